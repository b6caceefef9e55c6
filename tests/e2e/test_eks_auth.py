"""The production authentication path end to end: the functions find the API server with eks:DescribeCluster
(moto), mint a k8s-aws-v1 token locally, and the emulator (TLS, token checking on) verifies its SigV4 signature
for this cluster before anything is served."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devstack.stack import FUNCTIONS_PRINCIPAL, Stack, StackConfig
from tests.e2e.helpers import create_service, hostname, read_service


@pytest.fixture(scope="module")
def eks_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = StackConfig(state_dir=tmp_path_factory.mktemp("eks"), kube_auth="eks", resync_seconds=3600)
    with Stack(config) as running:
        yield running


def test_functions_reach_the_api_server_only_with_a_valid_eks_token(eks_stack: Stack):
    emulator = eks_stack.emulator
    assert emulator is not None and emulator.url.startswith("https://")
    assert eks_stack.lambda_environment()["KUBE_AUTH_MODE"] == "eks"
    assert "KUBECONFIG" not in eks_stack.lambda_environment()

    create_service(eks_stack, "web", [80])
    eks_stack.wait_for(lambda: hostname(eks_stack, "web"), timeout=60, what="EXTERNAL-IP through EKS auth")
    writes = [r for r in emulator.request_log.snapshot() if r["method"] == "PATCH" and "/services/web" in r["path"]]
    assert writes and {r["user"] for r in writes} == {FUNCTIONS_PRINCIPAL}
    validator = emulator.token_validator
    assert validator is not None and validator.refusals == []  # type: ignore[attr-defined]

    eks_stack.core().delete_namespaced_service("web", "default")
    eks_stack.wait_for(lambda: read_service(eks_stack, "web") is None, timeout=60, what="cleanup through EKS auth")
