"""Long-context fine-tuning: the longest context that fits, against Unsloth's published table.

Source: unslothai/unsloth README.md, "Context length benchmarks", and unsloth.ai/blog/llama3-3
(10 Dec 2024). Column "Hugging Face + FA2": Llama 3.1 (8B) Instruct and Llama 3.3 (70B)
Instruct, 4-bit QLoRA on q, k, v, o, gate, up and down with rank 32, batch size 1, sequences
padded to the length tested, gradient checkpointing. The stack of that date is transformers
4.47 (whose ``ForCausalLMLoss`` still copied the shifted float32 logits), PEFT 0.14 and TRL's
SFTTrainer, which runs PEFT's ``prepare_model_for_kbit_training`` on a 4-bit model.

| VRAM  | Llama 3.1 8B | Llama 3.3 70B |
| 8 GB  | OOM          |               |
| 12 GB | 932          |               |
| 16 GB | 2,551        |               |
| 24 GB | 5,789        |               |
| 40 GB | 12,264       |               |
| 48 GB | 15,502       | OOM           |
| 80 GB | 28,454       | 6,916         |

The 8B rows lie on one line (1,619 tokens per 4 GB), so they are a fit of PyTorch's peak
reserved memory against context, which Unsloth's notebooks print as
``torch.cuda.max_memory_reserved() / 1024**3`` labelled "GB": GiB of the caching allocator,
without the CUDA context. Two readings are checked: for the rows that are real cards (24, 40,
48 and 80 GB: RTX 4090, A100-40GB, RTX A6000, A100-80GB; the 70B rows were run on an A100
80GB) the whole estimate against the card's usable memory, which is what a user is told; for
12 and 16 GB, which name no card here, the estimate less the CUDA context against that many
GiB, the table's own measure. Each must be at most the table's context and at least 85% of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.architectures import LLAMA_2_7B, LLAMA_3_8B, LLAMA_3_70B

from gpu_sizer.api import parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.budget.runtime import CUDA_CONTEXT_BYTES
from gpu_sizer.catalog import DEFAULT_CATALOG

GIB = 1 << 30
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
USABLE = {c.name: c.usable for c in DEFAULT_CATALOG}


def _spec(
    arch: dict[str, Any], tokens: int, version: str | None = "4.47.1", dropout: float = 0.0
) -> Any:
    versioned = {"frameworkVersion": version} if version else {}
    return parse_spec(
        {
            "model": {
                "architecture": {**arch, "maxPositionEmbeddings": 131_072},
                "quantization": {"method": "bitsandbytes-nf4"},
            },
            "training": {
                "microBatchSize": 1,
                "sequenceLength": tokens,
                "activationCheckpointing": True,
                "finetuning": {
                    "method": "qlora",
                    "loraRank": 32,
                    "loraTargetModules": ALL_LINEAR,
                    "loraDropout": dropout,
                },
                **versioned,
            },
        }
    )


def _longest(need: Callable[[int], int], capacity: int) -> int:
    """Largest context whose ``need`` fits ``capacity`` bytes (0 when none does); ``need`` is
    monotonic in tokens (tests/budget/test_training_properties.py)."""
    if need(1) > capacity:
        return 0
    lo, hi = 1, 1 << 18
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if need(mid) <= capacity else (lo, mid)
    return lo


def _on_card(arch: dict[str, Any], card: str) -> int:
    return _longest(lambda n: estimate(_spec(arch, n)).per_gpu.total_bytes, USABLE[card])


def _reserved(arch: dict[str, Any], gib: int) -> int:
    return _longest(
        lambda n: estimate(_spec(arch, n)).per_gpu.total_bytes - CUDA_CONTEXT_BYTES, gib * GIB
    )


def _within(ours: int, table: int) -> None:
    assert 0.85 * table <= ours <= table, f"{ours} tokens against the table's {table}"


@pytest.mark.parametrize(
    ("card", "table"),
    [
        ("nvidia-rtx-4090", 5_789),
        ("nvidia-a100-40gb", 12_264),
        ("nvidia-rtx-a6000", 15_502),
        ("nvidia-a100-80gb", 28_454),
    ],
)
def test_llama_3_1_8b_qlora_longest_context_on_the_cards(card: str, table: int) -> None:
    _within(_on_card(LLAMA_3_8B, card), table)


@pytest.mark.parametrize(("gib", "table"), [(12, 932), (16, 2_551)])
def test_llama_3_1_8b_qlora_longest_context_in_reserved_memory(gib: int, table: int) -> None:
    _within(_reserved(LLAMA_3_8B, gib), table)


def test_llama_3_1_8b_qlora_does_not_fit_8_gb() -> None:
    """The Llama 3.1 blog: HF + FA2 "fails or runs out of memory (OOM) on 8GB GPU cards,
    needing around 9GB of memory"."""
    assert _reserved(LLAMA_3_8B, 8) == 0
    assert estimate(_spec(LLAMA_3_8B, 1)).per_gpu.total_bytes > 9 * GIB


