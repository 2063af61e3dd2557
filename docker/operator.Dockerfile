# syntax=docker/dockerfile:1
# The gpu-sizer operator (kopf controller and admission webhook): slim, no torch.
#
#   docker build -f docker/operator.Dockerfile -t gpu-sizer .
#
# The wheel is built in a throwaway stage and installed without extras, so the runtime image
# holds the package and its base dependencies (kopf, kubernetes, pydantic, prometheus-client,
# aiohttp, cryptography, nvidia-ml-py) but no PyTorch: the probe runs in its own image, and no
# test machinery: kmock and gpu-sizer-testbed (the demo's and the tests' API servers, testbed/)
# are neither in the build context nor dependencies of the wheel.
# Non-root numeric user, nothing written outside /tmp (readOnlyRootFilesystem-friendly).
ARG PYTHON_IMAGE=python:3.12-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN python -m pip wheel --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN python -m pip install /wheels/*.whl \
    && rm -rf /wheels \
    && python -c "import sys, gpu_sizer.cli; assert 'torch' not in sys.modules" \
    && python -c "import importlib.util as u; assert not [m for m in ('kmock', 'gpu_sizer_testbed') if u.find_spec(m)]" \
    && python -m compileall -q "$(python -c 'import gpu_sizer, os; print(os.path.dirname(gpu_sizer.__file__))')"
ENV HOME=/tmp XDG_CACHE_HOME=/tmp/.cache
WORKDIR /tmp
USER 65532:65532
# Metrics 8080, health 8081 (/healthz), webhook 9443.
EXPOSE 8080 8081 9443
ENTRYPOINT ["gpu-sizer"]
CMD ["operator", "--all-namespaces"]
