"""The GPU class type and the constants it is defined by. Pure.

See :mod:`gpu_sizer.catalog` for what the two memory figures mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Final

__all__ = [
    "AMD_PRODUCT_LABEL",
    "DERIVED_RESERVE_BYTES",
    "GFD_PRODUCT_LABEL",
    "GIB",
    "MIB",
    "GPUClass",
]

MIB: Final = 1 << 20
GIB: Final = 1 << 30

#: GPU Feature Discovery's product label (NVIDIA device plugin / GPU operator).
GFD_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
#: The AMD GPU node labeller's product label (ROCm/k8s-device-plugin, ``k8s-node-labeller``).
AMD_PRODUCT_LABEL: Final = "amd.com/gpu.product-name"
#: NVML total less ``cudaMemGetInfo`` total where no public figure exists for a class: the largest
#: gap among the classes that have one (A100 80GB: 80.00 GiB NVML, 79.25 GiB usable), rounded up.
DERIVED_RESERVE_BYTES: Final = 768 * MIB


@dataclass(frozen=True)
class GPUClass:
    """One GPU model as the scheduler sees it.

    ``memory_bytes`` is the device memory as NVML's ``nvmlDeviceGetMemoryInfo().total`` reports it
    (bytes; GFD's ``nvidia.com/gpu.memory``); ``usable_bytes`` what a CUDA process can allocate
    (``cudaMemGetInfo`` total after its context is created), against which every fit is computed
    (``None``: ``memory_bytes`` less :data:`DERIVED_RESERVE_BYTES`, see :attr:`usable`).
    ``products`` are the node label values that identify it (GFD ``nvidia.com/gpu.product`` for
    NVIDIA, ``amd.com/gpu.product-name`` for AMD). ``rank`` orders classes for the choice: lower is
    tried first (the default ranks follow typical on-demand cost per GPU-hour, cheapest first; set
    your own prices' order in catalog.yaml). ``compute_capability`` is the NVIDIA SM version
    (``"8.0"``) or the AMD GFX target (``"gfx942"``). ``source`` says where the figures come from.
    """

    name: str
    display_name: str
    memory_bytes: int
    products: tuple[str, ...]
    interconnect: str
    vendor: str = "nvidia"
    rank: int = 100
    source: str = ""
    #: MIG profile (``1g.10gb``) when the class is one MIG slice; empty for a whole GPU.
    mig_profile: str = ""
    #: The whole-GPU class a MIG slice is cut from (its ``products`` are the node's product label
    #: under the ``mixed`` strategy); empty for a whole GPU.
    parent: str = ""
    #: GPUs of one node of the class, when the cluster's inventory does not say (8 in the
    #: HGX/DGX baseboards and the cloud instances of these GPUs; set 4 where nodes have 4).
    gpus_per_node: int = 8

    @property
    def is_mig(self) -> bool:
        """Whether the class is one MIG slice rather than a whole GPU."""
        return bool(self.mig_profile)

    @property
    def mig_resource(self) -> str:
        """The extended resource of the slice under the ``mixed`` strategy
        (``nvidia.com/mig-1g.10gb``); empty for a whole GPU."""
        return f"nvidia.com/mig-{self.mig_profile}" if self.mig_profile else ""

    @property
    def mig_compute_slices(self) -> int:
        """Compute slices (of 7) of a MIG profile: the number before ``g.``; 0 for a whole GPU."""
        head = self.mig_profile.split("g.", 1)[0]
        return int(head) if head.isdigit() else 0

    usable_bytes: int | None = None
    compute_capability: str = ""

    @cached_property
    def usable(self) -> int:
        """Bytes a CUDA process can allocate: ``usable_bytes``, else NVML's total less
        :data:`DERIVED_RESERVE_BYTES`."""
        if self.usable_bytes is not None:
            return self.usable_bytes
        return max(self.memory_bytes - DERIVED_RESERVE_BYTES, self.memory_bytes // 2)

    @property
    def native_fp8(self) -> bool:
        """FP8 tensor cores: NVIDIA compute capability 8.9 (Ada) or newer, AMD CDNA3 (gfx94x) or
        newer. Without them FP8 checkpoints run weight-only (vLLM/SGLang/TGI Marlin kernels)."""
        cc = self.compute_capability
        if cc.startswith("gfx"):
            return cc[3:5] >= "94"
        try:
            major, _, minor = cc.partition(".")
            return (int(major), int(minor or 0)) >= (8, 9)
        except ValueError:
            return True  # unknown: do not invent a limitation

    @property
    def product_label(self) -> str:
        """The node label whose values are :attr:`products`."""
        return AMD_PRODUCT_LABEL if self.vendor == "amd" else GFD_PRODUCT_LABEL

    @property
    def memory_gib(self) -> float:
        """NVML total in GiB (2^30 bytes)."""
        return self.memory_bytes / GIB

    @property
    def usable_gib(self) -> float:
        """Usable memory (:attr:`usable`) in GiB (2^30 bytes)."""
        return self.usable / GIB


_SMI = "nvidia-smi Memory-Usage total {mib} MiB (NVML total, rounded down to MiB) on {product}, "
_CUDA = "; usable {gib} GiB: cudaMemGetInfo total as {what} (PyTorch and vLLM print 2 decimals)"
_DERIVED = (
    "; usable: no public cudaMemGetInfo figure found, NVML total less 768 MiB "
    "(DERIVED_RESERVE_BYTES)"
)
