"""deploy/overlays/prometheus: a metrics Service and a ServiceMonitor that really reach the watcher's /metrics
(the Deployment's pods, the container port serving it, the path the watcher's health server answers), and that
compose with the identity overlays without a conflict."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from tests.deploy.conftest import DEPLOY, REPO, Obj, find, kubectl_binary, render

WATCHER_LABEL = {"app.kubernetes.io/name": "serverless-ccm-watcher"}


def test_only_a_metrics_service_and_a_service_monitor() -> None:
    objs = render("overlays/prometheus")
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objs) == [
        ("Service", "serverless-ccm-watcher-metrics"),
        ("ServiceMonitor", "serverless-ccm-watcher"),
    ]
    assert {o["metadata"]["namespace"] for o in objs} == {"serverless-ccm"}
    assert all(o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "serverless-ccm" for o in objs)


def test_the_service_selects_the_watcher_pods_on_the_port_serving_metrics() -> None:
    service = find(render("overlays/prometheus"), "Service")
    pod = find(render("base"), "Deployment")["spec"]["template"]
    assert service["spec"]["selector"] == WATCHER_LABEL
    assert WATCHER_LABEL.items() <= pod["metadata"]["labels"].items()
    # Headless: one endpoint per replica, each scraped on its own (their counters differ).
    assert service["spec"]["clusterIP"] == "None"
    (port,) = service["spec"]["ports"]
    container = pod["spec"]["containers"][0]
    (served,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    env = {e["name"]: e.get("value") for e in container["env"]}
    # The named container port is the one the watcher's health server (/healthz, /readyz, /metrics) listens on.
    assert str(served["containerPort"]) == env["WATCHER_HEALTH_PORT"]
    assert port["protocol"] == served["protocol"] == "TCP"


def test_the_service_monitor_scrapes_that_service_at_the_metrics_path() -> None:
    objs = render("overlays/prometheus")
    service, monitor = find(objs, "Service"), find(objs, "ServiceMonitor")
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert spec["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    (endpoint,) = spec["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics" and '"/metrics"' in (REPO / "watcher/health.py").read_text()
    # A scrape must end before the next one starts (Prometheus refuses scrapeTimeout > interval).
    assert int(endpoint["scrapeTimeout"].rstrip("s")) < int(endpoint["interval"].rstrip("s"))
    # The metrics Service selects nothing but the metrics Service (not the Deployment or other Services).
    selected = [o for o in render("base") if spec["selector"]["matchLabels"].items() <= o["metadata"]["labels"].items()]
    assert selected == []


def test_it_composes_with_an_identity_overlay(tmp_path: Path) -> None:
    """What a user writes: their overlay = irsa + prometheus. Renders, and adds exactly the two objects."""
    bases = [os.path.relpath(DEPLOY / "overlays" / name, tmp_path) for name in ("irsa", "prometheus")]
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": bases})
    )
    proc = subprocess.run(
        [kubectl_binary(), "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    combined: list[Obj] = [d for d in yaml.safe_load_all(proc.stdout) if d]
    names = sorted((o["kind"], o["metadata"]["name"]) for o in combined)
    expected = sorted(
        (o["kind"], o["metadata"]["name"]) for o in render("overlays/irsa") + render("overlays/prometheus")
    )
    assert names == expected
