"""Inference KV cache as engines store it: per-token bytes and per-sequence state, by layer group.

:func:`kv_geometry` is the one description of what a model caches on the most loaded GPU; the
estimate (:func:`kv_cache_bytes`) and the engines' pre-allocated pools read it. Layers are
grouped by what they cache:

- ``full``: every attention layer keeps one key and one value vector per KV head per token
  (Kwon et al. 2023, "Efficient Memory Management for Large Language Model Serving with
  PagedAttention", section 3: OPT-13B needs 2 x 40 layers x 5120 x 2 bytes = 800 KiB per token):
  ``2 x kv_heads x head_dim x bytes(kvCacheDtype)`` per layer. GQA/MQA store only
  ``numKeyValueHeads`` heads (Ainslie et al. 2023; Shazeer 2019); tensor parallelism splits KV
  heads across ranks, and with fewer KV heads than ranks each rank keeps one replicated head
  (vLLM ``QKVParallelLinear``: ``num_kv_head_replicas``).
- ``sliding``: the same per token, but a sequence never holds more than the window (vLLM's
  ``SlidingWindowSpec`` frees blocks outside it; Mistral-7B-v0.1, Gemma 2/3's local layers,
  gpt-oss's 128-token layers).
- ``chunked``: Llama 4's chunked local attention holds at most one ``attentionChunkSize`` chunk
  (vLLM ``ChunkedLocalAttentionSpec``).
- ``mla``: multi-head latent attention caches one latent vector of ``kvLoraRank +
  qkRopeHeadDim`` per token per layer, shared by all heads and replicated on every
  tensor-parallel rank (vLLM ``MLAAttentionSpec`` with one KV head; vllm-project/vllm#15871:
  DeepSeek-V2-Lite, 576 x 2 bytes x 27 layers = 31,104 bytes per token in bf16, where counting it
  as multi-head attention gives 221,184).
- ``state``: state-space (Mamba) layers keep a fixed state per sequence, whatever its length:
  the causal-conv state and the SSM state (vLLM ``MambaStateShapeCalculator``: Mamba-2
  ``(conv_kernel - 1) x (inner + 2 x groups x state) / tp`` plus ``heads / tp x head_dim x
  state``; Mamba-1 ``inner / tp x (conv_kernel - 1)`` plus ``inner / tp x state``), in the model
  dtype (vLLM's ``mamba_cache_dtype`` and ``mamba_ssm_cache_dtype`` default ``auto``;
  ``kvCacheDtype`` does not apply). In hybrid models vLLM pads each Mamba layer's state to the
  page size of the attention layers (``HybridAttentionMambaModelConfig``: the attention block
  size grows in steps of 16 tokens until one attention page holds a Mamba state, and Mamba pages
  are padded to it); that padding is included.

Pipeline parallelism: the most loaded stage's layers (:func:`gpu_sizer.budget.params.stage_layers`
partition, the stage with the most cached bytes per token). ``kvCacheDtype``
``fp8``/``fp8_e4m3``/``fp8_e5m2`` store one byte per element (vLLM docs, "Quantized KV Cache");
``auto`` uses the model's activation dtype (16-bit when the weights are 8-bit).

All results are bytes or tokens, on the most loaded GPU.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from gpu_sizer.api import DTYPE_BYTES, Architecture, Inference, KvCacheDtype, Model
from gpu_sizer.budget.families import family
from gpu_sizer.budget.params import LayerKind, config_value, layer_plan

__all__ = [
    "KvGeometry",
    "KvGroup",
    "kv_cache_bytes",
    "kv_element_bytes",
    "kv_geometry",
    "kv_token_bytes",
    "mamba_state_shapes",
    "mla_aligned",
    "state_element_bytes",
    "state_page_bytes",
    "v1_request_bytes",
]

#: vLLM's attention block alignment used when it grows the block size of hybrid models.
_HYBRID_BLOCK_STEP = 16

KvKind = Literal["full", "sliding", "chunked", "mla", "state"]


@dataclass(frozen=True, slots=True)
class KvGroup:
    """Layers on the GPU that cache alike.

    :ivar kind: what they cache (see the module docstring).
    :ivar layers: how many such layers the GPU holds.
    :ivar bytes_per_token: cached bytes per token of one sequence, all ``layers`` together (0 for
        ``state``).
    :ivar token_cap: most tokens a sequence keeps (the window or chunk); ``None``: all of them.
    :ivar bytes_per_sequence: fixed bytes per sequence, all ``layers`` together (``state``).
    """

    kind: KvKind
    layers: int
    bytes_per_token: int
    token_cap: int | None
    bytes_per_sequence: int

    def bytes_for(self, tokens: int, sequences: int) -> int:
        """Bytes for ``sequences`` sequences of ``tokens`` tokens each."""
        kept = tokens if self.token_cap is None else min(tokens, self.token_cap)
        return sequences * (kept * self.bytes_per_token + self.bytes_per_sequence)


@dataclass(frozen=True, slots=True)
class KvGeometry:
    """What the most loaded GPU caches, by layer group."""

    groups: tuple[KvGroup, ...]

    @property
    def bytes_per_token(self) -> int:
        """Cached bytes per token of one sequence, every layer, windows not applied."""
        return sum(g.bytes_per_token for g in self.groups)

    @property
    def bytes_per_sequence(self) -> int:
        """Fixed per-sequence bytes (state-space layers)."""
        return sum(g.bytes_per_sequence for g in self.groups)


def kv_element_bytes(model: Model, inference: Inference) -> int:
    """Bytes per cached element for ``kvCacheDtype``."""
    if inference.kv_cache_dtype is not KvCacheDtype.auto:
        return 1
    return max(2, DTYPE_BYTES[model.dtype])


def state_element_bytes(model: Model) -> int:
    """Bytes per element of a Mamba state (vLLM ``mamba_cache_dtype`` ``auto``: model dtype)."""
    return max(2, DTYPE_BYTES[model.dtype])


def _attention_layer_bytes(arch: Architecture, kind: LayerKind, element: int, tp: int) -> int:
    if kind.mixer == "mla":
        assert arch.kv_lora_rank is not None and arch.qk_rope_head_dim is not None
        return (arch.kv_lora_rank + arch.qk_rope_head_dim) * element
    return 2 * max(1, arch.kv_heads // tp) * arch.head_size * element


def mamba_state_shapes(arch: Architecture, tp: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(conv state, SSM state) shapes of one Mamba layer's state for one sequence on one rank.

    vLLM ``MambaStateShapeCalculator``: Mamba-2 ``(inner + 2 x groups x state) / tp`` channels x
    ``conv_kernel - 1`` and ``heads / tp x head_dim x state`` (groups that do not divide are
    replicated to one per rank, ``extra_groups_for_head_shards``); Mamba-1 ``inner / tp`` x
    ``conv_kernel - 1`` and ``inner / tp x state``.
    """
    fam = family(arch.model_type)
    assert fam.mamba is not None
    if fam.mamba.version == 2:
        heads = config_value(arch, "mamba_num_heads")
        head_dim = config_value(arch, "mamba_head_dim")
        groups = config_value(arch, "n_groups")
        if groups % tp:
            groups = tp  # vLLM extra_groups_for_head_shards: replicated up to one per rank
        state = config_value(arch, "ssm_state_size")
        conv_dim = (heads * head_dim + 2 * groups * state) // tp
        return (conv_dim, config_value(arch, "conv_kernel") - 1), (heads // tp, head_dim, state)
    inner = config_value(arch, "mamba_expand") * arch.hidden_size // tp
    return (inner, config_value(arch, "mamba_d_conv") - 1), (
        inner,
        config_value(arch, "mamba_d_state"),
    )


def _state_layer_bytes(arch: Architecture, tp: int, element: int) -> int:
    """One Mamba layer's conv + SSM state per sequence on one rank, unpadded."""
    total = 0
    for shape in mamba_state_shapes(arch, tp):
        n = 1
        for d in shape:
            n *= d
        total += n
    return total * element


def state_page_bytes(arch: Architecture, tp: int, element_bytes: int, state_bytes: int) -> int:
    """Bytes vLLM reserves per sequence for one Mamba layer: the state padded to the attention
    page of a hybrid model (see the module docstring); the bare state without attention layers.

    :param element_bytes: bytes per cached attention element; :param state_bytes: per state
        element.
    """
    state = _state_layer_bytes(arch, tp, state_bytes)
    kinds = {k for k in layer_plan(arch) if k.mixer in ("attention", "mla")}
    page = max((_attention_layer_bytes(arch, k, element_bytes, tp) for k in kinds), default=0)
    if not page:
        return state
    step = _HYBRID_BLOCK_STEP * page
    return -(-state // step) * step


def _stages(n: int, pp: int) -> list[range]:
    size = -(-n // pp)
    return [range(s, min(n, s + size)) for s in range(0, n, size)]


@lru_cache(maxsize=1024)
def kv_geometry(
    arch: Architecture, element_bytes: int, tp: int, pp: int, state_bytes: int = 2
) -> KvGeometry:
    """What one GPU of ``tp x pp`` caches per token and per sequence, by layer group (memoised).

    :param arch: the model's shape.
    :param element_bytes: bytes per cached attention element (:func:`kv_element_bytes`).
    :param tp: tensor-parallel degree; :param pp: pipeline-parallel degree (the stage with the
        most bytes per token is described).
    :param state_bytes: bytes per Mamba state element (:func:`state_element_bytes`).
    """
    plan = layer_plan(arch)
    stages = _stages(len(plan), pp)
    best: tuple[int, KvGeometry] | None = None
    for stage in stages:
        geometry = _stage_geometry(arch, plan, stage, element_bytes, tp, state_bytes)
        key = geometry.bytes_per_token + geometry.bytes_per_sequence
        if best is None or key > best[0]:
            best = (key, geometry)
    assert best is not None
    return best[1]


def _stage_geometry(
    arch: Architecture,
    plan: tuple[LayerKind, ...],
    stage: range,
    element: int,
    tp: int,
    state_bytes: int,
) -> KvGeometry:
    counts: dict[KvKind, int] = {}
    per_layer: dict[KvKind, int] = {}
    states = 0
    for kind, layers in Counter(plan[i] for i in stage).items():
        if kind.mixer == "mamba":
            states += layers
            continue
        if kind.mixer == "none":
            continue
        group: KvKind = "mla" if kind.mixer == "mla" else kind.window
        per_layer[group] = _attention_layer_bytes(arch, kind, element, tp)
        counts[group] = counts.get(group, 0) + layers
    groups = []
    for group, layers in counts.items():
        cap: int | None = None
        if group == "sliding":
            cap = config_value(arch, "sliding_window")
        elif group == "chunked":
            cap = config_value(arch, "attention_chunk_size")
        groups.append(KvGroup(group, layers, layers * per_layer[group], cap, 0))
    if states:
        state = state_page_bytes(arch, tp, element, state_bytes)
        groups.append(KvGroup("state", states, 0, None, states * state))
    return KvGeometry(groups=tuple(groups))


def kv_token_bytes(arch: Architecture, element_bytes: int, tp: int, pp: int) -> int:
    """KV cache bytes per token on the most loaded GPU (all its attention layers, uncapped)."""
    return kv_geometry(arch, element_bytes, tp, pp).bytes_per_token


def kv_cache_bytes(geometry: KvGeometry, max_model_len: int, max_num_seqs: int) -> tuple[int, int]:
    """(bytes, tokens) of the cache for ``maxNumSeqs`` sequences of ``maxModelLen`` tokens.

    ``tokens`` is the largest per-layer token capacity (window-capped when every attention layer
    is capped; 0 for a model with no attention layer on the GPU).
    """
    nbytes = sum(g.bytes_for(max_model_len, max_num_seqs) for g in geometry.groups)
    caps = [
        max_model_len if g.token_cap is None else min(max_model_len, g.token_cap)
        for g in geometry.groups
        if g.kind != "state"
    ]
    return nbytes, max(caps, default=0) * max_num_seqs


def v1_request_bytes(geometry: KvGeometry, max_model_len: int, batched: int, block: int) -> int:
    """Bytes vLLM V1 reserves for one request of ``max_model_len`` tokens (its start-up check and
    "Maximum concurrency"), by layer group, in whole ``block``-token pages.

    vLLM ``kv_cache_interface.py`` (0.11.0) ``max_memory_usage_bytes``: full attention and MLA
    ``cdiv(max_model_len, block)`` pages; ``SlidingWindowSpec`` ``cdiv(min(window - 1 + batched,
    max_model_len), block) + 1`` (a chunked prefill keeps the window behind the new tokens, and the
    window need not start on a page boundary); ``ChunkedLocalAttentionSpec``
    ``cdiv(min(chunk + batched, max_model_len), block)``; Mamba state one page per request.

    :param batched: ``max_num_batched_tokens``; all counts in tokens, the result in bytes.
    """
    total = 0
    for g in geometry.groups:
        if g.kind == "state":
            total += g.bytes_per_sequence
            continue
        if g.kind == "sliding" and g.token_cap is not None:
            pages = -(-min(g.token_cap - 1 + batched, max_model_len) // block) + 1
        elif g.kind == "chunked" and g.token_cap is not None:
            pages = -(-min(g.token_cap + batched, max_model_len) // block)
        else:
            pages = -(-max_model_len // block)
        total += pages * block * g.bytes_per_token
    return total


def mla_aligned(geometry: KvGeometry, align: int) -> KvGeometry:
    """``geometry`` with each MLA layer's per-token entry padded to a multiple of ``align`` bytes
    (vLLM V0 ``CacheEngine`` with ``align_cache``: 576 x 2 = 1,152 bytes become 1,280)."""
    groups = []
    for g in geometry.groups:
        if g.kind == "mla" and g.layers:
            entry = g.bytes_per_token // g.layers
            padded = -(-entry // align) * align
            g = KvGroup(g.kind, g.layers, padded * g.layers, g.token_cap, g.bytes_per_sequence)
        groups.append(g)
    return KvGeometry(groups=tuple(groups))
