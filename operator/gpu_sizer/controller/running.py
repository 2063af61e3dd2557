"""Running the operator: kopf settings, the measurement backend, metrics, and ``kopf.operator``.

kopf's own bookkeeping (handler progress, last-handled configuration) would go to annotations
with the project's prefix ``gpusizer.dev``, never to ``status.kopf``, because a real API server
prunes status fields that the CRD does not declare; the operator registers no handler that
needs it (see :mod:`gpu_sizer.controller.handlers`), so kopf writes none, and removes the
finalizer ``gpusizer.dev/finalizer`` that earlier versions added.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from types import SimpleNamespace
from typing import Any

import kopf
from kopf._core.engines.activities import ActivityError  # not re-exported by kopf
from kopf._core.engines.peering import Identity  # not re-exported by kopf

from gpu_sizer import metrics
from gpu_sizer.controller.handlers import register
from gpu_sizer.controller.identity import operator_identity
from gpu_sizer.controller.kopf_fixes import quiet_toggle_sets
from gpu_sizer.controller.options import Options
from gpu_sizer.measurement.backends import Backend, KubernetesJobBackend, LocalProcessBackend

__all__ = ["configure_settings", "credentials_problem", "make_backend", "run"]

PREFIX = "gpusizer.dev"
#: Seconds after SIGTERM/SIGINT (or a fatal error) after which the process kills itself if the
#: graceful stop has not finished: within the chart's terminationGracePeriodSeconds (30).
SHUTDOWN_LIMIT_SECONDS = 20.0


def configure_settings(settings: kopf.OperatorSettings, opts: Options) -> None:
    """Apply the project's kopf settings (storage prefix, peering, watching, posting)."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.peering.standalone = opts.standalone
    if opts.peering:
        settings.peering.name = opts.peering
        settings.peering.standalone = False
    # Server-side label selectors: only our Jobs and pods travel over the watch.
    # (kopf filters again on the client side through the handlers' labels=.)
    selector = "app.kubernetes.io/managed-by=gpu-sizer"
    settings.watching.label_selectors["batch", "jobs"] = selector
    settings.watching.label_selectors["", "pods"] = selector
    # Reconnect watches well before load balancers cut idle connections.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.posting.level = logging.INFO
    settings.networking.error_backoffs = [0.5, 1, 2, 3, 5, 8]
    # Whatever is still running, the process is gone within the Pod's grace period.
    settings.process.ultimate_exiting_timeout = SHUTDOWN_LIMIT_SECONDS


def make_backend(opts: Options) -> Backend:
    """The measurement backend named by ``--measurement-backend``."""
    if opts.measurement_backend == "local":
        return LocalProcessBackend(
            opts.local_probe_command or None,
            deadline_cap_seconds=opts.local_deadline_cap,
            max_concurrency=opts.local_max_concurrency,
        )
    return KubernetesJobBackend(trusted_namespace=opts.operator_namespace)


def credentials_problem() -> str | None:
    """Why the operator cannot reach a Kubernetes API (None when it can try): neither the
    in-cluster service account nor a kubeconfig is usable. Checked before kopf starts, so that
    a missing kubeconfig is one line, not kopf's login traceback."""
    from kubernetes import config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        return None
    except config.ConfigException as exc:
        in_cluster = str(exc)
    try:
        config.load_kube_config()  # type: ignore[no-untyped-call]
        return None
    except (config.ConfigException, OSError, ValueError, TypeError) as exc:
        kubeconfig = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    where = os.environ.get("KUBECONFIG") or "~/.kube/config"
    return (
        f"no Kubernetes API credentials: not in a cluster ({in_cluster.rstrip('.')}) and no "
        f"usable kubeconfig at {where} ({kubeconfig.rstrip('.')}); set KUBECONFIG, or run "
        "in a pod with a service account"
    )


