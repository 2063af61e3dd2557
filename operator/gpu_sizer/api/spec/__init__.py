"""The GPUWorkload spec (``gpusizer.dev/v1alpha1``): the single source of truth for the API.

Field names are the API's contract with stored objects and with users' manifests: renaming one
makes every existing GPUWorkload invalid, so they change only with a new API version. Python
attributes are snake_case; the wire names are camelCase (Kubernetes API conventions), except where
they mirror a well-known engine option (vLLM's ``maxModelLen``, ``maxNumSeqs``, ``kvCacheDtype``,
``tensorParallelSize``).

Sizes are integers in bytes, fractions are 0..1, durations are seconds, lengths are tokens.

Cross-field rules raise :class:`FieldError` naming the exact field, so that a validation error
always reads ``spec.inference.tensorParallelSize: ...`` rather than pointing at a parent object.
The CRD (``crds/``) is generated from these models by ``hack/gen-crd.py``; field descriptions
here become ``kubectl explain`` text.

One module per area of the spec, as kubebuilder keeps one types file per kind: :mod:`.base`
(the model base class and its error), :mod:`.bounds` (size limits and bounded field types),
:mod:`.enums`, :mod:`.architecture`, :mod:`.quantization`, :mod:`.model` (``spec.model``),
:mod:`.inference`, :mod:`.training`, :mod:`.generation` (diffusion pipelines),
:mod:`.measurement`, :mod:`.placement` and :mod:`.root` (``GPUWorkloadSpec`` and the rules that
span several areas). Each module imports only the ones below it, so there is no import cycle.
"""

from gpu_sizer.api.family_keys import MOE_MODEL_TYPES
from gpu_sizer.api.spec.architecture import (
    KNOWN_MODEL_TYPES,
    KNOWN_ROPE_TYPES,
    LAYER_TYPES,
    VISION_LANGUAGE_MODEL_TYPES,
    VISION_MODEL_TYPES,
    Architecture,
    RopeScaling,
    VisionConfig,
)
from gpu_sizer.api.spec.base import FieldError
from gpu_sizer.api.spec.bounds import LENGTHS, LIMITS
from gpu_sizer.api.spec.bounds import Fraction as Fraction
from gpu_sizer.api.spec.enums import (
    DTYPE_BYTES,
    QUANTIZATION_BITS,
    CompressionFormat,
    Dtype,
    Engine,
    FinetuningMethod,
    Initialization,
    KvCacheDtype,
    Loss,
    MeasurementMode,
    OffloadTarget,
    Optimizer,
    ParallelStrategy,
    Precision,
    PrecisionRecipe,
    QuantizationMethod,
    QuantizationStrategy,
    QuantizationType,
    TrainingDtype,
    TrainingFramework,
)
from gpu_sizer.api.spec.generation import Generation as Generation
from gpu_sizer.api.spec.generation import Pipeline as Pipeline
from gpu_sizer.api.spec.inference import Inference
from gpu_sizer.api.spec.measurement import Measurement
from gpu_sizer.api.spec.model import Model
from gpu_sizer.api.spec.placement import MAX_MIN_HEADROOM_FRACTION, Placement
from gpu_sizer.api.spec.quantization import (
    CompressedTensorsArgs,
    CompressedTensorsGroup,
    Quantization,
)
from gpu_sizer.api.spec.root import GPUWorkloadSpec, spec_to_wire
from gpu_sizer.api.spec.training import (
    DEEPSPEED_DEFAULTS,
    LORA_TARGET_MODULES,
    DdpOptions,
    DeepSpeedOptions,
    Finetuning,
    FsdpOptions,
    Offload,
    Parallelism,
    Training,
)

__all__ = [
    "DEEPSPEED_DEFAULTS",
    "DTYPE_BYTES",
    "KNOWN_MODEL_TYPES",
    "KNOWN_ROPE_TYPES",
    "LAYER_TYPES",
    "LENGTHS",
    "LIMITS",
    "LORA_TARGET_MODULES",
    "MAX_MIN_HEADROOM_FRACTION",
    "MOE_MODEL_TYPES",
    "QUANTIZATION_BITS",
    "VISION_LANGUAGE_MODEL_TYPES",
    "VISION_MODEL_TYPES",
    "Architecture",
    "CompressedTensorsArgs",
    "CompressedTensorsGroup",
    "CompressionFormat",
    "DdpOptions",
    "DeepSpeedOptions",
    "Dtype",
    "Engine",
    "FieldError",
    "Finetuning",
    "FinetuningMethod",
    "FsdpOptions",
    "GPUWorkloadSpec",
    "Inference",
    "Initialization",
    "KvCacheDtype",
    "Loss",
    "Measurement",
    "MeasurementMode",
    "Model",
    "Offload",
    "OffloadTarget",
    "Optimizer",
    "ParallelStrategy",
    "Parallelism",
    "Placement",
    "Precision",
    "PrecisionRecipe",
    "Quantization",
    "QuantizationMethod",
    "QuantizationStrategy",
    "QuantizationType",
    "RopeScaling",
    "Training",
    "TrainingDtype",
    "TrainingFramework",
    "VisionConfig",
    "spec_to_wire",
]
