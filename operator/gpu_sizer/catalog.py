"""GPU classes and the choice of a class with headroom. Pure.

A *GPU class* is what a user names in ``spec.placement.gpuClasses`` and what the operator
recommends: one GPU model (or a family of products with the same usable memory), the memory a
process can really use on it, and the node labels that identify it.

Two memory figures per class, neither the marketing one:

- ``memory_bytes``: NVML's ``nvmlDeviceGetMemoryInfo().total`` — what ``nvidia-smi`` prints as the
  ``Memory-Usage`` total and GPU Feature Discovery as ``nvidia.com/gpu.memory``, in MiB rounded
  down. An "80 GB" H100 has 81559 MiB (79.65 GiB): ECC and the driver's region are already gone.
- ``usable_bytes``: what a CUDA process can allocate, ``cudaMemGetInfo`` total once its context
  exists (``torch.cuda.mem_get_info()[1]``, the "total capacity" of PyTorch's out-of-memory message
  and vLLM's ``total_gpu_memory``): a few hundred MiB less again (H100: 79.22 GiB). Every fit,
  headroom and engine pool is computed against this figure; vLLM's ``--gpu-memory-utilization``
  multiplies it.

Each default class says where both figures come from (``GPUClass.source``); where no public
``cudaMemGetInfo`` figure was found, ``usable_bytes`` is NVML's total less
:data:`DERIVED_RESERVE_BYTES`, and the source says so. ``compute_capability`` (NVIDIA SM version,
or the AMD GFX target) decides which kernels an engine can use: FP8 tensor cores need 8.9 (Ada)
or newer, so FP8 checkpoints on Ampere run through a weight-only path (see
``gpu_sizer.budget.engines``).

Nodes are matched by the GPU Feature Discovery label ``nvidia.com/gpu.product`` (the NVML device
name with spaces turned into dashes, e.g. ``NVIDIA-H100-80GB-HBM3``); AMD GPUs by the AMD GPU
node labeller's ``amd.com/gpu.product-name`` (e.g. ``AMD_Instinct_MI300X_OAM``).

The catalog can be overridden by a YAML file (the Helm chart mounts one at
``/etc/gpu-sizer/catalog.yaml``)::

    replaceDefaults: false        # true: only the classes below exist
    classes:
      - name: nvidia-l4           # override fields of a default class by name
        rank: 3
      - name: my-h100-nvl-mig-3g  # or add a class: memoryBytes and products are required
        displayName: H100 NVL MIG 3g.47gb
        memoryBytes: 48318382080    # NVML total
        usableBytes: 47781511168    # cudaMemGetInfo total (default: see below)
        computeCapability: "9.0"
        products: [NVIDIA-H100-NVL-MIG-3g.47gb]
        interconnect: none
        vendor: nvidia
        migProfile: 3g.47gb       # a MIG slice: its profile and whole-GPU class
        parent: nvidia-h100-nvl

A class without ``usableBytes`` derives it as a built-in class does: ``memoryBytes`` less the gap
the built-in class of one of its product labels measures, else less :data:`DERIVED_RESERVE_BYTES`
(its ``source`` says which); a ``memoryBytes`` override moves the usable figure by the class's own
gap; ``usableBytes`` above ``memoryBytes`` is refused.

MIG: every profile of the A100 40/80 GB, H100 80 GB and H200 is a class of its own
(:data:`MIG_CLASSES`, e.g. ``nvidia-a100-80gb-mig-1g.10gb``), ranked after every whole GPU, so a
slice is recommended when the cluster has it and no whole GPU present fits (re-rank them in
catalog.yaml to prefer slices). A slice serves one GPU per process: a spec that shards over
several GPUs is never placed on MIG classes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from gpu_sizer.api import Problem, problems_from

__all__ = [
    "AMD_PRODUCT_LABEL",
    "DEFAULT_CATALOG",
    "DERIVED_RESERVE_BYTES",
    "GFD_PRODUCT_LABEL",
    "MIG_CLASSES",
    "WHOLE_GPU_CLASSES",
    "Choice",
    "GPUClass",
    "InvalidCatalog",
    "allowed_classes",
    "catalog_to_data",
    "choose_class",
    "choose_fitting",
    "class_for_product",
    "fits",
    "headroom_fraction",
    "load_catalog",
    "load_catalog_file",
    "mig_class",
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

    @property
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


def _gib(value: float) -> int:
    """A GiB figure printed with 2 decimals, in bytes (whole MiB)."""
    return round(value * 1024) * MIB


#: Whole GPUs, 24 GB to 192 GB. Figures are NVML totals as printed by nvidia-smi in public
#: reports (the issue or document is named), or by rocm-smi for AMD (exact bytes).
WHOLE_GPU_CLASSES: tuple[GPUClass, ...] = (
    GPUClass(
        "nvidia-l4",
        "NVIDIA L4 24 GB",
        23034 * MIB,
        ("NVIDIA-L4",),
        "PCIe Gen4 x16, no NVLink",
        rank=1,
        source=_SMI.format(mib=23034, product="NVIDIA L4")
        + "seen in many public nvidia-smi outputs (e.g. GCP g2 instances)"
        + _CUDA.format(
            gib="22.03",
            what=(
                "PyTorch's out-of-memory message reports it on an L4 (ArcInstitute/evo2#190; "
                "vLLM CI prints 22.05 GiB, pytorch/pytorch#175666)"
            ),
        ),
        usable_bytes=_gib(22.03),
        compute_capability="8.9",
    ),
    GPUClass(
        "nvidia-a10g",
        "NVIDIA A10G 24 GB",
        23028 * MIB,
        ("NVIDIA-A10G", "NVIDIA-A10"),
        "PCIe Gen4 x16, no NVLink",
        rank=2,
        source=_SMI.format(mib=23028, product="NVIDIA A10G (AWS g5) and NVIDIA A10")
        + "in public nvidia-smi outputs; both report the same total"
        + _CUDA.format(
            gib="21.99",
            what=(
                "PyTorch's out-of-memory message reports it on an A10 (QwenLM/Qwen3#1387); A10G "
                "boards report up to 22.20 GiB, the smaller figure is kept for the class"
            ),
        ),
        usable_bytes=_gib(21.99),
        compute_capability="8.6",
    ),
    GPUClass(
        "nvidia-rtx-4090",
        "NVIDIA GeForce RTX 4090 24 GB",
        24564 * MIB,
        ("NVIDIA-GeForce-RTX-4090",),
        "PCIe Gen4 x16, no NVLink (no peer-to-peer)",
        rank=3,
        source=_SMI.format(mib=24564, product="NVIDIA GeForce RTX 4090")
        + "(no ECC)"
        + _CUDA.format(
            gib="23.64",
            what="PyTorch's out-of-memory message reports it (3DTopia/Phidias-Diffusion#8)",
        ),
        usable_bytes=_gib(23.64),
        compute_capability="8.9",
    ),
    GPUClass(
        "nvidia-rtx-a6000",
        "NVIDIA RTX A6000 48 GB",
        49140 * MIB,
        ("NVIDIA-RTX-A6000",),
        "PCIe Gen4 x16, optional 2-way NVLink bridge",
        rank=4,
        source=_SMI.format(mib=49140, product="NVIDIA RTX A6000") + _DERIVED,
        usable_bytes=None,
        compute_capability="8.6",
    ),
    GPUClass(
        "nvidia-l40s",
        "NVIDIA L40S 48 GB",
        46068 * MIB,
        ("NVIDIA-L40S",),
        "PCIe Gen4 x16, no NVLink",
        rank=5,
        source=_SMI.format(mib=46068, product="NVIDIA L40S")
        + "(ECC on)"
        + _CUDA.format(
            gib="44.42",
            what=(
                "PyTorch's out-of-memory message reports it on 8x L40S "
                "(stepfun-ai/Step-Video-T2V#8)"
            ),
        ),
        usable_bytes=_gib(44.42),
        compute_capability="8.9",
    ),
    GPUClass(
        "nvidia-a100-40gb",
        "NVIDIA A100 40 GB (SXM4 or PCIe)",
        40960 * MIB,
        ("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB", "A100-SXM4-40GB", "A100-PCIE-40GB"),
        "NVLink 3 600 GB/s (SXM4, HGX); PCIe Gen4 (PCIe card, optional NVLink bridge)",
        rank=6,
        source=_SMI.format(mib=40960, product="NVIDIA A100-SXM4-40GB and A100-PCIE-40GB")
        + "with R525+ drivers; older drivers printed 40537 MiB for the PCIe card"
        + _CUDA.format(
            gib="39.50",
            what="PyTorch's out-of-memory message reports it on an A100 40GB (TianheWu/CoSeR#10)",
        ),
        usable_bytes=_gib(39.50),
        compute_capability="8.0",
    ),
    GPUClass(
        "nvidia-a100-80gb",
        "NVIDIA A100 80 GB (SXM4 or PCIe)",
        81920 * MIB,
        ("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"),
        "NVLink 3 600 GB/s (SXM4, HGX); PCIe Gen4 (PCIe card, optional NVLink bridge)",
        rank=7,
        source=_SMI.format(mib=81920, product="NVIDIA A100-SXM4-80GB and A100 80GB PCIe")
        + _CUDA.format(
            gib="79.25",
            what=(
                "PyTorch's out-of-memory message reports it on an A100 80GB "
                "(levihsu/OOTDiffusion#235)"
            ),
        ),
        usable_bytes=_gib(79.25),
        compute_capability="8.0",
    ),
    GPUClass(
        "nvidia-h100-80gb",
        "NVIDIA H100 80 GB (SXM5 HBM3 or PCIe)",
        81559 * MIB,
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"),
        "NVLink 4 900 GB/s (SXM5, HGX); PCIe Gen5 (PCIe card, optional NVLink bridge)",
        rank=8,
        source=_SMI.format(mib=81559, product="NVIDIA H100 80GB HBM3 and NVIDIA H100 PCIe")
        + "(e.g. SkyPilot and vLLM issue logs)"
        + _CUDA.format(
            gib="79.22",
            what="vLLM logs total_gpu_memory on an H100 80GB (vllm-project/vllm#10511 and #12126)",
        ),
        usable_bytes=_gib(79.22),
        compute_capability="9.0",
    ),
    GPUClass(
        "nvidia-h100-nvl",
        "NVIDIA H100 NVL 94 GB",
        95830 * MIB,
        ("NVIDIA-H100-NVL",),
        "PCIe Gen5 with NVLink bridge pairs 600 GB/s",
        rank=9,
        source=_SMI.format(mib=95830, product="NVIDIA H100 NVL") + _DERIVED,
        usable_bytes=None,
        compute_capability="9.0",
    ),
    GPUClass(
        "nvidia-h200",
        "NVIDIA H200 141 GB",
        143771 * MIB,
        ("NVIDIA-H200", "NVIDIA-H200-NVL"),
        "NVLink 4 900 GB/s (SXM, HGX); H200 NVL: PCIe Gen5 with NVLink bridges",
        rank=10,
        source=_SMI.format(mib=143771, product="NVIDIA H200 and NVIDIA H200 NVL") + _DERIVED,
        usable_bytes=None,
        compute_capability="9.0",
    ),
    GPUClass(
        "amd-mi300x",
        "AMD Instinct MI300X 192 GB",
        205822885888,
        ("AMD_Instinct_MI300X_OAM", "AMD_Instinct_MI300X", "AMD_Instinct_MI300X_VF"),
        "Infinity Fabric 896 GB/s (OAM, 8-GPU platform)",
        vendor="amd",
        rank=11,
        source="rocm-smi --showmeminfo vram 'VRAM Total Memory (B): 205822885888' on AMD Instinct "
        "MI300X (bytes, in several public reports; also hipDeviceProp totalGlobalMem); label "
        "values from the AMD GPU node labeller (amd.com/gpu.product-name)" + _DERIVED,
        usable_bytes=None,
        compute_capability="gfx942",
    ),
    GPUClass(
        "nvidia-b200",
        "NVIDIA B200 180 GB",
        183359 * MIB,
        ("NVIDIA-B200",),
        "NVLink 5 1.8 TB/s (HGX B200)",
        rank=12,
        source=_SMI.format(mib=183359, product="NVIDIA B200")
        + "(TensorRT-LLM issue 10278); marketed as 192 GB HBM3e, 180 GB usable"
        + _DERIVED,
        usable_bytes=None,
        compute_capability="10.0",
    ),
)


_LGIP = (
    "nvidia-smi mig -lgip 'Memory GiB' column, {gib} GiB for MIG {profile} on {gpu} ({where}); "
    "profiles from the NVIDIA MIG User Guide, 'Supported MIG Profiles'"
)
_MIG_A100_GUIDE = "example output in the MIG User Guide, 'Getting Started with MIG'"

#: MIG profiles per whole-GPU class: (profile, usable GiB, where the figure comes from). The GiB
#: figure is the ``Memory`` column of ``nvidia-smi mig -lgip`` (two decimals; 19.62 is 19.625, an
#: exact multiple of 1 MiB, as GFD's ``nvidia.com/mig-<profile>.memory`` label of 20096 MiB shows).
#: A profile with the same memory slices as another shares its figure (said in its source);
#: ``+me`` (media extension) variants have the memory of their base profile and no own resource
#: name in the device plugin's ``mixed`` strategy, so they are not separate classes.
_MIG_PROFILES: dict[str, tuple[tuple[str, float, str], ...]] = {
    "nvidia-a100-40gb": (
        ("1g.5gb", 4.75, _MIG_A100_GUIDE),
        ("1g.10gb", 9.75, "2 of 8 memory slices, the same as 2g.10gb's 9.75 GiB"),
        ("2g.10gb", 9.75, _MIG_A100_GUIDE),
        ("3g.20gb", 19.625, _MIG_A100_GUIDE),
        ("4g.20gb", 19.625, _MIG_A100_GUIDE),
        (
            "7g.40gb",
            39.375,
            _MIG_A100_GUIDE + "; another public output prints 39.50, the lower kept",
        ),
    ),
    "nvidia-a100-80gb": (
        ("1g.10gb", 9.5, "public A100 80GB outputs"),
        ("1g.20gb", 19.5, "public A100 80GB outputs"),
        ("2g.20gb", 19.5, "public A100 80GB outputs"),
        ("3g.40gb", 39.25, "public A100 80GB outputs"),
        ("4g.40gb", 39.25, "public A100 80GB outputs"),
        ("7g.80gb", 79.0, "public A100 80GB outputs"),
    ),
    "nvidia-h100-80gb": (
        ("1g.10gb", 9.75, "public H100 80GB output"),
        ("1g.20gb", 19.625, "public H100 80GB output"),
        ("2g.20gb", 19.625, "public H100 80GB output"),
        ("3g.40gb", 39.5, "public H100 80GB output"),
        ("4g.40gb", 39.5, "public H100 80GB output"),
        ("7g.80gb", 79.25, "public H100 80GB output"),
    ),
    "nvidia-h200": (
        ("1g.18gb", 16.0, "public H200 output"),
        ("1g.35gb", 32.5, "2 of 8 memory slices, the same as 2g.35gb's 32.50 GiB"),
        ("2g.35gb", 32.5, "public H200 output"),
        (
            "3g.71gb",
            65.0,
            "no public -lgip line found: 4 of 8 memory slices taken as twice 2g.35gb's 32.50 GiB "
            "(a low bound: on A100/H100 the 4/8 profiles are 0.25 GiB more than twice the 2/8); "
            "agrees with a public PyTorch total of 69.8 GB (65.0 GiB) on H200 MIG 3g.71gb",
        ),
        ("4g.71gb", 65.0, "4 of 8 memory slices, the same as 3g.71gb (see there)"),
        ("7g.141gb", 140.0, "public H200 output"),
    ),
}


def _mig_classes(parents: Sequence[GPUClass]) -> tuple[GPUClass, ...]:
    by_name = {c.name: c for c in parents}
    rows = [
        (by_name[parent], profile, gib, where)
        for parent, profiles in _MIG_PROFILES.items()
        for profile, gib, where in profiles
    ]
    # Ranked after every whole GPU, smallest slice first: without an inventory (the CLI) nothing
    # changes; with one, a slice is chosen when the cluster has it and no whole GPU present fits.
    rows.sort(key=lambda r: (r[2], r[0].rank, r[1]))
    out = []
    for rank, (parent, profile, gib, where) in enumerate(rows, start=101):
        gpu = parent.display_name.split(" (")[0]
        out.append(
            GPUClass(
                name=f"{parent.name}-mig-{profile}",
                display_name=f"{gpu} MIG {profile}",
                memory_bytes=int(gib * 1024) * MIB,
                # GFD, `single` strategy: nvidia.com/gpu.product is "<product>-MIG-<profile>".
                products=tuple(f"{p}-MIG-{profile}" for p in parent.products),
                interconnect="none: a MIG device has no peer-to-peer or NVLink",
                rank=rank,
                source=_LGIP.format(gib=f"{gib:.2f}", profile=profile, gpu=gpu, where=where)
                + _DERIVED,
                mig_profile=profile,
                parent=parent.name,
                compute_capability=parent.compute_capability,
            )
        )
    return tuple(out)


#: One class per MIG profile of the A100 40/80 GB, H100 80 GB and H200 (NVIDIA MIG User Guide).
MIG_CLASSES: tuple[GPUClass, ...] = _mig_classes(WHOLE_GPU_CLASSES)

#: The default catalog: whole GPUs, then MIG slices.
DEFAULT_CATALOG: tuple[GPUClass, ...] = WHOLE_GPU_CLASSES + MIG_CLASSES


class InvalidCatalog(ValueError):
    """A catalog YAML failed validation; ``problems`` names each bad field (``classes[2].name``)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


