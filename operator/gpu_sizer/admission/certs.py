"""Self-signed webhook TLS: a CA and a serving certificate, kept in a Secret, rotated, trusted.

Used only when the chart does not mount cert-manager's certificate (no ``--webhook-cert-dir``).
The operator then owns the chain:

* a CA (ECDSA P-256, valid :data:`CA_VALIDITY`) and a serving certificate for the webhook
  Service's DNS names (valid :data:`SERVING_VALIDITY`), generated with ``cryptography``, plus
  the hosts an API server reaches the webhook at by ``url`` instead (``--webhook-cert-san``, and
  the listen address when it is a loopback one): an out-of-cluster operator behind
  ``url: https://127.0.0.1:PORT/...`` needs the IP in the certificate, since TLS clients match an
  IP address only against IP subject alternative names (RFC 6125, section 1.7.2; Go's
  ``crypto/x509`` ``VerifyHostname``, which the API server's webhook client uses);
* both stored in the Secret ``--webhook-tls-secret`` in the operator's namespace (type
  ``kubernetes.io/tls``: ``tls.crt``, ``tls.key``, plus ``ca.crt`` and ``ca.key``), so that
  restarts and several replicas share one chain instead of racing to patch the caBundle;
* a certificate is renewed when less than a third of its lifetime is left
  (:func:`needs_rotation`); a renewed CA is appended to ``ca.crt`` next to the old one until the
  old one expires, so the API servers trust both during the switch;
* ``ca.crt`` goes into ``webhooks[*].clientConfig.caBundle`` of the chart's
  Validating/MutatingWebhookConfiguration named ``--webhook-config-name``, patched with a
  JSONPatch whose ``test`` ops pin each webhook's name (:func:`ca_bundle_patch`).

Pure functions first (generation, rotation decisions, patch payloads), then the API calls.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CA_VALIDITY",
    "RENEW_FRACTION",
    "SERVING_VALIDITY",
    "CertBundle",
    "ca_bundle_patch",
    "ensure_bundle",
    "generate_bundle",
    "needs_rotation",
    "patch_ca_bundles",
    "rotate",
    "service_dns_names",
    "serving_names",
    "sync_secret",
    "write_files",
]

CA_VALIDITY = dt.timedelta(days=3650)
SERVING_VALIDITY = dt.timedelta(days=365)
#: Renew a certificate when less than this fraction of its lifetime remains (cert-manager's
#: default ``renewBefore`` is likewise a third of the duration).
RENEW_FRACTION = 1 / 3
#: Backdating absorbs clock skew between the operator and the API servers.
_BACKDATE = dt.timedelta(minutes=5)
#: Seconds each API call may take: startup must fail visibly, not hang, on an unreachable API.
API_TIMEOUT = 10.0


@dataclass(frozen=True)
class CertBundle:
    """PEM bytes: ``ca_crt`` may hold several CAs (new first) during a CA rotation."""

    ca_crt: bytes
    ca_key: bytes
    tls_crt: bytes
    tls_key: bytes

    def secret_data(self) -> dict[str, str]:
        """The Secret's ``data`` (base64 strings)."""
        return {
            key: base64.b64encode(value).decode()
            for key, value in (
                ("ca.crt", self.ca_crt),
                ("ca.key", self.ca_key),
                ("tls.crt", self.tls_crt),
                ("tls.key", self.tls_key),
            )
        }

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> CertBundle | None:
        """The bundle stored in a Secret's ``data``, or ``None`` when any key is missing."""
        data = data or {}
        keys = ("ca.crt", "ca.key", "tls.crt", "tls.key")
        if not all(data.get(k) for k in keys):
            return None
        ca_crt, ca_key, tls_crt, tls_key = (base64.b64decode(data[k]) for k in keys)
        return cls(ca_crt, ca_key, tls_crt, tls_key)


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names an API server may use for a Service: short, namespaced, ``.svc`` and FQDN."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def serving_names(
    service: str, namespace: str, extra: Sequence[str] = (), listen: str | None = None
) -> list[str]:
    """Every name the serving certificate covers: the Service's DNS names, then ``extra`` (IP
    addresses or DNS names of ``url`` client configs, ``--webhook-cert-san``), then ``listen``
    when it is a loopback address (a server listening there is reached only by that address).
    Duplicates are dropped, order kept."""
    names = [*service_dns_names(service, namespace), *(n.strip() for n in extra if n.strip())]
    if listen and _is_loopback(listen):
        names.append(listen)
    return list(dict.fromkeys(names))


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _general_name(name: str) -> x509.GeneralName:
    """An IP address SAN for an IP literal, a DNS name SAN otherwise."""
    try:
        return x509.IPAddress(ipaddress.ip_address(name.strip("[]")))
    except ValueError:
        return x509.DNSName(name)


