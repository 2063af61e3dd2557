"""GPU inventory from GPU Feature Discovery labels (NVIDIA k8s-device-plugin README, GFD labels)."""

from __future__ import annotations

from typing import Any

from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.inventory.nodes import (
    GpuNode,
    IgnoredNode,
    Offer,
    build_inventory,
    parse_memory_label,
    parse_node,
)

MIB = 1 << 20


def node(
    name: str = "n", labels: dict[str, str] | None = None, gpus: int | None = 8, **spec: Any
) -> dict[str, Any]:
    status = {"allocatable": {"nvidia.com/gpu": str(gpus)}} if gpus is not None else {}
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec, "status": status}


def gfd(
    product: str, memory: str | None = None, count: str | None = "8", **extra: str
) -> dict[str, str]:
    labels = {"nvidia.com/gpu.product": product, **extra}
    if memory is not None:
        labels["nvidia.com/gpu.memory"] = memory
    if count is not None:
        labels["nvidia.com/gpu.count"] = count
    return labels


def test_memory_label_in_mib_and_in_bytes_from_older_gfd() -> None:
    assert parse_memory_label("81920") == 81920 * MIB
    assert parse_memory_label(str(81920 * MIB)) == 81920 * MIB  # older GFD wrote bytes
    assert parse_memory_label("") is None
    assert parse_memory_label("lots") is None
    assert parse_memory_label("-1") is None


def test_h100_node_maps_to_its_class() -> None:
    parsed = parse_node(node(labels=gfd("NVIDIA-H100-80GB-HBM3", "81559")), DEFAULT_CATALOG)
    assert isinstance(parsed, GpuNode)
    assert parsed.gpu_class == "nvidia-h100-80gb" and parsed.gpu_count == 8


def test_bytes_memory_label_is_accepted_and_noted() -> None:
    parsed = parse_node(node(labels=gfd("NVIDIA-L4", str(23034 * MIB))), DEFAULT_CATALOG)
    assert isinstance(parsed, GpuNode) and parsed.gpu_class == "nvidia-l4"
    assert any("bytes" in n for n in parsed.notes)


def test_missing_memory_label_falls_back_to_the_product_table() -> None:
    parsed = parse_node(node(labels=gfd("NVIDIA-L4", None)), DEFAULT_CATALOG)
    assert isinstance(parsed, GpuNode) and parsed.gpu_class == "nvidia-l4"
    assert any("product table" in n for n in parsed.notes)


def test_node_without_gfd_labels_is_ignored_with_the_reason() -> None:
    parsed = parse_node(node(labels={}), DEFAULT_CATALOG)
    assert isinstance(parsed, IgnoredNode) and "no nvidia.com/gpu.product" in parsed.reason


def test_cpu_node_is_not_a_gpu_node() -> None:
    assert parse_node(node(labels={}, gpus=None), DEFAULT_CATALOG) is None


def test_mixed_gpu_models_memory_disagreement_is_ignored() -> None:
    # First GPU labelled as an L4 but memory of an 80 GB card: labels describe the first GPU only.
    parsed = parse_node(node(labels=gfd("NVIDIA-L4", "81920")), DEFAULT_CATALOG)
    assert isinstance(parsed, IgnoredNode) and "mixed GPU models" in parsed.reason


def test_count_label_disagreeing_with_allocatable_is_ignored() -> None:
    parsed = parse_node(node(labels=gfd("NVIDIA-L4", "23034", count="4"), gpus=8), DEFAULT_CATALOG)
    assert isinstance(parsed, IgnoredNode) and "gpu.count=4" in parsed.reason


def test_mig_single_strategy_slice_not_in_catalog_is_ignored() -> None:
    # The A30's profiles are not in the default catalog (MIG User Guide: 1g.6gb, 2g.12gb, 4g.24gb).
    labels = gfd(
        "NVIDIA-A30-MIG-1g.6gb", "5888", count="16", **{"nvidia.com/mig.strategy": "single"}
    )
    parsed = parse_node(node(labels=labels, gpus=16), DEFAULT_CATALOG)
    assert isinstance(parsed, IgnoredNode) and "MIG slice" in parsed.reason


def test_mig_single_strategy_slice_is_its_own_class() -> None:
    # GFD, single strategy on 8 A100-40GB cut into 1g.5gb: 56 slices of 4864 MiB each (GFD's
    # nvidia.com/mig-1g.5gb.memory label value; 4.75 GiB in nvidia-smi mig -lgip).
    labels = gfd(
        "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "4864",
        count="56",
        **{"nvidia.com/mig.strategy": "single"},
    )
    parsed = parse_node(node(labels=labels, gpus=56), DEFAULT_CATALOG)
    assert isinstance(parsed, GpuNode)
    assert parsed.gpu_class == "nvidia-a100-40gb-mig-1g.5gb" and parsed.gpu_count == 56
    assert parsed.offers == (Offer("nvidia-a100-40gb-mig-1g.5gb", 56, "nvidia.com/gpu"),)
    assert parsed.mig_strategy == "single"


