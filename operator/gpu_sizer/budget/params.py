"""Parameter layout of a decoder-only transformer, per tensor-parallel rank. Pure.

The layout lists every weight matrix of one decoder layer (with its input and output width, how
many copies a layer holds, and whether a quantized format packs it), the per-layer vectors (norms,
biases), and the tensors outside the layers (embeddings, learned positions, projections, lm_head,
final norm). Weights, quantization metadata, LoRA adapters, Adafactor's factored states, ZeRO-3's
gathered working set and pipeline stages are all derived from it, so the parameter count is the
single thing that must be exact.

Each family follows its Hugging Face ``transformers`` modeling file (``modeling_<family>.py``):

- ``llama``/``mistral``/``mixtral``/``qwen2``/``qwen2_moe``/``gemma``/``gemma2``/``phi3``: RMSNorm
  (one weight vector of ``hidden_size``), gated MLP (``gate_proj``, ``up_proj``, ``down_proj``;
  Phi-3 fuses ``gate_up_proj`` and ``qkv_proj``), no position parameters (RoPE).
- ``qwen2``/``qwen2_moe``: q/k/v projections always carry biases (``Qwen2Attention``).
- ``mixtral``: ``block_sparse_moe`` = router ``gate`` (hidden -> experts, no bias) and ``experts``
  of ``w1``/``w3``/``w2``. ``qwen2_moe`` adds ``shared_expert`` (a gated MLP of
  ``shared_expert_intermediate_size``) and ``shared_expert_gate`` (hidden -> 1).
- ``gemma2``: four RMSNorms per layer (input, post-attention, pre- and post-feedforward).
- ``gpt_neox``: LayerNorm with bias (2 x hidden each), fused ``query_key_value`` and ``dense`` with
  biases (``attention_bias``, default true in ``GPTNeoXConfig``), MLP ``dense_h_to_4h`` and
  ``dense_4h_to_h`` with biases, separate ``embed_out`` unless tied.
- ``falcon``: LayerNorm with bias; fused ``query_key_value`` of (heads + 2 x kv heads) x head_dim
  (multi-query: 1 kv head; ``new_decoder_architecture``: ``num_kv_heads``), two LayerNorms per
  layer with the new architecture, one with ``parallel_attn`` and two without; config.json's
  ``bias`` switches biases on every linear (given here as ``attentionBias``/``mlpBias``); lm_head
  tied by default (``FalconConfig.tie_word_embeddings=True``).
- ``opt``: learned positions with ``max_position_embeddings + 2`` rows (``OPTLearnedPositional
  Embedding``'s offset of 2), biases on every linear, LayerNorms with bias, ``project_in`` /
  ``project_out`` (no bias) when ``word_embed_proj_dim`` differs from ``hidden_size``, final
  LayerNorm only with ``do_layer_norm_before``, lm_head tied to ``embed_tokens``.

Flags whose default differs by family (``tieWordEmbeddings``: true for gemma, gemma2, falcon and
opt; ``attentionBias``: true for gpt_neox and opt) take the family default when the spec leaves
them unset, as ``transformers``' config classes do.

Under tensor parallelism (Megatron-LM, Shoeybi et al. 2019, section 3; vLLM's
``ColumnParallelLinear``/``RowParallelLinear``/``VocabParallelEmbedding``): q/k/v, gate/up and
the vocabulary split by output, o/down split by input, KV heads split or replicated when fewer
than ranks (vLLM ``QKVParallelLinear``), norms, routers and row-parallel biases replicated, MoE
experts split along their intermediate width (vLLM ``FusedMoE`` tensor-parallel mode).

All counts are numbers of parameters (elements), not bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from gpu_sizer.api import Architecture

__all__ = [
    "GATED_FAMILIES",
    "Layout",
    "Linear",
    "layout",
    "parameter_count",
]

#: Families whose MLP is gated (SwiGLU/GeGLU: three matrices, act(gate) * up).
GATED_FAMILIES = frozenset(
    {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gemma", "gemma2", "phi3"}
)

_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "falcon", "opt"})
_BIASED_BY_DEFAULT = frozenset({"gpt_neox", "opt"})


class Linear(NamedTuple):
    """One weight matrix in a decoder layer, on one tensor-parallel rank.

    ``role`` is canonical (q, k, v, o, qkv, gate, up, down, gate_up, router); ``name`` is the
    module name in the family's modeling file (used to match LoRA target modules). Widths are in
    elements; ``copies`` is the number of copies per layer (MoE experts).
    """

    role: str
    name: str
    in_features: int
    out_features: int
    copies: int
    bias: bool
    quantizable: bool

    @property
    def weight_params(self) -> int:
        """Matrix elements of all copies (bias excluded)."""
        return self.in_features * self.out_features * self.copies

    @property
    def bias_params(self) -> int:
        """Bias elements of all copies."""
        return self.out_features * self.copies if self.bias else 0


@dataclass(frozen=True, slots=True)
class Layout:
    """Parameters of one tensor-parallel rank, by where they live (all in elements).

    ``embedding`` holds the input embedding and whatever sits before the first layer (learned
    positions, OPT's ``project_in``); ``head`` holds lm_head (0 when tied), the final norm and
    OPT's ``project_out``. ``layer_vectors`` are a layer's norms and biases.
    """

    family: str
    layers: int
    linears: tuple[Linear, ...]
    layer_vectors: int
    embedding: int
    head: int
    vocab: int
    hidden: int
    tied: bool

    @property
    def layer_matrix_params(self) -> int:
        """Matrix elements of one decoder layer."""
        return sum(lin.weight_params for lin in self.linears)

    @property
    def layer_params(self) -> int:
        """All parameters of one decoder layer (matrices, biases, norms)."""
        return self.layer_matrix_params + self.layer_vectors

    @property
    def total(self) -> int:
        """All parameters of the rank (tied lm_head counted once)."""
        return self.layers * self.layer_params + self.embedding + self.head


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _flag(arch: Architecture, name: str, family_default: bool) -> bool:
    """A boolean the spec may leave unset (``None``), in which case the family default applies.

    Unset is ``None`` rather than "absent from the input" so that a spec re-serialised with its
    defaults filled (the mutating webhook, ``model_dump``) keeps the same meaning and hash.
    """
    value = getattr(arch, name)
    return family_default if value is None else bool(value)


def layout(arch: Architecture, tp: int = 1) -> Layout:
    """The parameter layout of one tensor-parallel rank of ``arch`` (``tp`` ranks in all).

    :param arch: the model's shape (config.json keys).
    :param tp: tensor-parallel degree; 1 gives the whole model, whose ``total`` is the exact
        parameter count.
    """
    family = arch.model_type
    h = arch.hidden_size
    hd = arch.head_size
    q_heads = max(1, arch.num_attention_heads // tp)
    kv_heads = max(1, arch.kv_heads // tp)
    q_out = q_heads * hd
    kv_out = kv_heads * hd
    inter = _ceil_div(arch.intermediate_size, tp)
    vocab = _ceil_div(arch.vocab_size, tp)
    tied = _flag(arch, "tie_word_embeddings", family in _TIED_BY_DEFAULT)
    attn_bias = _flag(arch, "attention_bias", family in _BIASED_BY_DEFAULT)
    mlp_bias = arch.mlp_bias
    linears: list[Linear] = []
    vectors = 0
    embedding = vocab * h
    head = 0 if tied else vocab * h

    if family in ("gpt_neox", "falcon", "opt"):
        # LayerNorm with weight and bias.
        norm = 2 * h
        if family == "gpt_neox":
            linears += [
                Linear("qkv", "query_key_value", h, q_out + 2 * kv_out, 1, attn_bias, True),
                Linear("o", "dense", q_heads * hd, h, 1, attn_bias, True),
                Linear("up", "dense_h_to_4h", h, inter, 1, True, True),
                Linear("down", "dense_4h_to_h", inter, h, 1, True, True),
            ]
            vectors += 2 * norm
        elif family == "falcon":
            bias = attn_bias or mlp_bias
            linears += [
                Linear("qkv", "query_key_value", h, q_out + 2 * kv_out, 1, bias, True),
                Linear("o", "dense", q_out, h, 1, bias, True),
                Linear("up", "dense_h_to_4h", h, inter, 1, bias, True),
                Linear("down", "dense_4h_to_h", inter, h, 1, bias, True),
            ]
            two_norms = arch.new_decoder_architecture or not arch.parallel_attn
            vectors += (2 if two_norms else 1) * norm
        else:  # opt
            linears += [
                Linear("q", "q_proj", h, q_out, 1, attn_bias, True),
                Linear("k", "k_proj", h, kv_out, 1, attn_bias, True),
                Linear("v", "v_proj", h, kv_out, 1, attn_bias, True),
                Linear("o", "out_proj", q_out, h, 1, attn_bias, True),
                Linear("up", "fc1", h, inter, 1, attn_bias, True),
                Linear("down", "fc2", inter, h, 1, attn_bias, True),
            ]
            vectors += 2 * norm
            proj = arch.word_embed_proj_dim or h
            embedding = vocab * proj + (arch.max_position_embeddings + 2) * h
            head = 0 if tied else vocab * proj
            if proj != h:
                embedding += proj * h  # project_in
                head += h * proj  # project_out
            if arch.do_layer_norm_before:
                head += norm  # final_layer_norm
            norm = 0  # the final norm is accounted above
        head += norm
        return _finish(family, arch, linears, vectors, embedding, head, vocab, h, tied)

    # RMSNorm families (one weight vector per norm), gated MLPs.
    qkv_bias = attn_bias or family in ("qwen2", "qwen2_moe")
    if family == "phi3":
        linears += [
            Linear("qkv", "qkv_proj", h, q_out + 2 * kv_out, 1, qkv_bias, True),
            Linear("o", "o_proj", q_out, h, 1, attn_bias, True),
        ]
    else:
        linears += [
            Linear("q", "q_proj", h, q_out, 1, qkv_bias, True),
            Linear("k", "k_proj", h, kv_out, 1, qkv_bias, True),
            Linear("v", "v_proj", h, kv_out, 1, qkv_bias, True),
            Linear("o", "o_proj", q_out, h, 1, attn_bias, True),
        ]
    experts = arch.num_local_experts
    if experts is not None:
        e_inter = _ceil_div(arch.moe_intermediate_size or arch.intermediate_size, tp)
        names = ("w1", "w3", "w2") if family == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        linears += [
            Linear("router", "gate", h, experts, 1, False, False),
            Linear("gate", names[0], h, e_inter, experts, mlp_bias, True),
            Linear("up", names[1], h, e_inter, experts, mlp_bias, True),
            Linear("down", names[2], e_inter, h, experts, mlp_bias, True),
        ]
        if arch.shared_expert_intermediate_size is not None:
            s_inter = _ceil_div(arch.shared_expert_intermediate_size, tp)
            linears += [
                Linear("gate", "gate_proj", h, s_inter, 1, mlp_bias, True),
                Linear("up", "up_proj", h, s_inter, 1, mlp_bias, True),
                Linear("down", "down_proj", s_inter, h, 1, mlp_bias, True),
                Linear("router", "shared_expert_gate", h, 1, 1, False, False),
            ]
    elif family == "phi3":
        linears += [
            Linear("gate_up", "gate_up_proj", h, 2 * inter, 1, mlp_bias, True),
            Linear("down", "down_proj", inter, h, 1, mlp_bias, True),
        ]
    else:
        linears += [
            Linear("gate", "gate_proj", h, inter, 1, mlp_bias, True),
            Linear("up", "up_proj", h, inter, 1, mlp_bias, True),
            Linear("down", "down_proj", inter, h, 1, mlp_bias, True),
        ]
    vectors += (4 if family == "gemma2" else 2) * h
    head += h  # final norm
    return _finish(family, arch, linears, vectors, embedding, head, vocab, h, tied)


def _finish(
    family: str,
    arch: Architecture,
    linears: list[Linear],
    vectors: int,
    embedding: int,
    head: int,
    vocab: int,
    hidden: int,
    tied: bool,
) -> Layout:
    vectors += sum(lin.bias_params for lin in linears)
    return Layout(
        family=family,
        layers=arch.num_hidden_layers,
        linears=tuple(linears),
        layer_vectors=vectors,
        embedding=embedding,
        head=head,
        vocab=vocab,
        hidden=hidden,
        tied=tied,
    )


def parameter_count(arch: Architecture) -> int:
    """Exact parameter count of ``arch`` (tied embeddings counted once), in parameters.

    Equals ``sum(p.numel() for p in model.parameters())`` of the ``transformers`` model built
    from the same config.json.
    """
    return layout(arch).total