def _san_strings(cert: x509.Certificate) -> list[str]:
    """The certificate's DNS and IP subject alternative names as strings, sorted."""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    ips = [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    return sorted([*sans.get_values_for_type(x509.DNSName), *ips])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _new_ca(now: dt.datetime) -> tuple[bytes, bytes]:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-sizer webhook CA")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _first_cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificates(pem)[0]


def _new_serving(
    ca_crt: bytes, ca_key: bytes, dns_names: Sequence[str], now: dt.datetime
) -> tuple[bytes, bytes]:
    ca = _first_cert(ca_crt)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(min(now + SERVING_VALIDITY, ca.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([_general_name(n) for n in dns_names]), False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key()),  # type: ignore[arg-type]
            False,
        )
        .sign(signer, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def generate_bundle(dns_names: Sequence[str], now: dt.datetime) -> CertBundle:
    """A fresh CA and a serving certificate for ``dns_names`` (the first is the subject CN; an
    IP literal among them becomes an IP address SAN)."""
    ca_crt, ca_key = _new_ca(now)
    tls_crt, tls_key = _new_serving(ca_crt, ca_key, dns_names, now)
    return CertBundle(ca_crt, ca_key, tls_crt, tls_key)


def needs_rotation(cert_pem: bytes, now: dt.datetime, fraction: float = RENEW_FRACTION) -> bool:
    """Whether less than ``fraction`` of the (first) certificate's lifetime is left at ``now``."""
    cert = _first_cert(cert_pem)
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return end - now < (end - start) * fraction


def rotate(bundle: CertBundle | None, dns_names: Sequence[str], now: dt.datetime) -> CertBundle:
    """The bundle to use from ``now``: ``bundle`` itself when nothing is due.

    * no bundle: a fresh chain;
    * CA due: a new CA, old CA kept after it in ``ca_crt`` until it expires, new serving cert;
    * serving certificate due, or issued for other names (DNS or IP: a certificate an older
      release wrote without the IP SAN is re-issued): a new one from the same CA.
    """
    if bundle is None:
        return generate_bundle(dns_names, now)
    if needs_rotation(bundle.ca_crt, now):
        fresh = generate_bundle(dns_names, now)
        still_valid = [
            c for c in x509.load_pem_x509_certificates(bundle.ca_crt) if c.not_valid_after_utc > now
        ]
        old = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in still_valid)
        return replace(fresh, ca_crt=fresh.ca_crt + old)
    wanted = sorted(str(_general_name(n).value) for n in dns_names)
    if needs_rotation(bundle.tls_crt, now) or _san_strings(_first_cert(bundle.tls_crt)) != wanted:
        tls_crt, tls_key = _new_serving(bundle.ca_crt, bundle.ca_key, dns_names, now)
        return replace(bundle, tls_crt=tls_crt, tls_key=tls_key)
    return bundle


def ca_bundle_patch(configuration: Mapping[str, Any], ca_crt: bytes) -> list[dict[str, Any]]:
    """JSONPatch ops setting ``caBundle`` on every webhook of a webhook configuration object.

    Each ``add`` is preceded by a ``test`` of that webhook's name, so a concurrent reordering of
    the list makes the patch fail instead of trusting the CA for the wrong webhook. Webhooks
    already carrying this bundle are skipped; an empty list means nothing to do.
    """
    value = base64.b64encode(ca_crt).decode()
    ops: list[dict[str, Any]] = []
    for i, webhook in enumerate(configuration.get("webhooks") or []):
        if (webhook.get("clientConfig") or {}).get("caBundle") == value:
            continue
        ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": webhook["name"]})
        ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": value})
    return ops


def write_files(bundle: CertBundle, directory: Path) -> tuple[Path, Path, Path]:
    """Write ``tls.crt``, ``tls.key`` (mode 0600) and ``ca.crt`` into ``directory``.

    Each file is written to a temporary name and renamed, so the webhook server never loads a
    half-written pair. Returns the three paths (cert, key, CA).
    """
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, content in (
        ("tls.crt", bundle.tls_crt),
        ("tls.key", bundle.tls_key),
        ("ca.crt", bundle.ca_crt),
    ):
        path = directory / name
        tmp = directory / f".{name}.tmp"
        tmp.write_bytes(content)
        tmp.chmod(0o600)
        tmp.replace(path)
        paths.append(path)
    return paths[0], paths[1], paths[2]


# --- Kubernetes API (official client, blocking: call from a worker thread) -----------------------


def sync_secret(
    core: Any, namespace: str, name: str, dns_names: Sequence[str], now: dt.datetime
) -> CertBundle:
    """Read the TLS Secret, rotate what is due, write it back; returns the bundle in use.

    ``core`` is a ``kubernetes.client.CoreV1Api``. A missing Secret is created; a conflict on
    create or replace (another replica won the race) re-reads and uses the winner's bundle.
    """
    from kubernetes.client import V1ObjectMeta, V1Secret
    from kubernetes.client.exceptions import ApiException

    try:
        secret = core.read_namespaced_secret(name, namespace, _request_timeout=API_TIMEOUT)
    except ApiException as exc:
        if exc.status != 404:
            raise
        secret = None
    current = CertBundle.from_secret_data(secret.data if secret is not None else None)
    bundle = rotate(current, dns_names, now)
    if bundle is current:
        return bundle
    body = V1Secret(
        metadata=V1ObjectMeta(
            name=name,
            namespace=namespace,
            labels={"app.kubernetes.io/managed-by": "gpu-sizer"},
            resource_version=secret.metadata.resource_version if secret is not None else None,
        ),
        type="kubernetes.io/tls",
        data=bundle.secret_data(),
    )
    try:
        if secret is None:
            core.create_namespaced_secret(namespace, body, _request_timeout=API_TIMEOUT)
        else:
            core.replace_namespaced_secret(name, namespace, body, _request_timeout=API_TIMEOUT)
    except ApiException as exc:
        if exc.status != 409:
            raise
        winner = CertBundle.from_secret_data(
            core.read_namespaced_secret(name, namespace, _request_timeout=API_TIMEOUT).data
        )
        if winner is None:
            raise
        return winner
    return bundle


def patch_ca_bundles(admission: Any, config_name: str, ca_crt: bytes) -> list[str]:
    """Patch ``caBundle`` into the Validating and Mutating webhook configurations ``config_name``.

    ``admission`` is a ``kubernetes.client.AdmissionregistrationV1Api``. A configuration that
    does not exist (the chart may deploy only one kind) is skipped. Returns the kinds patched.
    """
    from kubernetes.client.exceptions import ApiException

    patched = []
    for kind, read, patch in (
        (
            "ValidatingWebhookConfiguration",
            admission.read_validating_webhook_configuration,
            admission.patch_validating_webhook_configuration,
        ),
        (
            "MutatingWebhookConfiguration",
            admission.read_mutating_webhook_configuration,
            admission.patch_mutating_webhook_configuration,
        ),
    ):
        try:
            obj = read(config_name, _request_timeout=API_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        ops = ca_bundle_patch(admission.api_client.sanitize_for_serialization(obj), ca_crt)
        if ops:
            patch(
                config_name,
                ops,
                _content_type="application/json-patch+json",
                _request_timeout=API_TIMEOUT,
            )
            patched.append(kind)
    return patched


def ensure_bundle(
    api_client: Any,
    *,
    namespace: str,
    secret_name: str,
    service: str,
    config_name: str | None,
    directory: Path,
    extra_names: Sequence[str] = (),
    listen: str | None = None,
    now: dt.datetime | None = None,
) -> CertBundle:
    """Sync the Secret, write the files for the server, patch the caBundles. Idempotent.

    The certificate covers :func:`serving_names` (``service``, ``extra_names``, a loopback
    ``listen``).

    Called at startup and then periodically; cheap when nothing is due (one Secret read, one
    read per webhook configuration, files rewritten only when their content differs).
    """
    from kubernetes import client

    now = now or dt.datetime.now(dt.UTC)
    bundle = sync_secret(
        client.CoreV1Api(api_client),
        namespace,
        secret_name,
        serving_names(service, namespace, extra_names, listen),
        now,
    )
    on_disk = directory / "tls.crt"
    if not on_disk.exists() or on_disk.read_bytes() != bundle.tls_crt:
        write_files(bundle, directory)
    if config_name:
        patch_ca_bundles(client.AdmissionregistrationV1Api(api_client), config_name, bundle.ca_crt)
    return bundle
