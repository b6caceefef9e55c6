"""Pure node decisions: labels, addresses (provided-node-ip), lifecycle, and the combined plan."""

from __future__ import annotations

from typing import Any

import pytest

from ccm.contracts.cloud import InstanceMetadata
from ccm.node import initializer as init
from ccm.node import lifecycle as lc
from ccm.node import model as m
from ccm.node.plan import plan_node

META = InstanceMetadata(
    provider_id="aws:///us-east-1a/i-0123456789abcdef0",
    instance_type="m5.large",
    zone="us-east-1a",
    region="us-east-1",
    zone_id="use1-az6",
    addresses=(
        ("InternalIP", "10.0.0.5"),
        ("InternalIP", "10.0.1.7"),
        ("ExternalIP", "54.1.2.3"),
        ("InternalDNS", "ip-10-0-0-5.ec2.internal"),
        ("Hostname", "ip-10-0-0-5.ec2.internal"),
        ("ExternalDNS", "ec2-54-1-2-3.compute-1.amazonaws.com"),
    ),
    state="running",
)


def make_node(
    name: str = "ip-10-0-0-5.ec2.internal",
    *,
    provider_id: str = "",
    ready: str | None = "True",
    taints: list[str] = (),  # type: ignore[assignment]
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    addresses: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]}
    if provider_id:
        spec["providerID"] = provider_id
    status: dict[str, Any] = {"addresses": addresses or []}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": "u1",
            "resourceVersion": "7",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": status,
    }


def addrs(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"type": t, "address": a} for t, a in pairs]


# --- labels ---------------------------------------------------------------------------------------------------


def test_cloud_labels_have_ga_and_beta_twins() -> None:
    assert init.cloud_labels(META) == {
        m.INSTANCE_TYPE: "m5.large",
        m.BETA_INSTANCE_TYPE: "m5.large",
        m.ZONE: "us-east-1a",
        m.BETA_ZONE: "us-east-1a",
        m.REGION: "us-east-1",
        m.BETA_REGION: "us-east-1",
    }


def test_beta_labels_are_the_source_of_truth_for_ga_twins() -> None:
    labels = {m.BETA_ZONE: "us-east-1b", m.ZONE: "us-east-1a", m.BETA_REGION: "us-east-1", m.INSTANCE_TYPE: "x"}
    assert init.beta_to_ga_labels(labels) == {m.ZONE: "us-east-1b", m.REGION: "us-east-1"}
    assert init.beta_to_ga_labels({m.ZONE: "us-east-1a"}) == {}  # no beta label: nothing to copy


def test_initialisation_keeps_an_existing_zone_id_and_provider_id() -> None:
    node = make_node(provider_id="aws:///us-east-1a/i-1", labels={m.ZONE_ID: "custom", m.ZONE: "us-east-1a"})
    plan = init.plan_initialisation(node, META)
    assert plan.provider_id == ""
    assert m.ZONE_ID not in plan.labels and m.ZONE not in plan.labels  # unchanged labels are not rewritten
    assert plan.labels[m.BETA_ZONE] == "us-east-1a"
    fresh = init.plan_initialisation(make_node(), META)
    assert fresh.provider_id == META.provider_id
    assert fresh.labels[m.ZONE_ID] == "use1-az6"


# --- addresses ------------------------------------------------------------------------------------------------


def test_addresses_in_cloud_order_without_annotation() -> None:
    assert init.desired_addresses(make_node(), META) == addrs(*META.addresses)


def test_provided_node_ip_goes_first_and_is_the_only_one_of_its_type() -> None:
    node = make_node(annotations={m.PROVIDED_NODE_IP: "10.0.1.7"})
    assert init.desired_addresses(node, META) == addrs(
        ("InternalIP", "10.0.1.7"),
        ("ExternalIP", "54.1.2.3"),
        ("InternalDNS", "ip-10-0-0-5.ec2.internal"),
        ("Hostname", "ip-10-0-0-5.ec2.internal"),
        ("ExternalDNS", "ec2-54-1-2-3.compute-1.amazonaws.com"),
    )


