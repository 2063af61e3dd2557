"""GPU inventory from DRA ResourceSlices (NVIDIA k8s-dra-driver-gpu, driver gpu.nvidia.com).

Device shapes follow the driver's deviceinfo.go (GetDevice for GPUs and MIG devices); the GRID
slice is from a public `kubectl get resourceslices -o yaml` dump (resource.k8s.io/v1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import yaml

from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.inventory.dra import (
    claim_template,
    device_selector,
    merge_inventory,
    parse_quantity,
    parse_resource_slices,
)
from gpu_sizer.inventory.nodes import Offer, build_inventory

MIB = 1 << 20


def gpu(name: str, product: str, memory: str) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"type": {"string": "gpu"}, "productName": {"string": product}},
        "capacity": {"memory": {"value": memory}},
    }


def mig(name: str, product: str, profile: str, memory: str) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {
            "type": {"string": "mig"},
            "productName": {"string": product},
            "profile": {"string": profile},
        },
        "capacity": {"memory": {"value": memory}},
    }


def resource_slice(
    node: str,
    *devices: dict[str, Any],
    driver: str = "gpu.nvidia.com",
    generation: int = 1,
    slices: int = 1,
    suffix: str = "x7k2p",
) -> Any:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}-{suffix}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": slices},
            "devices": list(devices),
        },
    }


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    """A driver republishing its pool writes generation 2 and then deletes generation 1; in
    between both are listed (ResourcePool.generation: older slices are outdated). 8 GPUs must
    stay 8, not 16; a pool split over two slices of the newest generation counts both."""
    eight = [gpu(f"gpu-{i}", "NVIDIA H100 80GB HBM3", "81559Mi") for i in range(8)]
    old = resource_slice("h100-1", *eight, generation=1, suffix="old")
    new = resource_slice("h100-1", *eight, generation=2, suffix="new")
    for order in ([old, new], [new, old]):
        node = parse_resource_slices(order, DEFAULT_CATALOG)["h100-1"]
        assert node.offers == (Offer("nvidia-h100-80gb", 8, "gpu.nvidia.com"),)
    halves = [
        resource_slice("h100-1", *eight[:4], generation=3, slices=2, suffix="a"),
        resource_slice("h100-1", *eight[4:], generation=3, slices=2, suffix="b"),
    ]
    node = parse_resource_slices([old, new, *halves], DEFAULT_CATALOG)["h100-1"]
    assert node.offers == (Offer("nvidia-h100-80gb", 8, "gpu.nvidia.com"),)
    # Another pool (another node) keeps its own generations.
    other = resource_slice("h100-2", *eight[:2], generation=1)
    both = parse_resource_slices([old, new, other], DEFAULT_CATALOG)
    assert both["h100-2"].offers == (Offer("nvidia-h100-80gb", 2, "gpu.nvidia.com"),)


def test_quantities() -> None:
    assert parse_quantity("80Gi") == 80 << 30
    assert parse_quantity("9728Mi") == 9728 * MIB
    assert parse_quantity("85899345920") == 80 << 30
    assert parse_quantity("1.5Gi") == 3 << 29
    assert parse_quantity("10G") == 10**10
    assert parse_quantity("lots") is None and parse_quantity(None) is None
    assert parse_quantity("0") is None


def test_mixed_80_and_40_gb_node_is_seen_device_by_device() -> None:
    # The case GPU Feature Discovery labels cannot show (README): DRA lists each card.
    slices = [
        resource_slice(
            "mixed-1",
            gpu("gpu-0", "NVIDIA A100-SXM4-80GB", "81920Mi"),
            gpu("gpu-1", "NVIDIA A100-SXM4-40GB", "40Gi"),
        )
    ]
    node = parse_resource_slices(slices, DEFAULT_CATALOG)["mixed-1"]
    assert node.offers == (
        Offer("nvidia-a100-40gb", 1, "gpu.nvidia.com"),
        Offer("nvidia-a100-80gb", 1, "gpu.nvidia.com"),
    )
    assert node.ignored == ()


def test_mig_devices_map_to_their_profile_classes() -> None:
    # gpu-operator issue 637's node under DRA: two A100-80GB cut into 1g.10gb and 2g.20gb.
    devices = [
        mig(f"gpu-0-mig-19-{i}-1", "NVIDIA A100-SXM4-80GB", "1g.10gb", "9728Mi") for i in range(6)
    ]
    devices += [
        mig(f"gpu-1-mig-14-{i}-2", "NVIDIA A100-SXM4-80GB", "2g.20gb", "19968Mi") for i in range(4)
    ]
    node = parse_resource_slices([resource_slice("a100-mig", *devices)], DEFAULT_CATALOG)[
        "a100-mig"
    ]
    assert node.offers == (
        Offer("nvidia-a100-80gb-mig-1g.10gb", 6, "mig.nvidia.com"),
        Offer("nvidia-a100-80gb-mig-2g.20gb", 4, "mig.nvidia.com"),
    )
    assert "nvidia-a100-80gb" not in node.classes()


def test_devices_that_cannot_be_trusted_are_left_out_with_the_reason() -> None:
    grid = gpu("gpu-0", "GRID A100-10C", "10Gi")  # a vGPU profile (public dump): not a class
    wrong = gpu("gpu-1", "NVIDIA H100 80GB HBM3", "40Gi")  # memory disagrees with the class
    a30 = mig("gpu-2-mig-0", "NVIDIA A30", "1g.6gb", "5888Mi")
    channel = {"name": "channel-0", "attributes": {"type": {"string": "imex-channel"}}}
    node = parse_resource_slices(
        [resource_slice("n", grid, wrong, a30, channel, gpu("gpu-3", "NVIDIA L4", "23034Mi"))],
        DEFAULT_CATALOG,
    )["n"]
    assert node.offers == (Offer("nvidia-l4", 1, "gpu.nvidia.com"),)
    reasons = "\n".join(node.ignored)
    assert "gpu-0: productName 'GRID A100-10C' is not in the catalog" in reasons
    assert "gpu-1: capacity memory 40960 MiB but nvidia-h100-80gb is 81559 MiB" in reasons
    assert "gpu-2-mig-0: MIG device of 'NVIDIA A30'" in reasons
    assert "channel-0" not in reasons  # not a GPU: not an inventory matter


def test_other_drivers_v1beta1_basic_and_qualified_names() -> None:
    other = resource_slice("n1", gpu("gpu-0", "NVIDIA L4", "23034Mi"), driver="dra.net")
    beta = resource_slice(
        "n2",
        {
            "name": "gpu-0",
            "basic": {
                "attributes": {
                    "gpu.nvidia.com/type": {"string": "gpu"},
                    "gpu.nvidia.com/productName": {"string": "NVIDIA H200"},
                },
                "capacity": {"memory": {"value": "143771Mi"}},
            },
        },
    )
    parsed = parse_resource_slices([other, beta, beta], DEFAULT_CATALOG)
    assert set(parsed) == {"n2"}
    assert parsed["n2"].offers == (Offer("nvidia-h200", 2, "gpu.nvidia.com"),)


# --- the operator's use of slices: inventory merge, claims (fixture: the driver's shape)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dra-resourceslices.yaml"
BY_NAME = {c.name: c for c in DEFAULT_CATALOG}


def fixture_slices() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(FIXTURE.read_text()) if d]


def labelled(name: str, product: str, memory: str, count: int, **extra: Any) -> dict[str, Any]:
    labels = {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": memory,
        "nvidia.com/gpu.count": str(count),
    }
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": extra,
        "status": {"allocatable": {"nvidia.com/gpu": str(count)}},
    }


def test_slices_replace_labels_for_the_nodes_they_describe() -> None:
    # The 80/40 node: GFD labels it from its first GPU, two "80 GB" cards; the slices say one
    # of each. The MIG node has no usable labels (MIG configured, no strategy known).
    nodes = [
        labelled("mixed-80-40", "NVIDIA-A100-SXM4-80GB", "81920", 2),
        labelled(
            "a100-mig",
            "NVIDIA-A100-SXM4-80GB",
            "81920",
            1,
            **{},
        ),
        labelled("l4-1", "NVIDIA-L4", "23034", 4),
        labelled("cordoned", "NVIDIA-L4", "23034", 4, unschedulable=True),
    ]
    nodes[1]["metadata"]["labels"]["nvidia.com/mig.config"] = "all-1g.10gb"
    labels_only = build_inventory(nodes, DEFAULT_CATALOG)
    assert {n.name for n in labels_only.ignored} == {"a100-mig", "cordoned"}
    cordoned_slice = resource_slice("cordoned", gpu("gpu-0", "NVIDIA L4", "23034Mi"))
    dra = parse_resource_slices([*fixture_slices(), cordoned_slice], DEFAULT_CATALOG)
    merged = merge_inventory(labels_only, dra)
    by_node = {n.name: n for n in merged.nodes}
    assert by_node["mixed-80-40"].classes() == {"nvidia-a100-80gb", "nvidia-a100-40gb"}
    assert by_node["a100-mig"].classes() == {
        "nvidia-a100-80gb-mig-1g.10gb",
        "nvidia-a100-80gb-mig-2g.20gb",
    }
    assert by_node["l4-1"] == labels_only.nodes[[n.name for n in labels_only.nodes].index("l4-1")]
    assert "ResourceSlices" in by_node["mixed-80-40"].notes[0]
    assert [n.name for n in merged.ignored] == ["cordoned"]  # a cordon is not overruled
    assert merged.through_dra("nvidia-a100-40gb")
    assert not merged.through_dra("nvidia-l4")
    assert merged.mig_strategy("nvidia-a100-80gb-mig-1g.10gb") == "single"  # claimed, not mixed


def test_claim_template_shapes_by_api_version() -> None:
    owner = {"apiVersion": "gpusizer.dev/v1alpha1", "kind": "GPUWorkload", "name": "w", "uid": "u"}
    mig_class = BY_NAME["nvidia-a100-80gb-mig-1g.10gb"]
    v1 = claim_template(
        "resource.k8s.io/v1", "job-1", "ml", owner, mig_class, 1, ["NVIDIA A100-SXM4-80GB"]
    )
    (request,) = v1["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "gpu"
    exactly = request["exactly"]
    assert exactly["deviceClassName"] == "mig.nvidia.com" and exactly["count"] == 1
    assert exactly["allocationMode"] == "ExactCount"
    assert v1["metadata"]["ownerReferences"] == [owner]
    # v1beta2 nests the same under `exactly`; v1beta1 puts it on the request itself
    # (k8s.io/api resource/v1beta1 DeviceRequest vs v1beta2/v1 ExactDeviceRequest).
    beta2 = claim_template("resource.k8s.io/v1beta2", "j", "ml", owner, mig_class, 1, ["x"])
    assert "exactly" in beta2["spec"]["spec"]["devices"]["requests"][0]
    beta1 = claim_template("resource.k8s.io/v1beta1", "j", "ml", owner, mig_class, 1, ["x"])
    (flat,) = beta1["spec"]["spec"]["devices"]["requests"]
    assert flat["deviceClassName"] == "mig.nvidia.com" and "exactly" not in flat


def test_claim_selector_picks_exactly_the_class_devices_of_the_fixture() -> None:
    # The CEL selector evaluated (cel-python) on every device of the driver-shaped fixture, as
    # the scheduler sees them: device.attributes[<domain>].<name>.
    env = celpy.Environment()
    devices = [d for s in fixture_slices() for d in s["spec"]["devices"]]

    def chosen(cls_name: str, products: list[str]) -> set[str]:
        program = env.program(env.compile(device_selector(BY_NAME[cls_name], products)))
        picked = set()
        for device in devices:
            attrs = {k: next(iter(v.values())) for k, v in device["attributes"].items()}
            activation = {"device": celpy.json_to_cel({"attributes": {"gpu.nvidia.com": attrs}})}
            if bool(program.evaluate(activation)):
                picked.add(device["name"])
        return picked

    assert chosen("nvidia-a100-40gb", ["NVIDIA A100-SXM4-40GB"]) == {"gpu-1"}
    assert chosen("nvidia-a100-80gb", ["NVIDIA A100-SXM4-80GB"]) == {"gpu-0"}  # not its slices
    assert chosen("nvidia-a100-80gb-mig-2g.20gb", ["NVIDIA A100-SXM4-80GB"]) == {"gpu-0-mig-14-4-2"}
    quoted = device_selector(BY_NAME["nvidia-l4"], ["it's"])
    assert "['it\\'s']" in quoted
