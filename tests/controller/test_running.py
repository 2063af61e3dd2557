"""kopf settings the operator applies (what the loopback emulator cannot check: it ignores
label selectors and keeps no annotations apart from status)."""

from __future__ import annotations

import kopf
from kopf._cogs.structs.references import Resource

from gpu_sizer.controller.options import Options
from gpu_sizer.controller.running import configure_settings


def resource(group: str, version: str, plural: str) -> Resource:
    return Resource(group, version, plural, namespaced=True, verbs=["list", "watch"])


def test_server_side_selectors_only_for_our_jobs_and_pods() -> None:
    settings = kopf.OperatorSettings()
    configure_settings(settings, Options(all_namespaces=True))
    collect = settings.watching.label_selectors.collect
    wanted = ["app.kubernetes.io/managed-by=gpu-sizer"]
    assert list(collect(resource("", "v1", "pods"))) == wanted
    assert list(collect(resource("batch", "v1", "jobs"))) == wanted
    assert list(collect(resource("gpusizer.dev", "v1alpha1", "gpuworkloads"))) == []
    assert list(collect(resource("", "v1", "nodes"))) == []


def test_bookkeeping_in_gpusizer_annotations_never_in_status() -> None:
    settings = kopf.OperatorSettings()
    configure_settings(
        settings, Options(all_namespaces=True, peering="gpu-sizer", standalone=False)
    )
    progress = settings.persistence.progress_storage
    assert isinstance(progress, kopf.AnnotationsProgressStorage)
    assert progress.prefix == "gpusizer.dev"
    diffbase = settings.persistence.diffbase_storage
    assert isinstance(diffbase, kopf.AnnotationsDiffBaseStorage)
    assert diffbase.prefix == "gpusizer.dev"
    assert settings.peering.name == "gpu-sizer" and not settings.peering.standalone
