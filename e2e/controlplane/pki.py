"""Fresh certificates for one control plane, made with the ``openssl`` command line.

Every control plane gets its own CA, so a test can never talk to a leftover
apiserver by accident. EC P-256 keys are used for TLS (fast to generate); the
service-account signing key is RSA because that is what every token consumer
supports.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

CERT_DAYS = 30


class OpensslFailedError(RuntimeError):
    """Raised when an ``openssl`` invocation fails."""

    def __init__(self, *, args: list[str], stderr: str) -> None:
        self.args_used = args
        self.stderr = stderr
        super().__init__(f"openssl {' '.join(args)} failed: {stderr.strip()}")


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM files."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class ClusterPki:
    """All the files a control plane needs."""

    ca: KeyPair
    serving: KeyPair
    service_account_key: Path
    service_account_pub: Path
    directory: Path


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise OpensslFailedError(args=list(args), stderr=proc.stderr)


def _new_ec_key(path: Path) -> None:
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)
    )
    path.chmod(0o600)


def build_ca(*, directory: Path, common_name: str) -> KeyPair:
    """Create a self-signed CA in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    pair = KeyPair(cert=directory / "ca.crt", key=directory / "ca.key")
    _new_ec_key(pair.key)
    _openssl(
        "req", "-x509", "-new", "-key", str(pair.key), "-out", str(pair.cert),
        "-days", str(CERT_DAYS), "-subj", f"/CN={common_name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )  # fmt: skip
    return pair


def issue_cert(
    *,
    ca: KeyPair,
    directory: Path,
    name: str,
    common_name: str,
    organizations: tuple[str, ...] = (),
    server_names: tuple[str, ...] = (),
    server_ips: tuple[str, ...] = (),
    client: bool = True,
) -> KeyPair:
    """Issue a leaf certificate signed by ``ca``.

    Kubernetes maps the subject's CN to the user name and each O to a group, so a
    client certificate is also an identity (``system:masters`` for the admin,
    ``system:node:<name>`` in ``system:nodes`` for a node).
    """
    directory.mkdir(parents=True, exist_ok=True)
    pair = KeyPair(cert=directory / f"{name}.crt", key=directory / f"{name}.key")
    csr = directory / f"{name}.csr"
    ext = directory / f"{name}.ext"
    _new_ec_key(pair.key)
    subject = "".join(f"/O={o}" for o in organizations) + f"/CN={common_name}"
    _openssl("req", "-new", "-key", str(pair.key), "-out", str(csr), "-subj", subject)
    usages = []
    if server_names or server_ips:
        usages.append("serverAuth")
    if client:
        usages.append("clientAuth")
    lines = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={','.join(usages)}",
        "subjectKeyIdentifier=hash",
        "authorityKeyIdentifier=keyid",
    ]
    alt = [f"DNS:{n}" for n in server_names] + [f"IP:{ip}" for ip in server_ips]
    if alt:
        lines.append(f"subjectAltName={','.join(alt)}")
    ext.write_text("\n".join(lines) + "\n")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
        "-set_serial", str(secrets.randbits(63)), "-days", str(CERT_DAYS),
        "-out", str(pair.cert), "-extfile", str(ext),
    )  # fmt: skip
    csr.unlink()
    ext.unlink()
    return pair


def build_cluster_pki(*, directory: Path, extra_ips: tuple[str, ...] = ()) -> ClusterPki:
    """Create the CA, the apiserver serving certificate and the service-account key."""
    ca = build_ca(directory=directory, common_name="checkpointed-jobs-test-ca")
    serving = issue_cert(
        ca=ca,
        directory=directory,
        name="apiserver",
        common_name="kube-apiserver",
        server_names=(
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        server_ips=("127.0.0.1", *extra_ips),
        client=False,
    )
    sa_key = directory / "sa.key"
    sa_pub = directory / "sa.pub"
    _openssl(
        "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(sa_key)
    )
    sa_key.chmod(0o600)
    _openssl("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub))
    return ClusterPki(
        ca=ca,
        serving=serving,
        service_account_key=sa_key,
        service_account_pub=sa_pub,
        directory=directory,
    )
