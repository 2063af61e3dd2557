"""The official kubernetes client, configured in-cluster or from kubeconfig, built once.

kopf has its own API client for handlers; the admission side needs a few plain reads and patches
(Namespace labels, the TLS Secret, caBundle patches) from worker threads, for which the official
client is the well-kept tool.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["api_client"]


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