@pytest.mark.parametrize("value", ["10.9.9.9", "not-an-ip", "10.0.0.5,10.0.1.7", ""])
def test_provided_node_ip_must_parse_and_match(value: str) -> None:
    node = make_node(annotations={m.PROVIDED_NODE_IP: value})
    if value == "":
        assert init.desired_addresses(node, META) == addrs(*META.addresses)  # empty annotation = none
        return
    with pytest.raises(init.InvalidNodeIP):
        init.desired_addresses(node, META)


def test_hostname_kept_from_the_kubelet_when_the_cloud_has_none() -> None:
    meta = InstanceMetadata("aws:///z/i-1", "t3.small", "z", "r", addresses=(("InternalIP", "10.0.0.9"),))
    node = make_node(addresses=addrs(("Hostname", "my-host")))
    assert init.desired_addresses(node, meta) == addrs(("InternalIP", "10.0.0.9"), ("Hostname", "my-host"))


# --- lifecycle ------------------------------------------------------------------------------------------------

TERMINATED = InstanceMetadata("aws:///z/i-1", "t3.small", "z", "r", state="terminated")
STOPPED = InstanceMetadata("aws:///z/i-1", "t3.small", "z", "r", state="stopped")
PID = "aws:///us-east-1a/i-0123456789abcdef0"


@pytest.mark.parametrize(
    ("ready", "provider_id", "looked_up", "instance", "expected"),
    [
        ("True", PID, True, None, lc.Lifecycle.NONE),  # Ready nodes are never deleted
        ("False", PID, True, None, lc.Lifecycle.DELETE),  # not found
        ("Unknown", PID, True, TERMINATED, lc.Lifecycle.DELETE),
        (None, PID, True, TERMINATED, lc.Lifecycle.DELETE),  # no Ready condition counts as Unknown
        ("False", "", True, None, lc.Lifecycle.NONE),  # without providerID: never deleted
        ("False", PID, False, None, lc.Lifecycle.NONE),  # not looked up (foreign providerID)
        ("False", PID, True, STOPPED, lc.Lifecycle.ADD_SHUTDOWN_TAINT),
        ("False", PID, True, META, lc.Lifecycle.NONE),  # running, just NotReady
    ],
)
def test_lifecycle_decisions(ready, provider_id, looked_up, instance, expected) -> None:
    node = make_node(provider_id=provider_id, ready=ready)
    assert lc.decide(node, looked_up, instance) is expected


def test_shutdown_taint_is_removed_when_ready_and_not_added_twice() -> None:
    tainted = make_node(provider_id=PID, ready="True", taints=[m.SHUTDOWN_TAINT])
    assert lc.decide(tainted, False, None) is lc.Lifecycle.REMOVE_SHUTDOWN_TAINT
    stopped = make_node(provider_id=PID, ready="False", taints=[m.SHUTDOWN_TAINT])
    assert lc.decide(stopped, True, STOPPED) is lc.Lifecycle.NONE
    deleting = make_node(provider_id=PID, ready="False")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert lc.decide(deleting, True, None) is lc.Lifecycle.NONE
    assert not lc.needs_instance(deleting, refresh=True)


def test_needs_instance_only_when_a_decision_depends_on_it() -> None:
    assert not lc.needs_instance(make_node(provider_id=PID))  # Ready, initialised: 0 AWS calls
    assert lc.needs_instance(make_node(provider_id=PID), refresh=True)
    assert lc.needs_instance(make_node(provider_id=PID, ready="False"))
    assert lc.needs_instance(make_node(taints=[m.UNINITIALIZED_TAINT]))
    # Node deltas trust a kubelet that reports Ready=False (it runs); silence (Unknown, no condition) is checked.
    assert not lc.needs_instance(make_node(provider_id=PID, ready="False"), trust_kubelet=True)
    assert lc.needs_instance(make_node(provider_id=PID, ready="Unknown"), trust_kubelet=True)
    assert lc.needs_instance(make_node(provider_id=PID, ready=None), trust_kubelet=True)
    assert lc.needs_instance(make_node(ready="False", taints=[m.UNINITIALIZED_TAINT]), trust_kubelet=True)


