"""The GPUWorkload CustomResourceDefinition, generated from the pydantic models.

The models in :mod:`gpu_sizer.api.spec` and :mod:`gpu_sizer.api.status` are the single source of
truth; ``hack/gen-crd.py`` writes :func:`build_crd` to ``crds/`` and to the Helm chart's
``crds/``, and a test fails when either file drifts from the models.

pydantic emits JSON Schema 2020-12; Kubernetes wants a *structural* OpenAPI v3 schema
(Kubernetes docs, "Extend the Kubernetes API with CustomResourceDefinitions", section
"Specifying a structural schema"). The conversion here:

- ``$ref``/``$defs`` are inlined (a structural schema has no references);
- ``Optional[X]`` (``anyOf: [X, {type: null}]``) becomes plain ``X`` left out of ``required``:
  optional fields are absent, not null. Without ``nullable: true`` the API server prunes an
  explicit ``null`` before validation and defaulting, so ``quantization: null`` reads as absent,
  which is what the Python parser also accepts;
- ``exclusiveMaximum: N`` (2020-12) becomes ``maximum: N`` + ``exclusiveMaximum: true`` (OpenAPI
  v3.0), titles are dropped, ``additionalProperties: false`` is dropped (the API server prunes
  unknown fields instead; the webhook rejects them with a message naming the field); a map of
  strings (``recommendation.engineArgs``) keeps ``additionalProperties: {type: string}``;
- every property carries a description (the field's, else its model's docstring), so that
  ``kubectl explain gpuworkload.spec.inference`` reads like the Python docs;
- spec defaults are kept (the API server fills them, so ``kubectl get -o yaml`` shows them);
  status defaults are dropped (the operator writes whole status objects);
- status ``conditions`` is a list-map keyed by ``type`` (Kubernetes API conventions).

The cross-field rules the API server can check itself are CEL ``x-kubernetes-validations``
(Kubernetes docs, "Validation rules"); each mirrors a Python validator in
:mod:`gpu_sizer.api.spec`, and the tests evaluate both on the same objects. The webhook still runs
the full Python validation (e.g. the TP rule for replicated KV heads and the estimate).
"""

from __future__ import annotations

import copy
from typing import Any, Final

from pydantic import BaseModel

from gpu_sizer.api.record import (
    RECORD_KIND,
    RECORD_PLURAL,
    RECORD_SHORT_NAME,
    RECORD_SINGULAR,
    GPUMeasurementSpec,
)
from gpu_sizer.api.spec import QUANTIZATION_BITS, GPUWorkloadSpec
from gpu_sizer.api.status import GPUWorkloadStatus
from gpu_sizer.api.workload import (
    CATEGORY,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAME,
    SINGULAR,
    VERSION,
)

__all__ = [
    "CRD_NAME",
    "PRINTER_COLUMNS",
    "RECORD_CRD_NAME",
    "RECORD_PRINTER_COLUMNS",
    "VALIDATION_RULES",
    "build_crd",
    "build_record_crd",
    "crd_yaml",
    "openapi_schema",
    "record_crd_yaml",
]

CRD_NAME: Final = f"{PLURAL}.{GROUP}"
RECORD_CRD_NAME: Final = f"{RECORD_PLURAL}.{GROUP}"

