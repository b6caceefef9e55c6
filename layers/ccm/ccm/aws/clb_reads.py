"""The Classic ELB deployer's reads: the load balancer by name (it describes itself in one call), its tags and its
attributes. A converged pass reads these three and writes nothing."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.ownership import clb_tags


def describe_lb(clients: AwsClients, name: str) -> dict[str, Any] | None:
    try:
        found = clients.client("elb").describe_load_balancers(LoadBalancerNames=[name])["LoadBalancerDescriptions"]
    except ClientError as err:
        if error_code(err) == "LoadBalancerNotFound":
            return None
        raise
    return found[0] if found else None


def lb_tags(clients: AwsClients, name: str) -> dict[str, str] | None:
    """The LB's tags, or None when it does not exist."""
    return clb_tags(clients.client("elb"), name)


def attributes(clients: AwsClients, name: str) -> Any:
    return clients.client("elb").describe_load_balancer_attributes(LoadBalancerName=name)["LoadBalancerAttributes"]