# --- the combined plan ----------------------------------------------------------------------------------------


def test_plan_initialises_a_tainted_node_in_one_spec_patch() -> None:
    node = make_node(taints=[m.UNINITIALIZED_TAINT, "other"], ready="False")
    plan = plan_node(node, looked_up=True, instance=META)
    assert plan.initialised and not plan.delete and not plan.retry
    assert plan.spec_patch["spec"] == {
        "providerID": META.provider_id,
        "taints": [{"key": "other", "effect": "NoSchedule"}],
    }
    assert plan.spec_patch["metadata"]["labels"][m.INSTANCE_TYPE] == "m5.large"
    assert plan.taints_changed
    assert plan.addresses == addrs(*META.addresses)
    assert [(e.type, e.reason, e.message) for e in plan.events] == [("Normal", "Synced", "Node synced successfully")]


def test_plan_keeps_the_taint_when_the_instance_is_missing_and_asks_for_a_retry() -> None:
    node = make_node(taints=[m.UNINITIALIZED_TAINT], ready="True")
    plan = plan_node(node, looked_up=True, instance=None)
    assert plan.retry and not plan.writes
    assert plan.events[0].type == "Warning" and "instance not found" in plan.events[0].message


def test_plan_keeps_the_taint_on_provided_ip_mismatch_without_retry() -> None:
    node = make_node(taints=[m.UNINITIALIZED_TAINT], annotations={m.PROVIDED_NODE_IP: "192.168.1.1"})
    plan = plan_node(node, looked_up=True, instance=META)
    assert not plan.writes and not plan.retry and not plan.initialised
    assert plan.events[0].type == "Warning" and "192.168.1.1" in plan.events[0].message


def test_plan_deletes_a_dead_not_ready_node_and_does_nothing_else() -> None:
    node = make_node(provider_id=PID, ready="Unknown", taints=[m.UNINITIALIZED_TAINT])
    plan = plan_node(node, looked_up=True, instance=TERMINATED)
    assert plan.delete and plan.spec_patch == {} and plan.addresses is None
    assert plan.events[0].reason == "DeletingNode"
    assert plan.events[0].message == f"Deleting node {m.name(node)} because it does not exist in the cloud provider"


def test_plan_refreshes_addresses_only_when_they_differ() -> None:
    same = make_node(provider_id=PID, addresses=addrs(*META.addresses))
    assert plan_node(same, looked_up=True, instance=META, refresh_addresses=True).writes is False
    stale = make_node(provider_id=PID, addresses=addrs(("InternalIP", "10.0.0.5")))
    plan = plan_node(stale, looked_up=True, instance=META, refresh_addresses=True)
    assert plan.addresses == addrs(*META.addresses) and plan.spec_patch == {}
    assert plan_node(stale, looked_up=True, instance=META).addresses is None  # only when refreshing


def test_plan_for_an_initialised_node_copies_beta_labels_and_taints_stopped_ones() -> None:
    node = make_node(provider_id=PID, ready="False", labels={m.BETA_REGION: "us-east-1"})
    plan = plan_node(node, looked_up=True, instance=STOPPED)
    assert plan.spec_patch == {
        "metadata": {"labels": {m.REGION: "us-east-1"}},
        "spec": {"taints": [{"key": m.SHUTDOWN_TAINT, "effect": "NoSchedule"}]},
    }
    ready_again = make_node(provider_id=PID, ready="True", taints=[m.SHUTDOWN_TAINT, "keep"])
    assert plan_node(ready_again, looked_up=False, instance=None).spec_patch == {
        "spec": {"taints": [{"key": "keep", "effect": "NoSchedule"}]}
    }