def run(opts: Options) -> int:
    """Run the operator until interrupted; returns the exit status."""
    problem = credentials_problem()
    if problem is not None:
        logging.getLogger(__name__).error("gpu-sizer operator: %s", problem)
        return 1
    quiet_toggle_sets()  # kopf's start-up over N existing objects: N, not N**2, wake-ups
    # The default registry, because the admission handlers register themselves on it on import.
    registry = kopf.get_default_registry()
    backend = make_backend(opts)
    register(registry, opts, backend)

    @kopf.on.startup(registry=registry, id="settings")
    async def startup(settings: kopf.OperatorSettings, logger: kopf.Logger, **_: Any) -> None:
        configure_settings(settings, opts)
        # Configuration errors (flags, policy or catalog files, a busy port) do not heal by
        # retrying: fail the startup so that the process exits and says why.
        try:
            if opts.metrics_port:
                metrics.serve(opts.metrics_port, opts.metrics_listen)
            configure_admission(settings, opts, logger)
        except (ValueError, OSError, OverflowError) as exc:
            raise kopf.PermanentError(f"cannot start: {exc}") from exc
        logger.info(
            "gpu-sizer operator: backend=%s, %d GPU classes in the catalog",
            opts.measurement_backend,
            len(opts.catalog),
        )

    close = getattr(backend, "close", None)
    if close is not None:

        @kopf.on.cleanup(registry=registry, id="stop-local-probes")
        async def cleanup(**_: Any) -> None:
            # Stop running probes now (SIGTERM, then SIGKILL after a short grace) instead of
            # leaving them to run on, or to asyncio's teardown.
            await close()

    if opts.webhook:
        try:  # importing registers kopf.on.validate / kopf.on.mutate on the default registry
            importlib.import_module("gpu_sizer.admission.handlers")
        except ImportError:
            logging.getLogger(__name__).warning(
                "admission handlers not available (gpu_sizer.admission.handlers missing); "
                "running without the webhook"
            )

    liveness = _liveness_url(opts)
    try:
        asyncio.run(
            kopf.operator(
                registry=registry,
                standalone=opts.standalone,
                peering_name=opts.peering,
                priority=opts.priority,
                clusterwide=opts.all_namespaces,
                namespaces=list(opts.watched_namespaces),
                liveness_endpoint=liveness,
                identity=Identity(operator_identity()),
            )
        )
    except ActivityError as exc:  # a startup activity failed permanently (logged by kopf)
        logging.getLogger(__name__).error("gpu-sizer operator: %s", exc)
        return 1
    return 0


def _liveness_url(opts: Options) -> str | None:
    """kopf's liveness endpoint for ``--health-listen`` and ``--health-port`` (None: off); an
    IPv6 address in brackets, as a URL needs."""
    if not opts.health_port:
        return None
    host = opts.health_listen
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{opts.health_port}/healthz"


def configure_admission(settings: kopf.OperatorSettings, opts: Options, logger: Any) -> None:
    """Hand kopf's admission server settings to the admission package (single call site)."""
    if not opts.webhook:
        return
    try:
        server = importlib.import_module("gpu_sizer.admission.server")
    except ImportError:
        logger.warning("gpu_sizer.admission.server is missing: the webhook is not served")
        return
    # configure() reads the flags under their argparse names.
    flags = SimpleNamespace(
        no_webhook=not opts.webhook,
        webhook_port=opts.webhook_port,
        webhook_listen=opts.webhook_listen,
        webhook_workers=opts.webhook_workers,
        webhook_cert_dir=opts.webhook_cert_dir,
        webhook_tls_secret=opts.webhook_tls_secret,
        webhook_config_name=opts.webhook_config_name,
        webhook_service=opts.webhook_service,
        webhook_cert_san=opts.webhook_cert_san,
        policy=opts.policy_file,
        catalog=opts.catalog_file,
        default_headroom=opts.default_headroom,
    )
    server.configure(settings, flags, catalog=opts.catalog)
