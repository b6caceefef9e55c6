"""The AWS fault proxy speaks the real error protocols: botocore parses its answers as AWS errors and retries them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from devstack.aws import client
from devstack.aws_faults import AwsFaultProxy, FaultRule
from devstack.stack import Stack

NO_RETRIES = Config(retries={"mode": "standard", "total_max_attempts": 1})


@pytest.fixture
def proxy(stack: Stack) -> Iterator[AwsFaultProxy]:
    running = AwsFaultProxy(stack.endpoint_url, seed=7).start()
    yield running
    running.stop()


@pytest.mark.parametrize(
    ("service", "signing_name", "call", "kind", "code", "status"),
    [
        ("elbv2", "elasticloadbalancing", "describe_load_balancers", "throttle", "Throttling", 400),
        ("elbv2", "elasticloadbalancing", "describe_load_balancers", "5xx", "ServiceUnavailable", 503),
        ("ec2", "ec2", "describe_vpcs", "throttle", "RequestLimitExceeded", 503),
        ("ec2", "ec2", "describe_vpcs", "5xx", "InternalError", 500),
        ("resourcegroupstaggingapi", "tagging", "get_resources", "throttle", "ThrottlingException", 400),
    ],
)
def test_errors_have_the_aws_shape(
    proxy: AwsFaultProxy, service: str, signing_name: str, call: str, kind: str, code: str, status: int
) -> None:
    aws = client(service, proxy.url, "us-east-1", config=NO_RETRIES)
    proxy.inject(FaultRule(signing_name, kind, count=1))  # type: ignore[arg-type]
    with pytest.raises(ClientError) as err:
        getattr(aws, call)()
    assert err.value.response["Error"]["Code"] == code
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    getattr(aws, call)()  # the rule is used up: passes through to moto
    assert sum(proxy.injected.values()) == 1 and proxy.passed == 1


def test_botocore_retries_a_burst_and_rules_can_target_mutating_calls(proxy: AwsFaultProxy, stack: Stack) -> None:
    assert stack.world is not None
    ec2 = client("ec2", proxy.url, "us-east-1", config=Config(retries={"mode": "standard", "total_max_attempts": 4}))
    proxy.inject(FaultRule("ec2", "throttle", count=2))
    assert ec2.describe_vpcs(VpcIds=[stack.world.vpc_id])["Vpcs"]  # two throttles, then the answer
    assert proxy.injected == {"ec2:DescribeVpcs": 2}
    proxy.inject(FaultRule("ec2", "5xx", count=1, mutating_only=True))
    ec2.describe_vpcs(VpcIds=[stack.world.vpc_id])  # reads pass
    assert proxy.pending() == 1
    proxy.clear()
    assert proxy.pending() == 0