#: ``kubectl get gpuw`` columns. Printer columns show raw JSONPath values, so GiB and percent
#: come from the status's display-only computed fields (see :mod:`gpu_sizer.api.status`).
PRINTER_COLUMNS: Final[list[dict[str, Any]]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase",
     "description": "Lifecycle summary."},
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name",
     "description": "spec.model.name."},
    {"name": "Class", "type": "string", "jsonPath": ".status.recommendation.gpuClass",
     "description": "Recommended GPU class."},
    {"name": "GPUs", "type": "integer", "jsonPath": ".status.recommendation.gpuCount",
     "description": "GPUs of the recommended class per replica."},
    {"name": "Est GiB/GPU", "type": "number", "jsonPath": ".status.estimate.perGpu.totalGiB",
     "description": "Estimated peak per GPU, GiB."},
    {"name": "Measured GiB/GPU", "type": "number", "jsonPath": ".status.measurement.peakGiB",
     "description": "Measured peak per GPU, GiB."},
    {"name": "Headroom %", "type": "number",
     "jsonPath": ".status.recommendation.headroomPercent",
     "description": "Free share of the recommended GPU at the peak, percent."},
    {"name": "Max Conc", "type": "number", "jsonPath": ".status.estimate.maxConcurrency",
     "description": "Pre-allocating engines: maxModelLen requests the KV pool holds at once."},
    {"name": "KV Tokens", "type": "integer",
     "jsonPath": ".status.estimate.kvCacheCapacityTokens", "priority": 1,
     "description": "Pre-allocating engines: the KV cache pool in tokens."},
    {"name": "Basis", "type": "string", "jsonPath": ".status.recommendation.basis",
     "priority": 1, "description": "Estimate or Measurement."},
    {"name": "Peak Phase", "type": "string", "jsonPath": ".status.estimate.peakPhase",
     "priority": 1, "description": "Phase of the estimated peak (training: Load or Step)."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]  # fmt: skip


