"""Which API the watcher talks to: --kubeconfig, else the pod's service account, else the default kubeconfig (the
first file of KUBECONFIG, else ~/.kube/config), as the official client chose; through ccm.k8s (no official client)."""

from __future__ import annotations

from pathlib import Path

import pytest

from watcher.app import kube_api_client


def kubeconfig(path: Path, server: str) -> str:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return str(path)


def test_the_flag_then_in_cluster_then_the_first_kubeconfig_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = kubeconfig(tmp_path / "flag", "http://127.0.0.1:1001")
    first = kubeconfig(tmp_path / "first", "http://127.0.0.1:1002")
    second = kubeconfig(tmp_path / "second", "http://127.0.0.1:1003")
    env = {"KUBECONFIG": f"{first}:{second}"}
    assert kube_api_client(flag, env).server == "http://127.0.0.1:1001"
    assert kube_api_client(None, env).server == "http://127.0.0.1:1002"
    # In a pod (the kubelet sets these): the service account, before any kubeconfig.
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    pod_env = {**env, "KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert kube_api_client(None, pod_env).server == "https://[fd00::1]:443"
    assert kube_api_client(flag, pod_env).server == "http://127.0.0.1:1001"
