# syntax=docker/dockerfile:1
# The measurement probe: what the GPUWorkload measurement Job runs.
#
#   docker build -f docker/probe.Dockerfile -t gpu-sizer-probe .
#
# Base: the official PyTorch CUDA runtime image (Docker Hub pytorch/pytorch), which brings
# torch with its CUDA 12 libraries and Python 3.11 under /opt/conda. The package is installed on
# top with the `probe` extra; torch>=2.4 is already satisfied, so pip keeps the base's CUDA
# build (pip's default --upgrade-strategy only-if-needed). NVML (libnvidia-ml.so) is not in the
# image: the NVIDIA container runtime mounts the host driver's copy into GPU pods.
#
# Runs as a non-root numeric user and writes nothing outside /tmp, so the Job can set
# readOnlyRootFilesystem: true with an emptyDir at /tmp. The compact result goes to
# /dev/termination-log (kubelet's mount); the full result to stdout.
ARG PYTORCH_IMAGE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
FROM ${PYTORCH_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN python -m pip install ".[probe]" \
    && python -m compileall -q "$(python -c 'import gpu_sizer, os; print(os.path.dirname(gpu_sizer.__file__))')" \
    && python -c "import torch, pynvml, gpu_sizer.probe.run" \
    && rm -rf /src

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