#: ``kubectl get gpumeasurements`` columns.
RECORD_PRINTER_COLUMNS: Final[list[dict[str, Any]]] = [
    {"name": "Class", "type": "string", "jsonPath": ".spec.gpuClass",
     "description": "GPU class measured on."},
    {"name": "Engine", "type": "string", "jsonPath": ".spec.engine",
     "description": "Engine (pytorch for training, diffusers for generation)."},
    {"name": "Family", "type": "string", "jsonPath": ".spec.modelFamily",
     "description": "HF model_type, or the diffusers pipeline class."},
    {"name": "Peak GiB", "type": "number", "jsonPath": ".spec.result.peakGiB",
     "description": "Measured peak per GPU, GiB."},
    {"name": "OOM", "type": "boolean", "jsonPath": ".spec.result.outOfMemory",
     "description": "The probe hit CUDA out-of-memory on the class."},
    {"name": "Scope", "type": "string", "jsonPath": ".spec.scope",
     "description": "Cluster (reusable by every namespace that shares) or Namespace (only by "
     "spec.namespace)."},
    {"name": "Expires", "type": "date", "jsonPath": ".spec.expiresAt", "priority": 1,
     "description": "When the record stops being reused and is deleted."},
    {"name": "Source", "type": "string", "jsonPath": ".spec.result.sourceNamespace",
     "priority": 1, "description": "Namespace of the workload that was measured."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]  # fmt: skip


def _kv_heads(arch: str) -> str:
    return f"(has({arch}.numKeyValueHeads) ? {arch}.numKeyValueHeads : {arch}.numAttentionHeads)"


def _max_context(arch: str, length: str) -> str:
    """CEL: ``length`` fits maxPositionEmbeddings, or the rope-scaled context
    (``Architecture.max_context``)."""
    rs = f"{arch}.ropeScaling"
    base = (
        f"(has({rs}.originalMaxPositionEmbeddings) ? {rs}.originalMaxPositionEmbeddings "
        f": {arch}.maxPositionEmbeddings)"
    )
    factor = f"(has({rs}.factor) ? {rs}.factor : 1.0)"
    return (
        f"{length} <= {arch}.maxPositionEmbeddings || (has({arch}.ropeScaling) && {factor} > 1.0 "
        f"&& {length} <= int(double({base}) * {factor}))"
    )


def _tp_rules(prefix: str, path: str) -> list[dict[str, str]]:
    arch = "self.model.architecture"
    tp = f"self.{path}.tensorParallelSize"
    guard = f"!has(self.{prefix}) || !has({arch}) || !has({tp})"
    if prefix != path:
        guard = f"!has(self.{prefix}) || !has(self.{path}) || !has({arch}) || !has({tp})"
    return [
        {
            "rule": f"{guard} || {arch}.numAttentionHeads % {tp} == 0",
            "message": "tensorParallelSize must divide model.architecture.numAttentionHeads",
            "fieldPath": f".{path}.tensorParallelSize",
        },
        {
            "rule": f"{guard} || {_kv_heads(arch)} % {tp} == 0 || {tp} % {_kv_heads(arch)} == 0",
            "message": "tensorParallelSize must divide numKeyValueHeads or be a multiple of it",
            "fieldPath": f".{path}.tensorParallelSize",
        },
    ]


def _bits_rule() -> str:
    per_method = [
        f"(self.method == '{m.value}' && self.bits in [{', '.join(str(b) for b in bits)}])"
        for m, bits in QUANTIZATION_BITS.items()
    ]
    return "!has(self.bits) || " + " || ".join(per_method)


_ARCH = "self.model.architecture"

#: CEL rules by the dotted path (under ``spec``) of the object they sit on; "" is spec itself.
VALIDATION_RULES: Final[dict[str, list[dict[str, str]]]] = {
    "": [
        {
            "rule": "(has(self.inference) ? 1 : 0) + (has(self.training) ? 1 : 0) + "
            "(has(self.generation) ? 1 : 0) == 1",
            "message": "set exactly one of spec.inference, spec.training or spec.generation",
        },
        {
            "rule": "!has(self.generation) || has(self.model.pipeline)",
            "message": "spec.generation runs a diffusion pipeline: give spec.model.pipeline",
            "fieldPath": ".model.pipeline",
        },
        *_tp_rules("inference", "inference"),
        *_tp_rules("training", "training.parallelism"),
        {
            "rule": f"!has(self.inference) || !has({_ARCH}) || "
            + _max_context(_ARCH, "self.inference.maxModelLen"),
            "message": "inference.maxModelLen exceeds model.architecture.maxPositionEmbeddings "
            "(rope scaling included); lower it or set model.architecture.ropeScaling",
            "fieldPath": ".inference.maxModelLen",
        },
        {
            "rule": f"!has(self.training) || !has({_ARCH}) || "
            + _max_context(_ARCH, "self.training.sequenceLength"),
            "message": "training.sequenceLength exceeds the model's context "
            "(maxPositionEmbeddings, rope scaling included)",
            "fieldPath": ".training.sequenceLength",
        },
    ],
    "model": [
        {
            "rule": "has(self.architecture) || has(self.parameterCount) || has(self.pipeline)",
            "message": "give model.architecture (config.json keys), model.parameterCount or "
            "model.pipeline",
            "fieldPath": ".parameterCount",
        },
        {
            "rule": "!has(self.pipeline) || !has(self.architecture)",
            "message": "give model.pipeline or model.architecture, not both",
            "fieldPath": ".pipeline",
        },
    ],
    "generation": [
        {
            "rule": "self.task == 'TextToVideo' || self.task == 'ImageToVideo' || "
            "!has(self.numFrames) || self.numFrames == 1",
            "message": "image tasks produce one frame: numFrames must be 1",
            "fieldPath": ".numFrames",
        },
    ],
    "model.architecture": [
        {
            "rule": "!has(self.numKeyValueHeads) || "
            "self.numAttentionHeads % self.numKeyValueHeads == 0",
            "message": "numAttentionHeads must be divisible by numKeyValueHeads",
            "fieldPath": ".numKeyValueHeads",
        },
        {
            "rule": "(has(self.numLocalExperts) || has(self.numExperts) || "
            "has(self.nRoutedExperts)) == has(self.numExpertsPerTok)",
            "message": "MoE needs both an expert count (numLocalExperts, numExperts or "
            "nRoutedExperts) and numExpertsPerTok, or neither",
            "fieldPath": ".numExpertsPerTok",
        },
    ],
    "model.quantization": [
        {
            "rule": _bits_rule(),
            "message": "bits must be a width the method supports: "
            + ", ".join(
                f"{m.value} {'/'.join(str(b) for b in bits)}"
                for m, bits in QUANTIZATION_BITS.items()
            ),
            "fieldPath": ".bits",
        },
    ],
    "training": [
        {
            "rule": "!has(self.parallelism) || !has(self.parallelism.dataParallelSize) || "
            "self.parallelism.dataParallelSize == 1 || (has(self.parallelism.strategy) && "
            "self.parallelism.strategy != 'none')",
            "message": "dataParallelSize > 1 needs parallelism.strategy (ddp, fsdp-*, zero1/2/3)",
            "fieldPath": ".parallelism.strategy",
        },
    ],
    "measurement": [
        {
            "rule": "!has(self.mode) || self.mode != 'Command' || "
            "(has(self.command) && size(self.command) > 0)",
            "message": "measurement.mode Command needs a non-empty command",
            "fieldPath": ".command",
        },
    ],
}

_KEEP: Final = frozenset(
    {
        "type",
        "description",
        "properties",
        "required",
        "items",
        "enum",
        "default",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "x-kubernetes-preserve-unknown-fields",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "additionalProperties",
        "format",
        "prefixItems",
    }
)


def _nullable(node: dict[str, Any]) -> bool:
    """Whether a JSON Schema node admits ``null`` (pydantic writes ``anyOf: [X, {type: null}]``)."""
    return any(option.get("type") == "null" for option in node.get("anyOf", ()))


class SchemaError(ValueError):
    """A model uses a JSON Schema construct that has no structural-schema equivalent."""


def _tuple_items(
    prefix: list[dict[str, Any]], defs: dict[str, Any], *, keep_defaults: bool
) -> dict[str, Any]:
    """The one ``items`` schema of a fixed-length tuple (pydantic's ``prefixItems``).

    A structural schema has no per-position item schemas, and the API server requires ``items``
    on every array ("Specifying a structural schema": "items must be specified"). A tuple whose
    positions share one schema (``tuple[int, int]``) is that schema with ``minItems`` and
    ``maxItems`` (which pydantic already writes); anything else has no structural form.

    :raises SchemaError: the positions' schemas differ.
    """
    converted = [_convert(item, defs, keep_defaults=keep_defaults) for item in prefix]
    if not converted or any(item != converted[0] for item in converted[1:]):
        raise SchemaError(f"a tuple whose positions differ has no structural schema: {prefix}")
    return converted[0]


def _convert(node: dict[str, Any], defs: dict[str, Any], *, keep_defaults: bool) -> dict[str, Any]:
    node = dict(node)
    ref = node.pop("$ref", None)
    if ref is None and "allOf" in node and len(node["allOf"]) == 1:
        ref = node.pop("allOf")[0].get("$ref")
    if ref is not None:
        target = defs[ref.rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "title"}}
        return _convert(merged, defs, keep_defaults=keep_defaults)
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise SchemaError(f"anyOf with {len(options)} non-null options: {options}")
        merged = {**options[0], **node}
        if merged.get("default", 0) is None:
            del merged["default"]
        return _convert(merged, defs, keep_defaults=keep_defaults)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _KEEP:
            continue
        if key == "properties":
            out[key] = {
                name: _convert(sub, defs, keep_defaults=keep_defaults)
                for name, sub in value.items()
            }
        elif key == "items":
            out[key] = _convert(value, defs, keep_defaults=keep_defaults)
        elif key == "prefixItems":
            out["items"] = _tuple_items(value, defs, keep_defaults=keep_defaults)
        elif key == "additionalProperties":
            # A map's value schema (``dict[str, X]``) is kept: without it the API server would
            # prune every entry. ``false`` (closed models) is dropped, see the module docstring.
            if isinstance(value, dict):
                out[key] = _convert(value, defs, keep_defaults=keep_defaults)
        elif key == "required":
            # Serialization schemas list every computed field as required, even one that may be
            # None and is then left out of the written status: a real API server would reject
            # such a status write, so a nullable property is never required.
            props = node.get("properties", {})
            required = [name for name in value if not _nullable(props.get(name, {}))]
            if required:
                out[key] = required
        elif key in ("exclusiveMaximum", "exclusiveMinimum") and not isinstance(value, bool):
            out["maximum" if key == "exclusiveMaximum" else "minimum"] = value
            out[key] = True
        elif key == "default":
            if keep_defaults and value is not None:
                out[key] = copy.deepcopy(value)
        else:
            out[key] = copy.deepcopy(value)
    if "properties" in out and "type" not in out:
        out["type"] = "object"
    if "description" in out:
        out["description"] = " ".join(out["description"].replace("``", "").split())
    return out


