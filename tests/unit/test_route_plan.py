"""The pure route planner: creates, keeps, replaces and deletes across every cluster-tagged table."""

from __future__ import annotations

import pytest

from ccm.contracts.cloud import Route, RouteTable
from ccm.route.plan import (
    NodeRoutes,
    OpKind,
    RoutePlan,
    condition_patch,
    failed_route_message,
    go_duration,
    is_ours,
    node_routes,
    parse_cluster_cidrs,
    plan_routes,
)

V4 = parse_cluster_cidrs(["10.244.0.0/16"])
DUAL = parse_cluster_cidrs(["10.244.0.0/16", "fd00:10:244::/56"])


def n(name: str, instance: str, *cidrs: str, condition: str | None = None) -> NodeRoutes:
    return NodeRoutes(name, f"uid-{name}", instance, tuple(cidrs), condition)


def r(table: str, dest: str, instance: str = "", blackhole: bool = False) -> Route:
    return Route(f"c-{dest}", "", dest, blackhole, table, instance)


def t(table: str, *routes: Route) -> RouteTable:
    return RouteTable(table, routes)


def ops(plan: RoutePlan) -> list[tuple[str, str, str, str]]:
    return [(o.kind.value, o.route.route_table_id, o.route.destination_cidr, o.route.target_instance) for o in plan.ops]


def test_missing_routes_are_created_for_every_node() -> None:
    plan = plan_routes([t("rtb-a")], [n("b", "i-b", "10.244.1.0/24"), n("a", "i-a", "10.244.0.0/24")], V4)
    assert ops(plan) == [  # in node-name order, whatever order the API listed them in
        ("create", "rtb-a", "10.244.0.0/24", "i-a"),
        ("create", "rtb-a", "10.244.1.0/24", "i-b"),
    ]
    assert plan.routed_nodes == ("a", "b")
    assert plan.ops_for("a")[0].route.name == "a-10.244.0.0/24"


def test_a_route_to_the_right_instance_is_kept() -> None:
    plan = plan_routes([t("rtb-a", r("rtb-a", "10.244.0.0/24", "i-a"))], [n("a", "i-a", "10.244.0.0/24")], V4)
    assert plan.ops == ()
    assert plan.kept == 1
    assert plan.problems == {}


def test_a_blackhole_with_the_wanted_destination_is_replaced() -> None:
    table = t("rtb-a", r("rtb-a", "10.244.0.0/24", "i-dead", blackhole=True))
    plan = plan_routes([table], [n("a", "i-a", "10.244.0.0/24")], V4)
    assert ops(plan) == [("replace", "rtb-a", "10.244.0.0/24", "i-a")]
    assert plan.ops[0].reason == "blackhole"


def test_a_route_of_ours_to_another_instance_is_replaced() -> None:
    plan = plan_routes([t("rtb-a", r("rtb-a", "10.244.0.0/24", "i-old"))], [n("a", "i-new", "10.244.0.0/24")], V4)
    assert ops(plan) == [("replace", "rtb-a", "10.244.0.0/24", "i-new")]


def test_routes_of_a_gone_node_are_deleted() -> None:
    table = t("rtb-a", r("rtb-a", "10.244.0.0/24", "i-a"), r("rtb-a", "10.244.9.0/24", "i-gone"))
    plan = plan_routes([table], [n("a", "i-a", "10.244.0.0/24")], V4)
    assert ops(plan) == [("delete", "rtb-a", "10.244.9.0/24", "i-gone")]
    assert plan.kept == 1


def test_a_changed_cidr_gets_its_route_and_loses_the_old_one() -> None:
    table = t("rtb-a", r("rtb-a", "10.244.0.0/24", "i-a"))
    plan = plan_routes([table], [n("a", "i-a", "10.244.5.0/24")], V4)
    # Creates come before deletes: a node's new route never waits for tidying.
    assert ops(plan) == [("create", "rtb-a", "10.244.5.0/24", "i-a"), ("delete", "rtb-a", "10.244.0.0/24", "i-a")]


def test_blackholes_inside_the_cluster_cidr_are_deleted() -> None:
    table = t("rtb-a", r("rtb-a", "10.244.7.0/24", "", blackhole=True))
    assert ops(plan_routes([table], [], V4)) == [("delete", "rtb-a", "10.244.7.0/24", "")]


