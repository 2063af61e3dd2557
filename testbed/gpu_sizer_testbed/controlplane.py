"""A real Kubernetes control plane on 127.0.0.1, started from envtest binaries.

controller-runtime's envtest convention: ``KUBEBUILDER_ASSETS`` names a folder holding
``etcd`` and ``kube-apiserver`` (``setup-envtest use 1.36 -p path`` prints one). Here the folder
may also hold ``kube-controller-manager`` and ``kube-scheduler``: with them the control plane has
the Job, garbage-collector, namespace, service-account and resource-quota controllers and a
scheduler, so a measurement Job gets pods, pods get bound to Nodes, and deleting a namespace or
an owner cleans up, as on a cluster. There is no kubelet: Nodes are objects a caller creates, and
pod status is written through the ``status`` subresource the way a kubelet would.

Everything listens on 127.0.0.1, on ports the kernel hands out. Security is as on a cluster:
TLS with a private CA, client certificates for the admin and the two controllers,
``--authorization-mode=Node,RBAC`` and a service-account signing key, so that
``kubectl create token`` (the TokenRequest API) issues tokens a caller can run an operator with
and RBAC is the API server's, not ours. The flags follow the reference script beside the
binaries this project is given (``../shared/envtest/start-control-plane.sh``) and envtest's own
defaults (``sigs.k8s.io/controller-runtime/pkg/internal/testing/controlplane``: etcd with
``--unsafe-no-fsync``, which only a throwaway data directory may use).

Typical use::

    assets = assets_from_env()          # None: skip, saying how to get the binaries
    with started(assets, workdir) as plane:
        run(["kubectl", "--kubeconfig", plane.admin_kubeconfig, "get", "ns"])

:func:`start` waits for ``/readyz`` (etcd reached, every post-start hook done) and for the
``default`` service account (the controllers are working). :func:`stop` ends the processes by
PID: SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "ASSETS_ENV",
    "CONTROLLERS",
    "HOW_TO_GET",
    "ControlPlane",
    "ControlPlaneError",
    "assets_from_env",
    "start",
    "started",
    "stop",
]

ASSETS_ENV = "KUBEBUILDER_ASSETS"
#: Printed when the binaries are missing: where to get them.
HOW_TO_GET = (
    f"set {ASSETS_ENV} to a folder with etcd and kube-apiserver (and kube-controller-manager, "
    "kube-scheduler for the Job controller and the scheduler): "
    "`go run sigs.k8s.io/controller-runtime/tools/setup-envtest@latest use 1.36 -p path`, "
    "or unpack ../shared/envtest/k8s-1.36.2-linux-amd64.tar.xz (.ci/run does)"
)
REQUIRED = ("etcd", "kube-apiserver")
OPTIONAL = ("kube-controller-manager", "kube-scheduler")
#: The controllers a workload's lifecycle needs (kube-controller-manager ``--controllers``).
CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "job-controller",
    "root-ca-certificate-publisher-controller",
    "ttl-after-finished-controller",
    "pod-garbage-collector-controller",
    "clusterrole-aggregation-controller",
    "resourcequota-controller",
)
#: Seconds a start may take before it is given up (a loaded 2-core machine takes 5-15 s).
START_TIMEOUT = 180.0
#: Seconds each process gets to exit on SIGTERM before SIGKILL.
STOP_GRACE = 15.0
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc"


class ControlPlaneError(RuntimeError):
    """The control plane did not start; the message names the process and its last log lines."""


def assets_from_env(env: Mapping[str, str] = os.environ) -> Path | None:
    """The folder ``KUBEBUILDER_ASSETS`` names, or ``None`` when it is unset.

    :raises ControlPlaneError: it is set but lacks ``etcd`` or ``kube-apiserver``.
    """
    value = env.get(ASSETS_ENV, "").strip()
    if not value:
        return None
    folder = Path(value)
    missing = [name for name in REQUIRED if not os.access(folder / name, os.X_OK)]
    if missing:
        raise ControlPlaneError(
            f"{ASSETS_ENV}={value}: no executable {', '.join(missing)} there; {HOW_TO_GET}"
        )
    return folder


@dataclass
class ControlPlane:
    """A started control plane: where it listens, its credentials, and its processes."""

    directory: Path
    server: str
    ca_cert: Path
    admin_kubeconfig: Path
    #: Whether kube-controller-manager and kube-scheduler run (the assets had them).
    controllers: bool
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    #: etcd's client, peer and metrics ports (the API server's is in ``server``).
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: one JSON event per request (level Metadata: who, verb,
        resource, subresource, namespace, response code), so a test can derive the RBAC an
        identity really used."""
        return self.directory / "logs" / "audit.log"

    def audit_events(self, username: str | None = None) -> list[dict[str, object]]:
        """The audit log's ``ResponseComplete`` events, of ``username`` only when given."""
        if not self.audit_log.exists():
            return []
        events = []
        for line in self.audit_log.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:  # a line being written
                continue
            if event.get("stage") != "ResponseComplete":
                continue
            if username is None or (event.get("user") or {}).get("username") == username:
                events.append(event)
        return events

    @property
    def port(self) -> int:
        return int(self.server.rsplit(":", 1)[1])

    def log(self, process: str, lines: int = 20) -> str:
        """The last ``lines`` lines of a process's log (``etcd``, ``kube-apiserver``, ...)."""
        path = self.directory / "logs" / f"{process}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def ssl_context(self, *, client: str = "admin") -> ssl.SSLContext:
        """TLS to the API server as ``client`` (a certificate made by :func:`start`)."""
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        pki = self.directory / "pki"
        context.load_cert_chain(pki / f"{client}.crt", pki / f"{client}.key")
        return context

    def kubeconfig_for_token(self, token: str, path: Path, *, namespace: str = "") -> Path:
        """Write a kubeconfig that authenticates with a bearer ``token`` (a service account's,
        from the TokenRequest API) and return its path."""
        context: dict[str, str] = {"cluster": "envtest", "user": "token"}
        if namespace:
            context["namespace"] = namespace
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_cert)},
                }
            ],
            "users": [{"name": "token", "user": {"token": token}}],
            "contexts": [{"name": "token", "context": context}],
            "current-context": "token",
        }
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        return path