def openapi_schema(model: type[BaseModel], *, mode: str, keep_defaults: bool) -> dict[str, Any]:
    """A model's structural OpenAPI v3 schema (no ``$ref``, no ``anyOf``), by wire name."""
    raw = model.model_json_schema(by_alias=True, mode=mode)  # type: ignore[arg-type]
    defs = raw.pop("$defs", {})
    return _convert(raw, defs, keep_defaults=keep_defaults)


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in filter(None, path.split(".")):
        node = node["properties"][part]
    return node


def _spec_schema() -> dict[str, Any]:
    spec = openapi_schema(GPUWorkloadSpec, mode="validation", keep_defaults=True)
    for path, rules in VALIDATION_RULES.items():
        _at(spec, path)["x-kubernetes-validations"] = copy.deepcopy(rules)
    return spec


def _status_schema() -> dict[str, Any]:
    status = openapi_schema(GPUWorkloadStatus, mode="serialization", keep_defaults=False)
    conditions = status["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return status


def build_crd() -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition of GPUWorkload, as plain data."""
    schema = {
        "type": "object",
        "description": "A model and how it runs (inference or training); gpu-sizer estimates, "
        "measures and recommends the GPU class for it.",
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "APIVersion defines the versioned schema of this representation.",
            },
            "kind": {
                "type": "string",
                "description": "Kind is the REST resource this object represents.",
            },
            "metadata": {"type": "object"},
            "spec": _spec_schema(),
            "status": _status_schema(),
        },
        "required": ["spec"],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {
                "app.kubernetes.io/name": "gpu-sizer",
                "app.kubernetes.io/part-of": "gpu-sizer",
            },
            "annotations": {"gpusizer.dev/generated-by": "hack/gen-crd.py from gpu_sizer.api"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": [SHORT_NAME],
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def build_record_crd() -> dict[str, Any]:
    """The CustomResourceDefinition of ``GPUMeasurement`` (cluster-scoped shared measurement
    records, :mod:`gpu_sizer.api.record`), as plain data. No status subresource: a record is
    written whole, once."""
    spec = openapi_schema(GPUMeasurementSpec, mode="serialization", keep_defaults=False)
    schema = {
        "type": "object",
        "description": "One finished GPU measurement, shared across namespaces under its "
        "measurement key; GPUWorkloads of the same key reuse it instead of measuring again.",
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "APIVersion defines the versioned schema of this representation.",
            },
            "kind": {
                "type": "string",
                "description": "Kind is the REST resource this object represents.",
            },
            "metadata": {"type": "object"},
            "spec": spec,
        },
        "required": ["spec"],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": RECORD_CRD_NAME,
            "labels": {
                "app.kubernetes.io/name": "gpu-sizer",
                "app.kubernetes.io/part-of": "gpu-sizer",
            },
            "annotations": {"gpusizer.dev/generated-by": "hack/gen-crd.py from gpu_sizer.api"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": RECORD_KIND,
                "listKind": f"{RECORD_KIND}List",
                "plural": RECORD_PLURAL,
                "singular": RECORD_SINGULAR,
                "shortNames": [RECORD_SHORT_NAME],
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "additionalPrinterColumns": copy.deepcopy(RECORD_PRINTER_COLUMNS),
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


_HEADER = (
    "# GENERATED by hack/gen-crd.py from the pydantic models in operator/gpu_sizer/api.\n"
    "# Do not edit by hand.\n"
    "# Regenerate: PYTHONPATH=operator python hack/gen-crd.py\n"
)


def crd_yaml() -> str:
    """:func:`build_crd` as the YAML text written to ``crds/`` (header comment included)."""
    import yaml

    return _HEADER + yaml.safe_dump(build_crd(), sort_keys=False, width=100)


def record_crd_yaml() -> str:
    """:func:`build_record_crd` as the YAML text written to ``crds/``."""
    import yaml

    return _HEADER + yaml.safe_dump(build_record_crd(), sort_keys=False, width=100)
