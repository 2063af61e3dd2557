"""Public training-memory figures, each reproduced by the memory model (sources in each test).

GB is 1e9 bytes where the source says GB; GiB is 2^30 bytes (PyTorch's messages print GiB).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.architectures import LLAMA_2_7B, LLAMA_3_8B, LLAMA_3_70B, arch

from gpu_sizer.api import EstimateStatus, ParallelStrategy, TrainingFramework, parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.budget.params import layout
from gpu_sizer.budget.training import adapter_params
from gpu_sizer.budget.training_loss import logits_bytes
from gpu_sizer.budget.training_precision import optimizer_state_bytes, recipe
from gpu_sizer.budget.training_sharding import partitioned
from gpu_sizer.catalog import GPUClass
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess

GIB = 1 << 30
#: LLaMA-7B / Llama-2-7B parameters (the model cards' 6.74B; ``LLAMA_2_7B`` counts them).
LLAMA_7B_PARAMS = 6_738_415_616


def _spec(doc: dict[str, Any]) -> Any:
    return parse_spec(doc)


def _gpu(name: str, gib: float) -> GPUClass:
    return GPUClass(name, name, int(gib * GIB), (name,), "test")


def _peak(est: EstimateStatus, name: str) -> int:
    return next(p.total_bytes for p in est.phases if p.name == name)


@pytest.mark.parametrize(("stage", "expected_gb"), [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.88)])
def test_zero_paper_figure_1_under_the_papers_recipe(stage: int, expected_gb: float) -> None:
    """Rajbhandari et al. 2020, "ZeRO", Figure 1: Psi = 7.5B parameters, N_d = 64, mixed-
    precision Adam (K = 12): baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.88 GB
    of model states. The paper's recipe is ``MasterWeights`` (what ``bf16-mixed`` resolves to
    under DeepSpeed): 2 + 2 bytes of 16-bit weights and gradients, 4 of fp32 master weights and
    8 of Adam state per parameter."""
    psi = 7_500_000_000
    training = _spec(
        {
            "model": {"parameterCount": psi},
            "training": {
                "microBatchSize": 1,
                "sequenceLength": 1024,
                "parallelism": {"strategy": "zero1", "dataParallelSize": 64},
            },
        }
    ).training
    r = recipe(training)
    assert (r.name, r.param, r.grad, r.master, r.state) == ("MasterWeights", 2, 2, 4, 4)
    opt = optimizer_state_bytes(training.optimizer, r.state, psi, psi, 0)
    states = partitioned(psi * r.param, psi * r.grad, opt, psi * r.master, stage, 64)
    assert round(sum(states) / 1e9, 2 if expected_gb < 10 else 1) == expected_gb


def test_pytorch_amp_with_ddp_is_16_bytes_per_parameter_plus_buckets() -> None:
    """PyTorch AMP ("Automatic Mixed Precision" docs: the model stays fp32, autocast casts per
    op) with AdamW under DDP: 4 (fp32 weights) + 4 (fp32 gradients) + 8 (two fp32 states) =
    16 bytes per parameter, no master copy; DDP's buckets (PyTorch DDP docs,
    ``gradient_as_bucket_view``) are a second copy of the gradients, reported apart."""
    psi = 7_500_000_000
    g = estimate(
        _spec(
            {
                "model": {"parameterCount": psi},
                "training": {
                    "microBatchSize": 1,
                    "sequenceLength": 1024,
                    "precision": "bf16-mixed",
                    "parallelism": {"strategy": "ddp", "dataParallelSize": 64},
                },
            }
        )
    ).per_gpu
    states = g.weights_bytes + g.gradient_bytes + g.optimizer_state_bytes + g.master_weight_bytes
    assert states == 16 * psi
    assert g.master_weight_bytes == 0
    assert g.communication_buffer_bytes == 4 * psi


def test_deepspeed_zero2_keeps_an_fp32_gradient_partition() -> None:
    """DeepSpeed issue 5102 and the review of PR 5099 (``estimate_zero2_model_states_mem_needs``:
    "18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit"): a 7B
    model under ZeRO-2 on 8 GPUs holds 2P + 18P/N = 29.75 GB of model states, the ZeRO paper's
    2P + 14P/N plus the fp32 gradient partition ``stage_1_and_2.py`` ``step`` creates."""
    p, n = 7_000_000_000, 8
    est = estimate(
        _spec(
            {
                "model": {"parameterCount": p},
                "training": {
                    "microBatchSize": 1,
                    "sequenceLength": 1024,
                    "parallelism": {"strategy": "zero2", "dataParallelSize": n},
                },
            }
        )
    )
    g = est.per_gpu
    assert g.weights_bytes == 2 * p
    assert g.gradient_bytes == 2 * p // n + 4 * p // n
    assert g.master_weight_bytes == 4 * p // n
    assert g.optimizer_state_bytes == 8 * p // n
    states = g.weights_bytes + g.gradient_bytes + g.master_weight_bytes + g.optimizer_state_bytes
    assert states == 29_750_000_000
    # torch.optim AdamW's step temporary over the fp32 partition, reported as workspace.
    assert g.activation_bytes == 4 * p // n


def test_llama_7b_zero2_on_v100_32gb_needs_the_fp32_partition() -> None:
    """LlamaFactory issue 1221: LLaMA-7B full fine-tune, ZeRO-2 on 8x V100-32GB, batch size 1,
    fp16: "CUDA out of memory. Tried to allocate 3.14 GiB (GPU 5; 31.75 GiB total capacity;
    28.28 GiB already allocated ...)" at AdamW's step. 3.14 GiB is 4 x 6.74e9 / 8, the size of
    the rank's fp32 gradient partition and of AdamW's temporary over it. The estimate carries
    both and refuses the V100 (the issue's maintainer: "Zero2 needs 80G")."""
    spec = _spec(
        {
            "model": {"architecture": LLAMA_2_7B, "dtype": "float16"},
            "training": {
                "microBatchSize": 1,
                "sequenceLength": 1024,
                "precision": "fp16-mixed",
                "activationCheckpointing": True,
                "parallelism": {"strategy": "zero2", "dataParallelSize": 8},
            },
        }
    )
    est = estimate(spec)
    partition = 4 * LLAMA_7B_PARAMS // 8
    assert round(partition / GIB, 2) == 3.14
    g = est.per_gpu
    assert g.gradient_bytes == -(-LLAMA_7B_PARAMS // 8) * 2 + -(-LLAMA_7B_PARAMS // 8) * 4
    assert g.activation_bytes >= partition  # the optimizer step's temporary
    assert est.per_gpu.total_bytes > 31.0 * GIB
    v100 = _gpu("v100-32gb", 31.75)
    assert assess(spec, [v100]).verdict is Verdict.NoSafeHeadroom


def _llama2_7b_fsdp(initialization: str) -> Any:
    return _spec(
        {
            "model": {"architecture": LLAMA_2_7B},
            "training": {
                "microBatchSize": 1,
                "sequenceLength": 2048,
                "activationCheckpointing": True,
                "initialization": initialization,
                "parallelism": {"strategy": "fsdp-full-shard", "dataParallelSize": 8},
            },
        }
    )


def test_fsdp_initialisation_peak_on_rtx_3090() -> None:
    """llama-cookbook issue 100: Llama-2-7B full fine-tune with FSDP on 8x RTX 3090 (24 GB) ran
    out of memory inside ``FSDP(model, ...)``: every rank first held the unsharded fp32 model,
    4 x 6.74e9 bytes = 25.1 GiB. With the model materialised on every GPU the Load phase is the
    peak and the 24 GB card is refused; loading on the meta device or on rank 0 only keeps the
    Load phase to a shard plus one unit, and the step fits."""
    rtx3090 = _gpu("rtx-3090", 24.0)
    whole = estimate(_llama2_7b_fsdp("GpuPerRank"))
    assert round(4 * LLAMA_7B_PARAMS / GIB, 1) == 25.1
    assert whole.peak_phase == "Load"
    assert whole.per_gpu.weights_bytes >= 4 * LLAMA_7B_PARAMS
    assert whole.per_gpu.total_bytes == _peak(whole, "Load") > _peak(whole, "Step")
    assert assess(_llama2_7b_fsdp("GpuPerRank"), [rtx3090]).verdict is Verdict.NoSafeHeadroom
    for init in ("MetaDevice", "RankZeroCpu", "CpuPerRank"):
        est = estimate(_llama2_7b_fsdp(init))
        assert est.peak_phase == "Step"
        assert _peak(est, "Load") < 6 * GIB
        assert assess(_llama2_7b_fsdp(init), [rtx3090]).verdict is Verdict.Fits
    # Host memory: every rank stages the model, rank 0 alone, or nobody.
    host = {
        i: estimate(_llama2_7b_fsdp(i)).host_bytes_per_node
        for i in ("CpuPerRank", "RankZeroCpu", "MetaDevice")
    }
    assert host == {
        "CpuPerRank": 8 * 4 * LLAMA_7B_PARAMS,
        "RankZeroCpu": 4 * LLAMA_7B_PARAMS,
        "MetaDevice": 0,
    }


def test_fsdp_qlora_gradients_are_sharded_adapters_plus_one_unit() -> None:
    """axolotl issue 1522: Llama-2-70B QLoRA (r 32, all linear layers) with FSDP full-shard on
    2x RTX 3090. PEFT's FSDP wrap policy makes the adapters units of their own, so a rank holds
    its shard of the fp32 adapter gradients (0.77 GiB) plus the unsharded gradients of the one
    unit being reduced, in FSDP's bf16 ``param_dtype`` (accelerate's ``MixedPrecision``), not
    every adapter (2.31 GiB before). The issue's report (out of memory on 24 GB) holds."""
    arch70 = {**LLAMA_3_70B, "vocabSize": 32000, "maxPositionEmbeddings": 4096}
    spec = _spec(
        {
            "model": {"architecture": arch70, "quantization": {"method": "bitsandbytes-nf4"}},
            "training": {
                "microBatchSize": 1,
                "sequenceLength": 512,
                "activationCheckpointing": True,
                # axolotl's FSDP-QLoRA recipe: fsdp_cpu_ram_efficient_loading (rank 0 loads).
                "initialization": "RankZeroCpu",
                "finetuning": {
                    "method": "qlora",
                    "loraRank": 32,
                    "loraTargetModules": ["all-linear"],
                },
                "parallelism": {"strategy": "fsdp-full-shard", "dataParallelSize": 2},
            },
        }
    )
    adapters, _, _ = adapter_params(layout(arch(arch70)), 32, ["all-linear"])
    per_layer = adapters // 80
    assert adapters == 414_187_520
    sharded = -(-4 * adapters // 2)
    assert round(sharded / GIB, 2) == 0.77
    g = estimate(spec).per_gpu
    assert g.gradient_bytes == sharded + 2 * per_layer
    assert g.gradient_bytes < 0.8 * GIB
    assert assess(spec, [_gpu("rtx-3090", 24.0)]).verdict is Verdict.NoSafeHeadroom


def _llama3_8b_long(loss: str) -> Any:
    # gradientai/Llama-3-8B-Instruct-Gradient-1048k: Llama-3-8B's shape, 1,048,576 positions.
    return _spec(
        {
            "model": {
                "architecture": {**LLAMA_3_8B, "maxPositionEmbeddings": 1_048_576},
                "dtype": "float16",
                "quantization": {"method": "bitsandbytes-nf4"},
            },
            "training": {
                "microBatchSize": 1,
                "sequenceLength": 65_536,
                "precision": "fp16-mixed",
                "activationCheckpointing": True,
                "loss": loss,
                "finetuning": {
                    "method": "qlora",
                    "loraRank": 8,
                    "loraTargetModules": ["q_proj", "v_proj"],
                    # LlamaFactory with unsloth: no PEFT prepare_model_for_kbit_training upcast.
                    "prepareModelForKbitTraining": False,
                },
            },
        }
    )


def test_fused_cross_entropy_makes_65k_tokens_fit_in_80_gb() -> None:
    """LlamaFactory issue 3638: Llama-3-8B QLoRA (q_proj, v_proj; flash attention 2, unsloth,
    whose fused cross-entropy never materialises the logits) at cutoff_len 65,536 "basically
    fills" an A100-80GB and fits. The standard loss would need the fp16 logits, their fp32
    upcast and fp32 log-softmax: 65,536 x 128,256 x 10 bytes = 78.3 GiB, over 100 GiB in all
    (the loss instant: every layer's checkpointed input, the final norm and the loss)."""
    standard = estimate(_llama3_8b_long("standard"))
    tr = _llama3_8b_long("standard").training
    assert round(logits_bytes(arch(LLAMA_3_8B), tr, 2) / GIB, 1) == 78.3
    assert standard.per_gpu.total_bytes > 100 * GIB
    a100 = _gpu("a100-80gb", 80.0)
    assert assess(_llama3_8b_long("standard"), [a100]).verdict is Verdict.NoSafeHeadroom
    fused = estimate(_llama3_8b_long("fused"))
    assert fused.per_gpu.total_bytes < 80 * GIB
    assert assess(_llama3_8b_long("fused"), [a100]).verdict is Verdict.Fits
    chunked = estimate(_llama3_8b_long("chunked"))
    assert fused.per_gpu.total_bytes < chunked.per_gpu.total_bytes < standard.per_gpu.total_bytes


def _with(spec: Any, **training: Any) -> Any:
    tr = spec.training
    return spec.model_copy(update={"training": tr.model_copy(update=training)})


def test_llama_cookbook_100_is_refused_on_24_gb_unless_the_loading_path_is_named() -> None:
    """llama-cookbook issue 100 (meta-llama/llama-cookbook#100, 2023-08-06): Llama-2-7B full
    fine-tune, "enable fsdp with bf16 and without peft" (full_shard), 8x RTX 3090 (24 GB), CUDA
    out of memory "in `model = FSDP(model, ...)`". The script was llama-recipes'
    ``llama_finetuning.py`` of the time: every rank runs ``LlamaForCausalLM.from_pretrained``
    (float32 under transformers 4.31) unless ``low_cpu_fsdp``, then ``FSDP(...,
    device_id=torch.cuda.current_device(), sync_module_states=low_cpu_fsdp)``; its defaults
    (``configs/fsdp.py``: mixed_precision, fsdp_activation_checkpointing; ``micro_batch_size``
    1; samsum packed to 2,048 tokens) are the spec's. The whole float32 model is
    4 x 6.74e9 B = 25.1 GiB, more than the card.

    - ``framework: custom`` (llama-recipes' own loop is not modelled): the Load phase is the
      upper bound, every rank holding the model on its GPU, and the card is refused.
    - ``framework: transformers`` left at ``initialization: Auto`` (what a user who runs the
      same job under the Trainer or TRL writes): TRL's ``device_map="auto"`` path puts a whole
      copy per process on the node's GPUs, so the default is refused too, with a note naming
      the initialization values that pick one path.
    - The Trainer given a model object (``CpuPerRank``: FSDP1 moves one unit at a time with
      ``device_id``) and rank-0 loading (``RankZeroCpu``, the ``low_cpu_fsdp`` of
      meta-llama/llama-cookbook#77) fit: their Load phase is a shard plus one unit.
    """
    rtx3090 = _gpu("rtx-3090", 24.0)
    report = _llama2_7b_fsdp("Auto")
    assert report.training.framework is TrainingFramework.transformers  # the spec's default
    custom = _with(report, framework=TrainingFramework.custom)
    est = estimate(custom)
    assert est.peak_phase == "Load"
    assert _peak(est, "Load") >= 4 * LLAMA_7B_PARAMS > 24 * GIB
    assert any("framework custom" in n for n in est.notes)
    assert assess(custom, [rtx3090]).verdict is Verdict.NoSafeHeadroom
    default = estimate(report)
    assert default.peak_phase == "Load"
    assert _peak(default, "Load") >= 4 * LLAMA_7B_PARAMS
    assert any("device_map 'auto'" in n and "RankZeroCpu" in n for n in default.notes)
    assert assess(report, [rtx3090]).verdict is Verdict.NoSafeHeadroom
    # Both paths are counted: the host holds the Trainer path's copy per process.
    assert default.host_bytes_per_node == 8 * 4 * LLAMA_7B_PARAMS
    for init in ("CpuPerRank", "RankZeroCpu"):
        named = _llama2_7b_fsdp(init)
        assert estimate(named).peak_phase == "Step"
        assert not any("device_map 'auto'" in n for n in estimate(named).notes)
        assert assess(named, [rtx3090]).verdict is Verdict.Fits


def test_trl_device_map_path_is_counted_only_under_transformers_fsdp() -> None:
    """TRL's ``create_model_from_path`` sets ``device_map="auto"`` unless the launch is
    ``MULTI_GPU`` or ``DEEPSPEED``: DDP and DeepSpeed launches load without a device map, and
    torchtune, accelerate or DeepSpeed loops are not TRL. Under ZeRO-3 the Trainer's
    ``from_pretrained`` runs inside ``zero.Init``."""
    base = _llama2_7b_fsdp("Auto")
    default = _peak(estimate(base), "Load")
    for framework in ("accelerate", "torchtune", "deepspeed"):
        other = _with(base, framework=TrainingFramework(framework))
        assert _peak(estimate(other), "Load") < default / 4
    tr = base.training
    zero3 = tr.parallelism.model_copy(update={"strategy": ParallelStrategy.zero3})
    z3 = estimate(_with(base, parallelism=zero3))
    assert not any("device_map 'auto'" in n for n in z3.notes)
    assert _peak(z3, "Load") < default / 4


def _qlora_70b_fsdp(initialization: str) -> Any:
    arch70 = {**LLAMA_3_70B, "vocabSize": 32000, "maxPositionEmbeddings": 4096}
    return _spec(
        {
            "model": {"architecture": arch70, "quantization": {"method": "bitsandbytes-nf4"}},
            "training": {
                "microBatchSize": 1,
                "sequenceLength": 512,
                "activationCheckpointing": True,
                "initialization": initialization,
                "finetuning": {
                    "method": "qlora",
                    "loraRank": 32,
                    "loraTargetModules": ["all-linear"],
                },
                "parallelism": {"strategy": "fsdp-full-shard", "dataParallelSize": 2},
            },
        }
    )


def test_fsdp_qlora_loads_the_whole_quantized_model_on_every_gpu_by_default() -> None:
    """transformers ``Bnb4BitHfQuantizer.update_device_map``: with no ``device_map`` a 4-bit
    model is placed on ``torch.cuda.current_device()``, so under FSDP every rank first holds the
    whole quantized base (TRL issue 3436, the maintainers: 4-bit loading onto one GPU "is a known
    FSDP + bitsandbytes limitation; QLoRA under FSDP needs ... fsdp_cpu_ram_efficient_loading").
    Llama-2-70B in NF4 is over 34 GiB: the default Load phase does not fit a 24 GB card
    (axolotl issue 1522's 2x RTX 3090), rank-0 loading shards it."""
    default = estimate(_qlora_70b_fsdp("Auto"))
    assert default.peak_phase == "Load"
    assert _peak(default, "Load") > 34 * GIB
    rank0 = estimate(_qlora_70b_fsdp("RankZeroCpu"))
    assert _peak(rank0, "Load") < 24 * GIB
    assert _peak(rank0, "Load") < _peak(default, "Load") / 1.8


@pytest.mark.parametrize(
    ("framework", "strategy", "expected"),
    [
        ("transformers", "zero3", "MetaDevice"),
        ("transformers", "fsdp-full-shard", "CpuPerRank"),
        ("accelerate", "zero3", "CpuPerRank"),
        ("torchtune", "fsdp-full-shard", "CpuPerRank"),
        ("deepspeed", "zero3", "CpuPerRank"),
        ("custom", "ddp", "GpuPerRank"),
    ],
)
def test_each_frameworks_default_loading_path(framework: str, strategy: str, expected: str) -> None:
    from gpu_sizer.budget.training_load import initialization

    tr = _spec(
        {
            "model": {"parameterCount": 1_000_000_000},
            "training": {
                "microBatchSize": 1,
                "sequenceLength": 512,
                "framework": framework,
                "parallelism": {"strategy": strategy, "dataParallelSize": 2},
            },
        }
    ).training
    assert initialization(tr).value == expected
