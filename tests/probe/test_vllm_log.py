"""vLLM's startup memory report, parsed from real log lines.

The lines come from public vLLM issue reports (vllm-project/vllm issues #10517, #13061, #25350,
#21348, pull requests #12569 and #25340, and a run-ai/runai-model-streamer issue #67 log),
neutralised: model names, paths, hosts and PIDs removed, figures and wording kept.
"""

from __future__ import annotations

import pytest

from gpu_sizer.probe.vllm_log import VllmLogParser, parse_vllm_log

GIB = 1 << 30

# V0 engine (vLLM 0.6.x), an 8B model on a 24 GiB card (issue #10517).
V0_LOG = """\
INFO 11-20 10:01:02 model_runner.py:1072] Loading model weights took 14.9888 GB
INFO 11-20 10:01:05 worker.py:232] Memory profiling results: total_gpu_memory=23.58GiB \
initial_memory_usage=15.34GiB peak_torch_memory=17.06GiB memory_usage_post_profile=15.35GiB \
non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90
INFO 11-20 10:01:05 gpu_executor.py:113] # GPU blocks: 1952, # CPU blocks: 2048
INFO 11-20 10:01:05 gpu_executor.py:117] Maximum concurrency for 20000 tokens per request: 1.56x
"""

# V0 engine, tensor parallel worker prefix (issue #13061).
V0_TP_LOG = """\
(VllmWorkerProcess pid=1) INFO 02-11 07:40:45 model_runner.py:1115] Loading model weights took \
13.9476 GB
INFO 02-11 07:40:48 worker.py:266] model weights take 13.95GiB; non_torch_memory takes 0.25GiB; \
PyTorch activation peak memory takes 0.19GiB; the rest of the memory reserved for KV Cache is \
8.69GiB.
"""

# V1 engine (issue #25350 with --kv-cache-dtype fp8, and a V1 startup from PR #25340).
V1_LOG = """\
(EngineCore_DP0 pid=1) INFO 09-21 12:30:37 [gpu_model_runner.py:2581] Model loading took \
2.2845 GiB and 74.270197 seconds
(EngineCore_DP0 pid=1) INFO 09-21 12:30:52 [gpu_worker.py:298] Available KV cache memory: \
10.55 GiB
(EngineCore_DP0 pid=1) INFO 09-21 12:30:52 [kv_cache_utils.py:864] GPU KV cache size: \
230,528 tokens
(EngineCore_DP0 pid=1) INFO 09-21 12:30:52 [kv_cache_utils.py:868] Maximum concurrency for \
100,000 tokens per request: 2.31x
INFO 06-02 11:03:55 [gpu_model_runner.py:1933] Graph capturing finished in 37 secs, took 0.45 GiB
INFO 06-02 11:03:55 [core.py:167] init engine (profile, create kv cache, warmup model) took \
90.84 seconds
"""

# Early V1 (PR #12569): weights in "GB" (GiB), blocks and concurrency.
EARLY_V1_LOG = """\
INFO 01-30 03:18:12 gpu_model_runner.py:848] Loading model weights took 67.7229 GB
INFO 01-30 03:19:14 kv_cache_utils.py:395] # GPU blocks: 1381
INFO 01-30 03:19:14 kv_cache_utils.py:398] Maximum concurrency for 2048 tokens per request: 10.79x
"""


def _lines(text: str) -> list[str]:
    return text.replace("\\\n", "").splitlines()


def test_v0_memory_profiling_report() -> None:
    report = parse_vllm_log(_lines(V0_LOG))
    assert report is not None
    # vLLM's "GB" is GiB: it divides by 2^30 (vllm/utils.py GiB_bytes).
    assert report.model_loading_bytes == round(14.9888 * GIB)
    assert report.kv_cache_bytes == round(3.81 * GIB)
    assert report.non_torch_bytes == round(0.35 * GIB)
    assert report.total_gpu_bytes == round(23.58 * GIB)
    assert report.gpu_blocks == 1952
    assert report.max_concurrency == 1.56
    assert report.max_concurrency_tokens == 20000
    assert report.kv_cache_tokens is None


def test_v0_profile_summary_with_worker_prefix() -> None:
    report = parse_vllm_log(_lines(V0_TP_LOG))
    assert report is not None
    # The summary line comes last and restates the weights with two decimals.
    assert report.model_loading_bytes == round(13.95 * GIB)
    assert report.kv_cache_bytes == round(8.69 * GIB)
    assert report.activation_peak_bytes == round(0.19 * GIB)
    assert report.non_torch_bytes == round(0.25 * GIB)


def test_v1_report() -> None:
    report = parse_vllm_log(_lines(V1_LOG))
    assert report is not None
    assert report.model_loading_bytes == round(2.2845 * GIB)
    assert report.kv_cache_bytes == round(10.55 * GIB)
    assert report.kv_cache_tokens == 230_528
    assert report.max_concurrency_tokens == 100_000
    assert report.max_concurrency == 2.31
    assert report.cuda_graph_bytes == round(0.45 * GIB)


def test_early_v1_report() -> None:
    report = parse_vllm_log(_lines(EARLY_V1_LOG))
    assert report is not None
    assert report.model_loading_bytes == round(67.7229 * GIB)
    assert report.gpu_blocks == 1381
    assert report.max_concurrency == 10.79 and report.max_concurrency_tokens == 2048


@pytest.mark.parametrize(
    "line",
    [
        "INFO 03-05 18:47:09 loggers.py:78] Avg prompt throughput: 2155.8 tokens/s, Running: 4 "
        "reqs, GPU KV cache usage: 7.1%, Prefix cache hit rate: 0.0%",
        'INFO:     127.0.0.1:35706 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:02<00:00,  1.90it/s]",
    ],
)
def test_other_lines_are_not_a_report(line: str) -> None:
    parser = VllmLogParser()
    parser.feed(line)
    assert parser.result() is None