def test_routes_outside_the_cluster_cidrs_are_never_touched() -> None:
    table = t(
        "rtb-a",
        r("rtb-a", "10.0.0.0/16", ""),  # the VPC's local route
        r("rtb-a", "0.0.0.0/0", ""),  # a NAT / internet route
        r("rtb-a", "192.168.3.0/24", "i-other"),  # somebody's instance route
        r("rtb-a", "172.16.0.0/24", "", blackhole=True),  # somebody's blackhole
        r("rtb-a", "10.244.0.0/14", "i-other"),  # starts at the cluster CIDR but is larger: not inside
    )
    plan = plan_routes([table], [n("a", "i-a", "10.244.0.0/24")], V4)
    assert ops(plan) == [("create", "rtb-a", "10.244.0.0/24", "i-a")]


def test_other_targets_inside_the_cluster_cidr_are_left_alone_and_reported_when_wanted() -> None:
    table = t("rtb-a", r("rtb-a", "10.244.0.0/24", ""), r("rtb-a", "10.244.8.0/24", ""))  # e.g. a NAT / peering
    plan = plan_routes([table], [n("a", "i-a", "10.244.0.0/24")], V4)
    assert plan.ops == ()
    assert plan.problems == {"a": (("10.244.0.0/24", "destination already routed elsewhere in rtb-a"),)}


def test_ipv6_and_dual_stack_nodes() -> None:
    # AWS may spell an IPv6 destination differently from the node: compared as networks, not strings.
    table = t("rtb-a", r("rtb-a", "fd00:10:244:0::/64", "i-a"), r("rtb-a", "fd00:10:244:9::/64", "i-gone"))
    nodes = [n("a", "i-a", "10.244.0.0/24", "fd00:10:244::/64"), n("b", "i-b", "10.244.1.0/24", "fd00:10:244:1::/64")]
    plan = plan_routes([table], nodes, DUAL)
    assert ops(plan) == [
        ("create", "rtb-a", "10.244.0.0/24", "i-a"),
        ("create", "rtb-a", "10.244.1.0/24", "i-b"),
        ("create", "rtb-a", "fd00:10:244:1::/64", "i-b"),
        ("delete", "rtb-a", "fd00:10:244:9::/64", "i-gone"),
    ]
    assert plan.kept == 1


def test_an_ipv6_pod_cidr_without_an_ipv6_cluster_cidr_is_a_problem() -> None:
    plan = plan_routes([t("rtb-a")], [n("a", "i-a", "10.244.0.0/24", "fd00:10:244::/64")], V4)
    assert ops(plan) == [("create", "rtb-a", "10.244.0.0/24", "i-a")]
    assert plan.problems == {"a": (("fd00:10:244::/64", "outside the cluster CIDRs"),)}


def test_every_tagged_table_gets_every_route() -> None:
    tables = [t("rtb-b"), t("rtb-a", r("rtb-a", "10.244.0.0/24", "i-a"), r("rtb-a", "10.244.3.0/24", "i-x"))]
    plan = plan_routes(tables, [n("a", "i-a", "10.244.0.0/24")], V4)
    assert ops(plan) == [("create", "rtb-b", "10.244.0.0/24", "i-a"), ("delete", "rtb-a", "10.244.3.0/24", "i-x")]
    assert plan.kept == 1


def test_nodes_without_cidr_or_instance_are_not_routed() -> None:
    table = t("rtb-a", r("rtb-a", "10.244.2.0/24", "i-c"))
    plan = plan_routes([table], [n("a", "", "10.244.0.0/24"), n("b", "i-b"), n("c", "i-c", "10.244.2.0/24")], V4)
    assert plan.routed_nodes == ("c",)
    assert plan.ops == () and plan.kept == 1


def test_a_cidr_claimed_twice_goes_to_the_first_node_only() -> None:
    plan = plan_routes([t("rtb-a")], [n("b", "i-b", "10.244.0.0/24"), n("a", "i-a", "10.244.0.0/24")], V4)
    assert ops(plan) == [("create", "rtb-a", "10.244.0.0/24", "i-a")]
    assert plan.problems == {"b": (("10.244.0.0/24", "also the pod CIDR of node a"),)}


