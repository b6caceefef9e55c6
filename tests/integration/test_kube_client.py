"""How the Lambdas authenticate to the Kubernetes API (ccm.k8s.rest, not the official client): EKS tokens, a
kubeconfig kept in Secrets Manager, token files, in-cluster service accounts; checked against the emulator with
token checking (and TLS) switched on, so what the client really sends is what is verified."""

from __future__ import annotations

import base64
import json
import os
import socket
import stat
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
import urllib3
from moto import mock_aws

from ccm import deadline
from ccm.k8s.client import new_api_client
from ccm.k8s.eks_token import TOKEN_LIFETIME_S, TOKEN_PREFIX, EksToken, mint_token
from ccm.k8s.kubeconfig import KubeconfigError, from_kubeconfig, from_kubeconfig_text, in_cluster
from ccm.k8s.rest import ApiError, KubeRest
from ccm.wiring.settings import kube_settings_from_env
from devstack.k8s_emulator import Emulator


def presigned_url(token: str) -> str:
    assert token.startswith(TOKEN_PREFIX)
    raw = token[len(TOKEN_PREFIX) :]
    return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()


def eks_validator(cluster: str, seen: list[str]) -> Callable[[str], str | None]:
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


@pytest.fixture
def tls_emulator() -> Iterator[Emulator]:
    emu = Emulator(tls=True, require_token=True, tokens={"s3cret": "ccm"}).start()
    try:
        yield emu
    finally:
        emu.stop()


