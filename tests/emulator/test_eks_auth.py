"""The emulator's EKS token check against tokens minted by our real code path (botocore presigning)."""

from __future__ import annotations

import base64
import time

import boto3
import pytest

from ccm.k8s.eks_token import EksToken, mint_token
from ccm.k8s.rest import ApiError, KubeRest
from devstack.k8s_emulator import Emulator
from devstack.k8s_emulator.eks_auth import EksTokenValidator


def session(key: str = "AKIDDEVSTACK", secret: str = "s3cret", region: str = "eu-west-1") -> boto3.session.Session:
    return boto3.session.Session(aws_access_key_id=key, aws_secret_access_key=secret, region_name=region)


class Clock:
    def __init__(self, offset: float) -> None:
        self.offset = offset

    def time(self) -> float:
        return time.time() + self.offset


def test_a_token_minted_for_the_cluster_is_accepted_and_mapped_to_its_principal():
    validator = EksTokenValidator("prod", {"AKIDDEVSTACK": "s3cret"}, {"AKIDDEVSTACK": "arn:aws:iam::1:role/fn"})
    assert validator(mint_token(session(), "prod")) == "arn:aws:iam::1:role/fn"
    assert validator.refusals == []


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda: mint_token(session(), "staging"), "signature does not match"),
        (lambda: mint_token(session(secret="other"), "prod"), "signature does not match"),
        (lambda: mint_token(session(key="AKIDUNKNOWN"), "prod"), "unknown access key"),
        (
            lambda: "k8s-aws-v1." + base64.urlsafe_b64encode(b"https://sts.amazonaws.com/?Action=ListUsers").decode(),
            "not a presigned GetCallerIdentity URL",
        ),
        (lambda: "k8s-aws-v1.!!!", "not base64url"),
        (lambda: "eyJhbGciOi.static.jwt", "not a k8s-aws-v1 token"),
    ],
)
def test_tokens_eks_would_refuse_are_refused_with_the_reason(make, reason):
    validator = EksTokenValidator("prod", {"AKIDDEVSTACK": "s3cret"})
    assert validator(make()) is None
    assert reason in validator.refusals[-1]


def test_a_tampered_token_is_refused():
    token = mint_token(session(), "prod")
    raw = token[len("k8s-aws-v1.") :]
    decoded = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode().replace("2011-06-15", "2011-06-15&x=1")
    forged = "k8s-aws-v1." + base64.urlsafe_b64encode(decoded.encode()).decode().rstrip("=")
    validator = EksTokenValidator("prod", {"AKIDDEVSTACK": "s3cret"})
    assert validator(forged) is None and "signature does not match" in validator.refusals[-1]


def test_a_token_older_than_fifteen_minutes_is_refused():
    token = mint_token(session(), "prod")
    assert EksTokenValidator("prod", {"AKIDDEVSTACK": "s3cret"}, clock=Clock(14 * 60))(token) is not None
    late = EksTokenValidator("prod", {"AKIDDEVSTACK": "s3cret"}, clock=Clock(16 * 60))
    assert late(token) is None and "expired" in late.refusals[-1]


def test_the_functions_client_authenticates_with_a_minted_token_over_tls(tmp_path):
    validator = EksTokenValidator("prod", {"AKIDDEVSTACK": "s3cret"}, {"AKIDDEVSTACK": "arn:aws:iam::1:role/fn"})
    emu = Emulator(require_token=True, token_validator=validator, tls=True).start()
    try:
        ca = tmp_path / "ca.pem"
        ca.write_bytes(emu.ca_pem or b"")
        KubeRest(emu.url, token=EksToken(session(), "prod"), ca_file=str(ca)).get("/api/v1/namespaces")
        assert emu.request_log.snapshot()[-1]["user"] == "arn:aws:iam::1:role/fn"
        other = KubeRest(emu.url, token=EksToken(session(), "staging"), ca_file=str(ca))
        with pytest.raises(ApiError) as refused:
            other.get("/api/v1/namespaces")
        assert refused.value.status == 401
    finally:
        emu.stop()
