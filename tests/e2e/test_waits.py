"""Waiting on AWS is not failing, end to end: watcher -> queue -> runner -> handler -> moto.

AWS holds a deleted NLB's security group (its network interfaces) for minutes. The old policy retried the delete
every 15 s and dead-lettered it at the 6th receive (maxReceiveCount 5, about a minute). Here the group is held for
more receives than that; the retry delays are scaled down (CCM_RETRY_DELAY_SCALE) so the 25-minute schedule runs
in about 20 seconds, with the same receive counts.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ccm.retry import DELAY_SCALE_ENV
from devstack.stack import Stack
from tests.aws_holds import held_security_groups
from tests.e2e.helpers import create_service, dlq_depth, hostname, read_service, running_stack

OLD_MAX_RECEIVES = 5
HELD = OLD_MAX_RECEIVES + 2  # refusals: the old policy dead-lettered the delete at receive OLD_MAX_RECEIVES + 1


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory, extra_env={DELAY_SCALE_ENV: "0.02"}) as running:
        yield running


def test_a_security_group_held_longer_than_the_old_dlq_budget_is_waited_out(stack: Stack):
    # Source ranges of its own: its own frontend group, the one AWS holds (a default-range LB uses the cluster's
    # shared groups and has no group to delete).
    create_service(stack, "held", [80], loadBalancerSourceRanges=["10.0.0.0/8"])
    stack.wait_for(lambda: hostname(stack, "held"), timeout=60, what="held's load balancer")

    with held_security_groups(times=HELD) as hold:
        stack.core().delete_namespaced_service("held", "default")
        stack.wait_for(lambda: hold.refused, timeout=60, what="the first refused DeleteSecurityGroup")
        # Meanwhile other Services flow: the waiting message holds only its own FIFO group.
        create_service(stack, "other", [80])
        stack.wait_for(lambda: hostname(stack, "other"), timeout=60, what="other's load balancer")
        assert len(hold.refused) < HELD, "the other Service waited for the held delete"
        stack.wait_for(
            lambda: read_service(stack, "held") is None or dlq_depth(stack) > 0,
            timeout=60,
            what="held's finalizer removed (or its delete dead-lettered)",
        )
        assert dlq_depth(stack) == 0, "the delete was dead-lettered while AWS still held the group"
        assert read_service(stack, "held") is None

    # The same message was refused more times than the old receive budget allowed, and converged: group deleted
    # on the next receive, nothing dead-lettered.
    assert len(hold.refused) == HELD and len(set(hold.refused)) == 1
    assert hold.deleted == hold.refused[:1]
    assert dlq_depth(stack) == 0
    assert (
        stack.aws("ec2").describe_security_groups(
            GroupIds=[], Filters=[{"Name": "group-id", "Values": hold.refused[:1]}]
        )["SecurityGroups"]
        == []
    )