class _ClassEntry(BaseModel):
    """One ``classes[]`` entry of catalog.yaml; unset fields keep the default class's value."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    display_name: str | None = None
    memory_bytes: int | None = Field(None, ge=1 << 30, le=1 << 42, strict=True)
    products: list[str] | None = None
    interconnect: str | None = None
    vendor: str | None = None
    rank: int | None = Field(None, strict=True)
    source: str | None = None
    mig_profile: str | None = Field(None, pattern=r"^[1-9]g\.[0-9]+gb$")
    parent: str | None = None
    usable_bytes: int | None = Field(None, ge=1 << 30, le=1 << 42, strict=True)
    gpus_per_node: int | None = Field(None, ge=1, le=64, strict=True)
    compute_capability: str | None = Field(
        None, max_length=16, pattern=r"^([0-9]{1,2}\.[0-9]|gfx[0-9a-f]{3,4})$"
    )


class _CatalogFile(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    replace_defaults: bool = Field(False, strict=True)
    classes: list[_ClassEntry] = Field(default_factory=list)


def load_catalog(data: Any, defaults: Sequence[GPUClass] = DEFAULT_CATALOG) -> tuple[GPUClass, ...]:
    """Merge catalog.yaml content (already parsed) over ``defaults``.

    Entries override default classes by ``name`` field by field; new names add classes and need
    ``memoryBytes`` and ``products``. ``replaceDefaults: true`` drops every default first.

    :raises InvalidCatalog: one :class:`~gpu_sizer.api.Problem` per bad field.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidCatalog([Problem("(catalog)", "must be a mapping with a 'classes' list")])
    try:
        parsed = _CatalogFile.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise InvalidCatalog(problems_from(exc, model=_CatalogFile)) from None
    merged: dict[str, GPUClass] = {} if parsed.replace_defaults else {c.name: c for c in defaults}
    gaps = _measured_gaps(defaults)
    problems: list[Problem] = []
    seen: set[str] = set()
    for i, entry in enumerate(parsed.classes):
        if entry.name in seen:
            problems.append(Problem(f"classes[{i}].name", f"duplicate class {entry.name!r}"))
            continue
        seen.add(entry.name)
        updates = entry.model_dump(exclude_unset=True, exclude={"name"})
        if "products" in updates:
            updates["products"] = tuple(updates["products"])
        base = merged.get(entry.name)
        if base is None:
            missing = [f for f in ("memoryBytes", "products") if to_snake(f) not in updates]
            if missing:
                problems.extend(
                    Problem(f"classes[{i}].{f}", f"required for the new class {entry.name!r}")
                    for f in missing
                )
                continue
            if "usable_bytes" not in updates:
                usable, why = _derived_usable(updates["memory_bytes"], updates["products"], gaps)
                updates["usable_bytes"] = usable
                said = "DERIVED_RESERVE_BYTES" if usable is None else why
                if said not in updates.get("source", ""):
                    updates["source"] = _with_reason(updates.get("source", ""), why)
            cls = GPUClass(
                name=entry.name,
                display_name=updates.pop("display_name", entry.name),
                memory_bytes=updates.pop("memory_bytes"),
                products=updates.pop("products"),
                interconnect=updates.pop("interconnect", "unknown"),
                **updates,
            )
        else:
            if "memory_bytes" in updates and "usable_bytes" not in updates:
                # the override moves the usable figure with it: the class's own gap between
                # NVML's total and cudaMemGetInfo's (an L4 set to 1 GiB is not 22 GiB usable)
                gap = base.memory_bytes - base.usable
                updates["usable_bytes"] = max(updates["memory_bytes"] - gap, 0)
                updates["source"] = _with_reason(
                    updates.get("source", base.source),
                    f"usable moved with the memoryBytes override: less the class's "
                    f"{gap // MIB} MiB between NVML's and cudaMemGetInfo's totals",
                )
            cls = replace(base, **updates)
        if cls.usable_bytes is not None and cls.usable_bytes > cls.memory_bytes:
            problems.append(
                Problem(
                    f"classes[{i}].usableBytes",
                    f"{cls.usable_bytes} bytes ({cls.usable_bytes / GIB:.2f} GiB) is above "
                    f"memoryBytes {cls.memory_bytes} ({cls.memory_bytes / GIB:.2f} GiB): a process "
                    "cannot allocate more than the device has; give cudaMemGetInfo's total "
                    "(torch.cuda.mem_get_info()[1]), at most NVML's",
                )
            )
            continue
        if cls.usable <= 0:
            problems.append(
                Problem(
                    f"classes[{i}].memoryBytes",
                    f"{cls.memory_bytes} bytes leave no usable memory once the class's driver "
                    "reserve is taken; give usableBytes",
                )
            )
            continue
        merged[entry.name] = cls
    owner: dict[str, str] = {}
    for cls in merged.values():
        for product in cls.products:
            other = owner.setdefault(product, cls.name)
            if other != cls.name:
                problems.append(
                    Problem(
                        "classes",
                        f"product label {product!r} is claimed by both {other!r} and "
                        f"{cls.name!r}; a node must map to one class (remove it from one)",
                    )
                )
    if problems:
        raise InvalidCatalog(problems)
    if not merged:
        raise InvalidCatalog([Problem("classes", "the catalog has no GPU classes")])
    return tuple(sorted(merged.values(), key=lambda c: (c.rank, c.memory_bytes, c.name)))


