"""Rendering deploy/ with the real kustomize (kubectl kustomize) and driving the real kubectl at the emulator."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.k8s_emulator import Emulator

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
TARGETS = (
    "base",
    "lambda-rbac",
    "overlays/irsa",
    "overlays/pod-identity",
    "overlays/prometheus",
    "overlays/self-managed-rbac",
)
Obj = dict[str, Any]
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def kubectl_binary() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail("kubectl is not on PATH: the deploy tests need the real client (kustomize and apply)")
    return path


def versioned_kubectls() -> list[tuple[str, tuple[str, ...]]]:
    """(binary, extra apply flags): the PATH kubectl plus the oldest and newest kubectl.1.xx shipped beside it.
    The emulator serves OpenAPI v3 only; kubectl <= 1.28 validates client-side from /openapi/v2, so it runs with
    --validate=false there (the server still validates: dry-run goes through the same create/update path)."""
    path = shutil.which("kubectl")
    if path is None:
        return [("kubectl", ())]
    found = sorted(Path(os.path.realpath(path)).parent.glob("kubectl.1.*"), key=lambda p: int(p.name.split(".")[-1]))
    out: list[tuple[str, tuple[str, ...]]] = [("kubectl", ())]
    for binary in found[:1] + found[-1:]:
        minor = int(binary.name.split(".")[-1])
        out.append((str(binary), ("--validate=false",) if minor <= 28 else ()))
    return out


@functools.cache
def rendered_text(target: str) -> str:
    proc = subprocess.run(
        [kubectl_binary(), "kustomize", str(DEPLOY / target)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, f"kubectl kustomize deploy/{target} failed: {proc.stderr}"
    return proc.stdout


def render(target: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(rendered_text(target)) if doc]


def find(objs: list[Obj], kind: str, name: str | None = None) -> Obj:
    matches = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def make_kubectl(kubeconfig: str, home: Path, binary: str = "kubectl") -> Kubectl:
    home.mkdir(exist_ok=True)

    def run(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        # A private HOME keeps kubectl's discovery cache from leaking between emulators.
        proc = subprocess.run(
            [binary, "--kubeconfig", kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=60,
            input=input,
            env={"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
        return proc

    return run


@pytest.fixture
def emu() -> Iterator[Emulator]:
    emulator = Emulator(bookmark_interval=0.3).start()
    try:
        yield emulator
    finally:
        emulator.stop()
