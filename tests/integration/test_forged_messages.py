# ruff: noqa: F811  (the fixtures imported from test_service_reconciler are parameters here)
"""Messages are hints, never orders: forged deltas of every kind against a live Service's load balancer.

A queue sender can write any body. Whatever it names, a delete happens only when the Kubernetes API confirms it
(no live Service with that UID, or the live one is not ours) AND the load balancer's own tags name that
namespace/name and UID (ccm.service.decisions). Driven through the real handler, emulator over HTTP, in-process moto.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from ccm.aws import names
from ccm.aws.clients import CallCounter
from ccm.config import Settings
from ccm.contracts import kube as p
from ccm.contracts.messages import Delta, delta_for
from ccm.wiring.services import build_service_runtime
from tests.integration.conftest import CLUSTER, World
from tests.integration.test_service_reconciler import (  # noqa: F401 (fixtures)
    create_service,
    emulator,
    invoke,
    read,
    stack,
)

WAS_OURS = {"type": "LoadBalancer", "finalizers": [p.FINALIZER]}


def _lb_exists(world: World, uid: str) -> bool:
    elbv2 = world.clients.session.client("elbv2")
    return any(
        lb["LoadBalancerName"] == names.load_balancer_name(uid)
        for lb in elbv2.describe_load_balancers()["LoadBalancers"]
    )


def _managed_group_exists(world: World, uid: str) -> bool:
    ec2 = world.clients.session.client("ec2")
    wanted = "k8s-elb-" + names.load_balancer_name(uid)
    return any(g["GroupName"] == wanted for g in ec2.describe_security_groups()["SecurityGroups"])


def _victim(stack: dict[str, Any]) -> dict[str, Any]:
    # Source ranges: a security group of its own too, so a forged delete has every kind of resource to take.
    svc = create_service(stack["core"], "victim", loadBalancerSourceRanges=["203.0.113.0/24"])
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    live = read(stack["core"], "victim")
    assert live and live["status"]["loadBalancer"]["ingress"]
    return live


def _forge(event_type: str, key: str, uid: str, obj: dict[str, Any] | None = None) -> str:
    return Delta("Service", event_type, key, uid, "999999", time.time(), dict(obj or WAS_OURS)).to_body()


def _collision(uid: str) -> str:
    """Another UID whose load balancer name is the same: the name keeps only 31 of the 32 hex digits."""
    return uid[:-1] + ("0" if uid[-1] != "0" else "1")


def _warnings(stack: dict[str, Any], svc: dict[str, Any]) -> list[str]:
    """DeleteRefused about this Service, matched by UID: Events outlive their object (a predecessor of the name)."""
    events = json.loads(stack["core"].list_namespaced_event("default", _preload_content=False).data)["items"]
    uid = svc["metadata"]["uid"]
    return [e["message"] for e in events if e["involvedObject"].get("uid") == uid and e["reason"] == "DeleteRefused"]


def test_a_forged_deleted_with_the_victims_uid_under_another_key_deletes_nothing(stack: dict[str, Any], world: World):
    live = _victim(stack)
    uid = live["metadata"]["uid"]
    world.clients.counter.reset_thread()
    # No Service at that key: the API "confirms" the key is gone, but the LB's tags name default/victim.
    assert invoke(stack, [_forge("DELETED", "default/nobody", uid)]) == {"batchItemFailures": []}
    assert CallCounter.mutating(world.clients.counter.thread_calls()) == 0
    assert _lb_exists(world, uid) and _managed_group_exists(world, uid)
    assert read(stack["core"], "victim")["status"] == live["status"]  # type: ignore[index]


def test_a_forged_uid_change_hint_under_another_live_services_key_deletes_nothing(stack: dict[str, Any], world: World):
    live = _victim(stack)
    uid = live["metadata"]["uid"]
    mine = create_service(stack["core"], "mine", type="ClusterIP")
    # The attacker's own Service has another UID: "re-created, delete the predecessor's LB" is refuted by the tags.
    assert invoke(stack, [_forge("MODIFIED", "default/mine", uid)]) == {"batchItemFailures": []}
    assert _lb_exists(world, uid) and _managed_group_exists(world, uid)
    assert _warnings(stack, mine) and "tagged for Service default/victim" in _warnings(stack, mine)[0]


@pytest.mark.parametrize("event_type", ["ADDED", "MODIFIED", "SYNC", "DELETED", "HOSTS"])
def test_a_uid_change_hint_under_the_victims_own_key_deletes_nothing(
    stack: dict[str, Any], world: World, event_type: str
):
    live = _victim(stack)
    uid = live["metadata"]["uid"]
    forged = _collision(uid)
    assert names.load_balancer_name(forged) == names.load_balancer_name(uid) and forged != uid
    assert invoke(stack, [_forge(event_type, "default/victim", forged)]) == {"batchItemFailures": []}
    assert _lb_exists(world, uid) and _managed_group_exists(world, uid)
    after = read(stack["core"], "victim")
    assert after and after["status"] == live["status"] and p.FINALIZER in after["metadata"]["finalizers"]
    assert any(f"tagged for UID {uid}" in m for m in _warnings(stack, live))


def test_a_deleted_for_a_service_really_gone_still_deletes_its_load_balancer(stack: dict[str, Any], world: World):
    live = _victim(stack)
    uid = live["metadata"]["uid"]
    core = stack["core"]
    # Gone while we were not looking (finalizer removed by force): the watcher's DELETED is the only trigger.
    core.patch_namespaced_service(
        "victim", "default", {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    core.delete_namespaced_service("victim", "default")
    invoke(stack, [delta_for("Service", "DELETED", live).to_body()])
    assert not _lb_exists(world, uid)


@pytest.mark.parametrize("observed_ahead", [0, 11 * 3600])
def test_a_hosts_message_cannot_hold_the_services_group_beyond_its_bucket(
    stack: dict[str, Any], world: World, observed_ahead: int
):
    live = _victim(stack)
    now = time.time()
    hosts = Delta("Service", "HOSTS", "default/victim", live["metadata"]["uid"], "h", now + observed_ahead, {})
    body = json.loads(hosts.to_body())
    body["object"] = {"notBefore": now + 11 * 3600}
    response = invoke(stack, [json.dumps(body)])
    # Malformed: visible again at once (reaching the DLQ after maxReceiveCount), not parked for 11 hours.
    assert len(response["batchItemFailures"]) == 1
    again = stack["sqs"].receive_message(QueueUrl=stack["queue_url"], WaitTimeSeconds=1)
    assert again.get("Messages"), "the group stays blocked while the record is invisible"


def test_the_built_in_controllers_load_balancer_is_never_ours(stack: dict[str, Any], world: World):
    """EKS: class-less Services belong to the built-in controller, which uses the same finalizer and LB name."""
    stack["runtime"] = build_service_runtime(
        Settings(CLUSTER, world.vpc_id, default_lb_type="nlb", claim_unclassed=False),
        stack["runtime"].reconciler.kube,
        world.clients,
    )
    core = stack["core"]
    svc = create_service(core, "builtin")
    core.patch_namespaced_service("builtin", "default", {"metadata": {"finalizers": [p.FINALIZER]}})
    uid = svc["metadata"]["uid"]
    ec2, elbv2 = world.clients.session.client("ec2"), world.clients.session.client("elbv2")
    subnets = [
        s["SubnetId"] for s in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [world.vpc_id]}])["Subnets"]
    ]
    # What the built-in controller tags: the cluster and the service name, never our UID tag.
    elbv2.create_load_balancer(
        Name=names.load_balancer_name(uid),
        Subnets=subnets,
        Type="network",
        Tags=[
            {"Key": names.cluster_tag_key(CLUSTER), "Value": "owned"},
            {"Key": names.SERVICE_NAME_TAG, "Value": "default/builtin"},
        ],
    )
    live = read(core, "builtin")
    for body in (delta_for("Service", "MODIFIED", live).to_body(), _forge("DELETED", "default/other", uid)):  # type: ignore[arg-type]
        assert invoke(stack, [body]) == {"batchItemFailures": []}
    assert _lb_exists(world, uid)
    assert p.FINALIZER in read(core, "builtin")["metadata"]["finalizers"]  # type: ignore[index]
