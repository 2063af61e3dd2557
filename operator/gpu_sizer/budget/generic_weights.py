"""Serving weights of a family without a parameter layout, on its most loaded GPU. Pure.

A ``modelType`` gpu-sizer has no layout for gives its size as ``spec.model.parameterCount``
only; the architecture still says how large the embedding table is (``vocabSize x hiddenSize``)
and whether ``lm_head`` shares it (``tieWordEmbeddings``). Splitting every parameter evenly over
the GPUs and quantizing them all under-counts on two points, and both are the unsafe side:

- quantized checkpoints keep the input embedding and ``lm_head`` in 16 bits (vLLM's
  ``VocabParallelEmbedding`` and ``ParallelLMHead`` are unquantized unless the method says
  otherwise; compressed-tensors and GPTQ checkpoints list ``lm_head`` in their ``ignore`` /
  unquantized modules): they are counted at ``model.dtype``, the rest as quantized;
- under pipeline parallelism the first stage holds ``embed_tokens`` and the last ``lm_head``
  beside their layers (vLLM ``model_executor/models/utils.py`` ``make_layers`` over
  ``distributed/utils.py`` ``get_pp_indices``, which gives a stage ``ceil(layers / pp)`` layers
  at most): the most loaded stage is taken with ``ceil(layers / pp)`` layers' share of the
  body and one whole table (two when the run has one stage and the table is untied).

Tensor parallelism splits both the body and the tables (``VocabParallelEmbedding`` shards the
vocabulary) but not the norms: every rank holds its stage's two RMSNorm/LayerNorm weight vectors
per layer (``hiddenSize`` each) and the final one, at ``model.dtype`` (quantization methods leave
norms alone). Unset ``tieWordEmbeddings`` is taken as untied: two tables, the larger count.
"""

from __future__ import annotations

from gpu_sizer.api import DTYPE_BYTES, Architecture, Model
from gpu_sizer.budget.weights import flat_weight_bytes

__all__ = ["serving_weight_bytes"]

#: Per-tensor scales the flat matrix cannot see: up to eight linears a layer (q, k, v, o, gate,
#: up, down, router), each with an fp32 weight scale and input scale (``Fp8LinearMethod``'s
#: ``weight_scale`` / ``input_scale``), bytes.
_LINEAR_SCALARS_PER_LAYER = 8 * 2 * 4


def serving_weight_bytes(model: Model, arch: Architecture, tp: int, pp: int) -> tuple[int, int]:
    """(weights, quantization metadata) bytes on the most loaded GPU of a ``tp x pp`` serving
    run of ``model`` (``model.parameterCount`` parameters, ``arch`` a family without a layout).

    See the module docstring for why the tables and norms are kept apart; on one GPU without
    quantization this is ``parameterCount`` parameters at ``model.dtype``.
    """
    params = model.parameter_count
    assert params is not None
    hidden, layers = arch.hidden_size, arch.num_hidden_layers
    table = arch.vocab_size * hidden
    tables = min(table * (1 if arch.tie_word_embeddings else 2), params)
    norms = min((2 * layers + 1) * hidden, params - tables)
    body = params - tables - norms
    stage_layers = -(-layers // pp)
    stage_body = -(-body * stage_layers // layers)
    stage_tables = tables if pp == 1 else min(table, tables)
    stage_norms = min((2 * stage_layers + 1) * hidden, norms)  # each rank's own copy
    body_shard = -(-stage_body // tp)
    unquantized = -(-stage_tables // tp) + stage_norms
    if model.quantization is None:
        return (body_shard + unquantized) * DTYPE_BYTES[model.dtype], 0
    weights, quant = flat_weight_bytes(body_shard, model)
    quant += stage_layers * _LINEAR_SCALARS_PER_LAYER
    return weights + unquantized * DTYPE_BYTES[model.dtype], quant
