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
    with pytest.MonkeyPatch.context() as mp:
        # The runner hosts the handlers in this process: their AWS clients read this when first built.
        mp.setenv(faults.ENV_VAR, str(faults_file))
        # The production authentication path: DescribeCluster, a minted token, the emulator verifying it (TLS).
        config = StackConfig(state_dir=state_dir, concurrency=3, resync_seconds=3600, kube_auth="eks")
        with Stack(config) as running:
            running.faults_file = faults_file  # type: ignore[attr-defined]
            yield running


@pytest.fixture
def faults_file(stack: Stack) -> Iterator[Path]:
    path: Path = stack.faults_file  # type: ignore[attr-defined]
    yield path
    faults.arm(path, {})