# ---------------------------------------------------------------------------------------- PKI


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(key: rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _certificate(
    subject: x509.Name,
    key: rsa.RSAPrivateKey,
    issuer: tuple[x509.Name, rsa.RSAPrivateKey] | None,
    *,
    server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer if issuer else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
    )
    if issuer is None:  # the CA
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            True,
        )
    elif server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes.default.svc"),
                ]
            ),
            False,
        )
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False
        )
    else:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write_pki(pki: Path) -> None:
    """CA, serving certificate (IP SAN 127.0.0.1), client certificates for the admin
    (``system:masters``), the controller manager and the scheduler, and the service-account
    signing key pair."""
    pki.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("gpu-sizer-envtest-ca")
    ca = _certificate(ca_name, ca_key, None)
    (pki / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(ca_key, pki / "ca.key")
    identities = {
        "apiserver": (_name("kube-apiserver"), True),
        "admin": (_name("admin", "system:masters"), False),
        "kcm": (_name("system:kube-controller-manager"), False),
        "scheduler": (_name("system:kube-scheduler"), False),
    }
    for stem, (subject, server) in identities.items():
        key = _key()
        cert = _certificate(subject, key, (ca_name, ca_key), server=server)
        (pki / f"{stem}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pki / f"{stem}.key")
    sa_key = _key()
    _write_key(sa_key, pki / "sa.key")
    (pki / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _client_kubeconfig(directory: Path, server: str, user: str) -> Path:
    pki = directory / "pki"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "envtest",
                "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pki / f"{user}.crt"),
                    "client-key": str(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": user, "context": {"cluster": "envtest", "user": user}}],
        "current-context": user,
    }
    path = directory / f"{user}.kubeconfig"
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path


# ------------------------------------------------------------------------------- processes


def _free_ports(count: int) -> list[int]:
    """Ports the kernel hands out on 127.0.0.1 now (a process started next binds them; a clash
    with another process in between makes that process exit, and :func:`start` tries again)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _spawn(
    plane: ControlPlane, name: str, argv: list[str], env: Mapping[str, str] | None = None
) -> None:
    logs = plane.directory / "logs"
    logs.mkdir(exist_ok=True)
    with (logs / f"{name}.log").open("ab") as log:
        # A session of its own: a Ctrl-C meant for the test runner does not reach the control
        # plane before the runner's own teardown stops it in order.
        plane.processes[name] = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    (plane.directory / f"{name}.pid").write_text(str(plane.processes[name].pid))


def _get(plane: ControlPlane, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
    request = urllib.request.Request(plane.server + path)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=plane.ssl_context()) as r:
            return int(r.status), bytes(r.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def _wait(plane: ControlPlane, deadline: float, what: str, ready: Callable[[], bool]) -> None:
    last = ""
    while time.monotonic() < deadline:
        for name, proc in plane.processes.items():
            if proc.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with {proc.returncode} while waiting for {what}:\n"
                    + plane.log(name)
                )
        try:
            if ready():
                return
        except (OSError, ssl.SSLError, urllib.error.URLError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.2)
    raise ControlPlaneError(
        f"timed out after {START_TIMEOUT:.0f} s waiting for {what} ({last}); kube-apiserver log:\n"
        + plane.log("kube-apiserver")
    )


def _audit_policy(directory: Path) -> Path:
    """Audit every request at level Metadata (no bodies), only once it completed."""
    path = directory / "audit-policy.yaml"
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted", "Panic"],
        "rules": [{"level": "Metadata"}],
    }
    path.write_text(json.dumps(policy))
    return path


def _start_once(assets: Path, directory: Path, *, controllers: bool) -> ControlPlane:
    plane = _plane(directory, controllers=controllers)
    try:
        _run(plane, assets)
    except BaseException:
        stop(plane)
        raise
    return plane


def _plane(directory: Path, *, controllers: bool) -> ControlPlane:
    api_port, etcd_port, peer_port, metrics_port = _free_ports(4)
    server = f"https://127.0.0.1:{api_port}"
    pki = directory / "pki"
    plane = ControlPlane(
        directory=directory,
        server=server,
        ca_cert=pki / "ca.crt",
        admin_kubeconfig=_client_kubeconfig(directory, server, "admin"),
        controllers=controllers,
    )
    plane.ports = {"etcd": etcd_port, "peer": peer_port, "metrics": metrics_port}
    return plane


def _run(plane: ControlPlane, assets: Path) -> None:
    directory, server, pki = plane.directory, plane.server, plane.directory / "pki"
    api_port = plane.port
    etcd_port, peer_port, metrics_port = (plane.ports[k] for k in ("etcd", "peer", "metrics"))
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    peer_url = f"http://127.0.0.1:{peer_port}"
    _spawn(
        plane,
        "etcd",
        [
            str(assets / "etcd"),
            "--name=envtest",
            f"--data-dir={directory / 'etcd-data'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=envtest={peer_url}",
            f"--listen-metrics-urls=http://127.0.0.1:{metrics_port}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ],
    )
    _spawn(
        plane,
        "kube-apiserver",
        [
            str(assets / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
            "--service-cluster-ip-range=10.96.0.0/16",
            f"--cert-dir={directory / 'apiserver-certs'}",
            "--profiling=false",
            "--allow-privileged=true",
            f"--audit-policy-file={_audit_policy(directory)}",
            f"--audit-log-path={plane.audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
        ],
    )
    deadline = time.monotonic() + START_TIMEOUT
    _wait(plane, deadline, "kube-apiserver /readyz", lambda: _get(plane, "/readyz")[0] == 200)
    if plane.controllers:
        kcm = _client_kubeconfig(directory, server, "kcm")
        _spawn(
            plane,
            "kube-controller-manager",
            [
                str(assets / "kube-controller-manager"),
                f"--kubeconfig={kcm}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--leader-elect=false",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=true",
                f"--controllers={','.join(CONTROLLERS)}",
            ],
        )
        scheduler = _client_kubeconfig(directory, server, "scheduler")
        _spawn(
            plane,
            "kube-scheduler",
            [
                str(assets / "kube-scheduler"),
                f"--kubeconfig={scheduler}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--leader-elect=false",
            ],
        )

        def default_account() -> bool:
            code, _ = _get(plane, "/api/v1/namespaces/default/serviceaccounts/default")
            return code == 200

        _wait(plane, deadline, "the default service account (controllers)", default_account)


def start(assets: Path, directory: Path, *, attempts: int = 3) -> ControlPlane:
    """Start etcd and kube-apiserver (and, where ``assets`` has them, the controller manager
    and the scheduler) under ``directory``; return once the API server is ready.

    :param assets: the folder with the binaries (:func:`assets_from_env`).
    :param directory: an empty folder for PKI, etcd data, logs and kubeconfigs.
    :raises ControlPlaneError: a process exited or readiness timed out ``attempts`` times
        (a port taken between choosing and binding it is retried with new ports).
    """
    directory.mkdir(parents=True, exist_ok=True)
    _write_pki(directory / "pki")
    controllers = all(os.access(assets / name, os.X_OK) for name in OPTIONAL)
    error: ControlPlaneError | None = None
    for attempt in range(attempts):
        run = directory if attempt == 0 else directory / f"retry-{attempt}"
        if run is not directory:
            run.mkdir()
            (run / "pki").symlink_to(directory / "pki")
        try:
            return _start_once(assets, run, controllers=controllers)
        except ControlPlaneError as exc:
            error = exc
    assert error is not None
    raise error


def stop(plane: ControlPlane) -> None:
    """Stop the processes in reverse start order: SIGTERM, SIGKILL after :data:`STOP_GRACE`."""
    for name in reversed(list(plane.processes)):
        proc = plane.processes[name]
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(STOP_GRACE)
        (plane.directory / f"{name}.pid").unlink(missing_ok=True)
    plane.processes.clear()


@contextlib.contextmanager
def started(assets: Path, directory: Path) -> Iterator[ControlPlane]:
    """:func:`start`, then :func:`stop` on leaving the block, whatever happened inside."""
    plane = start(assets, directory)
    try:
        yield plane
    finally:
        stop(plane)
