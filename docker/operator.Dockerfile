# syntax=docker/dockerfile:1
# The gpu-sizer operator (kopf controller and admission webhook): slim, no torch.
#
#   docker build -f docker/operator.Dockerfile -t gpu-sizer:0.1.0 .
#
# The wheel is built in a throwaway stage and installed without extras, so the runtime image
# holds the package and its base dependencies (kopf, kubernetes, pydantic, prometheus-client,
# aiohttp, cryptography, nvidia-ml-py) but no PyTorch: the probe runs in its own image, and no
# test machinery: kmock and gpu-sizer-testbed (the demo's and the tests' API servers, testbed/)
# are neither in the build context nor dependencies of the wheel.
# Non-root numeric user, nothing written outside /tmp (readOnlyRootFilesystem-friendly).
#
# PYTHON_IMAGE is any image with CPython 3.11+ and its venv module: Docker Hub's python images,
# or a Debian bookworm base with python3 and python3-venv (hack/build-images.sh makes one). The
# package goes into a virtual environment at /opt/gpu-sizer rather than the base's own Python:
# Debian's Python refuses pip installs into it (PEP 668, EXTERNALLY-MANAGED) and has no `python`
# command, and a venv behaves the same on every base.
#
# Offline builds (no package index reachable from the build) pass pip's own settings as build
# arguments: PIP_NO_INDEX=1 and PIP_FIND_LINKS=/path/to/wheels (a wheelhouse mounted into the
# build; hack/build-images.sh does this with buildah). A normal build leaves both unset.
ARG PYTHON_IMAGE=python:3.12-slim

FROM ${PYTHON_IMAGE} AS build
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN python3 -m venv /opt/build \
    && /opt/build/bin/python -m pip wheel --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
# Kept equal to the package version (pyproject.toml) by tests/images/test_versions.py.
LABEL org.opencontainers.image.title="gpu-sizer" \
      org.opencontainers.image.description="gpu-sizer operator: Kubernetes admission and sizing for GPU workloads (no PyTorch)" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/gpu-sizer \
    PATH=/opt/gpu-sizer/bin:$PATH
COPY --from=build /wheels /wheels
# A passwd entry for the numeric user: getpass.getuser() (kopf, torch's caches) raises KeyError
# for a user id the image does not list.
RUN (getent group 65532 >/dev/null || groupadd --gid 65532 gpu-sizer) \
    && (getent passwd 65532 >/dev/null || useradd --uid 65532 --gid 65532 --home-dir /tmp \
        --no-create-home --shell /usr/sbin/nologin gpu-sizer)
RUN python3 -m venv /opt/gpu-sizer \
    && python -m pip install /wheels/*.whl \
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
