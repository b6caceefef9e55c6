"""Self-signed serving certificate. kubectl (clientcmd) only sends bearer tokens over TLS,
so token-auth tests with kubectl need ``Emulator(tls=True)``."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import tempfile
from dataclasses import dataclass


@dataclass(frozen=True)
class ServingCert:
    directory: str
    cert_file: str
    key_file: str

    @property
    def cert_pem(self) -> bytes:
        with open(self.cert_file, "rb") as fh:
            return fh.read()

    def context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def cleanup(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def make_serving_cert(host: str) -> ServingCert:
    if shutil.which("openssl") is None:
        raise RuntimeError("Emulator(tls=True) needs the openssl binary to create a self-signed certificate")
    directory = tempfile.mkdtemp(prefix="k8s-emulator-tls-")
    cert, key = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
    san = f"IP:{host}" if _is_ip(host) else f"DNS:{host}"
    # The certificate is its own CA, so the kubeconfig can pin it as certificate-authority-data.
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-days",
            "2",
            "-subj",
            "/CN=k8s-emulator",
            "-addext",
            f"subjectAltName={san},DNS:localhost,IP:127.0.0.1",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return ServingCert(directory, cert, key)


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
