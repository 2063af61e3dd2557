"""The built-in catalog is data (gpu_sizer/catalog/gpus.yaml): it parses into valid classes, its
MIG classes agree with their whole GPU, and its figures agree with the vendors' datasheets."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from gpu_sizer.catalog import (
    DEFAULT_CATALOG,
    GIB,
    MIG_CLASSES,
    WHOLE_GPU_CLASSES,
    GPUClass,
    catalog_to_data,
    load_catalog,
)
from gpu_sizer.catalog.loader import BUILTIN_CATALOG_FILE

BY_NAME = {c.name: c for c in DEFAULT_CATALOG}


def _packaged() -> object:
    return yaml.safe_load(
        resources.files("gpu_sizer.catalog").joinpath(BUILTIN_CATALOG_FILE).read_text("utf-8")
    )


def test_the_packaged_file_is_a_catalog_file_that_validates_on_its_own() -> None:
    data = _packaged()
    assert isinstance(data, dict) and data["replaceDefaults"] is True
    classes = load_catalog(data, defaults=())
    assert classes == DEFAULT_CATALOG
    assert all(isinstance(c, GPUClass) for c in classes)
    # `gpu-sizer catalog -o yaml` prints what the file holds: one format, one loader.
    assert catalog_to_data(DEFAULT_CATALOG) == data


def test_whole_gpus_rank_before_mig_slices_and_every_class_is_sourced() -> None:
    assert len(WHOLE_GPU_CLASSES) == 12 and len(MIG_CLASSES) == 24
    assert DEFAULT_CATALOG == WHOLE_GPU_CLASSES + MIG_CLASSES
    assert max(c.rank for c in WHOLE_GPU_CLASSES) < min(c.rank for c in MIG_CLASSES)
    for c in DEFAULT_CATALOG:
        assert c.source, c.name
        assert c.usable < c.memory_bytes, c.name
        if c.usable_bytes is None:
            assert "DERIVED_RESERVE_BYTES" in c.source, c.name


@pytest.mark.parametrize("mig", MIG_CLASSES, ids=lambda c: c.name)
def test_a_mig_class_is_cut_from_its_whole_gpu(mig: GPUClass) -> None:
    """What the Python table derived, the data must keep: name, GFD single-strategy product
    labels (<product>-MIG-<profile>), compute capability, less memory than the whole GPU."""
    parent = BY_NAME[mig.parent]
    assert not parent.is_mig
    assert mig.name == f"{parent.name}-mig-{mig.mig_profile}"
    assert mig.products == tuple(f"{p}-MIG-{mig.mig_profile}" for p in parent.products)
    assert mig.compute_capability == parent.compute_capability
    assert mig.memory_bytes < parent.memory_bytes
    assert mig.display_name == f"{parent.display_name.split(' (')[0]} MIG {mig.mig_profile}"


#: Memory per GPU on the vendor's datasheet (GB as the vendor prints it: the memory chips'
#: binary capacity, so read as GiB) and the CUDA compute capability (NVIDIA's CUDA GPUs table,
#: https://developer.nvidia.com/cuda-gpus) or AMD GFX target.
DATASHEETS = [
    # https://www.nvidia.com/en-us/data-center/l4/ : "GPU memory 24GB" (GDDR6)
    ("nvidia-l4", 24, "8.9"),
    # https://www.nvidia.com/en-us/data-center/l40s/ : "GPU Memory 48GB GDDR6 with ECC"
    ("nvidia-l40s", 48, "8.9"),
    # https://www.nvidia.com/en-us/data-center/a100/ : "40GB HBM2" / "80GB HBM2e"
    ("nvidia-a100-40gb", 40, "8.0"),
    ("nvidia-a100-80gb", 80, "8.0"),
    # https://www.nvidia.com/en-us/data-center/h100/ : H100 SXM "80GB", H100 NVL "94GB"
    ("nvidia-h100-80gb", 80, "9.0"),
    ("nvidia-h100-nvl", 94, "9.0"),
    # https://www.nvidia.com/en-us/data-center/h200/ : "GPU Memory 141GB" (HBM3e)
    ("nvidia-h200", 141, "9.0"),
    # https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html : "192 GB" HBM3
    ("amd-mi300x", 192, "gfx942"),
]


@pytest.mark.parametrize(("name", "datasheet_gb", "cc"), DATASHEETS, ids=lambda v: str(v))
def test_nvml_totals_agree_with_the_datasheets(name: str, datasheet_gb: int, cc: str) -> None:
    """NVML's total is the datasheet's capacity less ECC and the driver's region: never above
    it, and at least 93% of it (ECC on the L4's and L40S's GDDR6 takes 1/16, the driver a few
    MiB more: 23034 MiB of the L4's 24576)."""
    c = BY_NAME[name]
    assert c.compute_capability == cc
    assert 0.93 * datasheet_gb * GIB <= c.memory_bytes <= datasheet_gb * GIB
