"""Inference activations and workspace per engine. Pure.

Serving engines reserve memory for the largest forward pass they will run: vLLM's
``profile_run`` and SGLang's and TGI's warm-up run a dummy batch of ``maxNumBatchedTokens``
tokens and keep the peak of intermediate tensors reserved (``vllm/v1/worker/gpu_model_runner.py``
``profile_run``, whose peak ``gpu_worker.py`` ``determine_available_memory`` subtracts before
sizing the KV cache). Inside one decoder layer the live set per
token (elements, one tensor-parallel rank) is the larger of

- attention: residual + normed hidden (2 x hidden), the q/k/v projection output and the attention
  output (FlashAttention, Dao et al. 2022, keeps no seq x seq score matrix);
- MLP: residual + normed hidden, then gate and up outputs and the activated product
  (3 x intermediate for gated MLPs, 2 x for GeLU MLPs); for MoE, every token is processed by
  ``numExpertsPerTok`` experts (vLLM ``fused_moe`` intermediate caches of
  ``[tokens, top_k, 2N]``, ``[tokens * top_k, N]`` and ``[tokens, top_k, hidden]``).

Logits are computed only for the rows that are sampled (one per sequence): the lm_head output in
the activation dtype, gathered over the full vocabulary across tensor-parallel ranks, upcast to
float32 and turned into float32 probabilities by the sampler (vLLM ``v1/sample/sampler.py``).

Default ``maxNumBatchedTokens`` when the spec leaves it unset:

- vLLM: 8192 (``EngineArgs.get_batch_defaults``: the OpenAI server's chunked-prefill budget on
  GPUs of 70 GiB or more other than A100; 2048 on the others, so 8192 is the safe side; vLLM V1
  always chunks prefills).
- SGLang: 8192 (``ServerArgs.chunked_prefill_size``; its default depends on GPU memory, 8192
  is a planning value).
- TGI: ``maxModelLen + 50`` (launcher ``--max-batch-prefill-tokens`` defaults to
  ``max_input_tokens + 50``).
- transformers: no chunking; ``generate`` prefills every sequence at once
  (``maxNumSeqs x maxModelLen`` tokens).

Vision-language models add the encoder's pass over the largest image (``budget.vision``).

All results are bytes on the most loaded GPU.
"""

from __future__ import annotations

from functools import lru_cache

from gpu_sizer.api import Architecture, Engine, Inference
from gpu_sizer.budget.families import Family, family
from gpu_sizer.budget.params import LayerKind, config_value, layer_plan
from gpu_sizer.budget.vision import encoder_activation_bytes, encoder_output_bytes

__all__ = [
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "activation_token_elements",
    "inference_activation_bytes",
    "logits_bytes",
    "prefill_tokens",
]

DEFAULT_MAX_NUM_BATCHED_TOKENS: dict[Engine, int] = {Engine.vllm: 8192, Engine.sglang: 8192}


def prefill_tokens(inference: Inference) -> int:
    """Tokens in the largest forward pass the engine plans for.

    Never more than ``maxNumSeqs x maxModelLen``: a forward pass only holds tokens of resident
    sequences (the scheduler fills a step from at most ``max_num_seqs`` requests of at most
    ``max_model_len`` tokens), and vLLM applies the same cap to its default
    (``vllm/config/scheduler.py`` ``SchedulerConfig.__post_init__``: ``max_num_batched_tokens =
    min(max_num_seqs * max_model_len, max_num_batched_tokens)``). Caveat: an explicit larger
    ``--max-num-batched-tokens`` is passed to vLLM's ``profile_run`` dummy batch unchanged, so
    its start-up profiling pass can briefly peak above this figure; the served batches cannot.
    """
    resident = inference.max_num_seqs * inference.max_model_len
    if inference.max_num_batched_tokens is not None:
        return min(inference.max_num_batched_tokens, resident)
    engine = inference.engine
    if engine is Engine.transformers:
        return resident
    if engine is Engine.tgi:
        return min(inference.max_model_len + 50, resident)
    return min(max(DEFAULT_MAX_NUM_BATCHED_TOKENS[engine], inference.max_num_seqs), resident)