def test_mig_single_strategy_slice_memory_disagreement_is_ignored() -> None:
    # A 1g.10gb product label with a 3g.40gb slice's memory: labels cannot both be right.
    labels = gfd(
        "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "40192",
        count="8",
        **{"nvidia.com/mig.strategy": "single"},
    )
    parsed = parse_node(node(labels=labels, gpus=8), DEFAULT_CATALOG)
    assert isinstance(parsed, IgnoredNode) and "MiB" in parsed.reason


def test_gpu_operator_issue_637_mixed_mig_node_offers_slices_not_stale_gpus() -> None:
    # NVIDIA gpu-operator issue 637: two A100-80GB, mixed strategy, every GPU cut into slices;
    # the node still advertised nvidia.com/gpu: 2, and pods asking for it got no GPU.
    labels = gfd(
        "NVIDIA-A100-SXM4-80GB",
        "81920",
        count="2",
        **{"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.10gb.memory": "9728"},
    )
    n = node(labels=labels, gpus=2)
    n["status"]["allocatable"].update(
        {
            "nvidia.com/mig-1g.10gb": "6",
            "nvidia.com/mig-2g.20gb": "4",
            "nvidia.com/mig-3g.40gb": "0",
        }
    )
    parsed = parse_node(n, DEFAULT_CATALOG)
    assert isinstance(parsed, GpuNode)
    assert parsed.offers == (
        Offer("nvidia-a100-80gb-mig-1g.10gb", 6, "nvidia.com/mig-1g.10gb"),
        Offer("nvidia-a100-80gb-mig-2g.20gb", 4, "nvidia.com/mig-2g.20gb"),
    )
    assert "nvidia-a100-80gb" not in parsed.classes()
    assert any("gpu-operator#637" in note and "0 whole GPU(s)" in note for note in parsed.notes)
    inv = build_inventory([n], DEFAULT_CATALOG)
    assert inv.present_classes() == {
        "nvidia-a100-80gb-mig-1g.10gb",
        "nvidia-a100-80gb-mig-2g.20gb",
    }