def test_an_invalid_pod_cidr_is_a_problem() -> None:
    plan = plan_routes([t("rtb-a")], [n("a", "i-a", "10.244.0.1/24")], V4)  # host bits set
    assert plan.ops == ()
    assert plan.problems == {"a": (("10.244.0.1/24", "not a valid CIDR"),)}


def test_cluster_cidrs_one_or_two_of_different_families() -> None:
    assert [str(c) for c in parse_cluster_cidrs(["10.244.0.0/16", " ", "fd00::/48"])] == ["10.244.0.0/16", "fd00::/48"]
    with pytest.raises(ValueError, match="no cluster CIDR"):
        parse_cluster_cidrs([""])
    with pytest.raises(ValueError, match="different families"):
        parse_cluster_cidrs(["10.244.0.0/16", "10.245.0.0/16"])
    with pytest.raises(ValueError):
        parse_cluster_cidrs(["10.244.0.1/16"])
    assert is_ours("10.244.3.0/24", V4) and not is_ours("fd00::/64", V4) and not is_ours("garbage", V4)


@pytest.mark.parametrize(
    ("provider_id", "instance"),
    [
        ("aws:///us-east-1a/i-0123456789abcdef0", "i-0123456789abcdef0"),
        ("aws:///i-0abc", "i-0abc"),
        ("i-0abc", "i-0abc"),
        ("aws:///us-east-1a/fargate-ip-10-0-0-1", ""),
        ("gce://project/zone/vm", ""),
        ("", ""),
    ],
)
def test_instance_id_from_provider_id(provider_id: str, instance: str) -> None:
    # The parser is ccm.contracts.provider_id (its own table in test_provider_id); the planner's "" means no instance.
    assert node_routes({"metadata": {"name": "n"}, "spec": {"providerID": provider_id}}).instance_id == instance


def test_node_routes_reads_the_api_object() -> None:
    obj = {
        "metadata": {"name": "ip-10-0-1-5", "uid": "u1"},
        "spec": {"providerID": "aws:///us-east-1a/i-0abc", "podCIDR": "10.244.0.0/24"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "NetworkUnavailable", "status": "True"}]
        },
    }
    assert node_routes(obj) == NodeRoutes("ip-10-0-1-5", "u1", "i-0abc", ("10.244.0.0/24",), "True")
    obj["spec"]["podCIDRs"] = ["10.244.0.0/24", "fd00::/64"]
    assert node_routes(obj).pod_cidrs == ("10.244.0.0/24", "fd00::/64")


def test_condition_is_written_only_when_its_status_changes() -> None:
    fresh = n("a", "i-a", "10.244.0.0/24")
    patch = condition_patch(fresh, routes_created=True, now="2026-01-01T00:00:00Z")
    assert patch is not None
    (cond,) = patch["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "NetworkUnavailable",
        "False",
        "RouteCreated",
        "RouteController created a route",
    )
    assert cond["lastTransitionTime"] == cond["lastHeartbeatTime"] == "2026-01-01T00:00:00Z"
    assert condition_patch(n("a", "i-a", condition="False"), routes_created=True, now="x") is None
    failed = condition_patch(n("a", "i-a", condition="False"), routes_created=False, now="x")
    assert failed is not None
    assert failed["status"]["conditions"][0]["status"] == "True"
    assert failed["status"]["conditions"][0]["reason"] == "NoRouteCreated"
    assert failed["status"]["conditions"][0]["message"] == "RouteController failed to create a route"


def test_failed_route_event_text_is_upstreams() -> None:
    assert go_duration(0.0421) == "42ms"
    assert go_duration(1.5) == "1.5s"
    assert go_duration(75.25) == "1m15.25s"
    message = failed_route_message(n("a", "i-a"), "10.244.0.0/24", 0.2, "RouteLimitExceeded: too many")
    assert message == "Could not create route uid-a 10.244.0.0/24 for node a after 200ms: RouteLimitExceeded: too many"


def test_op_kinds_are_the_three_route_writes() -> None:
    assert {k.value for k in OpKind} == {"create", "replace", "delete"}