@lru_cache(maxsize=1024)
def activation_token_elements(arch: Architecture, tp: int, moe_tokens: int = 1) -> int:
    """Peak live elements per token inside one decoder layer on one tensor-parallel rank.

    The largest over the model's layer kinds (:func:`gpu_sizer.budget.params.layer_plan`) of the
    token mixer's and the feed-forward's live set:

    - attention: residual + normed hidden, q, k, v and the attention output;
    - MLA (vLLM's prefill path decompresses the latent with ``kv_b_proj``): residual + normed
      hidden, q (and the qLoraRank bottleneck), the latent ``kvLoraRank + qkRopeHeadDim``, the
      decompressed ``heads x (qkNope + vHead)`` and the attention output;
    - Mamba-2 (vLLM ``MambaMixer2.forward``): residual + normed hidden, ``in_proj``'s output, the
      conv output over ``inner + 2 x groups x state`` channels, the scan output and the gated
      norm's output; Mamba-1: ``in_proj`` (2 x inner), conv, ``x_proj``, ``dt_proj`` and scan
      outputs;
    - dense MLP: residual + normed hidden and 3 (gated) or 2 intermediate-wide tensors;
    - MoE: residual + normed hidden, router logits, and per routed expert the gated
      intermediate and the expert output, plus the shared experts' gated intermediate.

    ``moe_tokens``: tokens an MoE layer sees per token of this rank's batch: vLLM's data
    parallel MoE gathers every data-parallel rank's tokens before the experts (the default
    ``naive``/``allgather_reducescatter`` all-to-all, ``FusedMoE`` with ``dp_size > 1``), so
    ``dataParallelSize`` there.
    """
    fam = family(arch.model_type)
    return max(
        max(
            _mixer_elements(arch, fam, kind, tp),
            _ffn_elements(arch, fam, kind, tp) * (moe_tokens if kind.ffn == "moe" else 1),
        )
        for kind in set(layer_plan(arch))
    )


def _mixer_elements(arch: Architecture, fam: Family, kind: LayerKind, tp: int) -> int:
    h = arch.hidden_size
    if kind.mixer == "attention":
        hd = arch.head_size
        q = max(1, arch.num_attention_heads // tp) * hd
        kv = max(1, arch.kv_heads // tp) * hd
        return 2 * h + q + 2 * kv + q
    if kind.mixer == "mla":
        heads = arch.num_attention_heads // tp
        rope = arch.qk_rope_head_dim or 0
        nope = arch.qk_nope_head_dim or 0
        v = arch.v_head_dim or 0
        latent = (arch.kv_lora_rank or 0) + rope
        q = heads * (nope + rope) + (arch.q_lora_rank or 0)
        return 2 * h + q + latent + heads * (nope + v) + heads * v
    if kind.mixer == "mamba":
        assert fam.mamba is not None
        if fam.mamba.version == 2:
            heads = config_value(arch, "mamba_num_heads") // tp
            inner = heads * config_value(arch, "mamba_head_dim")
            groups = config_value(arch, "n_groups")
            groups = groups // tp if groups % tp == 0 else groups
            conv = inner + 2 * groups * config_value(arch, "ssm_state_size")
            return 2 * h + (inner + conv + heads) + conv + 2 * inner
        inner = config_value(arch, "mamba_expand") * h // tp
        rank = arch.mamba_dt_rank or -(-h // 16)
        return (
            2 * h + 2 * inner + inner + rank + 2 * config_value(arch, "mamba_d_state") + 2 * inner
        )
    return 0


def _ffn_elements(arch: Architecture, fam: Family, kind: LayerKind, tp: int) -> int:
    h = arch.hidden_size
    if kind.ffn == "dense":
        width = getattr(arch, fam.mlp.width_key, None) or arch.intermediate_size
        return 2 * h + (3 if fam.mlp.gated else 2) * -(-width // tp)
    if kind.ffn == "moe" and fam.moe is not None:
        experts = arch.experts or 1
        k = arch.num_experts_per_tok or 1
        e_inter = -(-(getattr(arch, fam.moe.width_key, None) or arch.intermediate_size) // tp)
        mlp = 2 * h + experts + k * (3 * e_inter + h)
        shared = arch.shared_expert_intermediate_size or 0
        if fam.moe.shared == "deepseek":
            shared = (arch.n_shared_experts or 0) * (arch.moe_intermediate_size or 0)
        elif fam.moe.shared == "llama4":
            shared = arch.intermediate_size
        return mlp + 3 * -(-shared // tp)
    return 0


def logits_bytes(arch: Architecture, rows: int, act_bytes: int) -> int:
    """Sampler logits: lm_head output plus float32 logits and probabilities, full vocabulary."""
    return rows * arch.vocab_size * (act_bytes + 4 + 4)


def inference_activation_bytes(
    arch: Architecture, inference: Inference, act_bytes: int, tokens: int, rows: int
) -> int:
    """Peak activation bytes of a forward pass over ``tokens`` tokens sampling ``rows`` rows.

    With a vision encoder, the larger of that pass plus the largest image's embeddings (vLLM's
    ``profile_run`` keeps the encoder outputs for the dummy language-model pass) and the
    encoder's own peak on that image (:func:`gpu_sizer.budget.vision.encoder_activation_bytes`).
    """
    tp = inference.tensor_parallel_size
    gathered = inference.data_parallel_size if inference.engine is Engine.vllm else 1
    per_token = activation_token_elements(arch, tp, gathered) * act_bytes
    text = tokens * per_token + logits_bytes(arch, rows, act_bytes)
    if arch.vision_config is None:
        return text
    return max(
        text + encoder_output_bytes(arch, act_bytes), encoder_activation_bytes(arch, tp, act_bytes)
    )
