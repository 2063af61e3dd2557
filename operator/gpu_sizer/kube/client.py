"""The official kubernetes client, configured in-cluster or from kubeconfig.

kopf has its own API client for handlers; the admission side needs a few plain reads and patches
(Namespace labels, the TLS Secret, caBundle patches) from worker threads, and the CLI lists
records from a cluster, for which the official client is the well-kept tool. Two ways to
configure it, one per caller:

- :func:`api_client`, the webhook's, built once: the service account in a pod, else
  ``KUBECONFIG`` (a webhook run outside a cluster, in tests and the demo);
- :func:`new_api_client`, the CLI's, built per command: an explicit kubeconfig file or context
  wins (the user asked for it), then the service account when in a pod, else the kubeconfig.
"""

from __future__ import annotations

import functools
import os
from typing import Any

__all__ = ["api_client", "import_client", "new_api_client"]


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


def new_api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A new ``kubernetes.client.ApiClient`` (the caller closes it): from ``kubeconfig`` (a file;
    ``None``: ``KUBECONFIG`` or ``~/.kube/config``) and ``context`` when either is given or when
    not in a pod (no ``KUBERNETES_SERVICE_HOST``), else from the pod's service account.

    :raises kubernetes.config.ConfigException: the chosen configuration is missing or invalid.
    :raises OSError: a file of it cannot be read.
    """
    from kubernetes import client, config

    if kubeconfig or context or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context
        )
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
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