def _measured_gaps(classes: Sequence[GPUClass]) -> dict[str, int]:
    """NVML total less cudaMemGetInfo total (bytes) of each product label whose class has a
    published usable figure."""
    return {
        product: c.memory_bytes - c.usable_bytes
        for c in classes
        if c.usable_bytes is not None and not c.is_mig
        for product in c.products
    }


def _derived_usable(
    memory: int, products: Sequence[str], gaps: dict[str, int]
) -> tuple[int | None, str]:
    """Usable bytes of a catalog class that gives only ``memoryBytes``, and how they were derived:
    the gap the default class of one of its products measures (the same figures a built-in class
    uses), else ``None``: :data:`DERIVED_RESERVE_BYTES` less, as for a built-in class without a
    published figure (:attr:`GPUClass.usable`)."""
    known = [gaps[p] for p in products if p in gaps]
    if known:
        gap = max(known)
        return memory - gap, (
            f"usable derived from memoryBytes less {gap // MIB} MiB, the gap the built-in class "
            "of its product label measures (no usableBytes given)"
        )
    return None, _DERIVED_REASON


#: What a class without ``usableBytes`` and without a built-in class for its products says.
_DERIVED_REASON: Final = (
    f"usable: NVML total less DERIVED_RESERVE_BYTES ({DERIVED_RESERVE_BYTES // MIB} MiB; no "
    "usableBytes given and no built-in class measures its product labels): give usableBytes, "
    "torch.cuda.mem_get_info()[1] on the GPU, for the exact figure"
)


