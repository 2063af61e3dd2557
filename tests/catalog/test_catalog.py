"""The default GPU catalog, catalog.yaml overrides, and the class choice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpu_sizer.catalog import (
    AMD_PRODUCT_LABEL,
    DEFAULT_CATALOG,
    DERIVED_RESERVE_BYTES,
    GFD_PRODUCT_LABEL,
    GPUClass,
    InvalidCatalog,
    allowed_classes,
    catalog_to_data,
    choose_class,
    class_for_product,
    fits,
    headroom_fraction,
    load_catalog,
    load_catalog_file,
)

GIB = 1 << 30
BY_NAME = {c.name: c for c in DEFAULT_CATALOG}

#: Marketing memory per class (GB as vendors print it) — usable NVML totals sit a little below.
NOMINAL_GB = {
    "nvidia-l4": 24, "nvidia-a10g": 24, "nvidia-rtx-4090": 24, "nvidia-a100-40gb": 40,
    "nvidia-l40s": 48, "nvidia-rtx-a6000": 48, "nvidia-a100-80gb": 80, "nvidia-h100-80gb": 80,
    "nvidia-h100-nvl": 94, "nvidia-h200": 141, "nvidia-b200": 180, "amd-mi300x": 192,
}  # fmt: skip


def test_default_catalog_covers_24_to_192_gb() -> None:
    assert set(NOMINAL_GB) <= set(BY_NAME)
    for name, nominal in NOMINAL_GB.items():
        usable = BY_NAME[name].memory_bytes / GIB
        # HBM/GDDR "GB" on datasheets are GiB-sized; NVML totals lose ECC/driver reservations.
        assert 0.9 * nominal <= usable <= nominal, (name, usable)
    whole = [c for c in DEFAULT_CATALOG if not c.is_mig]
    assert min(c.memory_gib for c in whole) > 22
    assert max(c.memory_gib for c in whole) < 192


def test_published_nvml_figures() -> None:
    # nvidia-smi totals in MiB from public reports (see GPUClass.source).
    mib = {"nvidia-h100-80gb": 81559, "nvidia-a100-80gb": 81920, "nvidia-l4": 23034,
           "nvidia-h200": 143771, "nvidia-b200": 183359, "nvidia-h100-nvl": 95830}  # fmt: skip
    for name, figure in mib.items():
        assert BY_NAME[name].memory_bytes == figure << 20
    assert BY_NAME["amd-mi300x"].memory_bytes == 205_822_885_888
    assert round(BY_NAME["nvidia-h100-80gb"].memory_gib, 1) == 79.6  # DESIGN.md's "about 79.6 GiB"


def test_every_class_is_sourced_and_labelled() -> None:
    products: set[str] = set()
    for cls in DEFAULT_CATALOG:
        assert cls.source and cls.interconnect and cls.products, cls.name
        for product in cls.products:
            assert " " not in product  # GFD replaces spaces by dashes; AMD by underscores
            assert product not in products, f"{product} listed twice"
            products.add(product)
    assert BY_NAME["nvidia-h100-80gb"].products == ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe")
    assert "NVIDIA-A100-SXM4-80GB" in BY_NAME["nvidia-a100-80gb"].products
    assert "NVIDIA-A100-80GB-PCIe" in BY_NAME["nvidia-a100-80gb"].products
    assert BY_NAME["nvidia-h100-80gb"].product_label == GFD_PRODUCT_LABEL
    assert BY_NAME["amd-mi300x"].product_label == AMD_PRODUCT_LABEL
    assert len({c.rank for c in DEFAULT_CATALOG}) == len(DEFAULT_CATALOG)


def test_class_for_product() -> None:
    assert (
        class_for_product(DEFAULT_CATALOG, "NVIDIA-H100-80GB-HBM3") is BY_NAME["nvidia-h100-80gb"]
    )
    assert class_for_product(DEFAULT_CATALOG, "NVIDIA-L4-SHARED") is BY_NAME["nvidia-l4"]
    assert class_for_product(DEFAULT_CATALOG, "AMD_Instinct_MI300X_OAM") is BY_NAME["amd-mi300x"]
    assert (
        class_for_product(DEFAULT_CATALOG, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb")
        is BY_NAME["nvidia-a100-40gb-mig-1g.5gb"]
    )
    assert class_for_product(DEFAULT_CATALOG, "NVIDIA-A30-MIG-1g.6gb") is None
    assert class_for_product(DEFAULT_CATALOG, "Tesla-T4") is None


# --- choice -------------------------------------------------------------------------------------

SMALL = GPUClass("small", "Small", 24 * GIB, ("S",), "pcie", rank=1, usable_bytes=24 * GIB)
MID = GPUClass("mid", "Mid", 48 * GIB, ("M",), "pcie", rank=2, usable_bytes=48 * GIB)
BIG = GPUClass("big", "Big", 80 * GIB, ("B",), "nvlink", rank=3, usable_bytes=80 * GIB)


def test_headroom_fraction() -> None:
    assert headroom_fraction(100, 78) == pytest.approx(0.22)
    assert headroom_fraction(100, 120) == pytest.approx(-0.2)


def test_choice_is_the_first_in_rank_order_with_the_headroom() -> None:
    choice = choose_class(30 * GIB, 0.10, [BIG, MID, SMALL])
    assert choice is not None and choice.gpu_class is MID
    assert choice.headroom_fraction == pytest.approx(18 / 48)
    assert choice.present_in_cluster is None and choice.cheapest is MID


def test_headroom_boundary_is_inclusive() -> None:
    exactly = int(48 * GIB * 0.9)
    choice = choose_class(exactly, 0.10, [MID])
    assert choice is not None and choice.gpu_class is MID
    assert choose_class(exactly + 1024, 0.10, [MID]) is None


def test_rank_not_memory_decides() -> None:
    cheap_big = GPUClass("cheap-big", "Cheap big", 96 * GIB, ("C",), "pcie", rank=0,
                         usable_bytes=96 * GIB)  # fmt: skip
    choice = choose_class(10 * GIB, 0.1, [SMALL, cheap_big])
    assert choice is not None and choice.gpu_class is cheap_big


def test_present_classes_win_and_cheapest_is_still_reported() -> None:
    choice = choose_class(10 * GIB, 0.1, [SMALL, MID, BIG], present={"big"})
    assert choice is not None
    assert (choice.gpu_class, choice.present_in_cluster, choice.cheapest) == (BIG, True, SMALL)


def test_no_present_class_fits_falls_back_to_cheapest() -> None:
    choice = choose_class(40 * GIB, 0.1, [SMALL, MID, BIG], present={"small"})
    assert choice is not None
    assert (choice.gpu_class, choice.present_in_cluster) == (MID, False)


def test_nothing_fits() -> None:
    assert choose_class(100 * GIB, 0.0, [SMALL, MID, BIG]) is None


def test_allowed_classes() -> None:
    assert allowed_classes([SMALL, MID], []) == [SMALL, MID]
    assert allowed_classes([SMALL, MID], ["mid"]) == [MID]


# --- catalog.yaml ------------------------------------------------------------------------------


def test_override_a_default_by_name() -> None:
    catalog = load_catalog({"classes": [{"name": "nvidia-l4", "rank": 50}]})
    l4 = next(c for c in catalog if c.name == "nvidia-l4")
    assert l4.rank == 50 and l4.memory_bytes == BY_NAME["nvidia-l4"].memory_bytes
    assert len(catalog) == len(DEFAULT_CATALOG)
    assert [c.rank for c in catalog] == sorted(c.rank for c in catalog)


def test_add_a_class_and_replace_defaults() -> None:
    entry = {"name": "h100-mig-3g", "displayName": "H100 NVL MIG 3g.47gb", "memoryBytes": 45 * GIB,
             "products": ["NVIDIA-H100-NVL-MIG-3g.47gb"], "interconnect": "none",
             "migProfile": "3g.47gb", "parent": "nvidia-h100-nvl"}  # fmt: skip
    catalog = load_catalog({"classes": [entry]})
    assert len(catalog) == len(DEFAULT_CATALOG) + 1
    only = load_catalog({"replaceDefaults": True, "classes": [entry]})
    assert [c.name for c in only] == ["h100-mig-3g"]
    assert only[0].products == ("NVIDIA-H100-NVL-MIG-3g.47gb",)
    assert only[0].is_mig and only[0].mig_resource == "nvidia.com/mig-3g.47gb"
    # A built-in MIG product claimed again by a new class is refused with the fix.
    clash = {**entry, "products": ["NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"]}
    with pytest.raises(InvalidCatalog, match="claimed by both"):
        load_catalog({"classes": [clash]})


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"classes": [{"name": "new-class", "memoryBytes": 40 * GIB}]}, "classes[0].products"),
        ({"classes": [{"name": "new-class", "products": ["X"]}]}, "classes[0].memoryBytes"),
        ({"classes": [{"name": "nvidia-l4", "memoryBytes": 12}]}, "classes.0.memoryBytes"),
        ({"classes": [{"name": "Bad Name"}]}, "classes.0.name"),
        ({"classes": [{"name": "nvidia-l4", "memory": 1}]}, "classes.0.memory"),
        ({"clases": []}, "clases"),
        ({"replaceDefaults": True, "classes": []}, "classes"),
        ([1, 2], "(catalog)"),
    ],
)
def test_invalid_catalog_names_the_field(data: object, path: str) -> None:
    with pytest.raises(InvalidCatalog) as info:
        load_catalog(data)
    assert path.replace(".0.", "[0].") in [
        p.path.replace(".0.", "[0].") for p in info.value.problems
    ]


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(InvalidCatalog, match="duplicate"):
        load_catalog({"classes": [{"name": "nvidia-l4"}, {"name": "nvidia-l4"}]})


def test_round_trip_through_yaml_form() -> None:
    assert load_catalog(catalog_to_data(DEFAULT_CATALOG)) == DEFAULT_CATALOG


def test_catalog_files(tmp_path: Path) -> None:
    good = tmp_path / "catalog.yaml"
    good.write_text("classes:\n  - name: nvidia-h200\n    rank: 0\n")
    assert load_catalog_file(good)[0].name == "nvidia-h200"
    bad = tmp_path / "bad.yaml"
    bad.write_text("classes: [\n")
    with pytest.raises(InvalidCatalog, match="invalid YAML"):
        load_catalog_file(bad)
    with pytest.raises(InvalidCatalog, match="cannot read"):
        load_catalog_file(tmp_path / "missing.yaml")


def test_a_product_label_belongs_to_one_class() -> None:
    data = {"classes": [{"name": "my-l4", "memoryBytes": 1 << 34, "products": ["NVIDIA-L4"]}]}
    with pytest.raises(InvalidCatalog) as info:
        load_catalog(data)
    [problem] = info.value.problems
    assert "'NVIDIA-L4' is claimed by both 'nvidia-l4' and 'my-l4'" in problem.message


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"replaceDefaults": "yes"}, "replaceDefaults: must be true or false, not 'yes'"),
        ({"classes": [{"name": "nvidia-l4", "rank": "3"}]}, "must be an integer, not '3'"),
        ({"replace_defaults": True}, "unknown field; did you mean replaceDefaults?"),
    ],
)
def test_catalog_types_are_strict_and_keys_camel_case(data: dict[str, Any], expected: str) -> None:
    with pytest.raises(InvalidCatalog) as info:
        load_catalog(data)
    assert expected in "; ".join(str(p) for p in info.value.problems)


def test_catalog_file_that_is_not_utf8(tmp_path: Path) -> None:
    junk = tmp_path / "junk.yaml"
    junk.write_bytes(bytes(range(256)))
    with pytest.raises(InvalidCatalog, match="cannot read: not UTF-8"):
        load_catalog_file(junk)


#: ``nvidia-smi mig -lgip`` Memory (GiB) per profile in public outputs: the A100-40GB example of
#: NVIDIA's MIG User Guide, public A100-80GB, H100-80GB and H200 outputs (see GPUClass.source).
#: Profiles sharing memory slices with another (A100-40GB 1g.10gb, H200 1g.35gb) and the H200's
#: 4/8 profiles (no public line: twice 2g.35gb) are derived and marked None here.
LGIP_GIB = {
    "nvidia-a100-40gb": {"1g.5gb": 4.75, "1g.10gb": None, "2g.10gb": 9.75, "3g.20gb": 19.62,
                         "4g.20gb": 19.62, "7g.40gb": 39.38},
    "nvidia-a100-80gb": {"1g.10gb": 9.50, "1g.20gb": 19.50, "2g.20gb": 19.50, "3g.40gb": 39.25,
                         "4g.40gb": 39.25, "7g.80gb": 79.00},
    "nvidia-h100-80gb": {"1g.10gb": 9.75, "1g.20gb": 19.62, "2g.20gb": 19.62, "3g.40gb": 39.50,
                         "4g.40gb": 39.50, "7g.80gb": 79.25},
    "nvidia-h200": {"1g.18gb": 16.00, "1g.35gb": None, "2g.35gb": 32.50, "3g.71gb": None,
                    "4g.71gb": None, "7g.141gb": 140.00},
}  # fmt: skip


def test_mig_profiles_are_classes_with_lgip_memory() -> None:
    mig = [c for c in DEFAULT_CATALOG if c.is_mig]
    assert {(c.parent, c.mig_profile) for c in mig} == {
        (parent, profile) for parent, profiles in LGIP_GIB.items() for profile in profiles
    }
    for cls in mig:
        parent = BY_NAME[cls.parent]
        figure = LGIP_GIB[cls.parent][cls.mig_profile]
        if figure is not None:
            assert round(cls.memory_gib, 2) == figure, cls.name
        assert cls.memory_bytes % (1 << 20) == 0
        assert cls.memory_bytes < parent.memory_bytes
        assert cls.name == f"{cls.parent}-mig-{cls.mig_profile}"
        assert cls.mig_resource == f"nvidia.com/mig-{cls.mig_profile}"
        assert all(p.endswith(f"-MIG-{cls.mig_profile}") for p in cls.products)
        assert cls.rank > max(c.rank for c in DEFAULT_CATALOG if not c.is_mig)
    # GFD's nvidia.com/mig-<profile>.memory labels in public node dumps, in MiB.
    assert BY_NAME["nvidia-a100-40gb-mig-1g.5gb"].memory_bytes == 4864 << 20
    assert BY_NAME["nvidia-a100-40gb-mig-2g.10gb"].memory_bytes == 9984 << 20
    assert BY_NAME["nvidia-a100-40gb-mig-3g.20gb"].memory_bytes == 20096 << 20
    assert BY_NAME["nvidia-a100-80gb-mig-1g.10gb"].memory_bytes == 9728 << 20


def test_no_inventory_recommendation_is_unchanged_by_mig_classes() -> None:
    # Ranked after every whole GPU: without an inventory the cheapest whole GPU still wins.
    choice = choose_class(8 * GIB, 0.1, DEFAULT_CATALOG)
    assert choice is not None and choice.gpu_class.name == "nvidia-l4"
    # With only MIG slices in the cluster, the smallest present slice that fits is chosen.
    present = {"nvidia-a100-80gb-mig-1g.10gb", "nvidia-a100-80gb-mig-3g.40gb"}
    choice = choose_class(12 * GIB, 0.1, DEFAULT_CATALOG, present=present)
    assert choice is not None and choice.gpu_class.name == "nvidia-a100-80gb-mig-3g.40gb"


def test_catalog_yaml_round_trips_mig_fields() -> None:
    data = catalog_to_data(DEFAULT_CATALOG)
    assert load_catalog(data) == tuple(
        sorted(DEFAULT_CATALOG, key=lambda c: (c.rank, c.memory_bytes, c.name))
    )


def test_every_class_records_nvml_total_and_cuda_usable_with_sources() -> None:
    """Usable (cudaMemGetInfo total after the context) is below NVML's total on every class; the
    source says where each figure comes from, or that usable is derived."""
    for cls in DEFAULT_CATALOG:
        assert 0 < cls.memory_bytes - cls.usable <= 1 << 30, cls.name
        assert "usable" in cls.source, cls.name
        assert cls.compute_capability, cls.name
        if cls.usable_bytes is None:
            assert "DERIVED_RESERVE_BYTES" in cls.source
    h100 = next(c for c in DEFAULT_CATALOG if c.name == "nvidia-h100-80gb")
    assert round(h100.usable / GIB, 2) == 79.22 and round(h100.memory_bytes / GIB, 2) == 79.65


def test_fits_against_usable_not_nvml_total() -> None:
    h100 = next(c for c in DEFAULT_CATALOG if c.name == "nvidia-h100-80gb")
    between = (h100.usable + h100.memory_bytes) // 2
    assert not fits(h100, between, 0.0)
    assert fits(h100, h100.usable, 0.0)


def test_native_fp8_follows_compute_capability() -> None:
    fp8 = {c.name for c in DEFAULT_CATALOG if c.native_fp8}
    assert {"nvidia-a10g", "nvidia-a100-40gb", "nvidia-a100-80gb", "nvidia-rtx-a6000"}.isdisjoint(
        fp8
    )
    assert {"nvidia-l4", "nvidia-l40s", "nvidia-h100-80gb", "nvidia-b200", "amd-mi300x"} <= fp8


def test_catalog_file_sets_usable_and_compute_capability() -> None:
    merged = load_catalog(
        {"classes": [{"name": "nvidia-l4", "usableBytes": 22 * GIB, "computeCapability": "8.9"},
                     {"name": "mig", "memoryBytes": 40 * GIB, "products": ["MIG"]}]}
    )  # fmt: skip
    l4 = next(c for c in merged if c.name == "nvidia-l4")
    assert l4.usable == 22 * GIB
    mig = next(c for c in merged if c.name == "mig")
    assert mig.usable == 40 * GIB - DERIVED_RESERVE_BYTES and mig.native_fp8  # unknown: no limit
    with pytest.raises(InvalidCatalog):
        load_catalog({"classes": [{"name": "nvidia-l4", "computeCapability": "eight"}]})


# --- one derivation of usable memory for every class ------------------------------------------


def test_a_memory_override_moves_the_usable_figure() -> None:
    """An L4 overridden to 1 GiB keeps its own gap between NVML's and cudaMemGetInfo's totals,
    not its old 22.03 GiB usable: it no longer fits Llama-3-8B (16 GB of weights alone)."""
    (l4,) = [c for c in load_catalog({"classes": [{"name": "nvidia-l4", "memoryBytes": 1 << 30}]})
             if c.name == "nvidia-l4"]  # fmt: skip
    base = BY_NAME["nvidia-l4"]
    assert l4.usable == (1 << 30) - (base.memory_bytes - base.usable)
    assert "memoryBytes override" in l4.source
    assert not fits(l4, 15 * GIB, 0.0)
    from tests.architectures import LLAMA_3_8B

    from gpu_sizer.api import parse_spec
    from gpu_sizer.sizing.assessment import Verdict
    from gpu_sizer.sizing.verdict import assess

    spec = parse_spec({"model": {"architecture": LLAMA_3_8B},
                       "inference": {"engine": "vllm", "maxModelLen": 4096, "maxNumSeqs": 8},
                       "placement": {"gpuClasses": ["nvidia-l4"]}})  # fmt: skip
    catalog = load_catalog({"classes": [{"name": "nvidia-l4", "memoryBytes": 1 << 30}]})
    assert assess(spec, catalog).verdict is Verdict.NoSafeHeadroom
    assert assess(spec).verdict is Verdict.Fits


def test_a_new_class_of_a_known_product_uses_that_products_measured_gap() -> None:
    data = {
        "replaceDefaults": True,
        "classes": [{"name": "my-l4", "memoryBytes": 23034 << 20, "products": ["NVIDIA-L4"]}],
    }
    (mine,) = load_catalog(data)
    assert mine.usable == BY_NAME["nvidia-l4"].usable  # 22.03 GiB, not NVML's total less 768 MiB
    assert "gap the built-in class" in mine.source


def test_a_new_class_of_an_unknown_product_says_its_usable_figure_is_derived() -> None:
    data = {"classes": [{"name": "new-gpu", "memoryBytes": 40 * GIB, "products": ["NEW-GPU"]}]}
    new = next(c for c in load_catalog(data) if c.name == "new-gpu")
    assert new.usable == 40 * GIB - DERIVED_RESERVE_BYTES
    assert "give usableBytes" in new.source


@pytest.mark.parametrize(
    "entry",
    [{"name": "nvidia-l4", "usableBytes": 30 * GIB},
     {"name": "x", "memoryBytes": 20 * GIB, "usableBytes": 21 * GIB, "products": ["X"]}],
)  # fmt: skip
def test_usable_above_total_is_refused(entry: dict[str, Any]) -> None:
    with pytest.raises(InvalidCatalog) as err:
        load_catalog({"classes": [entry]})
    (problem,) = err.value.problems
    assert problem.path == "classes[0].usableBytes"
    assert "above memoryBytes" in problem.message
