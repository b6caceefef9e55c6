"""How the Lambdas authenticate to the Kubernetes API: EKS tokens and a kubeconfig kept in Secrets Manager,
checked against the emulator with token checking switched on (what the client really sends)."""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from kubernetes import client
from moto import mock_aws

from ccm.k8s.client import new_api_client
from ccm.k8s.eks_token import TOKEN_PREFIX, install_token_refresh, mint_token
from devstack.k8s_emulator import Emulator


def presigned_url(token: str) -> str:
    assert token.startswith(TOKEN_PREFIX)
    raw = token[len(TOKEN_PREFIX) :]
    return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()


def eks_validator(cluster: str, seen: list[str]):
    def validate(token: str) -> str | None:
        seen.append(token)
        if not token.startswith(TOKEN_PREFIX):
            return None
        query = urllib.parse.parse_qs(urllib.parse.urlparse(presigned_url(token)).query)
        signed = query.get("X-Amz-SignedHeaders", [""])[0].split(";")
        if query.get("Action") != ["GetCallerIdentity"] or "x-k8s-aws-id" not in signed:
            return None
        return f"eks:{cluster}"

    return validate


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "AKIDTEST",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield


def test_eks_token_is_a_presigned_get_caller_identity_for_the_cluster(aws: None):
    token = mint_token(boto3.session.Session(), "prod-1")
    url = urllib.parse.urlparse(presigned_url(token))
    query = urllib.parse.parse_qs(url.query)
    assert url.hostname == "sts.us-east-1.amazonaws.com" or url.hostname.startswith("sts.")
    assert query["Action"] == ["GetCallerIdentity"] and query["Version"] == ["2011-06-15"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")
    assert "=" not in token[len(TOKEN_PREFIX) :]  # base64url without padding


def test_the_client_sends_the_eks_token_as_a_bearer_token(aws: None):
    seen: list[str] = []
    emu = Emulator(require_token=True, token_validator=eks_validator("prod-1", seen)).start()
    try:
        configuration = client.Configuration()
        configuration.host = emu.url
        install_token_refresh(configuration, boto3.session.Session(), "prod-1")
        # What the client will put on the wire (the v36+ BearerToken pitfall).
        header = configuration.auth_settings()["BearerToken"]
        assert header["key"] == "authorization" and header["value"].startswith("Bearer k8s-aws-v1.")
        api = client.CoreV1Api(client.ApiClient(configuration))
        api.list_node()
        assert seen and seen[-1].startswith(TOKEN_PREFIX)
        assert emu.request_log.snapshot()[-1]["user"] == "eks:prod-1"
    finally:
        emu.stop()


def test_kubeconfig_from_secrets_manager(aws: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    emu = Emulator(require_token=True, tokens={"s3cret": "ccm"}).start()
    try:
        kubeconfig = Path(emu.write_kubeconfig(str(tmp_path / "kc"), token="s3cret")).read_text()
        arn = boto3.client("secretsmanager").create_secret(Name="ccm-kubeconfig", SecretString=kubeconfig)["ARN"]
        monkeypatch.setenv("KUBE_AUTH_MODE", "kubeconfig-secret")
        monkeypatch.setenv("KUBECONFIG_SECRET_ARN", arn)
        api = client.CoreV1Api(new_api_client())
        api.list_node()
        assert emu.request_log.snapshot()[-1]["user"] == "ccm"
    finally:
        emu.stop()