def _with_reason(source: str, reason: str) -> str:
    return f"{source}; {reason}" if source else reason


def to_snake(camel: str) -> str:
    """``memoryBytes`` -> ``memory_bytes``."""
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in camel)


def load_catalog_file(path: str | Path) -> tuple[GPUClass, ...]:
    """Read and merge a catalog YAML file over the defaults.

    :raises InvalidCatalog: unreadable file, bad YAML, or invalid content.
    """
    from gpu_sizer.yamlio import UnreadableFile, YamlError, load, read_text

    try:
        text = read_text(path)
    except UnreadableFile as exc:
        raise InvalidCatalog([Problem(str(path), f"cannot read: {exc}")]) from None
    try:
        data = load(text)
    except YamlError as exc:
        raise InvalidCatalog([Problem(str(path), f"invalid YAML: {exc}")]) from None
    return load_catalog(data)


def catalog_to_data(catalog: Sequence[GPUClass]) -> dict[str, Any]:
    """The catalog in catalog.yaml form (``replaceDefaults: true``), camelCase keys."""
    return {
        "replaceDefaults": True,
        "classes": [
            {
                "name": c.name,
                "displayName": c.display_name,
                "memoryBytes": c.memory_bytes,
                "products": list(c.products),
                "interconnect": c.interconnect,
                "vendor": c.vendor,
                "rank": c.rank,
                "source": c.source,
                **({"migProfile": c.mig_profile, "parent": c.parent} if c.is_mig else {}),
                **({"usableBytes": c.usable_bytes} if c.usable_bytes is not None else {}),
                **({"computeCapability": c.compute_capability} if c.compute_capability else {}),
                **({"gpusPerNode": c.gpus_per_node} if c.gpus_per_node != 8 else {}),
            }
            for c in catalog
        ],
    }


