"""One devstack for the chaos package (emulator, moto behind the AWS fault proxy, queues, watcher,
runner); tests reset what they changed. CCM_FAULTS_FILE arms crash points in the in-process Lambdas."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ccm.aws import faults
from devstack.stack import Stack, StackConfig
from tests.chaos.world import aws_view

BUCKET_S = 1  # membership coalescing buckets: short, so host updates settle quickly


@pytest.fixture(scope="package")  # torn down before other packages (e2e) start their own stacks
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    state_dir = tmp_path_factory.mktemp("chaos")
    faults_file = state_dir / "faults.json"
    faults.arm(faults_file, {})
    config = StackConfig(
        state_dir=state_dir,
        concurrency=3,
        resync_seconds=3600,  # no periodic repair: convergence must come from the deltas themselves
        aws_fault_proxy=True,
        # The functions' AWS clients read the faults file named in their environment (each is its own process).
        extra_env={"HOST_UPDATE_BUCKET_SECONDS": str(BUCKET_S), faults.ENV_VAR: str(faults_file)},
    )
    with Stack(config) as running:
        running.faults_file = faults_file  # type: ignore[attr-defined]
        running.baseline = aws_view(running).tagged  # type: ignore[attr-defined]  # the seeded network
        yield running
