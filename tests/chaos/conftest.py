"""One devstack for the chaos package (emulator, moto behind the AWS fault proxy, queues, watcher,
runner); tests reset what they changed. CCM_FAULTS_FILE arms crash points in the in-process Lambdas."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from ccm.aws import faults
from devstack import aws_faithful
from devstack.aws_faithful import FaithfulSettings
from devstack.stack import Stack, StackConfig
from tests.chaos.invariants import aws_view

BUCKET_S = 1  # membership coalescing buckets: short, so host updates settle quickly
# CHAOS_PROFILE=throttled: AWS's API rate limits on (devstack.aws_faithful token buckets), refilled at a twentieth
# of AWS's documented rates so that the few Services of a schedule really drain them: every call site meets
# Throttling / RequestLimitExceeded answers, as a busy account does. The default profile leaves them off.
PROFILE = os.environ.get("CHAOS_PROFILE", "default")
PROFILES = {
    "default": FaithfulSettings(),
    "throttled": FaithfulSettings(rate_limits=True, refill_scale=0.05),
}


def faithful_moto_clb_listener_deletion() -> None:
    """moto's DeleteLoadBalancerListeners with several ports keeps every other listener once per port given
    (duplicates, and the deleted ports back): AWS deletes exactly the listeners on those ports
    (API_DeleteLoadBalancerListeners: "Deletes the specified listeners from the specified load balancer").
    Patched on the backend model, which the in-process moto server uses; chaos Services switch to Classic ELBs."""
    from moto.elb.models import ELBBackend

    def delete_load_balancer_listeners(self: Any, name: str, ports: list[str]) -> Any:
        balancer = self.get_load_balancer(name)
        if balancer is not None:
            gone = {int(port) for port in ports}
            balancer.listeners = [li for li in balancer.listeners if int(li.load_balancer_port) not in gone]
        return balancer

    ELBBackend.delete_load_balancer_listeners = delete_load_balancer_listeners  # type: ignore[method-assign]


@pytest.fixture(scope="package")  # torn down before other packages (e2e) start their own stacks
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    state_dir = tmp_path_factory.mktemp("chaos")
    faults_file = state_dir / "faults.json"
    faults.arm(faults_file, {})
    faithful_moto_clb_listener_deletion()
    config = StackConfig(
        state_dir=state_dir,
        concurrency=3,
        resync_seconds=3600,  # no periodic repair: convergence must come from the deltas themselves
        aws_fault_proxy=True,
        aws=PROFILES[PROFILE],
        routes=True,  # pod-CIDR routes in one cluster route table per AZ: the route reconciler is under test too
        route_table_per_az=True,
        # The functions' AWS clients read the faults file named in their environment (each is its own process).
        extra_env={"HOST_UPDATE_BUCKET_SECONDS": str(BUCKET_S), faults.ENV_VAR: str(faults_file)},
    )
    with Stack(config) as running:
        running.faults_file = faults_file  # type: ignore[attr-defined]
        running.baseline = aws_view(running).tagged  # type: ignore[attr-defined]  # the seeded network
        yield running
    if PROFILE == "throttled":
        print(f"chaos profile throttled: throttled answers by action {dict(sorted(aws_faithful.throttled.items()))}")
