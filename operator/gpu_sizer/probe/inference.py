"""Synthetic inference: load, KV cache, chunked prefill and decode at each concurrency. Torch.

Shaped after vLLM's engine (``vllm/v1/worker/gpu_model_runner.py``, ``vllm/v1/core``):

- **KV cache**: allocated once, up front, as vLLM does after its profiling run, but sized for
  exactly ``maxNumSeqs x maxModelLen`` token slots (what the spec asks the engine to hold) rather
  than "whatever memory is left". One tensor per layer in the FlashAttention backend layout
  ``[2, num_blocks, block_size, num_kv_heads, head_size]`` with 16-token blocks (vLLM's default
  ``--block-size``); each sequence owns ``ceil(maxModelLen / 16)`` consecutive blocks (an
  identity block table), so attention reads views of the cache and never copies it. Bytes:
  ``2 x layers x kv_heads x head_size x dtype_bytes x slots`` = ``kvCacheBytesPerToken x slots``
  (PagedAttention paper, Kwon et al. 2023, section 3), with ``kvCacheDtype`` fp8 stored as
  ``float8_e4m3fn`` / ``float8_e5m2`` like vLLM's fp8 cache. Layers cache as the estimate's
  :func:`gpu_sizer.budget.kv_cache.kv_geometry` says: MLA layers one ``[num_blocks, block_size,
  kvLoraRank + qkRopeHeadDim]`` latent tensor, Mamba layers one page per sequence holding the
  conv and SSM state in the model dtype, padded to the attention page as vLLM pads hybrid models;
  sliding-window and chunked layers are allocated for every position (noted).
- **KV cache, pre-allocating engines on a GPU** (vLLM, SGLang, TGI): the pool is sized the way the
  engine sizes it, from the device's own figures after a profile forward pass of the engine's
  prefill budget (:func:`pool_bytes`, with the fraction and budget the estimate chose for this
  class, :mod:`gpu_sizer.budget.engines`): vLLM ``requested - (weights + activation peak +
  non-PyTorch increase)``, SGLang ``free after load - free before load x (1 - fraction)``, TGI
  ``free after warm-up - (1 - 0.9 x fraction) x total``. The layer caches are allocated for as
  many ``maxModelLen`` requests as the pool holds, in the engine's block size, and the rest of
  the pool as one untouched buffer, so the probe holds what the engine holds; concurrency levels
  beyond those requests are measured at that number (the engine would preempt). CPU runs and
  on-demand runtimes keep ``maxNumSeqs x maxModelLen`` slots.
- **Prefill**: ``c`` prompts of ``maxModelLen - decode steps`` tokens, in forward passes of at most
  ``maxNumBatchedTokens`` tokens (chunked prefill; short prompts are batched together); unset,
  the engine's own budget from :func:`gpu_sizer.budget.activations.prefill_tokens` (vLLM and
  SGLang chunk at 8192 tokens, TGI batches up to ``maxModelLen + 50``, transformers prefills
  the whole batch unchunked), the same figure the estimate plans for; logits
  only for each sequence's last position (vLLM's ``compute_logits`` on sampled positions), in
  float32 as its sampler does.
- **Decode**: a few steps of one token per sequence for the ``c`` sequences.
- **Encode** (vision-language models, before the first prefill): the vision encoder over the
  largest image vLLM profiles with (``budget.vision.encoder_profile_patches``), pixel values
  sent as float32 and cast to the model dtype, as the processor and vLLM do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from gpu_sizer.api import Architecture, Engine, GPUWorkloadSpec, Inference, KvCacheDtype
from gpu_sizer.budget.activations import prefill_tokens
from gpu_sizer.budget.kv_cache import kv_geometry, mamba_state_shapes, state_page_bytes
from gpu_sizer.budget.vision import encoder_profile_patches
from gpu_sizer.probe.memory import OutOfMemory, Recorder
from gpu_sizer.probe.model import (
    KvCache,
    SyntheticDecoder,
    build_model,
    heaviest_stage,
    parameter_count,
    rank_architecture,
)

__all__ = [
    "BLOCK_SIZE",
    "EngineStart",
    "InferenceFigures",
    "LayerCache",
    "allocate_kv_cache",
    "allocate_layer_caches",
    "concurrency_levels",
    "default_prefill_note",
    "fp8_cache_note",
    "kv_cache_dtype",
    "pool_bytes",
    "run_inference",
]

#: vLLM's default KV cache block size in tokens (``--block-size 16``).
BLOCK_SIZE = 16
#: Decode steps measured per concurrency level.
DECODE_STEPS = 4


@dataclass
class InferenceFigures:
    """What the inference run built: parameters, weight bytes, KV cache slots and bytes."""

    parameter_count: int
    weights_bytes: int
    kv_cache_bytes: int
    kv_cache_tokens: int
    levels: list[int]
    notes: list[str]


def kv_cache_dtype(spec_dtype: KvCacheDtype, model_dtype: torch.dtype) -> torch.dtype:
    """vLLM's ``--kv-cache-dtype``: ``auto`` is the model dtype, ``fp8`` is ``fp8_e4m3``."""
    if spec_dtype is KvCacheDtype.auto:
        return model_dtype
    if spec_dtype is KvCacheDtype.fp8_e5m2:
        return torch.float8_e5m2
    return torch.float8_e4m3fn


