"""No secret reaches the logs, at any level: the authentication paths run with the root logger at DEBUG (what
docs/runbook.md recommends for debugging; the Lambda runtime puts the root logger at ApplicationLogLevel) and every
line logged, by us, botocore or urllib3, is searched for the credentials. At DEBUG botocore logs response bodies
(a GetSecretValue answer is the whole kubeconfig), request headers and the signature of a presigned URL (an EKS
token is one)."""

from __future__ import annotations

import logging
import os
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from ccm.k8s.client import new_api_client
from ccm.k8s.eks_token import EksToken
from ccm.k8s.rest import KubeRest
from ccm.wiring.settings import kube_settings_from_env
from devstack.k8s_emulator import Emulator

from .test_kube_client import aws, eks_validator, presigned_url  # noqa: F401  (aws is a fixture)


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record) + " " + repr(vars(record)))  # extra= fields too

    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def debug_logs() -> Iterator[Capture]:
    root, capture = logging.getLogger(), Capture()
    level = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(capture)
    try:
        yield capture
    finally:
        root.removeHandler(capture)
        root.setLevel(level)


def test_the_kubeconfig_secret_is_not_logged_at_debug(
    aws: None,  # noqa: F811
    debug_logs: Capture,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = f"kubeconfig-token-{uuid.uuid4().hex}"
    emu = Emulator(require_token=True, tokens={token: "ccm"}).start()
    try:
        body = Path(emu.write_kubeconfig(str(tmp_path / "kc"), token=token)).read_text()
        arn = boto3.client("secretsmanager").create_secret(Name="ccm-kubeconfig", SecretString=body)["ARN"]
        monkeypatch.setenv("KUBE_AUTH_MODE", "kubeconfig-secret")
        monkeypatch.setenv("KUBECONFIG_SECRET_ARN", arn)
        debug_logs.lines.clear()
        new_api_client(kube_settings_from_env(os.environ)).get("/api/v1/nodes")
        assert emu.request_log.snapshot()[-1]["user"] == "ccm"  # the secret was read and used
    finally:
        emu.stop()
    logged = debug_logs.text()
    assert "GetSecretValue" in logged and "urllib3" in logged  # DEBUG lines were really captured
    assert token not in logged
    assert "current-context" not in logged  # no part of the secret body either


def test_the_eks_token_and_its_signature_are_not_logged_at_debug(
    aws: None,  # noqa: F811
    debug_logs: Capture,
) -> None:
    seen: list[str] = []
    emu = Emulator(require_token=True, token_validator=eks_validator("prod-1", seen)).start()
    try:
        KubeRest(emu.url, token=EksToken(boto3.session.Session(), "prod-1")).get("/api/v1/nodes")
    finally:
        emu.stop()
    (token,) = set(seen)
    url = presigned_url(token)
    signature = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["X-Amz-Signature"][0]
    logged = debug_logs.text()
    assert "urllib3" in logged  # DEBUG lines were really captured
    assert token not in logged and url not in logged
    assert signature not in logged  # with it and the (logged) canonical request, the token can be rebuilt
