"""AdmissionReview v1 over HTTPS to the real kopf operator's webhook server on loopback.

The operator runs in-process against kmock's emulator (see conftest.py); every request here goes
through TLS, aiohttp, kopf's admission machinery and our handlers, exactly as an API server's would.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import jsonpatch
import pytest

from gpu_sizer.api import parse_spec
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.metrics import ADMISSION_VERDICTS
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess
from tests.architectures import LLAMA_3_8B

from .conftest import Webhook, admission_review, workload

pytestmark = pytest.mark.asyncio(loop_scope="module")


def inference(**overrides: Any) -> dict[str, Any]:
    """Llama 3 8B served by transformers (an on-demand runtime, whose requirement the searches
    below can steer with maxNumSeqs), revision pinned; ``overrides`` replace inference keys."""
    return {
        "model": {
            "name": "meta-llama/Meta-Llama-3-8B",
            "revision": "62bd457b6fe961a42a631306577e622c83876cb6",
            "architecture": LLAMA_3_8B,
        },
        "inference": {"engine": "transformers", "maxModelLen": 4096, "maxNumSeqs": 4, **overrides},
    }


def headroom(spec: dict[str, Any]) -> float | None:
    rec = assess(parse_spec(spec)).recommendation
    return None if rec is None else rec.headroom_fraction


def near_threshold_spec() -> dict[str, Any]:
    """A spec whose chosen class leaves between 1x and 2x the required 10 % headroom.

    Searched rather than hard-coded, so the test keeps its meaning as the budget model evolves.
    """
    for seqs in range(1, 513):
        spec = inference(maxModelLen=8192, maxNumSeqs=seqs)
        room = headroom(spec)
        if room is not None and 0.10 <= room < 0.20:
            return spec
    raise AssertionError("no maxNumSeqs gives a near-threshold headroom")


def comfortable_spec() -> dict[str, Any]:
    """A spec whose chosen class leaves at least twice the required 10 % headroom (searched)."""
    for seqs in (1, 2, 4, 8, 16, 32, 64):
        for length in (8192, 4096, 2048, 1024):
            spec = inference(maxModelLen=length, maxNumSeqs=seqs)
            if (headroom(spec) or 0) >= 0.20:
                return spec
    raise AssertionError("no inference setting leaves 20 % headroom")


def no_headroom_spec() -> dict[str, Any]:
    spec = inference(maxModelLen=8192, maxNumSeqs=2048)
    assert assess(parse_spec(spec)).verdict is Verdict.NoSafeHeadroom
    return spec


def count(operation: str, verdict: str) -> float:
    return ADMISSION_VERDICTS.labels(operation, verdict)._value.get()  # type: ignore[attr-defined,no-any-return]


async def test_valid_spec_is_allowed_without_warnings(webhook: Webhook) -> None:
    spec = comfortable_spec()
    before = count("CREATE", "Allowed")
    resp = await webhook.validate(admission_review(workload(spec)))
    assert resp["allowed"] is True
    assert "warnings" not in resp
    assert "status" not in resp
    assert count("CREATE", "Allowed") == before + 1


async def test_invalid_spec_lists_every_problem_with_its_path(webhook: Webhook) -> None:
    spec = {
        "model": {"dtype": "bfloat17"},
        "inference": {"maxModelLen": 0, "maxNumSeqs": 8, "kvCacheDtype": "auto"},
        "placement": {"minHeadroomFraction": 1.5},
    }
    resp = await webhook.validate(admission_review(workload(spec)))
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 422
    assert resp["status"]["message"] == (
        "spec.model.dtype: must be one of 'float32', 'bfloat16', 'float16', 'float8_e4m3fn' or "
        "'float8_e5m2', not 'bfloat17'; did you mean 'bfloat16'?\n"
        "spec.inference.maxModelLen: must be >= 1, not 0\n"
        "spec.placement.minHeadroomFraction: must be <= 0.5, not 1.5"
    )


async def test_unknown_fields_are_rejected_by_path(webhook: Webhook) -> None:
    spec = inference()
    spec["inference"]["maxNumSeq"] = 16  # typo of maxNumSeqs
    spec["replicas"] = 2
    resp = await webhook.validate(admission_review(workload(spec)))
    assert resp["allowed"] is False
    assert resp["status"]["message"] == (
        "spec.inference.maxNumSeq: unknown field; did you mean maxNumSeqs? allowed: engine, "
        "maxModelLen, maxNumSeqs, maxNumBatchedTokens, kvCacheDtype, tensorParallelSize, "
        "pipelineParallelSize, dataParallelSize, enableExpertParallel, enforceEager, "
        "gpuMemoryUtilization, engineVersion, "
        "targetConcurrency\n"
        "spec.replicas: unknown field; allowed: model, inference, training, generation, "
        "measurement, placement"
    )


async def test_no_safe_headroom_is_rejected_with_the_offline_message(webhook: Webhook) -> None:
    spec = no_headroom_spec()
    before = count("CREATE", "NoSafeHeadroom")
    resp = await webhook.validate(admission_review(workload(spec)))
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 422
    # Offline parity: the message is exactly what gpu-sizer estimate's assess() says.
    assert resp["status"]["message"] == assess(parse_spec(spec), DEFAULT_CATALOG).message
    assert count("CREATE", "NoSafeHeadroom") == before + 1


async def test_near_threshold_headroom_is_allowed_with_a_warning(webhook: Webhook) -> None:
    spec = near_threshold_spec()
    rec = assess(parse_spec(spec)).recommendation
    assert rec is not None
    resp = await webhook.validate(admission_review(workload(spec)))
    assert resp["allowed"] is True
    assert resp["warnings"] == [
        f"headroom on {rec.gpu_class} is {rec.headroom_fraction:.0%}, under twice the required "
        "10%: a runtime or batch change may not fit"
    ]


async def test_unpinned_revision_and_disabled_measurement_warn(webhook: Webhook) -> None:
    spec = comfortable_spec()
    del spec["model"]["revision"]
    spec["measurement"] = {"mode": "Disabled"}
    resp = await webhook.validate(admission_review(workload(spec)))
    assert resp["allowed"] is True
    assert resp["warnings"] == [
        "spec.model.revision is not set: measurements cannot be tied to the exact weights",
        "spec.measurement.mode is Disabled: the recommendation rests on the estimate alone",
    ]


async def test_incomplete_estimate_warns_or_is_denied_as_the_namespace_policy_says(
    webhook: Webhook,
) -> None:
    """Without the architecture the KV cache is not counted: the default policy (Warn) admits
    the spec with the incomplete-estimate message first; the research namespace's rule (Deny)
    refuses it with the same text and a line naming the policy."""
    spec = comfortable_spec()
    del spec["model"]["architecture"]
    spec["model"]["parameterCount"] = 8_000_000_000
    a = assess(parse_spec(spec))
    resp = await webhook.validate(admission_review(workload(spec)))
    assert resp["allowed"] is True
    assert resp["warnings"] == [a.message, *a.warnings]
    assert resp["warnings"][0].startswith("incomplete estimate: KV cache not counted: needs ")
    resp = await webhook.validate(admission_review(workload(spec, namespace="research")))
    assert resp["allowed"] is False and resp["status"]["code"] == 422
    first, policy = resp["status"]["message"].split("\n")
    assert first.startswith("incomplete estimate: KV cache not counted: needs ")
    assert "spec.model.architecture (numHiddenLayers, numKeyValueHeads, headDim)" in first
    assert policy == (
        "namespace 'research' admits only complete estimates (policy incompleteEstimates: Deny)"
    )


async def test_unknown_gpu_class_is_rejected(webhook: Webhook) -> None:
    spec = inference()
    spec["placement"] = {"gpuClasses": ["nvidia-h100-80gb", "nvidia-b300"]}
    resp = await webhook.validate(admission_review(workload(spec)))
    assert resp["allowed"] is False
    assert resp["status"]["message"] == assess(parse_spec(spec)).message
    assert "nvidia-b300" in resp["status"]["message"]


async def test_update_that_breaks_headroom_is_rejected(webhook: Webhook) -> None:
    old = workload(inference())
    new = workload(no_headroom_spec())
    before = count("UPDATE", "NoSafeHeadroom")
    resp = await webhook.validate(admission_review(new, operation="UPDATE", old=old))
    assert resp["allowed"] is False
    assert resp["status"]["message"] == assess(parse_spec(new["spec"])).message
    assert count("UPDATE", "NoSafeHeadroom") == before + 1


async def test_status_only_update_is_allowed_without_revalidation(webhook: Webhook) -> None:
    # Even a spec that would now be rejected: the status subresource cannot change it.
    obj = workload(no_headroom_spec())
    obj["status"] = {"phase": "Estimated"}
    review = admission_review(obj, operation="UPDATE", old=obj, subresource="status")
    resp = await webhook.validate(review)
    assert resp["allowed"] is True
    mutated = await webhook.mutate(review)
    assert mutated["allowed"] is True
    assert "patch" not in mutated


async def test_class_outside_namespace_policy_is_rejected(webhook: Webhook) -> None:
    spec = inference()
    spec["placement"] = {"gpuClasses": ["nvidia-h200"]}
    resp = await webhook.validate(admission_review(workload(spec, namespace="research")))
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 403
    assert resp["status"]["message"] == (
        "spec.placement.gpuClasses: namespace 'research' allows only nvidia-a100-40gb, "
        "nvidia-l4; remove nvidia-h200"
    )
    # The same spec is fine where no rule restricts classes.
    resp = await webhook.validate(admission_review(workload(spec, namespace="team-a")))
    assert resp["allowed"] is True


async def test_headroom_outside_policy_bounds_is_rejected(webhook: Webhook) -> None:
    low, high = inference(), inference()
    low["placement"] = {"minHeadroomFraction": 0.01}
    high["placement"] = {"minHeadroomFraction": 0.45}
    resp = await webhook.validate(admission_review(workload(low, namespace="team-a")))
    assert resp["status"]["message"] == (
        "spec.placement.minHeadroomFraction: 0.01 is below the floor of 0.05 that the policy "
        "sets for namespace 'team-a'; raise it to at least 0.05"
    )
    resp = await webhook.validate(admission_review(workload(high, namespace="team-a")))
    assert resp["status"]["message"] == (
        "spec.placement.minHeadroomFraction: 0.45 exceeds the policy maximum of 0.4; a margin "
        "that large leaves most of the GPU idle"
    )


async def test_policy_restricts_the_classes_sizing_may_choose(webhook: Webhook) -> None:
    # Fits some catalog class, but not the research namespace's L4 / A100 40 GB with that
    # namespace's default headroom of 15 % (the spec sets none).
    def restricted(spec: dict[str, Any]) -> dict[str, Any]:
        return {
            **spec,
            "placement": {
                "gpuClasses": ["nvidia-l4", "nvidia-a100-40gb"],
                "minHeadroomFraction": 0.15,
            },
        }

    spec = next(
        candidate
        for seqs in range(1, 513)
        if (candidate := inference(maxModelLen=8192, maxNumSeqs=seqs))
        and assess(parse_spec(candidate)).verdict is Verdict.Fits
        and assess(parse_spec(restricted(candidate))).verdict is Verdict.NoSafeHeadroom
    )
    resp = await webhook.validate(admission_review(workload(spec, namespace="research")))
    assert resp["allowed"] is False
    assert resp["status"]["message"] == assess(parse_spec(restricted(spec))).message
    assert "the largest allowed class, nvidia-a100-40gb" in resp["status"]["message"]
    assert "15% headroom required" in resp["status"]["message"]


async def test_reject_messages_in_full(webhook: Webhook) -> None:
    """Exactly what kubectl prints after 'admission webhook ... denied the request: '."""
    l4 = inference(maxModelLen=8192, maxNumSeqs=64)
    l4["placement"] = {"gpuClasses": ["nvidia-l4"]}
    resp = await webhook.validate(admission_review(workload(l4)))
    assert resp["status"]["message"] == (
        "needs 134.6 GiB per GPU x1 (KV cache 64.0 GiB, activations 50.1 GiB, weights 15.0 GiB); "
        "the largest allowed class, nvidia-l4 (22.0 GiB usable), is 112.6 GiB short; 10% "
        "headroom required (spec.placement.minHeadroomFraction).\n"
        "Fits with any of: maxNumSeqs 2 (19.2 GiB per GPU, nvidia-l4 x1). Not enough alone: "
        "kvCacheDtype fp8 (102.6 GiB per GPU, still too big for nvidia-l4); maxModelLen 512 "
        "(23.0 GiB per GPU, still too big for nvidia-l4)."
    )
    # vLLM on the same L4: its pool, not maxNumSeqs x maxModelLen, against targetConcurrency.
    pool = inference(engine="vllm", maxModelLen=8192, maxNumSeqs=64, targetConcurrency=16)
    pool["placement"] = {"gpuClasses": ["nvidia-l4"]}
    resp = await webhook.validate(admission_review(workload(pool)))
    assert resp["status"]["message"] == (
        "on the largest allowed class, nvidia-l4 x1: vllm 0.19.1 at --gpu-memory-utilization "
        "0.86 holds 19.7 GiB of 22.0 GiB usable (KV pool 3.5 GiB = 28,832 tokens, 3.52 x "
        "maxModelLen 8192; weights 15.0 GiB, activations 0.2 GiB, runtime 1.0 GiB): fewer than "
        "spec.inference.targetConcurrency 16 requests of maxModelLen tokens.\n"
        "Fits with any of: targetConcurrency 3 (nvidia-l4 x1: KV pool 3.5 GiB, 3.5 x "
        "maxModelLen); maxModelLen 1792 (nvidia-l4 x1: KV pool 3.5 GiB, 16.1 x maxModelLen); "
        "gpuClasses add nvidia-rtx-a6000 (nvidia-rtx-a6000 x1: KV pool 26.1 GiB, 26.1 x "
        "maxModelLen); tensorParallelSize 2 (nvidia-l4 x2: KV pool 8.9 GiB). Not enough alone: "
        "kvCacheDtype fp8 (still not enough on nvidia-l4)."
    )
    training = {
        "model": {"revision": "x", "parameterCount": 70_000_000_000},
        "training": {"microBatchSize": 1, "sequenceLength": 4096},
    }
    resp = await webhook.validate(admission_review(workload(training)))
    assert resp["status"]["message"] == (
        "needs 1356.6 GiB per GPU x1 (optimizer state 521.5 GiB, weights 260.8 GiB, "
        "activations 260.8 GiB); the largest class in the catalog, amd-mi300x (190.9 GiB usable), "
        "is 1165.6 GiB short; 10% headroom required (spec.placement.minHeadroomFraction).\n"
        "What is counted fits with any of: parallelism zero3 with dataParallelSize 8 (141.0 GiB "
        "per GPU, amd-mi300x x8).\n"
        "The real need is higher: incomplete estimate: activations and logits not counted: "
        "needs spec.model.architecture (numHiddenLayers, hiddenSize, intermediateSize, "
        "numAttentionHeads, vocabSize); set spec.model.architecture from the model's "
        "config.json (gpu-sizer import-hf-config CONFIG_JSON writes it)."
    )


async def test_unreadable_namespace_fails_safe_and_says_so(webhook: Webhook) -> None:
    before = count("CREATE", "PolicyUnavailable")
    resp = await webhook.validate(admission_review(workload(inference(), namespace="ghost")))
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 503
    assert resp["status"]["message"] == (
        "could not read the labels of namespace 'ghost' to apply the namespace policy (API "
        "answered HTTP 404 Not Found); retry shortly"
    )
    assert count("CREATE", "PolicyUnavailable") == before + 1


async def test_mutation_writes_defaults_explicitly(webhook: Webhook) -> None:
    obj = workload(inference(engine="vllm"), namespace="research")
    resp = await webhook.mutate(admission_review(obj))
    assert resp["allowed"] is True
    assert resp["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(resp["patch"]))
    assert all(op["path"].startswith("/spec/") for op in ops)
    assert all(op["op"] == "add" for op in ops)
    stored = jsonpatch.apply_patch(obj, ops)
    spec = stored["spec"]
    assert spec["placement"] == {"gpuClasses": [], "minHeadroomFraction": 0.15}  # research's
    assert spec["measurement"]["mode"] == "Synthetic"
    assert spec["measurement"]["timeoutSeconds"] == 900
    # unset: the engine's own start-up condition (one maxModelLen request for vLLM and TGI, a
    # one-token pool for SGLang), which depends on the engine and is never frozen into the spec
    assert "targetConcurrency" not in spec["inference"]
    assert spec["inference"]["engine"] == "vllm"
    # vLLM's batched-token budget and memory fraction depend on the GPU class: left to
    # status.recommendation.engineArgs, never frozen into the spec.
    assert "maxNumBatchedTokens" not in spec["inference"]
    assert "gpuMemoryUtilization" not in spec["inference"]
    assert "status" not in stored
    # The explicit object sizes exactly like the original, and needs no further mutation.
    assert assess(parse_spec(spec)).verdict is Verdict.Fits
    again = await webhook.mutate(admission_review(stored, operation="UPDATE", old=stored))
    assert "patch" not in again


async def test_mutation_keeps_explicit_values_and_skips_invalid_specs(webhook: Webhook) -> None:
    spec = inference(maxNumBatchedTokens=4096)
    spec["placement"] = {"minHeadroomFraction": 0.3}
    ops = json.loads(
        base64.b64decode((await webhook.mutate(admission_review(workload(spec))))["patch"])
    )
    paths = {op["path"] for op in ops}
    assert "/spec/placement/minHeadroomFraction" not in paths
    assert "/spec/inference/maxNumBatchedTokens" not in paths
    bad = await webhook.mutate(admission_review(workload({"model": {}})))
    assert bad["allowed"] is True
    assert "patch" not in bad


async def test_one_mebibyte_object_is_served(webhook: Webhook) -> None:
    obj = workload(inference())
    obj["metadata"]["annotations"] = {"example.com/blob": "x" * (1 << 20)}
    resp = await webhook.validate(admission_review(obj))
    assert resp["allowed"] is True
    # An UPDATE carries it twice.
    resp = await webhook.validate(admission_review(obj, operation="UPDATE", old=obj))
    assert resp["allowed"] is True


async def test_malformed_reviews_get_a_clear_400_and_the_server_keeps_serving(
    webhook: Webhook,
) -> None:
    resp = await webhook.post_raw("validate-gpuworkload", b"{not json")
    assert resp.status == 400
    assert (await resp.text()).startswith("malformed AdmissionReview: body is not JSON")

    review = admission_review(workload(inference()))
    del review["request"]["uid"]
    review["request"]["operation"] = "PATCH"
    review["kind"] = "AdmissionReviewList"
    resp = await webhook.post_raw("validate-gpuworkload", json.dumps(review).encode())
    assert resp.status == 400
    assert await resp.text() == (
        "malformed AdmissionReview:\n"
        "kind: 'AdmissionReviewList' is not an AdmissionReview; expected kind 'AdmissionReview'\n"
        "request.uid: required field is missing\n"
        "request.operation: Input should be 'CREATE', 'UPDATE', 'DELETE' or 'CONNECT'\n"
    )

    resp = await webhook.post_raw("validate-gpuworkload", b"[1, 2]")
    assert resp.status == 400
    assert await resp.text() == (
        "malformed AdmissionReview:\n(body): must be a JSON object (an AdmissionReview)\n"
    )

    resp = await webhook.post_raw(
        "no-such-webhook", json.dumps(admission_review(workload(inference()))).encode()
    )
    assert resp.status == 404

    ok = await webhook.validate(admission_review(workload(inference())))
    assert ok["allowed"] is True


async def test_denials_are_logged_at_info_not_error(
    webhook: Webhook, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="kopf.objects")
    spec = comfortable_spec()
    spec["inference"]["bogus"] = 1
    resp = await webhook.validate(admission_review(workload(spec)))
    assert resp["allowed"] is False
    denials = [r for r in caplog.records if r.getMessage().startswith("Admission denied: ")]
    assert [r.levelname for r in denials] == ["INFO"]
    assert denials[0].getMessage() == (
        "Admission denied: spec.inference.bogus: unknown field; allowed: engine, maxModelLen, "
        "maxNumSeqs, maxNumBatchedTokens, kvCacheDtype, tensorParallelSize, "
        "pipelineParallelSize, dataParallelSize, enableExpertParallel, enforceEager, "
        "gpuMemoryUtilization, engineVersion, "
        "targetConcurrency"
    )
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_operations_the_webhook_does_not_judge_are_allowed_untouched(
    webhook: Webhook,
) -> None:
    # A DELETE carries only oldObject; even one that would fail sizing must not be refused.
    old = workload(no_headroom_spec())
    review = admission_review(None, operation="DELETE", old=old)
    resp = await webhook.validate(review)
    assert resp["allowed"] is True
    assert "status" not in resp
    mutated = await webhook.mutate(review)
    assert mutated["allowed"] is True
    assert "patch" not in mutated
    connect = admission_review(None, operation="CONNECT", old=workload(inference()))
    assert (await webhook.validate(connect))["allowed"] is True
    # kopf would run the mutating handler for CONNECT (it skips only DELETE): no defaults patch.
    mutated = await webhook.mutate(connect)
    assert mutated["allowed"] is True
    assert "patch" not in mutated


async def test_create_or_update_without_object_is_a_400_naming_request_object(
    webhook: Webhook,
) -> None:
    old = workload(inference())
    for review in (
        admission_review(None, operation="UPDATE", old=old),
        admission_review(old, operation="CREATE"),
    ):
        review["request"]["object"] = None
        resp = await webhook.post_raw("validate-gpuworkload", json.dumps(review).encode())
        assert resp.status == 400
        op = review["request"]["operation"]
        assert await resp.text() == (
            "malformed AdmissionReview:\n"
            f"request.object: required for a {op} review, which must carry the object to "
            "judge\n"
        )


async def test_overflowing_numbers_are_field_errors_not_server_errors(webhook: Webhook) -> None:
    spec = comfortable_spec()
    del spec["model"]["architecture"]
    # JSON reads 1e400 as float inf; a 401-digit integer literal stays an exact int.
    for literal in ("1e400", "1" + "0" * 400, "-1e400"):
        review = admission_review(workload(spec))
        review["request"]["object"]["spec"]["model"]["parameterCount"] = "@"
        raw = json.dumps(review).replace('"@"', literal).encode()
        resp = await webhook.post_raw("validate-gpuworkload", raw)
        assert resp.status == 200, await resp.text()
        resp = json.loads(await resp.text())["response"]
        assert resp["allowed"] is False
        assert resp["status"]["code"] == 422, resp
        message = resp["status"]["message"]
        assert message.startswith("spec.model.parameterCount: "), message
        assert "division" not in message


async def test_nan_and_infinite_fractions_must_be_finite(webhook: Webhook) -> None:
    spec = comfortable_spec()
    for value in (float("nan"), float("inf"), float("-inf")):
        spec["placement"] = {"minHeadroomFraction": value}
        resp = await webhook.validate(admission_review(workload(spec)))
        assert resp["allowed"] is False
        assert resp["status"]["message"] == (
            "spec.placement.minHeadroomFraction: must be a finite number"
        ), value


async def test_over_deep_json_is_a_400_before_parsing(webhook: Webhook) -> None:
    depth = 100_000
    resp = await webhook.post_raw("validate-gpuworkload", b"[" * depth + b"]" * depth)
    assert resp.status == 400
    assert await resp.text() == ("malformed AdmissionReview: JSON nested deeper than 64 levels\n")
    review = admission_review(workload(inference()))
    nested: Any = 1
    for _ in range(70):
        nested = {"a": nested}
    review["request"]["object"]["metadata"]["annotations"] = {"x": "y"}
    review["request"]["object"]["spec"]["model"]["extra"] = nested
    resp = await webhook.post_raw("validate-gpuworkload", json.dumps(review).encode())
    assert resp.status == 400
    # A string full of brackets is not nesting.
    ok = admission_review(workload(inference()))
    ok["request"]["object"]["metadata"]["annotations"] = {"x": "[" * 1000 + '"\\"{' * 100}
    assert (await webhook.validate(ok))["allowed"] is True
