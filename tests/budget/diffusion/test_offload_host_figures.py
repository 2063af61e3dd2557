"""An offloading pipeline's messages say how much host memory (RAM) its weights take, so a
platform engineer knows what the node must have: the offload note of the estimate, and every fix
line whose candidate holds host memory another way than the spec (another offload mode, float8
weights offloaded). The figures here are computed independently of gpu-sizer's weight model:
each component is built by its library on the meta device and loaded the way diffusers 0.42.1
``ModelMixin.from_pretrained`` loads it (``models/model_loading_utils.py``
``load_model_dict_into_meta``: floating tensors in ``torch_dtype``, those under
``_keep_in_fp32_modules`` in float32; transformers keeps its own list only for float16), then
offloaded whole (``enable_model_cpu_offload``, ``enable_sequential_cpu_offload`` and
``enable_group_offload`` hold each offloaded parameter once in host memory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic.alias_generators import to_snake
from tests.budget.diffusion.conftest import CONFIG_CLASSES, build_on_meta, torch

from gpu_sizer.api import parse_workload
from gpu_sizer.budget import estimate
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
GIB = 1 << 30


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _doc(name: str, **generation: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    doc["spec"]["generation"].update(generation)
    return doc


def _loaded(component: dict[str, Any], model_dtype: str, float8: bool = False) -> Any:
    """The component as from_pretrained loads it, on the meta device; ``float8``: then stored
    in float8 by ``enable_layerwise_casting`` (``hooks/layerwise_casting.py``)."""
    dtype = getattr(torch, component.get("dtype") or model_dtype)
    config = {to_snake(k): v for k, v in component["config"].items()}
    model = build_on_meta(component["class"], config, dtype)
    transformers_kept = component["class"] in CONFIG_CLASSES and dtype is not torch.float16
    keep = [] if transformers_kept else (model._keep_in_fp32_modules or [])
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_floating_point() and any(k in name.split(".") for k in keep):
            t.data = t.data.float()
    if float8:
        model.enable_layerwise_casting(
            storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16
        )
    return model


def _library_bytes(
    doc: dict[str, Any], names: set[str], float8: frozenset[str] = frozenset()
) -> int:
    """Bytes of the named components' parameters and buffers, as the library holds them."""
    spec = doc["spec"]
    total = 0
    for c in spec["model"]["pipeline"]["components"]:
        if c["name"] in names:
            model = _loaded(c, spec["model"]["dtype"], c["name"] in float8)
            total += sum(
                t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers())
            )
    return total


WAN_14B = "wan21-t2v-14b-720p.yaml"
WAN_14B_ALL = {"text_encoder", "transformer", "vae"}


def test_the_offload_note_states_the_host_memory_of_its_components() -> None:
    doc = _doc(WAN_14B, offload="Model")
    est = estimate(parse_workload(doc))
    held = _library_bytes(doc, WAN_14B_ALL)
    assert est.host_bytes_per_node == held  # the status and the note: one figure
    assert (
        "offload Model: text_encoder, transformer, vae on the GPU only while running; "
        f"host memory holds their weights ({_gib(held)})"
    ) in est.notes


def test_a_component_on_the_cpu_and_the_offloaded_ones_each_state_theirs() -> None:
    doc = _doc("wan21-t2v-1.3b-480p-4090.yaml")  # UMT5 on the CPU, the rest model-offloaded
    est = estimate(parse_workload(doc))
    on_cpu = _library_bytes(doc, {"text_encoder"})
    offloaded = _library_bytes(doc, {"transformer", "vae"})
    assert (
        f"on the CPU, never on the GPU: text_encoder; host memory holds their weights "
        f"({_gib(on_cpu)})"
    ) in est.notes
    assert (
        "offload Model: transformer, vae on the GPU only while running; host memory holds "
        f"their weights ({_gib(offloaded)})"
    ) in est.notes
    assert est.host_bytes_per_node == on_cpu + offloaded


def test_every_process_of_a_parallel_pipeline_holds_its_own_copy() -> None:
    doc = _doc(WAN_14B, offload="Model", parallelism={"ulyssesDegree": 2})
    est = estimate(parse_workload(doc))
    held = _library_bytes(doc, WAN_14B_ALL)
    assert est.host_bytes_per_node == 2 * held
    assert (
        f"host memory holds their weights ({_gib(held)} in each of the 2 processes, "
        f"{_gib(2 * held)} per node)"
    ) in " ".join(est.notes)


def test_fixes_that_change_how_the_host_holds_the_weights_state_their_host_memory() -> None:
    # Model offload already holds every component in host memory; Group and Sequential hold the
    # same bytes, and float8 storage holds fewer: each line says what the node must have.
    doc = _doc(WAN_14B, offload="Model")
    doc["spec"]["placement"] = {"gpuClasses": ["nvidia-rtx-4090"]}
    a = assess(parse_workload(doc), DEFAULT_CATALOG)
    assert a.verdict is Verdict.NoSafeHeadroom
    fixes = {str(f).split(" (")[0]: str(f) for f in a.fixes}
    held = _gib(_library_bytes(doc, WAN_14B_ALL))
    for offload in ("offload Group", "offload Sequential"):
        assert f", {held} host memory per node, nvidia-rtx-4090 x1)" in fixes[offload]
        assert fixes[offload] in a.message.split("Fits with any of: ")[1]
    float8 = _library_bytes(doc, WAN_14B_ALL, frozenset({"transformer"}))
    cast = fixes["transformer dtype float8_e4m3fn"]
    assert f", {_gib(float8)} host memory per node, " in cast
    # A fix that leaves the host's share and its offload alone does not repeat the figure.
    assert "host memory" not in fixes["vaeTiling true"]
    assert "host memory" not in fixes["numFrames 41"]
