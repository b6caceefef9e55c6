"""`sam delete` leaves nothing (issue 22): the stack's custom resource, run as CloudFormation runs it (a Delete
request whose response is PUT to a pre-signed URL, here a local HTTP server), against moto answering as AWS does.
While a load balancer of ours is left it refuses with the reason and changes nothing; once none is, the cluster's
shared groups (backend, listener groups) and the node rule go, and the VPC holds only what was there before."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ccm.contracts.cluster import Cluster
from ccm.sweeper.custom_resource import FAILED, SUCCESS, handle
from ccm.sweeper.teardown import STALLED_PASSES, WAIT_SECONDS, Teardown, TeardownResource
from tests.cfn_response import CloudFormation
from tests.factories import service
from tests.integration.conftest import CLUSTER, World
from tests.integration.test_balancers_delete import TYPE, Env


@pytest.fixture
def cfn() -> Iterator[CloudFormation]:
    cloudformation = CloudFormation()
    yield cloudformation
    cloudformation.server.shutdown()


@pytest.fixture
def env(world: World) -> Env:
    return Env(world)


def vpc_group_names(env: Env) -> set[str]:
    vpc = [{"Name": "vpc-id", "Values": [env.world.vpc_id]}]
    return {g["GroupName"] for g in env.ec2.describe_security_groups(Filters=vpc)["SecurityGroups"]}


def run(env: Env, cfn: CloudFormation, request_type: str, remaining_ms: int = 0) -> dict[str, Any]:
    slept: list[float] = []
    resource = TeardownResource(
        Teardown(env.world.clients, Cluster(CLUSTER, env.world.vpc_id), env.groups), sleep=slept.append
    )
    handle(cfn.event(request_type), resource.physical_id, lambda: resource.delete(lambda: remaining_ms), resource.keep)
    return cfn.responses[-1]


def test_create_and_update_change_nothing(env: Env, cfn: CloudFormation) -> None:
    before = vpc_group_names(env)
    for request in ("Create", "Update"):
        answer = run(env, cfn, request)
        assert answer["Status"] == SUCCESS and answer["PhysicalResourceId"] == f"serverless-ccm-teardown-{CLUSTER}"
    assert vpc_group_names(env) == before


def test_a_delete_refuses_while_a_load_balancer_is_left_then_leaves_nothing(env: Env, cfn: CloudFormation) -> None:
    before = vpc_group_names(env)
    web = service("web", annotations={TYPE: "nlb"})
    env.lbs.ensure_load_balancer(web, env.world.nodes())
    made = vpc_group_names(env) - before
    assert len(made) == 2 and env.node_rule_sources()  # backend + listener group; the backend node rule

    refused = run(env, cfn, "Delete")
    assert refused["Status"] == FAILED
    assert "1 load balancers of cluster test-cluster still exist (default/web" in refused["Reason"]
    assert vpc_group_names(env) - before == made and env.node_rule_sources()  # nothing was deleted

    env.delete_until_done(web["metadata"]["uid"])  # the Service's own cleanup (as the services function does)
    done = run(env, cfn, "Delete")
    assert done["Status"] == SUCCESS, done["Reason"]
    assert vpc_group_names(env) == before and env.node_rule_sources() == []
    assert run(env, cfn, "Delete")["Status"] == SUCCESS  # CloudFormation may ask again: idempotent


def test_a_delete_waits_while_time_is_left(env: Env, cfn: CloudFormation) -> None:
    """With time left, a pass that finds a load balancer waits and tries again (a Service being deleted now)."""
    web = service("web", annotations={TYPE: "nlb"})
    env.lbs.ensure_load_balancer(web, env.world.nodes())
    passes: list[int] = []
    resource = TeardownResource(
        Teardown(env.world.clients, Cluster(CLUSTER, env.world.vpc_id), env.groups), sleep=lambda _: passes.append(1)
    )
    original = resource.teardown.run

    def run_and_delete_after_first() -> Any:
        result = original()
        if not passes:  # the Service's deletion completes while the teardown waits
            env.delete_until_done(web["metadata"]["uid"])
        return result

    resource.teardown.run = run_and_delete_after_first  # type: ignore[method-assign]
    outcome = resource.delete(lambda: 600_000)
    assert outcome.status == SUCCESS and passes == [1]


def test_an_unexpected_error_is_answered_not_left_hanging(env: Env, cfn: CloudFormation) -> None:
    def boom() -> Any:
        raise RuntimeError("AccessDenied on ec2:DescribeSecurityGroups")

    handle(cfn.event("Delete"), "x", boom, boom)
    assert cfn.responses[-1]["Status"] == FAILED
    assert cfn.responses[-1]["Reason"] == "RuntimeError: AccessDenied on ec2:DescribeSecurityGroups"


def test_a_delete_refuses_soon_when_the_load_balancers_left_do_not_change(env: Env, cfn: CloudFormation) -> None:
    """Nobody is deleting the Services: the refusal comes after the stall limit, not at the function's timeout."""
    env.lbs.ensure_load_balancer(service("web", annotations={TYPE: "nlb"}), env.world.nodes())
    waits: list[float] = []
    resource = TeardownResource(
        Teardown(env.world.clients, Cluster(CLUSTER, env.world.vpc_id), env.groups), sleep=waits.append
    )
    outcome = resource.delete(lambda: 900_000)
    assert outcome.status == FAILED and "still exist (default/web" in outcome.reason
    assert waits == [WAIT_SECONDS] * STALLED_PASSES