def fp8_cache_note(engine: Engine) -> str:
    """The note on how the synthetic fp8 KV cache differs from the engine's."""
    kernels = {
        Engine.vllm: "vLLM's fp8 attention kernels read fp8 directly",
        Engine.sglang: "SGLang's attention backends read the fp8 cache directly",
        Engine.tgi: "TGI's attention kernels read the fp8 cache directly",
        Engine.transformers: "transformers has no fp8 KV cache of its own: the figure is what "
        "an fp8 cache of this size would hold",
    }[engine]
    return (
        "fp8 KV cache: attention dequantizes each sequence's cached slice to the model dtype "
        f"before the kernel ({kernels}): a small transient"
    )


def default_prefill_note(inference: Inference, tokens: int) -> str:
    """What the synthetic prefill does when ``maxNumBatchedTokens`` is unset: the engine's own
    default budget, as :func:`gpu_sizer.budget.activations.prefill_tokens` gives it (sources
    there)."""
    engine = inference.engine
    if engine is Engine.transformers:
        return (
            f"maxNumBatchedTokens unset: no chunked prefill with transformers (generate prefills "
            f"the whole batch in one forward pass): up to {tokens} tokens (maxNumSeqs x "
            "maxModelLen)"
        )
    if engine is Engine.tgi:
        return (
            f"maxNumBatchedTokens unset: prefill batches of at most {tokens} tokens (TGI's "
            "--max-batch-prefill-tokens default, maxModelLen + 50)"
        )
    if engine is Engine.sglang:
        return (
            f"maxNumBatchedTokens unset: chunked prefill of {tokens} tokens per forward pass "
            "(SGLang --chunked-prefill-size; its default depends on GPU memory, 8192 planned)"
        )
    return (
        f"maxNumBatchedTokens unset: chunked prefill of {tokens} tokens per forward pass "
        "(vLLM V1 default for the OpenAI server)"
    )


def concurrency_levels(spec: GPUWorkloadSpec) -> tuple[list[int], list[str]]:
    """Levels to measure (default ``[1, maxNumSeqs]``), capped at ``maxNumSeqs``, with notes."""
    assert spec.inference is not None
    top = spec.inference.max_num_seqs
    asked = spec.measurement.concurrency_levels or [1, top]
    notes = []
    above = sorted({c for c in asked if c > top})
    if above:
        notes.append(
            f"concurrency levels {above} exceed maxNumSeqs {top}: the engine never runs more "
            f"than {top} sequences at once, measured at {top}"
        )
    return sorted({min(c, top) for c in asked}), notes


def allocate_kv_cache(
    num_layers: int,
    num_seqs: int,
    max_len: int,
    kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device,
) -> list[Tensor]:
    """One ``[2, num_blocks, BLOCK_SIZE, kv_heads, head_dim]`` tensor per layer.

    vLLM zero-fills its cache (``torch.zeros``); this one is left uninitialised
    (``torch.empty``): the same bytes from the caching allocator, and ``cudaMalloc`` commits
    device memory whether or not it is written.
    """
    blocks = num_seqs * math.ceil(max_len / BLOCK_SIZE)
    return [
        torch.empty(2, blocks, BLOCK_SIZE, kv_heads, head_dim, dtype=dtype, device=device)
        for _ in range(num_layers)
    ]


@dataclass
class LayerCache:
    """One layer's cache tensor and how to view it: ``kv`` ``[2, blocks, BLOCK_SIZE, kv_heads,
    head_dim]``, ``mla`` ``[blocks, BLOCK_SIZE, latent]``, ``state`` ``[num_seqs, page]`` holding
    the conv state then the SSM state, ``none`` for a layer without a mixer."""

    kind: str
    tensor: Tensor
    conv: tuple[int, ...] = ()
    ssm: tuple[int, ...] = ()