def headroom_fraction(capacity_bytes: int, required_bytes: int) -> float:
    """``(capacity - required) / capacity``: the share of the GPU left free; negative when the
    requirement exceeds the capacity."""
    return (capacity_bytes - required_bytes) / capacity_bytes


@dataclass(frozen=True)
class Choice:
    """The chosen class, the headroom it leaves, and what else was considered.

    ``present_in_cluster`` is ``None`` when no inventory was given; ``cheapest`` is the first
    fitting class in rank order whether or not nodes of it exist.
    """

    gpu_class: GPUClass
    headroom_fraction: float
    present_in_cluster: bool | None = None
    cheapest: GPUClass | None = None


def fits(cls: GPUClass, required_bytes_per_gpu: int, min_headroom_fraction: float) -> bool:
    """Whether ``cls`` leaves at least ``min_headroom_fraction`` of its usable memory free."""
    return headroom_fraction(cls.usable, required_bytes_per_gpu) >= min_headroom_fraction


def choose_class(
    required_bytes_per_gpu: int,
    min_headroom_fraction: float,
    classes: Iterable[GPUClass],
    present: Collection[str] | None = None,
) -> Choice | None:
    """The first class in rank order that leaves ``min_headroom_fraction`` free, else ``None``.

    With ``present`` (class names that have nodes in the cluster), a present class that fits wins
    over a cheaper absent one; when no present class fits, the cheapest fitting class is chosen
    anyway (``present_in_cluster=False``) so that the recommendation says what to add.
    """
    return choose_fitting(
        [
            (c, headroom_fraction(c.usable, required_bytes_per_gpu))
            for c in classes
            if fits(c, required_bytes_per_gpu, min_headroom_fraction)
        ],
        present,
    )


