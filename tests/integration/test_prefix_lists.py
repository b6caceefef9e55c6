"""`service.beta.kubernetes.io/aws-load-balancer-security-group-prefix-lists` (the AWS Load Balancer Controller's
annotation, v2.8) through both drivers against moto: managed prefix lists as client sources on the listener ports,
instead of 0.0.0.0/0 when the Service names no ranges, beside its ranges when it does; an unknown list changes
nothing in AWS; a changed list converges the group."""

from __future__ import annotations

from typing import Any

import pytest

from ccm.aws import security_groups_model as sgm
from ccm.aws.lbconfig import PREFIX_LISTS_ANNOTATION
from ccm.contracts.cloud import CloudStateError, PassFlags
from tests.compliance import findings
from tests.factories import service
from tests.integration.conftest import World
from tests.integration.test_balancers_delete import TYPE, Env, _groups_of

THOROUGH = PassFlags(thorough=True)


@pytest.fixture
def env(world: World) -> Env:
    return Env(world)


def prefix_list(env: Env, name: str, cidr: str) -> str:
    created = env.ec2.create_managed_prefix_list(
        PrefixListName=name, AddressFamily="IPv4", MaxEntries=5, Entries=[{"Cidr": cidr}]
    )
    return str(created["PrefixList"]["PrefixListId"])


def client_rules(env: Env, svc: dict[str, Any], lb_type: str) -> set[tuple[str, int, str]]:
    """(protocol, port, source) of every rule on the LB's groups but the backend group's."""
    ids = [g for g in _groups_of(env, svc, lb_type) if g not in env.backend()]
    out: set[tuple[str, int, str]] = set()
    for group in env.ec2.describe_security_groups(GroupIds=ids)["SecurityGroups"]:
        for rule in sgm.rules_from_permissions(group["IpPermissions"]):
            out.add((rule.protocol, rule.from_port, rule.prefix_list or rule.cidr or rule.source_group or ""))
    return out


@pytest.mark.parametrize("lb_type", ["nlb", "clb"])
def test_prefix_lists_replace_everywhere_when_no_ranges_are_given(env: Env, lb_type: str) -> None:
    office = prefix_list(env, "office", "198.51.100.0/24")
    svc = service("web", annotations={TYPE: lb_type, PREFIX_LISTS_ANNOTATION: office}, ports=[(443, 30443)])
    env.lbs.ensure_load_balancer(svc, env.world.nodes())
    assert client_rules(env, svc, lb_type) == {("tcp", 443, office)}
    groups = env.ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [env.world.vpc_id]}])
    assert findings(groups["SecurityGroups"]) == []  # nothing open to the world


def test_prefix_lists_sit_beside_the_services_ranges_and_follow_changes(env: Env) -> None:
    office, vpn = prefix_list(env, "office", "198.51.100.0/24"), prefix_list(env, "vpn", "203.0.113.0/24")
    svc = service(
        "web",
        annotations={TYPE: "nlb", PREFIX_LISTS_ANNOTATION: office},
        ports=[(443, 30443)],
        loadBalancerSourceRanges=["10.0.0.0/8"],
    )
    env.lbs.ensure_load_balancer(svc, env.world.nodes())
    assert {r for r in client_rules(env, svc, "nlb") if r[0] == "tcp"} == {
        ("tcp", 443, office),
        ("tcp", 443, "10.0.0.0/8"),
    }
    svc["metadata"]["annotations"][PREFIX_LISTS_ANNOTATION] = vpn
    env.lbs.ensure_load_balancer(svc, env.world.nodes(), THOROUGH)
    assert {r for r in client_rules(env, svc, "nlb") if r[0] == "tcp"} == {
        ("tcp", 443, vpn),
        ("tcp", 443, "10.0.0.0/8"),
    }


def test_an_unknown_prefix_list_changes_nothing_in_aws(env: Env) -> None:
    svc = service("web", annotations={TYPE: "nlb", PREFIX_LISTS_ANNOTATION: "pl-0123456789abcdef0"})
    with pytest.raises(CloudStateError, match="managed prefix list pl-0123456789abcdef0 was not found"):
        env.lbs.ensure_load_balancer(svc, env.world.nodes())
    assert env.nlbs() == [] and env.managed_groups() == []
