"""Client settings from a kubeconfig or from a pod's service account: the subset a controller needs.

Supported in a kubeconfig's current context: `server`, `certificate-authority(-data)`, `insecure-skip-tls-verify`,
`token`, `tokenFile`, `client-certificate(-data)` + `client-key(-data)`. Exec and auth-provider plugins are refused
with a clear error: a Lambda has no plugin binaries; use EKS mode or a service-account token instead.
"""

from __future__ import annotations

import base64
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from ccm.k8s.rest import KubeRest

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_FILE_REREAD_S = 60.0  # projected tokens rotate (hourly by default); re-reading each minute is plenty


class KubeconfigError(ValueError):
    pass


def from_kubeconfig(path: str) -> KubeRest:
    with open(path, encoding="utf-8") as handle:
        return from_kubeconfig_text(handle.read(), base_dir=os.path.dirname(os.path.abspath(path)))


def from_kubeconfig_text(text: str, base_dir: str = ".") -> KubeRest:
    import yaml  # only the kubeconfig modes parse YAML

    config = yaml.safe_load(text)
    if not isinstance(config, dict):
        raise KubeconfigError("the kubeconfig is not a mapping")
    context = _named(config, "contexts", config.get("current-context"), "context")
    cluster = _named(config, "clusters", context.get("cluster"), "cluster")
    user = _named(config, "users", context.get("user"), "user") if context.get("user") else {}
    if "exec" in user or "auth-provider" in user:
        raise KubeconfigError("kubeconfig credential plugins (exec, auth-provider) are not supported: use a token")
    if "server" not in cluster:
        raise KubeconfigError("the kubeconfig's cluster has no server")

    def file_of(key: str, suffix: str) -> str | None:
        if user.get(key + "-data") or cluster.get(key + "-data"):
            return _write_private(base64.b64decode(user.get(key + "-data") or cluster[key + "-data"]), suffix)
        path = user.get(key) or cluster.get(key)
        return os.path.join(base_dir, path) if path else None

    token: Callable[[], str | None] | None = None
    if user.get("token"):
        static = str(user["token"])
        token = lambda: static  # noqa: E731
    elif user.get("tokenFile"):
        token = _token_file(os.path.join(base_dir, user["tokenFile"]))
    return KubeRest(
        cluster["server"],
        token=token,
        ca_file=file_of("certificate-authority", ".crt"),
        verify=not cluster.get("insecure-skip-tls-verify", False),
        cert_file=file_of("client-certificate", ".crt"),
        key_file=file_of("client-key", ".key"),
    )


def in_cluster(host: str, port: str, sa_dir: str = SERVICE_ACCOUNT_DIR) -> KubeRest:
    """The pod's service account; `host` and `port` are KUBERNETES_SERVICE_HOST / _PORT, read by the caller."""
    host = f"[{host}]" if ":" in host else host
    return KubeRest(
        f"https://{host}:{port}", token=_token_file(os.path.join(sa_dir, "token")), ca_file=f"{sa_dir}/ca.crt"
    )


def _named(config: dict[str, Any], section: str, name: Any, key: str) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            found: dict[str, Any] = entry.get(key) or {}
            return found
    raise KubeconfigError(f"the kubeconfig has no {key} named {name!r}")


def _token_file(path: str) -> Callable[[], str | None]:
    cached: dict[str, Any] = {"at": float("-inf"), "token": None}

    def token() -> str | None:
        if time.monotonic() - cached["at"] > TOKEN_FILE_REREAD_S:
            with open(path, encoding="utf-8") as handle:
                cached.update(token=handle.read().strip(), at=time.monotonic())
        value: str | None = cached["token"]
        return value

    return token


def _write_private(data: bytes, suffix: str) -> str:
    """urllib3 takes certificates and keys as files; /tmp is the Lambda's only writable place."""
    with tempfile.NamedTemporaryFile(prefix="kube-", suffix=suffix, delete=False) as handle:
        handle.write(data)
    os.chmod(handle.name, 0o600)
    return handle.name
