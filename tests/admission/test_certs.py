"""Self-signed webhook certificates: generation, rotation, the Secret and the caBundle patches."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import kopf
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from gpu_sizer.admission import certs
from gpu_sizer.admission.server import AdmissionServer, configure
from gpu_sizer.kube import client as kube

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
NAMES = certs.service_dns_names("gpu-sizer-webhook", "gpu-sizer")


def cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificates(pem)[0]


def test_bundle_is_a_ca_signing_a_serving_certificate_for_the_service() -> None:
    bundle = certs.generate_bundle(NAMES, NOW)
    ca, leaf = cert(bundle.ca_crt), cert(bundle.tls_crt)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    leaf.verify_directly_issued_by(ca)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "gpu-sizer-webhook",
        "gpu-sizer-webhook.gpu-sizer",
        "gpu-sizer-webhook.gpu-sizer.svc",
        "gpu-sizer-webhook.gpu-sizer.svc.cluster.local",
    ]
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert leaf.not_valid_after_utc - leaf.not_valid_before_utc == certs.SERVING_VALIDITY + (
        dt.timedelta(minutes=5)
    )
    assert isinstance(leaf.public_key(), ec.EllipticCurvePublicKey)
    # Round trip through the Secret's data.
    assert certs.CertBundle.from_secret_data(bundle.secret_data()) == bundle
    assert certs.CertBundle.from_secret_data({"tls.crt": "eA=="}) is None


def test_rotation_threshold_is_a_third_of_the_lifetime() -> None:
    leaf = certs.generate_bundle(NAMES, NOW).tls_crt
    parsed = cert(leaf)
    start, end = parsed.not_valid_before_utc, parsed.not_valid_after_utc
    due = end - (end - start) / 3
    assert not certs.needs_rotation(leaf, due - dt.timedelta(minutes=1))
    assert certs.needs_rotation(leaf, due + dt.timedelta(minutes=1))
    assert certs.needs_rotation(leaf, end + dt.timedelta(days=1))


def test_rotate_keeps_renews_the_leaf_or_renews_the_ca_keeping_the_old_one() -> None:
    bundle = certs.generate_bundle(NAMES, NOW)
    assert certs.rotate(bundle, NAMES, NOW + dt.timedelta(days=30)) is bundle

    later = NOW + dt.timedelta(days=300)  # the 365-day leaf is due, the 10-year CA is not
    renewed = certs.rotate(bundle, NAMES, later)
    assert renewed.ca_crt == bundle.ca_crt and renewed.ca_key == bundle.ca_key
    assert renewed.tls_crt != bundle.tls_crt
    cert(renewed.tls_crt).verify_directly_issued_by(cert(bundle.ca_crt))
    assert cert(renewed.tls_crt).not_valid_before_utc > later - dt.timedelta(minutes=10)

    renamed = certs.rotate(bundle, [*NAMES, "extra.example"], NOW)
    assert renamed.tls_crt != bundle.tls_crt and renamed.ca_crt == bundle.ca_crt

    much_later = NOW + dt.timedelta(days=3000)  # CA due: new CA first, old CA still trusted
    fresh = certs.rotate(bundle, NAMES, much_later)
    cas = x509.load_pem_x509_certificates(fresh.ca_crt)
    assert len(cas) == 2
    assert cas[1] == cert(bundle.ca_crt)
    cert(fresh.tls_crt).verify_directly_issued_by(cas[0])


def test_serving_names_add_url_hosts_and_a_loopback_listen_address() -> None:
    assert certs.serving_names("svc", "ns") == certs.service_dns_names("svc", "ns")
    assert certs.serving_names("svc", "ns", ["127.0.0.1", " ", "gpu.example.com"]) == [
        *certs.service_dns_names("svc", "ns"),
        "127.0.0.1",
        "gpu.example.com",
    ]
    # Listening on loopback: reached only by that address, so it is covered by itself.
    assert certs.serving_names("svc", "ns", listen="127.0.0.1")[-1] == "127.0.0.1"
    assert certs.serving_names("svc", "ns", listen="::1")[-1] == "::1"
    assert (
        certs.serving_names("svc", "ns", ["127.0.0.1"], listen="127.0.0.1").count("127.0.0.1") == 1
    )
    # A pod's 0.0.0.0 (or any non-loopback address) is not a name anyone connects to.
    assert certs.serving_names("svc", "ns", listen="0.0.0.0") == certs.service_dns_names(
        "svc", "ns"
    )


def test_an_ip_address_becomes_an_ip_san_that_tls_verification_accepts() -> None:
    """TLS clients match an address only against IP SANs (RFC 6125 1.7.2; Go's crypto/x509,
    which the API server's webhook client uses, as Python's ssl does): a DNS-only certificate
    fails for ``url: https://127.0.0.1:PORT``, this one passes."""
    names = certs.serving_names("gpu-sizer-webhook", "gpu-sizer", ["127.0.0.1"])
    bundle = certs.generate_bundle(names, NOW)
    sans = (
        cert(bundle.tls_crt).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    )
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert "127.0.0.1" not in sans.get_values_for_type(x509.DNSName)
    dns_only = certs.generate_bundle(NAMES, NOW)
    assert handshake(bundle, "127.0.0.1") is None
    assert "IP address mismatch" in str(handshake(dns_only, "127.0.0.1"))


