"""One local stack per test module: emulator, moto server, template queues, watcher process, runner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ccm.aws import faults
from devstack.stack import Stack, StackConfig


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    state_dir = tmp_path_factory.mktemp("devstack")
    faults_file = state_dir / "faults.json"
    faults.arm(faults_file, {})
    # The functions' AWS clients read the faults file named in their environment (each is its own process).
    # The production authentication path: DescribeCluster, a minted token, the emulator verifying it (TLS).
    config = StackConfig(
        state_dir=state_dir,
        concurrency=3,
        resync_seconds=3600,
        kube_auth="eks",
        extra_env={faults.ENV_VAR: str(faults_file)},
    )
    with Stack(config) as running:
        running.faults_file = faults_file  # type: ignore[attr-defined]
        yield running


@pytest.fixture
def faults_file(stack: Stack) -> Iterator[Path]:
    path: Path = stack.faults_file  # type: ignore[attr-defined]
    yield path
    faults.arm(path, {})
