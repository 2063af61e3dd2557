"""GPUWorkload API types (``gpusizer.dev/v1alpha1``): spec, status, parsing, errors."""

from gpu_sizer.api.errors import InvalidWorkload, Problem, problems_from
from gpu_sizer.api.spec import *  # noqa: F403
from gpu_sizer.api.spec import __all__ as _spec_all
from gpu_sizer.api.spec.generation import *  # noqa: F403
from gpu_sizer.api.spec.generation import __all__ as _generation_all
from gpu_sizer.api.status import *  # noqa: F403
from gpu_sizer.api.status import __all__ as _status_all
from gpu_sizer.api.workload import (
    API_VERSION,
    CATEGORY,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAME,
    SINGULAR,
    VERSION,
    parse_spec,
    parse_workload,
    spec_hash,
)

__all__ = [
    *_spec_all,
    *_generation_all,
    *_status_all,
    "API_VERSION",
    "CATEGORY",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAME",
    "SINGULAR",
    "VERSION",
    "InvalidWorkload",
    "Problem",
    "parse_spec",
    "parse_workload",
    "problems_from",
    "spec_hash",
]
