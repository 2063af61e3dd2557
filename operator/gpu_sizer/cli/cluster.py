"""The cluster ``gpu-sizer accuracy --from-cluster`` reads: measurement records and GPUWorkloads
listed with the official kubernetes client (kubeconfig, or the in-cluster service account)."""

from __future__ import annotations

from typing import Any

__all__ = ["ClusterUnreadable", "kubeconfig_problem", "list_records"]


def kubeconfig_problem(path: str) -> str | None:
    """Why ``path`` is not a kubeconfig file (unreadable, malformed YAML, not a mapping, or a
    ``clusters``/``contexts``/``users`` entry that is not a list), or ``None``.

    The kubernetes client's own loader (kubernetes ``config/kube_config.py``,
    ``KubeConfigMerger.load_config``) lets ``yaml.YAMLError`` and ``TypeError`` escape on such
    files, so the file is checked here first, with the project's safe loader.
    """
    from gpu_sizer.yamlio import UnreadableFile, YamlError, load, read_text

    try:
        data = load(read_text(path))
    except UnreadableFile as exc:
        return f"cannot read: {exc}"
    except YamlError as exc:
        where = f"line {exc.line}: " if exc.line is not None else ""
        return f"{where}invalid YAML: {exc.message}"
    if not isinstance(data, dict):
        return f"must be a YAML mapping (apiVersion: v1, kind: Config), not {type(data).__name__}"
    for key in ("clusters", "contexts", "users"):
        if data.get(key) is not None and not isinstance(data[key], list):
            return f"{key} must be a list"
    return None


class ClusterUnreadable(Exception):
    """The cluster could not be listed (no kubeconfig, unreachable, forbidden)."""


def list_records(kubeconfig: str | None, context: str | None) -> list[dict[str, Any]]:
    """Every GPUMeasurement and GPUWorkload of the cluster, as plain data, listed in pages of
    500 with the official kubernetes client; a kind the cluster does not serve (404: the CRD
    is not installed) is left out.

    :raises ClusterUnreadable: no configuration, or the API server refused or could not be
        reached (the message says which and how to fix it).
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    from gpu_sizer.api import GROUP, KIND, PLURAL, VERSION
    from gpu_sizer.kube.client import new_api_client

    try:
        api_client = new_api_client(kubeconfig, context)
    except (ConfigException, OSError) as exc:
        raise ClusterUnreadable(
            f"no usable kubeconfig ({exc}); give --kubeconfig FILE or set KUBECONFIG"
        ) from None
    api = client.CustomObjectsApi(api_client)
    out: list[dict[str, Any]] = []
    try:
        for plural, kind in (("gpumeasurements", "GPUMeasurement"), (PLURAL, KIND)):
            token: str | None = None
            while True:
                kw: dict[str, Any] = {"limit": 500}
                if token:
                    kw["_continue"] = token
                try:
                    page: Any = api.list_cluster_custom_object(GROUP, VERSION, plural, **kw)
                except ApiException as exc:
                    if exc.status == 404:
                        break  # not served here (CRD not installed)
                    raise
                for item in page.get("items") or []:
                    out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, **item})
                token = (page.get("metadata") or {}).get("continue") or None
                if not token:
                    break
    except ApiException as exc:
        raise ClusterUnreadable(
            f"listing {GROUP} objects: HTTP {exc.status} {exc.reason}; the identity needs "
            "list on gpumeasurements and gpuworkloads (the chart's view role grants it)"
        ) from None
    except OSError as exc:  # urllib3 connection errors derive from it
        raise ClusterUnreadable(f"cannot reach the API server: {exc}") from None
    finally:
        api_client.close()
    return out
