"""scripts/doctor runs from a fresh clone (no .venv): scripts/tools-python picks a Python that has boto3 and the
kubernetes client (python3 here; a bare one gets .venv-tools from scripts/requirements-tools.txt)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def fresh_clone(tmp_path: Path) -> Path:
    """The tracked files the doctor needs, as a clone has them: no .venv, no PYTHONPATH."""
    clone = tmp_path / "clone"
    shutil.copytree(REPO / "scripts", clone / "scripts")
    shutil.copytree(REPO / "layers/ccm/ccm", clone / "layers/ccm/ccm", ignore=shutil.ignore_patterns("__pycache__"))
    return clone


def test_the_doctor_runs_from_a_fresh_clone_with_one_command(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python3 = bin_dir / "python3"  # a python3 with boto3 and kubernetes (as after pip install)
    python3.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python3.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    chosen = subprocess.run([clone / "scripts/tools-python"], env=env, capture_output=True, text=True, check=True)
    assert chosen.stdout.strip() == str(bin_dir / "python3")
    run = subprocess.run(
        [clone / "scripts/doctor", "--cluster", "c", "--region", "us-east-1", "--stack", "s", "--no-kube", "--json"],
        # Nothing listens on port 9: every AWS read fails fast, and the doctor says so.
        env={
            **env,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "No module named" not in run.stderr, run.stderr
    assert '"check": "stack"' in run.stdout, run.stdout + run.stderr  # it ran and reported the stack unreadable


def test_tools_requirements_pin_what_the_dev_environment_has() -> None:
    pins = {line for line in (REPO / "scripts/requirements-tools.txt").read_text().splitlines() if "==" in line}
    dev = set((REPO / "requirements-dev.txt").read_text().splitlines())
    assert pins and pins <= dev
