"""The training loss of the synthetic model, computed the way ``spec.training.loss`` says.

The loss decides the largest transient of a training step (the logits, and their float32 copy),
so the probe computes it as each named implementation does. Needs torch.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["causal_lm_loss"]


def _cross_entropy_sum(logits: Tensor, labels: Tensor) -> Tensor:
    return F.cross_entropy(logits.float(), labels, reduction="sum")


def _linear_cross_entropy_sum(hidden: Tensor, weight: Tensor, labels: Tensor) -> Tensor:
    return F.cross_entropy(F.linear(hidden, weight).float(), labels, reduction="sum")


def causal_lm_loss(hidden: Tensor, lm_head: nn.Linear, labels: Tensor, mode: str) -> Tensor:
    """Mean cross-entropy of ``lm_head(hidden)`` against ``labels`` as ``spec.training.loss``
    computes it (see ``gpu_sizer.budget.training_loss`` for the sources).

    ``standard``: the full logits, upcast to float32 (``transformers``' ``ForCausalLMLoss``).
    ``chunked``: the full 16-bit logits, each of 8 chunks upcast and reduced under activation
    checkpointing, which keeps what torchtune's compiled ``CEWithChunkedOutputLoss`` keeps (the
    16-bit chunk, not its float32 log-softmax). ``fused``: Liger's chunking of the tokens
    (``liger_chunk_rows``), each chunk's logits computed and reduced under checkpointing, so no
    full logits tensor exists.

    :param hidden: ``[batch, t, hidden]``; ``labels``: ``[batch, t]`` token ids.
    """
    from torch.utils.checkpoint import checkpoint

    from gpu_sizer.budget.training_loss import CHUNKED_LOSS_CHUNKS, liger_chunk_rows

    flat = hidden.reshape(-1, hidden.shape[-1])
    targets = labels.reshape(-1)
    tokens = targets.numel()
    if mode == "fused":
        rows = liger_chunk_rows(tokens, lm_head.out_features, lm_head.in_features)
        total = sum(
            checkpoint(
                _linear_cross_entropy_sum,
                flat[i : i + rows],
                lm_head.weight,
                targets[i : i + rows],
                use_reentrant=False,
            )
            for i in range(0, tokens, rows)
        )
        return total / tokens  # type: ignore[no-any-return]
    logits = lm_head(flat)
    if mode == "chunked":
        chunks = zip(
            logits.tensor_split(CHUNKED_LOSS_CHUNKS),
            targets.tensor_split(CHUNKED_LOSS_CHUNKS),
            strict=True,
        )
        total = sum(checkpoint(_cross_entropy_sum, c, t, use_reentrant=False) for c, t in chunks)
        return total / tokens  # type: ignore[no-any-return]
    return F.cross_entropy(logits.float(), targets)
