"""The chart as Helm installs it on a real API server, and the operator serving it."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from typing import Any

from cryptography import x509

from .harness import Install, Manifest, eventually, one

KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def test_every_object_of_the_release_is_on_the_server(install: Install) -> None:
    """What Helm applied is there: CRDs Established, every templated object readable."""
    install.admin.wait_established("gpuworkloads.gpusizer.dev", "gpumeasurements.gpusizer.dev")
    for doc in install.manifests:
        meta = doc["metadata"]
        where = ["-n", meta["namespace"]] if meta.get("namespace") else []
        found = install.admin.json(f"{doc['kind'].lower()}.{_group(doc)}", meta["name"], *where)
        assert found is not None, f"{doc['kind']} {meta['name']} missing"
    assert install.admin.json("deployment", "gpu-sizer", "-n", "gpu-sizer")["spec"]["replicas"] == 0


def _group(doc: Manifest) -> str:
    version: str = doc["apiVersion"]
    return version.split("/")[0] if "/" in version else ""


def _live(install: Install, kind: str, name: str) -> dict[str, Any]:
    def patched() -> dict[str, Any] | None:
        live = install.admin.json(kind.lower(), name)
        hooks = live["webhooks"]
        return live if all(h["clientConfig"].get("caBundle") for h in hooks) else None

    return eventually(patched, what=f"the operator's caBundle in {kind} {name}")


def test_both_webhooks_are_registered_as_rendered_with_the_operators_ca(install: Install) -> None:
    """The operator's self-signed mode patched its CA into every webhook of the chart's two
    configurations; everything else is as Helm rendered it, the client config a ``url``."""
    secret = install.admin.json("secret", "gpu-sizer-webhook-tls", "-n", install.namespace)
    ca = base64.b64decode(secret["data"]["ca.crt"])
    for kind in KINDS:
        rendered = one(install.manifests, kind)
        live = _live(install, kind, rendered["metadata"]["name"])
        assert [h["name"] for h in live["webhooks"]] == [h["name"] for h in rendered["webhooks"]]
        for want, got in zip(rendered["webhooks"], live["webhooks"], strict=True):
            assert base64.b64decode(got["clientConfig"]["caBundle"]) == ca
            assert got["clientConfig"]["url"] == want["clientConfig"]["url"]
            assert got["clientConfig"]["url"].startswith(
                f"https://127.0.0.1:{install.webhook_port}/"
            )
            # Every rendered field as rendered (the API server adds defaults beside them).
            for key, value in want.items():
                if key != "clientConfig":
                    assert got[key] == value, (kind, want["name"], key)


def test_the_serving_certificate_covers_the_url_address(install: Install) -> None:
    """TLS to ``https://127.0.0.1:PORT`` verifies against the caBundle the API server uses: the
    certificate carries 127.0.0.1 as an IP SAN (a DNS-only one fails, tests/admission)."""
    live = _live(install, KINDS[0], one(install.manifests, KINDS[0])["metadata"]["name"])
    ca = base64.b64decode(live["webhooks"][0]["clientConfig"]["caBundle"]).decode()
    context = ssl.create_default_context(cadata=ca)
    with (
        socket.create_connection(("127.0.0.1", install.webhook_port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    sans = x509.load_der_x509_certificate(der).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert "127.0.0.1" in [str(ip) for ip in sans.value.get_values_for_type(x509.IPAddress)]
    assert "gpu-sizer-webhook.gpu-sizer.svc" in sans.value.get_values_for_type(x509.DNSName)


def test_the_operator_runs_as_the_charts_service_account(install: Install) -> None:
    """Its kubeconfig holds a TokenRequest token of the chart's ServiceAccount, which is whom
    the API server sees in the audit log; and that identity cannot do what the chart does not
    grant (read Secrets other than its own, write Nodes)."""
    whoami = json.loads(install.as_operator("auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == install.username
    assert install.plane.audit_events(install.username), "no request of the operator audited"
    for verb, resource in (("list", "secrets"), ("patch", "nodes"), ("create", "pods")):
        answer = install.as_operator("auth", "can-i", verb, resource, "-A", check=False)
        assert answer.stdout.strip() == "no", (verb, resource)


def test_start_up_logs_no_error(install: Install) -> None:
    """A fresh install's first listings meet ``429 storage is (re)initializing`` while the new
    CRDs' watch caches fill; kopf retries, and that is not an ERROR (INFO, when it happens).
    (Every test of the install also fails on an ERROR logged while it ran: conftest.)"""
    log = install.startup_log.splitlines()
    assert any("Admission webhooks listening" in line for line in log)
    errors = [line for line in log if " ERROR " in line]
    assert errors == [], errors
    throttled = [line for line in log if "APITooManyRequestsError" in line]
    assert all(" INFO " in line for line in throttled), throttled
