"""A throwaway certificate authority for the twin API server.

kubectl (client-go's ``clientcmd``) only attaches a kubeconfig's credentials when the server
URL is ``https``; a bearer token against ``http://`` is silently dropped. So the API server
speaks TLS too, with a server certificate for ``127.0.0.1``/``localhost`` signed by a CA that
is generated once per process and embedded in the kubeconfigs it writes
(``certificate-authority-data``). Nothing here is secret or persistent.
"""

from __future__ import annotations

import base64
import datetime as _dt
import functools
import ipaddress
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Credentials:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


@functools.lru_cache(maxsize=1)
def credentials() -> Credentials:
    # Certificates are checked against wall time by the clients, never against the virtual clock.
    now = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(days=1)
    until = now + _dt.timedelta(days=3650)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sremarathon-twin-ca")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sremarathon-twin-apiserver")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.DNSName("kubernetes.default.svc"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(ipaddress.ip_address("::1"))]),
            critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return Credentials(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()),
    )


def server_context(creds: Credentials) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])  # no h2: clients fall back to HTTP/1.1
    # load_cert_chain only reads files; keep them only for as long as it takes to load them.
    fd, path = tempfile.mkstemp(prefix="sremarathon-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(creds.cert_pem + creds.key_pem)
        ctx.load_cert_chain(path)
    finally:
        os.unlink(path)
    return ctx


def write_kubeconfig(path: Path, *, server: str, ca_pem: bytes, token: str, user: str,
                     context: str = "sremarathon") -> Path:
    """A kubeconfig for a loopback server we serve over TLS with our CA, using a bearer token."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": context, "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": user, "namespace": "default"}}],
        "current-context": context,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        path.chmod(0o600)
    except OSError:
        pass
    return path