def test_eks_token_is_a_presigned_get_caller_identity_for_the_cluster(aws: None) -> None:
    token = mint_token(boto3.session.Session(), "prod-1")
    url = urllib.parse.urlparse(presigned_url(token))
    query = urllib.parse.parse_qs(url.query)
    assert url.hostname is not None and url.hostname.startswith("sts.")
    assert query["Action"] == ["GetCallerIdentity"] and query["Version"] == ["2011-06-15"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")
    assert "=" not in token[len(TOKEN_PREFIX) :]  # base64url without padding


def test_the_client_sends_the_eks_token_as_a_bearer_token_and_remints_it_before_expiry(aws: None) -> None:
    seen: list[str] = []
    emu = Emulator(require_token=True, token_validator=eks_validator("prod-1", seen)).start()
    now = [1_000_000.0]
    try:
        source = EksToken(boto3.session.Session(), "prod-1", clock=lambda: now[0])
        api = KubeRest(emu.url, token=source)
        api.get("/api/v1/nodes")
        api.get("/api/v1/nodes")
        # What went over the wire: "Authorization: Bearer k8s-aws-v1...." (the emulator saw and accepted it).
        assert len(seen) == 2 and seen[0] == seen[1] and seen[0].startswith(TOKEN_PREFIX)
        assert [entry["user"] for entry in emu.request_log.snapshot()[-2:]] == ["eks:prod-1"] * 2
        minted_first = source._minted_at
        now[0] += TOKEN_LIFETIME_S + 1  # the token is now 10 minutes old: the next request mints a new one
        api.get("/api/v1/nodes")
        assert source._minted_at == now[0] != minted_first and seen[-1].startswith(TOKEN_PREFIX)
    finally:
        emu.stop()


def test_kubeconfig_from_secrets_manager(
    aws: None, tls_emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = Path(tls_emulator.write_kubeconfig(str(tmp_path / "kc"), token="s3cret"))
    arn = boto3.client("secretsmanager").create_secret(Name="ccm-kubeconfig", SecretString=kubeconfig.read_text())[
        "ARN"
    ]
    monkeypatch.setenv("KUBE_AUTH_MODE", "kubeconfig-secret")
    monkeypatch.setenv("KUBECONFIG_SECRET_ARN", arn)
    new_api_client(kube_settings_from_env(os.environ)).get("/api/v1/nodes")
    assert tls_emulator.request_log.snapshot()[-1]["user"] == "ccm"


def test_the_certificate_authority_is_verified(tls_emulator: Emulator, tmp_path: Path) -> None:
    good = from_kubeconfig(tls_emulator.write_kubeconfig(str(tmp_path / "kc"), token="s3cret"))
    assert good.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"
    config = json.loads((tmp_path / "kc").read_text())
    del config["clusters"][0]["cluster"]["certificate-authority-data"]  # no CA: the system store does not know it
    untrusted = from_kubeconfig_text(json.dumps(config))
    untrusted.pool.connection_pool_kw["retries"] = 0
    with pytest.raises(Exception, match=r"(?i)certificate"):
        untrusted.get("/api/v1/nodes")
    config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    assert from_kubeconfig_text(json.dumps(config)).get("/api/v1/nodes")["items"] == []


def test_a_token_file_is_read_relative_to_the_kubeconfig(tls_emulator: Emulator, tmp_path: Path) -> None:
    config = json.loads(Path(tls_emulator.write_kubeconfig(str(tmp_path / "kc"), token="s3cret")).read_text())
    (tmp_path / "token").write_text("s3cret\n")
    config["users"][0]["user"] = {"tokenFile": "token"}
    (tmp_path / "kc").write_text(json.dumps(config))
    from_kubeconfig(str(tmp_path / "kc")).get("/api/v1/nodes")
    assert tls_emulator.request_log.snapshot()[-1]["user"] == "ccm"


def test_in_cluster_uses_the_service_account_token_and_ca(
    tls_emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert tls_emulator.ca_pem is not None
    (tmp_path / "token").write_text("s3cret")
    (tmp_path / "ca.crt").write_bytes(tls_emulator.ca_pem)
    url = urllib.parse.urlparse(tls_emulator.url)
    in_cluster(str(url.hostname), str(url.port), str(tmp_path)).get("/api/v1/nodes")
    assert tls_emulator.request_log.snapshot()[-1]["user"] == "ccm"


def test_client_certificates_are_written_private_and_plugins_are_refused() -> None:
    config = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://k8s.example:6443"}}],
        "users": [
            {
                "name": "u",
                "user": {
                    "client-certificate-data": base64.b64encode(b"CERT").decode(),
                    "client-key-data": base64.b64encode(b"KEY").decode(),
                },
            }
        ],
    }
    api = from_kubeconfig_text(json.dumps(config))
    key_file = api.pool.connection_pool_kw["key_file"]
    assert Path(key_file).read_bytes() == b"KEY" and stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert Path(api.pool.connection_pool_kw["cert_file"]).read_bytes() == b"CERT"
    config["users"][0]["user"] = {"exec": {"command": "aws", "args": ["eks", "get-token"]}}
    with pytest.raises(KubeconfigError, match="exec"):
        from_kubeconfig_text(json.dumps(config))
    config["current-context"] = "nope"
    with pytest.raises(KubeconfigError, match="no context named 'nope'"):
        from_kubeconfig_text(json.dumps(config))


def test_errors_carry_the_status_and_one_line_message(tls_emulator: Emulator, tmp_path: Path) -> None:
    api = from_kubeconfig(tls_emulator.write_kubeconfig(str(tmp_path / "kc"), token="s3cret"))
    with pytest.raises(ApiError) as caught:
        api.get("/api/v1/namespaces/default/services/nope")
    assert caught.value.status == 404
    assert str(caught.value) == '(404) Not Found: services "nope" not found'
    refused = from_kubeconfig(tls_emulator.write_kubeconfig(str(tmp_path / "kc2"), token="wrong"))
    with pytest.raises(ApiError) as caught:
        refused.get("/api/v1/nodes")
    assert caught.value.status == 401 and "s3cret" not in str(caught.value)


def test_a_connection_dropped_without_an_answer_is_retried_for_every_verb() -> None:
    """What a frozen-and-thawed Lambda meets: a pooled connection the server has closed. The request is sent
    again (POST too: our writes are safe to repeat) instead of failing the reconcile."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    served: list[str] = []

    def serve() -> None:
        for attempt in range(2):
            conn, _ = listener.accept()
            with conn:
                request = conn.recv(65536).decode()
                served.append(request.split(" ", 1)[0])
                if attempt == 0:
                    continue  # close without answering
                body = b'{"kind":"Event"}'
                conn.sendall(
                    b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nConnection: close\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        answer = KubeRest(f"http://127.0.0.1:{port}").post("/api/v1/namespaces/default/events", {"kind": "Event"})
    finally:
        thread.join(timeout=5)
        listener.close()
    assert answer == {"kind": "Event"} and served == ["POST", "POST"]


def test_requests_are_bounded_by_the_invocations_deadline() -> None:
    emu = Emulator().start()
    try:
        api = KubeRest(emu.url)
        path = "/api/v1/namespaces/default/services"
        api.get(path)  # a warm pool, as in a warm Lambda
        emu.faults.latency(3000)  # the API server answers after 3 s
        with deadline.invocation(lambda: 2.5, finish_reserve=0):
            # Every attempt's timeouts shrink to fit the 2.5 s left (urllib3 retries included): it gives up in time
            # instead of waiting 3 s for the answer (the old client waited up to 30 s per attempt).
            started = time.monotonic()
            with pytest.raises(urllib3.exceptions.MaxRetryError):
                api.get(path)
            assert time.monotonic() - started < 2.5
        emu.faults.clear()
        emu.clear_log()
        with deadline.invocation(lambda: 1.0, finish_reserve=0), pytest.raises(deadline.OutOfTime):
            api.get(path)  # too little left to start one
        assert emu.request_log.snapshot() == []
    finally:
        emu.stop()


def test_a_status_write_never_lands_on_a_service_re_created_under_the_same_name(
    tls_emulator: Emulator, tmp_path: Path
) -> None:
    """Chaos found it: a reconcile of the old Service wrote its LB hostname onto the new ClusterIP one. A UID in a
    merge patch is no precondition on a real server (422 "field is immutable", the same code as an invalid status),
    so the write is a JSON patch whose `test` of metadata.uid the server checks on the object it holds; an invalid
    status still raises."""
    from ccm.k8s.kube import Kube

    kube = Kube(from_kubeconfig(tls_emulator.write_kubeconfig(str(tmp_path / "kc"), token="s3cret")))
    spec = {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}
    old = tls_emulator.create(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "default"}, "spec": spec}
    )
    assert kube.patch_load_balancer_status(old, [{"hostname": "old.example"}])
    tls_emulator.delete("services", "default", "a")
    new = tls_emulator.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "a", "namespace": "default"},
            "spec": {"ports": [{"port": 80, "protocol": "TCP"}]},
        }
    )
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert kube.patch_load_balancer_status(old, [{"hostname": "old.example"}]) is None
    live = tls_emulator.get("services", "default", "a")
    assert live is not None and not (live.get("status") or {}).get("loadBalancer", {}).get("ingress")
    assert kube.patch_load_balancer_status(new, [{"hostname": "new.example"}])
    assert kube.patch_load_balancer_status(new, [])  # cleared: no ingress left
    live = tls_emulator.get("services", "default", "a")
    assert live is not None and live["status"]["loadBalancer"] == {}
    with pytest.raises(ApiError) as invalid:
        kube.patch_load_balancer_status(new, [{"ip": "not-an-ip"}])
    assert invalid.value.status == 422


@pytest.mark.parametrize("ip_mode_gate", [True, False])
def test_status_compare_holds_only_what_the_server_keeps(ip_mode_gate: bool, tmp_path: Path) -> None:
    """kube-apiserver 1.28 and 1.29 (LoadBalancerIPMode off) drop ingress[].ipMode; 1.30+ keep it (and default it
    to VIP). Either way, the status the controller wrote compares equal to what it reads back, so the next
    reconcile writes nothing; a changed ipMode on a server that keeps it is a change."""
    from ccm.contracts.cloud import Ingress
    from ccm.k8s.kube import Kube
    from ccm.service.decisions import ingress_equal

    emu = Emulator(load_balancer_ip_mode=ip_mode_gate).start()
    try:
        kube = Kube(from_kubeconfig(emu.write_kubeconfig(str(tmp_path / "kc"))))
        spec = {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}
        svc = emu.create(
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "default"}, "spec": spec}
        )
        desired = [Ingress(ip="203.0.113.10").to_api()]
        written = kube.patch_load_balancer_status(svc, desired)
        assert written is not None
        current = written["status"]["loadBalancer"]["ingress"]
        assert current == ([{"ip": "203.0.113.10", "ipMode": "VIP"}] if ip_mode_gate else [{"ip": "203.0.113.10"}])
        assert ingress_equal(current, desired)
        assert ingress_equal(current, [{"ip": "203.0.113.10"}])  # the server's default, either way
        assert ingress_equal(current, [Ingress(ip="203.0.113.10", ip_mode="Proxy").to_api()]) is not ip_mode_gate
    finally:
        emu.stop()
