"""The real kubectl binary against the emulator."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from devstack.k8s_emulator import Emulator

from .conftest import Kubectl, as_json, service_body

SVC_YAML = """\
apiVersion: v1
kind: Service
metadata:
  name: web
  labels: {app: web}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports:
  - name: http
    port: 80
    targetPort: 8080
"""


@pytest.fixture
def svc_file(tmp_path: Path) -> str:
    path = tmp_path / "svc.yaml"
    path.write_text(SVC_YAML)
    return str(path)


def test_create_get_and_table_output(kubectl: Kubectl, svc_file: str, emu: Emulator) -> None:
    assert "service/web created" in kubectl("create", "-f", svc_file).stdout
    svc = as_json(kubectl("get", "svc", "web", "-o", "json"))
    assert svc["spec"]["type"] == "LoadBalancer" and svc["spec"]["ports"][0]["nodePort"] >= 30000
    listed = as_json(kubectl("get", "svc", "-o", "json"))
    assert [i["metadata"]["name"] for i in listed["items"]] == ["web"]
    table = kubectl("get", "svc").stdout.splitlines()
    assert table[0].split() == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    assert table[1].split()[:5] == [
        "web",
        "LoadBalancer",
        svc["spec"]["clusterIP"],
        "<pending>",
        f"80:{svc['spec']['ports'][0]['nodePort']}/TCP",
    ]
    assert "kube-system" in kubectl("get", "ns").stdout
    dup = kubectl("create", "-f", svc_file, check=False)
    assert dup.returncode != 0 and "AlreadyExists" in dup.stderr
    # Server-side field validation is used, so no /openapi/v2 download is needed.
    assert not any(e["path"] == "/openapi/v2" and e["status"] == 200 for e in emu.request_log)


def test_status_patch_label_and_delete(kubectl: Kubectl, svc_file: str, emu: Emulator) -> None:
    kubectl("create", "-f", svc_file)
    kubectl(
        "patch",
        "svc",
        "web",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"loadBalancer":{"ingress":[{"hostname":"web-123.elb.us-east-1.amazonaws.com"}]}}}',
    )
    stored = emu.get("services", "default", "web")
    assert stored is not None
    assert stored["status"]["loadBalancer"]["ingress"] == [{"hostname": "web-123.elb.us-east-1.amazonaws.com"}]
    assert "web-123.elb" in kubectl("get", "svc", "web").stdout
    kubectl("label", "svc", "web", "team=ccm")
    kubectl(
        "patch",
        "svc",
        "web",
        "--type=json",
        "-p",
        '[{"op":"add","path":"/metadata/annotations",'
        '"value":{"service.beta.kubernetes.io/aws-load-balancer-type":"nlb"}}]',
    )
    got = as_json(kubectl("get", "svc", "-l", "team=ccm", "-o", "json"))["items"][0]
    assert got["metadata"]["annotations"] == {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
    bad = kubectl("patch", "svc", "web", "--type=merge", "-p", '{"spec":{"ports":[{"port":0}]}}', check=False)
    assert bad.returncode != 0 and "is invalid" in bad.stderr
    assert 'service "web" deleted' in kubectl("delete", "svc", "web").stdout
    assert emu.get("services", "default", "web") is None


def test_get_watch_prints_changes(
    kubectl: Kubectl, kubeconfig: str, svc_file: str, emu: Emulator, tmp_path: Path
) -> None:
    kubectl("create", "-f", svc_file)
    kubectl("get", "svc")  # warm the discovery cache so the watch starts quickly
    proc = subprocess.Popen(
        ["kubectl", "--kubeconfig", kubeconfig, "get", "svc", "-w"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"HOME": str(tmp_path / "home"), "PATH": _path()},
    )
    lines: list[str] = []
    stdout = proc.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")), daemon=True)
    reader.start()
    try:
        _wait(lambda: any(e["watch"] for e in emu.request_log) and len(lines) >= 2)
        emu.update(
            {
                **emu.get("services", "default", "web"),  # type: ignore[dict-item]
                "status": {"loadBalancer": {"ingress": [{"hostname": "changed.example.com"}]}},
            },
            subresource="status",
        )
        _wait(lambda: any("changed.example.com" in line for line in lines))
    finally:
        proc.terminate()
        proc.communicate(timeout=5)
    assert lines[0].split()[0] == "NAME"
    assert "<pending>" in lines[1]


def _wait(cond: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_wait_for_delete_with_finalizer_removed_concurrently(kubectl: Kubectl, emu: Emulator) -> None:
    body = service_body("web")
    body["metadata"]["finalizers"] = ["service.k8s.aws/resources"]
    emu.create(body)
    assert kubectl("delete", "svc", "web", "--wait=false").returncode == 0
    stored = emu.get("services", "default", "web")
    assert stored is not None and stored["metadata"]["deletionTimestamp"]

    def release() -> None:
        time.sleep(1.0)
        kubectl("patch", "svc", "web", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')

    t = threading.Thread(target=release)
    t.start()
    started = time.monotonic()
    result = kubectl("wait", "--for=delete", "svc/web", "--timeout=10s", check=False)
    t.join()
    assert result.returncode == 0, result.stderr
    assert 0.5 < time.monotonic() - started < 9
    assert emu.get("services", "default", "web") is None
    watches = [e for e in emu.request_log if e["watch"]]
    assert watches and "fieldSelector=metadata.name%3Dweb" in watches[-1]["query"]


def test_kubectl_with_required_token(tmp_path: Path) -> None:
    # clientcmd only attaches bearer tokens to TLS connections, hence tls=True.
    emu = Emulator(require_token=True, tls=True).start()
    try:
        assert emu.url.startswith("https://")
        env = {"HOME": str(tmp_path), "PATH": _path()}
        good = emu.write_kubeconfig(str(tmp_path / "good"), token="admin-token")
        bad = emu.write_kubeconfig(str(tmp_path / "bad"), token="nope")
        ok = subprocess.run(
            ["kubectl", "--kubeconfig", good, "get", "ns", "-o", "name"],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert ok.returncode == 0 and "namespace/default" in ok.stdout
        denied = subprocess.run(
            ["kubectl", "--kubeconfig", bad, "get", "ns"], capture_output=True, text=True, env=env, timeout=30
        )
        assert denied.returncode != 0 and "Unauthorized" in denied.stderr + denied.stdout
        assert {e["user"] for e in emu.request_log if e["status"] == 200} == {"admin"}
        client = kubernetes.config.new_client_from_config(config_file=good)  # verifies the pinned CA
        assert len(kubernetes.client.CoreV1Api(client).list_namespace().items) == 2
    finally:
        emu.stop()


def _path() -> str:
    import os

    return os.environ.get("PATH", "/usr/bin:/bin")


def test_get_events_nodes_leases(kubectl: Kubectl, emu: Emulator) -> None:
    emu.create(
        {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "web.1"},
            "eventTime": "2024-01-01T00:00:00.000000Z",
            "reportingController": "ccm.example.com/svc",
            "reportingInstance": "fn-1",
            "action": "Ensure",
            "reason": "EnsuredLoadBalancer",
            "type": "Normal",
            "note": "Ensured load balancer",
            "regarding": {"kind": "Service", "name": "web", "namespace": "default"},
        }
    )
    emu.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "ip-10-0-0-1.ec2.internal"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    emu.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "ccm", "namespace": "kube-system"},
            "spec": {"holderIdentity": "pod-a"},
        }
    )
    for resource in ("events", "events.v1.events.k8s.io"):
        row = kubectl("get", resource).stdout.splitlines()[1].split()
        assert row[1:4] == ["Normal", "EnsuredLoadBalancer", "service/web"], resource
    assert kubectl("get", "nodes").stdout.splitlines()[1].split()[:2] == ["ip-10-0-0-1.ec2.internal", "Ready"]
    assert kubectl("get", "leases", "-A").stdout.splitlines()[1].split()[:3] == ["kube-system", "ccm", "pod-a"]


def test_create_subcommands_send_protobuf_and_succeed(kubectl: Kubectl, emu: Emulator) -> None:
    # kubectl's `create <kind>` posts application/vnd.kubernetes.protobuf and does not retry with JSON on a 415
    # (checked with kubectl 1.32), so the emulator decodes those bodies (devstack/k8s_emulator/protobuf.py).
    kubectl("create", "namespace", "team-a")
    kubectl("create", "configmap", "settings", "--from-literal=mode=fast", "-n", "team-a")
    kubectl("create", "serviceaccount", "robot")
    kubectl("create", "service", "nodeport", "dns", "--tcp=53:5353", "--node-port=30053")
    posts = [e for e in emu.request_log.snapshot() if e["method"] == "POST"]
    assert [e["status"] for e in posts] == [201, 201, 201, 201]
    ns = emu.get("namespaces", None, "team-a")
    assert ns is not None and ns["status"] == {"phase": "Active"}
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team-a"}
    cm = emu.get("configmaps", "team-a", "settings")
    assert cm is not None and cm["data"] == {"mode": "fast"}
    assert emu.get("serviceaccounts", "default", "robot") is not None
    svc = emu.get("services", "default", "dns")
    assert svc is not None and svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["ports"] == [
        {"name": "53-5353", "protocol": "TCP", "port": 53, "targetPort": 5353, "nodePort": 30053}
    ]
    assert svc["spec"]["selector"] == {"app": "dns"}


def test_protobuf_of_an_unsupported_kind_is_415(raw: Any) -> None:
    body = b"k8s\x00" + bytes([0x0A, 0x0C, 0x0A, 0x02]) + b"v1" + bytes([0x12, 0x06]) + b"Secret"
    status, _, out = raw.request(
        "POST", "/api/v1/namespaces/default/configmaps", body, content_type="application/vnd.kubernetes.protobuf"
    )
    assert status == 415 and out["reason"] == "UnsupportedMediaType" and "kind Secret" in out["message"]