def choose_fitting(
    fitting: Sequence[tuple[GPUClass, float]], present: Collection[str] | None = None
) -> Choice | None:
    """The choice among classes already known to fit, each with the headroom it leaves.

    For workloads whose requirement depends on the class (pre-allocating serving engines size
    their KV cache pool from each GPU's memory) the caller decides the fit per class; the order
    and the preference for present classes are those of :func:`choose_class`.
    """
    ordered = sorted(fitting, key=lambda f: (f[0].rank, f[0].memory_bytes, f[0].name))
    if not ordered:
        return None
    cheapest = ordered[0]
    chosen = cheapest
    in_cluster: bool | None = None
    if present is not None:
        on_nodes = [f for f in ordered if f[0].name in present]
        in_cluster = bool(on_nodes)
        if on_nodes:
            chosen = on_nodes[0]
    return Choice(chosen[0], chosen[1], in_cluster, cheapest[0])


def allowed_classes(catalog: Sequence[GPUClass], names: Sequence[str]) -> list[GPUClass]:
    """Classes of ``catalog`` named in ``names`` (all of them when ``names`` is empty)."""
    return [c for c in catalog if not names or c.name in names]


def mig_class(catalog: Sequence[GPUClass], parent: str, profile: str) -> GPUClass | None:
    """The MIG class cut from whole-GPU class ``parent`` with ``profile`` (``1g.10gb``), if any."""
    for cls in catalog:
        if cls.parent == parent and cls.mig_profile == profile:
            return cls
    return None


def class_for_product(catalog: Sequence[GPUClass], product: str) -> GPUClass | None:
    """The class whose ``products`` include a node's product label value.

    GFD appends ``-SHARED`` under time-slicing or MPS sharing; that suffix is ignored (the memory
    is the same device's). MIG slices (``...-MIG-3g.40gb``) match only a class that lists them.
    """
    for name in (product, product.removesuffix("-SHARED")):
        for cls in catalog:
            if name in cls.products:
                return cls
    return None
