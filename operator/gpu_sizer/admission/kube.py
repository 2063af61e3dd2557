"""The official kubernetes client, configured in-cluster or from kubeconfig, built once.

kopf has its own API client for handlers; the admission side needs a few plain reads and patches
(Namespace labels, the TLS Secret, caBundle patches) from worker threads, for which the official
client is the well-kept tool.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["api_client", "import_client"]


@functools.cache
def api_client() -> Any:
    """A ``kubernetes.client.ApiClient``: service-account config in a pod, else ``KUBECONFIG``.

    :raises kubernetes.config.ConfigException: neither configuration is available.
    """
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


def import_client() -> None:
    """Import the client's API classes the admission side reads with (``CoreV1Api``,
    ``CustomObjectsApi``) now rather than on the first read.

    kubernetes 37 builds their pydantic models on import: seconds of CPU on a busy node, and
    some 67,000 objects. Imported on the first review, that review waits for it (and may outlast
    the Namespace read's timeout); imported before the webhook listens, the objects are among
    those :class:`gpu_sizer.admission.server.AdmissionServer` freezes out of the garbage
    collector's reach. Builds no client: reads no configuration.
    """
    from kubernetes.client import CoreV1Api, CustomObjectsApi  # noqa: F401