def allocate_layer_caches(
    model: SyntheticDecoder,
    whole: Architecture,
    tp: int,
    num_seqs: int,
    max_len: int,
    dtype: torch.dtype,
    state_dtype: torch.dtype,
    device: torch.device,
    block_size: int = BLOCK_SIZE,
) -> list[LayerCache]:
    """The cache of every layer ``model`` holds, by what the layer caches, for ``num_seqs``
    sequences of up to ``max_len`` tokens in ``block_size``-token blocks.

    :param whole: the model's whole architecture (``model`` is built from one rank's share).
    :param dtype: the KV cache dtype; :param state_dtype: the Mamba state dtype (model dtype).
    """
    arch = model.arch
    blocks = num_seqs * math.ceil(max_len / block_size)
    element = torch.empty((), dtype=dtype).element_size()
    state_element = torch.empty((), dtype=state_dtype).element_size()
    caches = []
    for kind in model.layer_kinds:
        if kind.mixer == "attention":
            shape: tuple[int, ...] = (2, blocks, block_size, arch.kv_heads, arch.head_size)
            caches.append(LayerCache("kv", torch.empty(shape, dtype=dtype, device=device)))
        elif kind.mixer == "mla":
            width = (arch.kv_lora_rank or 0) + (arch.qk_rope_head_dim or 0)
            tensor = torch.empty(blocks, block_size, width, dtype=dtype, device=device)
            caches.append(LayerCache("mla", tensor))
        elif kind.mixer == "mamba":
            conv, ssm = mamba_state_shapes(whole, tp)
            page = state_page_bytes(whole, tp, element, state_element) // state_element
            tensor = torch.empty(num_seqs, page, dtype=state_dtype, device=device)
            caches.append(LayerCache("state", tensor, conv, ssm))
        else:
            caches.append(LayerCache("none", torch.empty(0, dtype=dtype, device=device)))
    return caches