def test_llama_3_3_70b_qlora_longest_context_on_an_a100_80gb() -> None:
    _within(_on_card(LLAMA_3_70B, "nvidia-a100-80gb"), 6_916)


@pytest.mark.parametrize("card", ["nvidia-rtx-a6000", "nvidia-l40s"])
def test_llama_3_3_70b_qlora_does_not_fit_48_gb(card: str) -> None:
    assert _on_card(LLAMA_3_70B, card) == 0


def test_the_table_is_the_loss_instant_not_the_layer_instant() -> None:
    """At these vocabularies the end of the forward (every checkpoint plus the loss's 14 bytes
    per logit) is the activation peak; summing it with the recomputed layer would make the
    80 GB context about 20% shorter than the table."""
    spec = _spec(LLAMA_3_8B, 28_000)
    tokens, vocab, hidden, layers = 28_000, 128_256, 4096, 32
    acts = estimate(spec).per_gpu.activation_bytes
    loss = tokens * vocab * (2 + 4 + 4 + 4)
    checkpoints = layers * tokens * hidden * 4  # float32 residual stream
    assert acts >= loss + checkpoints
    assert acts < 1.05 * (loss + checkpoints) + 3 * GIB  # lm_head's 16-bit copy, dequant, norm


def test_transformers_4_49_drops_the_shifted_logits_copy() -> None:
    """transformers PR 35646 (in 4.49.0): ``ForCausalLMLoss`` pads the labels instead of making
    ``logits[..., :-1, :].contiguous()``: 4 bytes per logit less at the loss instant. Unset,
    the version is the newest modelled."""
    old = estimate(_spec(LLAMA_3_8B, 16_384)).per_gpu.activation_bytes
    new = estimate(_spec(LLAMA_3_8B, 16_384, "4.49.0")).per_gpu.activation_bytes
    assert old - new == 16_384 * 128_256 * 4
    assert estimate(_spec(LLAMA_3_8B, 16_384, None)).per_gpu.activation_bytes == new


def test_unmodelled_transformers_release_is_noted() -> None:
    est = estimate(_spec(LLAMA_3_8B, 1024, "4.30.0"))
    assert any("older than the releases modelled" in n for n in est.notes)


def test_lora_dropout_keeps_a_mask_per_adapted_module_in_the_recomputed_layer() -> None:
    """PEFT ``LoraLayer.update_layer``: ``lora_dropout`` > 0 gives each adapted module its own
    ``nn.Dropout``, whose mask (1 byte per input element) backward keeps; on the float32
    stream the dropped copy is transient (autocast's 16-bit cast of it is what LoRA A saves),
    except for o_proj, whose input is FlashAttention's 16-bit output (mask and copy, 3 bytes).
    Llama-2-7B's 32,000-token vocabulary makes the recomputed layer the peak."""
    tokens, h, inter = 4096, 4096, 11_008
    plain = estimate(_spec(LLAMA_2_7B, tokens)).per_gpu.activation_bytes
    dropped = estimate(_spec(LLAMA_2_7B, tokens, dropout=0.05)).per_gpu.activation_bytes
    per_token = 3 * h + 3 * h + 2 * h + inter  # q, k, v; o; gate, up; down
    assert dropped - plain == tokens * per_token
