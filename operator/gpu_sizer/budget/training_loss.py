"""The language-model loss's memory: logits and their float32 working copies. Pure.

The cross-entropy over a vocabulary of V for T tokens is, with large vocabularies (Llama 3:
128,256), often the largest single allocation of a step. ``spec.training.loss`` says how it is
computed:

- ``standard`` (Hugging Face ``transformers`` ``ForCausalLMLoss``: ``logits = logits.float()``
  then ``F.cross_entropy``): the lm_head output in the compute dtype, its float32 upcast, and the
  float32 log-softmax that ``log_softmax`` saves for backward, T x V x (c + 4 + 4) bytes for a
  c-byte compute dtype; fp32 training has no separate upcast (T x V x 8). Before transformers
  4.49 the loss also made a contiguous float32 copy of the shifted logits (``shift_logits =
  logits[..., :-1, :].contiguous()``; PR 35646 pads the labels instead), 4 bytes more: all
  four exist when ``log_softmax`` runs, the forward's end. The backward's own peak over the
  logits (the saved log-softmax, the incoming gradient and ``_log_softmax_backward_data``'s
  output, 12 bytes) does not exceed it.
- ``chunked`` (torchtune ``CEWithChunkedOutputLoss``, ``num_output_chunks`` = 8, with
  ``compute_cross_entropy`` compiled as its docstring recommends, so that only the per-row
  log-sum-exp is saved): the lm_head output in the compute dtype for every token, and the
  float32 upcast and log-softmax of one chunk at a time, T x V x (c + 8 / 8) bytes (no upcast
  in fp32 training). Uncompiled,
  each chunk's float32 log-softmax stays saved for backward (4 bytes more per element).
- ``fused`` (Liger-Kernel ``fused_linear_cross_entropy_forward``; unsloth's and Apple's Cut
  Cross-Entropy work the same way): the logits are never materialised. Liger splits the T
  tokens into chunks of ``next_power_of_2(ceil(T / ceil(V / H)))`` rows (at most T) so that one
  chunk's logits are about T x H elements, computes the loss and the logits' gradient in place
  chunk by chunk, and keeps the input's gradient (T x H) and a float32 loss per token.

Under tensor parallelism the vocabulary is split (Megatron ``VocabParallelEmbedding``, vocab-
parallel cross-entropy); under context parallelism each rank holds ``sequenceLength /
contextParallelSize`` tokens.

All results are bytes for one micro-batch on one GPU.
"""

from __future__ import annotations

from gpu_sizer.api import Architecture, Loss, Training

__all__ = ["CHUNKED_LOSS_CHUNKS", "liger_chunk_rows", "logits_bytes"]

#: torchtune ``CEWithChunkedOutputLoss.num_output_chunks`` default.
CHUNKED_LOSS_CHUNKS = 8


def liger_chunk_rows(tokens: int, vocab: int, hidden: int) -> int:
    """Rows of one Liger fused-linear-cross-entropy chunk: ``next_power_of_2(ceil(T /
    ceil(V / H)))``, at most T (``chunk_mem_const`` 1, its default)."""
    inc = -(-vocab // hidden)
    rows = -(-tokens // inc)
    return min(tokens, 1 << max(0, rows - 1).bit_length())


def logits_bytes(
    arch: Architecture, tr: Training, compute: int, *, shift_copy: bool = False
) -> int:
    """Loss working set of one micro-batch (bytes; see the module docstring).

    :param compute: bytes of an element in the compute dtype (2, or 4 for fp32 training).
    :param shift_copy: the standard loss copies the shifted float32 logits (transformers < 4.49).
    """
    par = tr.parallelism
    vocab = -(-arch.vocab_size // par.tensor_parallel_size)
    tokens = tr.micro_batch_size * (tr.sequence_length // par.context_parallel_size)
    if tr.loss is Loss.fused:
        hidden = arch.word_embed_proj_dim or arch.hidden_size
        rows = liger_chunk_rows(tokens, vocab, hidden)
        return rows * vocab * compute + tokens * hidden * compute + tokens * 4
    upcast = 0 if compute == 4 else 4
    if tr.loss is Loss.chunked:
        chunk = -(-tokens // CHUNKED_LOSS_CHUNKS) * vocab * (upcast + 4)
        return tokens * vocab * compute + chunk
    return tokens * vocab * (compute + upcast + 4 + (4 if shift_copy else 0))
