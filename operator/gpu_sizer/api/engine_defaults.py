"""Engine defaults that change memory, so that a stored GPUWorkload can state them explicitly.

The mutating admission webhook writes these into ``spec.inference`` when they are unset, and the
budget should read the same function for an unset field, so that an object and its defaulted form
size identically. Pure.
"""

from __future__ import annotations

from gpu_sizer.api.spec import Engine, Inference

__all__ = ["DEFAULT_BATCHED_TOKENS", "default_max_num_batched_tokens"]

#: Tokens per forward pass (prefill chunk) each engine schedules by default, in tokens.
#: vLLM (V1 engine, chunked prefill always on): ``EngineArgs`` gives the OpenAI-compatible server
#: 8192 on large-memory GPUs (2048 on small ones; vllm/engine/arg_utils.py,
#: ``_set_default_args``). TGI: ``--max-batch-prefill-tokens`` defaults to 4096
#: (text-generation-launcher). SGLang: ``--chunked-prefill-size`` defaults to 8192 on large GPUs
#: (sglang/srt/server_args.py). We take the large-GPU value: more batched tokens means more
#: activation memory, so it is the conservative choice for sizing. ``transformers`` has no
#: such scheduler knob (a forward pass takes the whole batch).
DEFAULT_BATCHED_TOKENS: dict[Engine, int] = {
    Engine.vllm: 8192,
    Engine.tgi: 4096,
    Engine.sglang: 8192,
}


def default_max_num_batched_tokens(inference: Inference) -> int | None:
    """``maxNumBatchedTokens`` the engine would use for ``inference``, in tokens.

    Returns the explicit value when set; ``None`` for engines without the knob. Never less than
    ``maxNumSeqs`` (each decode step batches one token per resident sequence; the API rejects a
    smaller explicit value).
    """
    if inference.max_num_batched_tokens is not None:
        return inference.max_num_batched_tokens
    default = DEFAULT_BATCHED_TOKENS.get(inference.engine)
    if default is None:
        return None
    return max(default, inference.max_num_seqs)
