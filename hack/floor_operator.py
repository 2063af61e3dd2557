"""The floor operator of the scale benchmark (issue 17): bare kopf, one ``on.create`` handler that
patches a constant status. What any kopf operator pays per GPUWorkload (watch, handler
bookkeeping in annotations, one status patch), with none of gpu-sizer's work. kopf's
defaults otherwise (it also posts an Event for the handler's success).

Run by ``hack/bench-scale.py`` as ``python -m kopf run hack/floor_operator.py -A --standalone``.
"""

from __future__ import annotations

from typing import Any

import kopf


@kopf.on.create("gpusizer.dev", "v1alpha1", "gpuworkloads")
def created(patch: kopf.Patch, **_: Any) -> None:
    patch.status["phase"] = "Floor"
