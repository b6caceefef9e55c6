"""scripts/create-kubeconfig-secret end to end, as docs/deploy.md tells a self-managed cluster's admin to run it:
deploy/base and deploy/overlays/self-managed-rbac applied with the real kubectl to the API emulator (TLS: kubectl
sends tokens only over TLS, RBAC enforced), the script run with an admin kubeconfig against a moto server's
Secrets Manager. The stored kubeconfig is what the functions load (ccm.k8s.kubeconfig) and its token has exactly
the functions' verbs; a second run adds a version instead of failing; no token reaches the output."""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from ccm.k8s.kubeconfig import from_kubeconfig_text
from ccm.k8s.rest import ApiError
from devstack.k8s_emulator import Emulator
from tests.deploy.conftest import DEPLOY, REPO, make_kubectl

SCRIPT = REPO / "scripts" / "create-kubeconfig-secret"
NS, SA = "serverless-ccm", "serverless-ccm-functions"
FUNCTIONS_SA = f"system:serviceaccount:{NS}:{SA}"
NAME = "serverless-ccm/prod/kubeconfig"
REGION = "eu-west-1"


def token_controller(emu: Emulator, issued: list[str], stop: threading.Event) -> None:
    """What kube-controller-manager's token controller does (the emulator runs no controllers): fills a
    service-account-token Secret with a token for its ServiceAccount and the cluster's CA."""
    while not stop.is_set():
        for secret in emu.list("secrets", NS):
            annotations = secret["metadata"].get("annotations") or {}
            if secret.get("type") != "kubernetes.io/service-account-token" or (secret.get("data") or {}).get("token"):
                continue
            account = annotations["kubernetes.io/service-account.name"]
            token = secrets.token_urlsafe(32)
            emu.tokens[token] = f"system:serviceaccount:{NS}:{account}"
            issued.append(token)
            assert emu.ca_pem is not None
            secret["data"] = {
                "token": base64.b64encode(token.encode()).decode(),
                "ca.crt": base64.b64encode(emu.ca_pem).decode(),
                "namespace": base64.b64encode(NS.encode()).decode(),
            }
            emu.update(secret)
        time.sleep(0.05)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Emulator, str, list[str]]]:
    emu = Emulator(tls=True).start()
    stop = threading.Event()
    issued: list[str] = []
    try:
        admin = emu.write_kubeconfig(str(tmp_path / "admin.kubeconfig"))
        kubectl = make_kubectl(admin, tmp_path / "home")
        # docs/deploy.md, self-managed clusters: before the first deploy, with a cluster-admin kubeconfig.
        kubectl("apply", "-k", str(DEPLOY / "base"))
        kubectl("apply", "-k", str(DEPLOY / "overlays/self-managed-rbac"))
        emu.enable_rbac()
        emu.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        emu.create(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
            }
        )
        emu.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "default"}})
        threading.Thread(target=token_controller, args=(emu, issued, stop), daemon=True).start()
        yield emu, admin, issued
    finally:
        stop.set()
        emu.stop()


@pytest.fixture
def secretsmanager() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        # moto's backends live in this process: start from an empty account.
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10)
        yield endpoint
    finally:
        server.stop()


def run_script(admin: str, endpoint: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "KUBECONFIG": admin,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    argv = [str(SCRIPT), "--name", NAME, "--region", REGION]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def test_the_secret_holds_a_kubeconfig_with_exactly_the_functions_verbs(
    cluster: tuple[Emulator, str, list[str]], secretsmanager: str, tmp_path: Path
) -> None:
    emu, admin, issued = cluster
    first = run_script(admin, secretsmanager, tmp_path / "home")
    assert first.returncode == 0, first.stderr
    client = boto3.client("secretsmanager", region_name=REGION, endpoint_url=secretsmanager)
    arn = client.describe_secret(SecretId=NAME)["ARN"]
    assert first.stdout == arn + "\n" and first.stderr == ""  # only the ARN: KubeconfigSecretArn
    text = client.get_secret_value(SecretId=arn)["SecretString"]
    assert len(issued) == 1 and issued[0] in text
    assert issued[0] not in first.stdout + first.stderr

    # What the functions do with it (ccm.k8s.client, KubeAuthMode=kubeconfig-secret): TLS with the cluster's CA.
    api = from_kubeconfig_text(text)
    assert api.get("/api/v1/nodes")["items"][0]["metadata"]["name"] == "n1"
    merge = "application/merge-patch+json"
    api.patch("/api/v1/namespaces/default/services/web/status", {"status": {"loadBalancer": {}}}, merge)
    api.patch("/api/v1/nodes/n1/status", {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}})
    for refused in (
        lambda: api.get("/api/v1/namespaces/default/secrets/db"),
        lambda: api.get("/api/v1/secrets"),
        lambda: api.delete("/api/v1/namespaces/default/services/web"),
        lambda: api.post("/api/v1/namespaces", {"metadata": {"name": "evil"}}),
    ):
        with pytest.raises(ApiError) as err:
            refused()
        assert err.value.status == 403
    assert [e["user"] for e in list(emu.request_log) if e["status"] == 403] == [FUNCTIONS_SA] * 4

    # The real kubectl with the stored kubeconfig: the same identity.
    stored = tmp_path / "stored.kubeconfig"
    stored.write_text(text)
    kubectl = make_kubectl(str(stored), tmp_path / "home2")
    assert kubectl("get", "nodes", "-o", "name").stdout.strip() == "node/n1"
    assert "Forbidden" in kubectl("get", "secrets", "-A", check=False).stderr

    # Idempotent: a second run stores the kubeconfig again as a new version of the same secret.
    second = run_script(admin, secretsmanager, tmp_path / "home")
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout and second.stderr == ""
    versions = client.list_secret_version_ids(SecretId=arn)["Versions"]
    assert len(versions) == 2 and client.get_secret_value(SecretId=arn)["SecretString"] == text
    assert len(issued) == 1  # the ServiceAccount's token Secret was reused, not re-issued
    assert all(token not in second.stdout + second.stderr for token in issued)


def test_without_the_overlay_it_says_what_to_apply(secretsmanager: str, tmp_path: Path) -> None:
    with Emulator(tls=True) as emu:
        admin = emu.write_kubeconfig(str(tmp_path / "admin.kubeconfig"))
        done = run_script(admin, secretsmanager, tmp_path / "home")
    assert done.returncode == 1 and "kubectl apply -k deploy/overlays/self-managed-rbac" in done.stderr
    client = boto3.client("secretsmanager", region_name=REGION, endpoint_url=secretsmanager)
    assert client.list_secrets()["SecretList"] == []
