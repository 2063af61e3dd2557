"""GPUWorkload documents shared by the API tests (valid starting points to mutate)."""

from __future__ import annotations

import copy
from typing import Any

from tests.architectures import LLAMA_3_8B


def inference_doc() -> dict[str, Any]:
    return {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": {
            "model": {
                "name": "meta-llama/Meta-Llama-3-8B",
                "architecture": copy.deepcopy(LLAMA_3_8B),
            },
            "inference": {"engine": "vllm", "maxModelLen": 8192, "maxNumSeqs": 16},
        },
    }


def training_doc() -> dict[str, Any]:
    doc = inference_doc()
    del doc["spec"]["inference"]
    doc["spec"]["training"] = {
        "microBatchSize": 2,
        "sequenceLength": 4096,
        "parallelism": {"strategy": "fsdp-full-shard", "dataParallelSize": 8},
    }
    return doc
