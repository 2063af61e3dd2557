#!/usr/bin/env bash
# Estimate versus measurement on one NVIDIA GPU (H100/H200 class, under 8 minutes).
#
# Runs the probe on the reference matrix of issue 4 (8B-shaped bf16 inference at three
# concurrency levels, the same with an fp8 KV cache, a 1B-shaped full AdamW bf16-mixed training
# step with and without activation checkpointing, a 7B-shaped LoRA step), the pre-allocating
# engines' KV pools of issue 9 (vLLM, SGLang, TGI rules on this GPU: pool in tokens against the
# estimate on the device's catalog class; not yet run on a GPU) and the probe-overhead check, and writes a markdown table of estimate vs measured (allocated, reserved, NVML) with
# the relative error per component to $OUT/gpu-check.md (default ./gpu-check-out).
# step with and without activation checkpointing, a 7B-shaped LoRA step; the 1B-shaped step
# under FSDP2, FSDP1, DDP and DeepSpeed ZeRO-2 with one rank per visible GPU under
# torch.distributed.run, issue 11) and the probe-overhead check, and writes a markdown table of
# estimate vs measured (allocated, reserved, NVML) with the relative error per component to
# $OUT/gpu-check.md (default ./gpu-check-out). Not yet run for the distributed rows: no GPU was
# available when they were written (2026-11-30).
#
# Installs nothing from the network: it uses the machine's preinstalled torch and runs the
# package from this working tree (PYTHONPATH); with GPU_CHECK_INSTALL=1 it pip-installs the
# tree itself with --no-deps --no-build-isolation instead. Needs pydantic and nvidia-ml-py.
#
#   hack/gpu-check.sh             # measure (needs CUDA)
#   hack/gpu-check.sh --dry-run   # the matrix and the estimate column only, no CUDA
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-./gpu-check-out}"
python="${PYTHON:-python3}"
mkdir -p "$out"

if [[ "${GPU_CHECK_INSTALL:-0}" == 1 ]]; then
  "$python" -m pip install --no-deps --no-build-isolation --no-index -q "$here"
fi
missing="$("$python" - <<'PY'
import importlib.util
print(" ".join(m for m in ("pydantic", "pynvml", "torch") if importlib.util.find_spec(m) is None))
PY
)"
if [[ -n "$missing" && " $* " != *" --dry-run "* ]]; then
  echo "gpu-check: missing Python packages: $missing (this script installs nothing)" >&2
  exit 2
fi
if [[ " $* " != *" --dry-run "* ]]; then
  "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)' || {
    echo "gpu-check: torch sees no CUDA device; use --dry-run for the estimate column" >&2
    exit 3
  }
  command -v nvidia-smi >/dev/null && nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
fi
# A hard stop well inside 8 minutes even if a configuration hangs.
exec timeout --signal=TERM --kill-after=15 470 \
  env PYTHONPATH="$here/operator${PYTHONPATH:+:$PYTHONPATH}" \
  "$python" "$here/hack/gpu_check.py" --out "$out" "$@"