def test_mixed_strategy_with_some_whole_gpus_offers_both() -> None:
    # 8 A100-80GB, one cut into 7 x 1g.10gb: 7 whole GPUs stay requestable as nvidia.com/gpu.
    labels = gfd(
        "NVIDIA-A100-SXM4-80GB", "81920", count="8", **{"nvidia.com/mig.strategy": "mixed"}
    )
    n = node(labels=labels, gpus=7)
    n["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "7"
    parsed = parse_node(n, DEFAULT_CATALOG)
    assert isinstance(parsed, GpuNode)
    assert parsed.offers == (
        Offer("nvidia-a100-80gb", 7),
        Offer("nvidia-a100-80gb-mig-1g.10gb", 7, "nvidia.com/mig-1g.10gb"),
    )
    assert parsed.gpu_class == "nvidia-a100-80gb" and parsed.gpu_count == 7


def test_mixed_strategy_slice_memory_label_disagreement_drops_that_slice() -> None:
    labels = gfd(
        "NVIDIA-H100-80GB-HBM3",
        "81559",
        count="1",
        **{"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-3g.40gb.memory": "9984"},
    )
    n = node(labels=labels, gpus=0)
    n["status"]["allocatable"].update(
        {"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-1g.10gb": "4"}
    )
    parsed = parse_node(n, DEFAULT_CATALOG)
    assert isinstance(parsed, GpuNode)
    assert parsed.classes() == {"nvidia-h100-80gb-mig-1g.10gb"}
    assert any("mig-3g.40gb.memory" in note for note in parsed.notes)


def test_mig_resources_without_strategy_label_are_read_as_mixed() -> None:
    n = node(labels=gfd("NVIDIA-H200", "143771", count="1"), gpus=None)
    n["status"] = {"allocatable": {"nvidia.com/mig-1g.18gb": "7"}}
    parsed = parse_node(n, DEFAULT_CATALOG)
    assert isinstance(parsed, GpuNode) and parsed.gpu_class == "nvidia-h200-mig-1g.18gb"
    assert any("read as the mixed strategy" in note for note in parsed.notes)


def test_mixed_strategy_slices_unknown_to_the_catalog_leave_the_node_ignored() -> None:
    n = node(labels=gfd("NVIDIA-A30", "24576", count="1", **{"nvidia.com/mig.strategy": "mixed"}))
    n["status"] = {"allocatable": {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.6gb": "4"}}
    parsed = parse_node(n, DEFAULT_CATALOG)
    assert isinstance(parsed, IgnoredNode) and "mig-1g.6gb: no catalog class" in parsed.reason


def test_mixed_80_and_40_gb_node_cannot_be_told_from_labels() -> None:
    # GFD labels a node from its first GPU: an A100-80GB first and an A100-40GB second read as
    # two 80 GB cards (product, memory and count all agree). This pins the limitation the README
    # states; the only remedy on the Node object is the operator's opt-out label.
    labels = gfd("NVIDIA-A100-SXM4-80GB", "81920", count="2")
    parsed = parse_node(node(labels=labels, gpus=2), DEFAULT_CATALOG)
    assert isinstance(parsed, GpuNode)
    assert parsed.gpu_class == "nvidia-a100-80gb" and parsed.gpu_count == 2
    opted_out = parse_node(
        node(labels={**labels, "gpusizer.dev/ignore": "true"}, gpus=2), DEFAULT_CATALOG
    )
    assert isinstance(opted_out, IgnoredNode) and "gpusizer.dev/ignore" in opted_out.reason
    # With the 40 GB card first the memory label shows 40 GB and the node under-claims (safe).
    first_40 = parse_node(
        node(labels=gfd("NVIDIA-A100-SXM4-40GB", "40960", count="2"), gpus=2), DEFAULT_CATALOG
    )
    assert isinstance(first_40, GpuNode) and first_40.gpu_class == "nvidia-a100-40gb"


def test_mig_mixed_strategy_counts_whole_gpus_only() -> None:
    labels = gfd(
        "NVIDIA-A100-SXM4-80GB",
        "81920",
        count="8",
        **{"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "all-balanced"},
    )
    parsed = parse_node(node(labels=labels, gpus=4), DEFAULT_CATALOG)
    assert isinstance(parsed, GpuNode) and parsed.gpu_count == 4
    assert any("MIG mixed" in n for n in parsed.notes)


def test_mig_config_without_strategy_is_ignored() -> None:
    labels = gfd("NVIDIA-A100-SXM4-80GB", "81920", **{"nvidia.com/mig.config": "all-1g.10gb"})
    parsed = parse_node(node(labels=labels), DEFAULT_CATALOG)
    assert isinstance(parsed, IgnoredNode) and "mig.config" in parsed.reason


def test_unknown_product_and_cordoned_nodes_are_ignored() -> None:
    unknown = parse_node(node(labels=gfd("Tesla-T4", "15360")), DEFAULT_CATALOG)
    assert isinstance(unknown, IgnoredNode) and "not in the GPU catalog" in unknown.reason
    cordoned = parse_node(
        node(labels=gfd("NVIDIA-L4", "23034"), unschedulable=True), DEFAULT_CATALOG
    )
    assert isinstance(cordoned, IgnoredNode) and "cordoned" in cordoned.reason


def test_time_sliced_shared_product_suffix_matches_the_class() -> None:
    parsed = parse_node(node(labels=gfd("NVIDIA-L4-SHARED", "23034")), DEFAULT_CATALOG)
    assert isinstance(parsed, GpuNode) and parsed.gpu_class == "nvidia-l4"


def test_inventory_summary_names_ignored_nodes() -> None:
    inv = build_inventory(
        [node("a", gfd("NVIDIA-L4", "23034")), node("b", {}), node("cpu", {}, gpus=None)],
        DEFAULT_CATALOG,
    )
    assert inv.present_classes() == {"nvidia-l4"}
    assert [i.name for i in inv.ignored] == ["b"]
    assert "b (" in inv.summary() and "nvidia-l4: 1 node(s)" in inv.summary()


def test_mig_strategy_of_a_class_follows_how_its_nodes_offer_it() -> None:
    # gpu-operator issue 637's node (mixed) beside a single-strategy node of another profile.
    mixed = node("mixed", gfd("NVIDIA-A100-SXM4-80GB", "81920", count="2"), gpus=0)
    mixed["metadata"]["labels"]["nvidia.com/mig.strategy"] = "mixed"
    mixed["status"]["allocatable"].update({"nvidia.com/mig-1g.10gb": "6"})
    single = node(
        "single",
        gfd("NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", "40192", count="4")
        | {"nvidia.com/mig.strategy": "single"},
        gpus=4,
    )
    inv = build_inventory([mixed, single], DEFAULT_CATALOG)
    assert inv.mig_strategy("nvidia-a100-80gb-mig-1g.10gb") == "mixed"
    assert inv.mig_strategy("nvidia-a100-80gb-mig-3g.40gb") == "single"
    assert inv.mig_strategy("nvidia-l4") == "single"  # absent, and whole GPUs: nvidia.com/gpu
    # The same profile offered both ways: requested the way most of its devices are offered.
    also = node(
        "single-1g",
        gfd("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "9728", count="7")
        | {"nvidia.com/mig.strategy": "single"},
        gpus=7,
    )
    assert (
        build_inventory([mixed, also], DEFAULT_CATALOG).mig_strategy("nvidia-a100-80gb-mig-1g.10gb")
        == "single"
    )
