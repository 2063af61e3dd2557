# syntax=docker/dockerfile:1
# The measurement probe: what the GPUWorkload measurement Job runs.
#
#   docker build -f docker/probe.Dockerfile -t gpu-sizer-probe:0.1.0 .
#
# Base: the official PyTorch CUDA runtime image (Docker Hub pytorch/pytorch), which brings
# torch with its CUDA 12 libraries and Python under /opt/conda. Any base whose `python3` (3.11
# or newer) imports torch 2.6 or newer works: transformers 5, the probe extra's pin, disables
# PyTorch below 2.6 (transformers.utils.import_utils.is_torch_available), so the 2.5.1 image this
# file used to name would build and then fail every synthetic measurement that builds a
# transformers or diffusers component; the build now checks it. hack/build-images.sh builds a
# base from Debian bookworm with the CPU build of torch 2.13.0 for CI.
#
# The package goes into a virtual environment at /opt/gpu-sizer that sees the base's packages
# (--system-site-packages), so torch>=2.4 is already satisfied and pip keeps the base's build
# (pip's default --upgrade-strategy only-if-needed), while Debian's PEP 668 guard on its own
# Python does not apply and `python` (the Job's command: python -m gpu_sizer.probe) exists on
# every base. NVML (libnvidia-ml.so) is not in the image: the NVIDIA container runtime mounts
# the host driver's copy into GPU pods.
#
# Runs as a non-root numeric user and writes nothing outside /tmp, so the Job can set
# readOnlyRootFilesystem: true with an emptyDir at /tmp. The compact result goes to
# /dev/termination-log (kubelet's mount); the full result to stdout.
#
# Offline builds pass pip's own settings as build arguments (PIP_NO_INDEX=1,
# PIP_FIND_LINKS=/path/to/wheels), as for the operator image.
ARG PYTORCH_IMAGE=pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime
FROM ${PYTORCH_IMAGE}
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
# Kept equal to the package version (pyproject.toml) by tests/images/test_versions.py.
LABEL org.opencontainers.image.title="gpu-sizer-probe" \
      org.opencontainers.image.description="gpu-sizer measurement probe: runs a GPUWorkload spec with PyTorch and reports its memory peaks" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/gpu-sizer \
    PATH=/opt/gpu-sizer/bin:$PATH

WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
# A passwd entry for the numeric user: getpass.getuser() (kopf, torch's caches) raises KeyError
# for a user id the image does not list.
RUN (getent group 65532 >/dev/null || groupadd --gid 65532 gpu-sizer) \
    && (getent passwd 65532 >/dev/null || useradd --uid 65532 --gid 65532 --home-dir /tmp \
        --no-create-home --shell /usr/sbin/nologin gpu-sizer)
RUN python3 -m venv --system-site-packages /opt/gpu-sizer \
    && python -m pip install ".[probe]" \
    && python -m compileall -q "$(python -c 'import gpu_sizer, os; print(os.path.dirname(gpu_sizer.__file__))')" \
    && python -c "import torch, pynvml, diffusers, gpu_sizer.probe.run; from transformers.utils import is_torch_available; assert is_torch_available(), 'transformers disabled PyTorch ' + torch.__version__ + ': the base needs torch>=2.6'" \
    && cd / && rm -rf /src

# Every cache a run could touch points into /tmp (writable emptyDir under a read-only root).
ENV HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    TORCH_HOME=/tmp/.cache/torch \
    TRITON_CACHE_DIR=/tmp/.cache/triton \
    CUDA_CACHE_PATH=/tmp/.cache/nv \
    HF_HOME=/tmp/.cache/huggingface \
    MPLCONFIGDIR=/tmp/.cache/matplotlib

WORKDIR /tmp
USER 65532:65532

ENTRYPOINT ["python", "-m", "gpu_sizer.probe"]