def _views(cache: list[LayerCache], num_seqs: int, first: int, count: int) -> list[KvCache]:
    """Per-layer views of sequences ``first .. first + count`` (no copy: each sequence's blocks
    are consecutive): K and V ``[count, capacity, kv_heads, head_dim]``, MLA's latent
    ``[count, capacity, latent]`` (twice), a Mamba layer's conv and SSM state."""
    views: list[KvCache] = []
    for layer in cache:
        t = layer.tensor
        if layer.kind == "kv":
            _, blocks, block, heads, dim = t.shape
            capacity = blocks // num_seqs * block
            k = t[0].view(num_seqs, capacity, heads, dim)[first : first + count]
            v = t[1].view(num_seqs, capacity, heads, dim)[first : first + count]
            views.append((k, v))
        elif layer.kind == "mla":
            blocks, block, width = t.shape
            latent = t.view(num_seqs, blocks // num_seqs * block, width)[first : first + count]
            views.append((latent, latent))
        elif layer.kind == "state":
            rows = t[first : first + count]
            conv_n = math.prod(layer.conv)
            ssm_n = math.prod(layer.ssm)
            conv = rows[:, :conv_n].view(count, *layer.conv)
            ssm = rows[:, conv_n : conv_n + ssm_n].view(count, *layer.ssm)
            views.append((conv, ssm))
        else:
            views.append((t, t))
    return views


@dataclass(frozen=True)
class EngineStart:
    """How a pre-allocating engine starts on this GPU, as the estimate planned it: its fraction
    flag's value, its prefill budget (profile run) and its KV block size in tokens."""

    engine: Engine
    fraction: float
    prefill_tokens: int
    block_size: int


def pool_bytes(
    engine: Engine,
    fraction: float,
    *,
    total: int,
    free_at_start: int,
    free_now: int,
    weights: int,
    activation_peak: int,
    non_torch_increase: int,
) -> int:
    """The KV pool an engine carves out, from the device's own figures (bytes).

    vLLM (``gpu_worker.py`` ``determine_available_memory``): ``ceil(total x fraction) - (weights +
    activation peak + non-PyTorch increase)``. SGLang (``kv_cache_configurator.py``
    ``_profile_available_bytes``): ``free now - free at start x (1 - fraction)``. TGI
    (``flash_causal_lm.py`` ``warmup``): ``free now - (1 - fraction x 0.90) x total``, measured
    with the warm-up's activations still cached.
    """
    if engine is Engine.sglang:
        return int(free_now - free_at_start * (1 - fraction))
    if engine is Engine.tgi:
        return int(free_now - (1 - fraction * 0.90) * total)
    return math.ceil(total * fraction) - (weights + activation_peak + non_torch_increase)


def _device_memory(device: torch.device) -> tuple[int, int, int]:
    """(free, total, PyTorch reserved) bytes on ``device`` (``cudaMemGetInfo``)."""
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    return free, total, torch.cuda.memory_reserved(device)


def _engine_pool(
    spec: GPUWorkloadSpec,
    model: SyntheticDecoder,
    start: EngineStart,
    before: tuple[int, int, int],
    weights: int,
    device: torch.device,
    recorder: Recorder,
) -> int:
    """The bytes of KV pool the engine would allocate: a profile forward pass of its prefill
    budget without a KV cache (as vLLM's ``profile_run``) plus the sampler over
    ``min(maxNumSeqs, budget)`` rows in float32, then the engine's pool formula
    (:func:`pool_bytes`) on the device's figures."""
    inf = spec.inference
    assert inf is not None
    tokens = start.prefill_tokens
    with recorder.phase("profile"):
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        out = model(model.make_inputs(1, tokens, device), None, 0, last_only=True)
        if model.lm_head is not None:
            rows = min(inf.max_num_seqs, tokens)
            logits = out[:, -1].float().expand(rows, -1).contiguous()
            logits.softmax(dim=-1)
            del logits
        del out
        peak = torch.cuda.max_memory_allocated(device) - base
    if start.engine is not Engine.tgi:  # TGI measures with the warm-up's blocks still cached
        torch.cuda.empty_cache()
    free0, total, reserved0 = before
    free, _, reserved = _device_memory(device)
    non_torch = ((total - free) - reserved) - ((total - free0) - reserved0)
    return pool_bytes(
        start.engine,
        start.fraction,
        total=total,
        free_at_start=free0,
        free_now=free,
        weights=weights,
        activation_peak=peak,
        non_torch_increase=max(non_torch, 0),
    )


def _forward(model: SyntheticDecoder, batch: int, t: int, views: list[KvCache], start: int) -> None:
    """One forward pass of ``batch`` sequences of ``t`` new tokens at ``start``; greedy sampling
    from float32 logits (vLLM's sampler upcasts them) where this stage holds lm_head."""
    out = model(model.make_inputs(batch, t, views[0][0].device), views, start, last_only=True)
    if model.lm_head is not None:
        out[:, -1].float().argmax(dim=-1)


def run_inference(
    spec: GPUWorkloadSpec,
    dtype: torch.dtype,
    device: torch.device,
    recorder: Recorder,
    start: EngineStart | None = None,
) -> InferenceFigures:
    """Run the synthetic inference workload, recording a phase for each step.

    ``start`` (GPU runs of pre-allocating engines): size the KV pool the engine's way after a
    profile forward pass (see the module docstring); without it the cache holds
    ``maxNumSeqs x maxModelLen`` tokens.

    :raises gpu_sizer.probe.memory.OutOfMemory: an allocation failed (phase and size inside), or
        the engine's pool would not hold one ``maxModelLen`` request (phase ``kv-cache``).
    :raises gpu_sizer.probe.memory.DeadlineExceeded: the deadline passed between steps.
    """
    assert spec.inference is not None and spec.model.architecture is not None
    inf = spec.inference
    tp, pp = inf.tensor_parallel_size, inf.pipeline_parallel_size
    whole = spec.model.architecture
    arch = rank_architecture(whole, tp)
    stage = heaviest_stage(arch, pp, tp)
    levels, notes = concurrency_levels(spec)
    if tp > 1:
        notes.append(
            f"tensorParallelSize {tp}: rank 0's shard built and run on one GPU (ranks are "
            "symmetric); NCCL buffers and the all-reduce between ranks are not included"
        )
    if pp > 1:
        end = "first (embedding)" if stage.first else "last (lm_head)"
        notes.append(
            f"pipelineParallelSize {pp}: the most loaded stage ({stage.layers} layers and the "
            f"{end} end) built and run on one GPU with random inputs from the previous stage; "
            "NCCL send/receive buffers are not included"
        )
    batched = start.prefill_tokens if start is not None else prefill_tokens(inf)
    if inf.max_num_batched_tokens is None and start is None:
        notes.append(default_prefill_note(inf, batched))
    if inf.engine is Engine.transformers:
        notes.append(
            "transformers: the synthetic KV cache is allocated once for maxNumSeqs x maxModelLen "
            "(like StaticCache); the default DynamicCache grows by concatenation per step "
            "(torch.cat), which briefly holds a layer's old and new cache together"
        )
    capped = [
        g
        for g in kv_geometry(whole, 2, tp, pp).groups
        if g.token_cap is not None and g.token_cap < inf.max_model_len
    ]
    if capped:
        spans = ", ".join(f"{g.layers} {g.kind} layers of {g.token_cap} tokens" for g in capped)
        notes.append(
            f"{spans} (maxModelLen {inf.max_model_len}): the synthetic cache holds every "
            "position for every layer; engines that cap them (vLLM's hybrid KV cache manager) "
            "hold less"
        )
    torch.manual_seed(0)

    block = start.block_size if start is not None else BLOCK_SIZE
    with torch.inference_mode():
        before = _device_memory(device) if start is not None else (0, 0, 0)
        with recorder.phase("load"):
            model = build_model(arch, dtype, device, stage, tp).eval()
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        cache_dtype = kv_cache_dtype(inf.kv_cache_dtype, dtype)
        seqs, spare = inf.max_num_seqs, 0
        if start is not None:
            pool = _engine_pool(spec, model, start, before, weights, device, recorder)
            one = allocate_layer_caches(
                model, whole, tp, 1, inf.max_model_len, cache_dtype, dtype,
                torch.device("meta"), block,
            )  # fmt: skip
            request = sum(c.tensor.numel() * c.tensor.element_size() for c in one)
            seqs = max(pool, 0) // max(request, 1)
            if seqs < 1:
                raise OutOfMemory(
                    "kv-cache",
                    None,
                    f"{start.engine.value} would refuse to start: its KV pool of {pool} bytes "
                    f"holds no maxModelLen request ({inf.max_model_len} tokens, {request} bytes)",
                )
            spare = pool - seqs * request
            if seqs < max(levels):
                notes.append(
                    f"the KV pool holds {seqs} requests of maxModelLen {inf.max_model_len} "
                    f"tokens: concurrency levels above it measured at {seqs} (the engine would "
                    "preempt the rest)"
                )
                levels = sorted({min(c, seqs) for c in levels})
        with recorder.phase("kv-cache"):
            cache = allocate_layer_caches(
                model,
                whole,
                tp,
                seqs,
                inf.max_model_len,
                cache_dtype,
                dtype,
                device,
                block,
            )
            # the rest of the engine's pool: blocks no whole request fits in
            filler = torch.empty(spare, dtype=torch.uint8, device=device) if spare else None
        kv_bytes = sum(c.tensor.numel() * c.tensor.element_size() for c in cache) + spare
        kv_tokens = seqs * math.ceil(inf.max_model_len / block) * block
        if start is not None:  # the pool in tokens, as the engine reports it
            kv_tokens = kv_bytes * inf.max_model_len // max(request, 1)

        if model.vision is not None:
            # vLLM's profile_run encodes the largest image before the text pass (budget.vision).
            with recorder.phase("encode"):
                patches = encoder_profile_patches(whole)
                pixels = torch.randn(patches, model.vision.patch_elements, device=device)
                model.vision(pixels.to(dtype))
                del pixels

        steps = min(DECODE_STEPS, max(1, inf.max_model_len // 4))
        prompt = inf.max_model_len - steps
        for c in levels:
            with recorder.phase(f"prefill@{c}"):
                _prefill(recorder, model, cache, seqs, c, prompt, batched)
            with recorder.phase(f"decode@{c}"):
                views = _views(cache, seqs, 0, c)
                for step in range(steps):
                    recorder.check_deadline()
                    _forward(model, c, 1, views, prompt + step)
        if cache_dtype != dtype:
            notes.append(fp8_cache_note(inf.engine))
        del filler
    return InferenceFigures(
        parameter_count=parameter_count(model),
        weights_bytes=weights,
        kv_cache_bytes=kv_bytes,
        kv_cache_tokens=kv_tokens,
        levels=levels,
        notes=notes,
    )


def _prefill(
    recorder: Recorder,
    model: SyntheticDecoder,
    cache: list[LayerCache],
    num_seqs: int,
    count: int,
    prompt: int,
    batched: int,
) -> None:
    """Prefill ``count`` prompts of ``prompt`` tokens in passes of at most ``batched`` tokens."""
    if prompt <= batched:
        group = max(1, min(count, batched // prompt))
        for first in range(0, count, group):
            recorder.check_deadline()
            n = min(group, count - first)
            _forward(model, n, prompt, _views(cache, num_seqs, first, n), 0)
        return
    for seq in range(count):
        views = _views(cache, num_seqs, seq, 1)
        for start in range(0, prompt, batched):
            recorder.check_deadline()
            _forward(model, 1, min(batched, prompt - start), views, start)