def test_a_certificate_without_the_ip_san_is_reissued_from_the_same_ca() -> None:
    """An older release's Secret holds a DNS-only certificate: the new SAN list re-issues the
    serving certificate (same CA: the caBundle stays valid); the same list keeps it."""
    old = certs.generate_bundle(NAMES, NOW)
    names = [*NAMES, "127.0.0.1"]
    new = certs.rotate(old, names, NOW)
    assert new.ca_crt == old.ca_crt and new.tls_crt != old.tls_crt
    cert(new.tls_crt).verify_directly_issued_by(cert(old.ca_crt))
    assert certs.rotate(new, names, NOW) is new
    assert certs.rotate(new, list(reversed(names)), NOW) is new


def handshake(bundle: certs.CertBundle, host: str) -> Exception | None:
    """Serve ``bundle`` on 127.0.0.1 and connect verifying ``host``: the error, or None."""
    import socket
    import tempfile
    import threading

    with tempfile.TemporaryDirectory() as tmp:
        crt, key, ca = certs.write_files(bundle, Path(tmp))
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ctx.load_cert_chain(crt, key)
        client_ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            with contextlib.suppress(OSError), server_ctx.wrap_socket(conn, server_side=True):
                pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
                client_ctx.wrap_socket(raw, server_hostname=host),
            ):
                return None
        except ssl.SSLCertVerificationError as exc:
            return exc
        finally:
            thread.join(10)


def test_ca_bundle_patch_pins_each_webhook_name() -> None:
    ca = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    value = base64.b64encode(ca).decode()
    config = {
        "webhooks": [
            {"name": "validate.gpuworkloads.gpusizer.dev", "clientConfig": {"service": {}}},
            {"name": "done.gpusizer.dev", "clientConfig": {"caBundle": value}},
        ]
    }
    assert certs.ca_bundle_patch(config, ca) == [
        {"op": "test", "path": "/webhooks/0/name", "value": "validate.gpuworkloads.gpusizer.dev"},
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": value},
    ]
    assert certs.ca_bundle_patch({"webhooks": []}, ca) == []


def webhook_configuration(kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "gpu-sizer"},
        "webhooks": [
            {
                "name": f"{kind[:8].lower()}.gpuworkloads.gpusizer.dev",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "clientConfig": {
                    "service": {
                        "name": "gpu-sizer-webhook",
                        "namespace": "gpu-sizer",
                        "path": "/validate-gpuworkload",
                    }
                },
            }
        ],
    }


def requests_to(emulator: kmock.KubernetesEmulator, method: str, path: str) -> list[Any]:
    return [
        r for r in list(emulator) if str(r.method).upper().endswith(method) and r.url.path == path
    ]


@pytest.mark.asyncio(loop_scope="module")
async def test_self_signed_mode_stores_the_secret_patches_ca_bundles_and_serves_tls(
    emulator: kmock.KubernetesEmulator, monkeypatch: pytest.MonkeyPatch, options: Any
) -> None:
    for plural, kind in (
        ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration"),
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration"),
    ):
        emulator.objects[f"admissionregistration.k8s.io/v1/{plural}", None, "gpu-sizer"] = (
            webhook_configuration(kind)
        )
    monkeypatch.setenv("POD_NAMESPACE", "gpu-sizer")
    settings = kopf.OperatorSettings()
    opts = options(
        webhook_cert_dir=None,
        webhook_tls_secret="gpu-sizer-webhook-tls",
        webhook_service="gpu-sizer-webhook",
        webhook_config_name="gpu-sizer",
    )
    first = len(list(emulator))
    server = await asyncio.to_thread(configure, settings, opts)
    assert isinstance(server, AdmissionServer) and settings.admission.server is server
    assert settings.admission.managed is None

    # The Secret: created once, type kubernetes.io/tls, the chain the server loads.
    created = requests_to(emulator, "POST", "/api/v1/namespaces/gpu-sizer/secrets")
    assert len(created) == 1
    secret = created[0].data
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["name"] == "gpu-sizer-webhook-tls"
    bundle = certs.CertBundle.from_secret_data(secret["data"])
    assert bundle is not None
    assert server.certfile.read_bytes() == bundle.tls_crt
    assert server.cafile is not None and server.cafile.read_bytes() == bundle.ca_crt

    # The caBundle patches: one JSONPatch per configuration, name pinned by a test op.
    value = base64.b64encode(bundle.ca_crt).decode()
    for plural, prefix in (
        ("validatingwebhookconfigurations", "validati"),
        ("mutatingwebhookconfigurations", "mutating"),
    ):
        patches = requests_to(
            emulator, "PATCH", f"/apis/admissionregistration.k8s.io/v1/{plural}/gpu-sizer"
        )
        assert len(patches) == 1
        assert patches[0].headers["Content-Type"] == "application/json-patch+json"
        assert json.loads(patches[0].body) == [
            {
                "op": "test",
                "path": "/webhooks/0/name",
                "value": f"{prefix}.gpuworkloads.gpusizer.dev",
            },
            {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": value},
        ]
    assert len(list(emulator)) > first

    # A restart (or the periodic refresh) reuses the stored chain: no new Secret.
    assert server.refresh is not None
    await asyncio.to_thread(server.refresh)
    assert len(requests_to(emulator, "POST", "/api/v1/namespaces/gpu-sizer/secrets")) == 1
    assert not requests_to(
        emulator, "PUT", "/api/v1/namespaces/gpu-sizer/secrets/gpu-sizer-webhook-tls"
    )

    # The server presents that chain for the Service's DNS name.
    async def fn(request: Any, **_: Any) -> Any:
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": request["request"]["uid"], "allowed": True},
        }

    server.port = 0
    server.addr = "127.0.0.1"
    gen = server(fn)
    client_config = await gen.__anext__()
    assert client_config["caBundle"] == value
    assert server.bound is not None
    context = ssl.create_default_context(cadata=bundle.ca_crt.decode())
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"https://127.0.0.1:{server.bound[1]}/validate-gpuworkload",
                data=b"[]",
                ssl=context,
                server_hostname="gpu-sizer-webhook.gpu-sizer.svc",
            ) as resp,
        ):
            assert resp.status == 400
    finally:
        await gen.aclose()


@pytest.mark.asyncio(loop_scope="module")
async def test_renewed_files_are_loaded_without_restarting_the_listener(tmp_path: Path) -> None:
    old = certs.generate_bundle(["localhost"], NOW)
    certs.write_files(old, tmp_path)
    server = AdmissionServer(
        addr="127.0.0.1",
        port=0,
        certfile=tmp_path / "tls.crt",
        pkeyfile=tmp_path / "tls.key",
        cafile=tmp_path / "ca.crt",
        file_check_interval=0.05,
    )

    async def fn(request: Any, **_: Any) -> Any:
        raise AssertionError("not called")

    async def served_cert() -> bytes:
        assert server.bound is not None
        _reader, writer = await asyncio.open_connection(
            "127.0.0.1",
            server.bound[1],
            ssl=ssl._create_unverified_context(),
            server_hostname="localhost",
        )
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        await writer.wait_closed()
        return bytes(der)

    gen = server(fn)
    await gen.__anext__()
    watcher = asyncio.create_task(gen.__anext__())
    try:
        assert await served_cert() == cert(old.tls_crt).public_bytes(serialization_der())
        new = certs.rotate(old, ["localhost"], NOW + dt.timedelta(days=300))
        certs.write_files(new, tmp_path)
        expected = cert(new.tls_crt).public_bytes(serialization_der())
        async with asyncio.timeout(120):  # generous: a loaded machine; ends when served
            while await served_cert() != expected:
                await asyncio.sleep(0.05)
    finally:
        watcher.cancel()  # the generator's finally stops the listener
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await gen.aclose()


def serialization_der() -> Any:
    from cryptography.hazmat.primitives.serialization import Encoding

    return Encoding.DER


@pytest.fixture(autouse=True)
def _fresh_client() -> None:
    kube.api_client.cache_clear()
