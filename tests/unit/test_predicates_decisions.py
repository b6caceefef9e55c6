import pytest

from ccm.contracts import kube as p
from ccm.contracts.messages import delta_for
from ccm.retry import failure_delay
from ccm.service.decisions import Action, decide, ingress_equal
from tests.factories import node, service

OURS = "ccm.aws/serverless"


@pytest.mark.parametrize(
    ("value", "member"),
    [
        (None, True),
        ("false", True),
        ("0", True),
        ("F", True),
        ("true", False),
        ("1", False),
        ("", False),
        ("yes", False),
    ],
)
def test_exclude_label_follows_go_parsebool(value, member):
    n = node("n1", "i-1")
    if value is not None:
        n["metadata"]["labels"][p.EXCLUDE_LABEL] = value
    assert p.is_member_node(n) is member


def test_membership_ignores_readiness_but_not_deletion_or_autoscaler_taint():
    n = node("n1", "i-1")
    n["status"]["conditions"][0]["status"] = "False"
    n["spec"]["unschedulable"] = True
    assert p.is_member_node(n)
    n["spec"]["taints"] = [{"key": p.TO_BE_DELETED_TAINT, "effect": "NoSchedule"}]
    assert not p.is_member_node(n)
    m = node("n2", "i-2")
    m["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not p.is_member_node(m)


@pytest.mark.parametrize(
    ("taint", "member"),
    [
        ({"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}, False),  # being drained by Karpenter (LBC v2.12)
        ({"key": "karpenter.sh/disrupted", "effect": "NoExecute"}, True),  # not the taint Karpenter sets
        ({"key": "karpenter.sh/disruption", "value": "disrupting", "effect": "NoSchedule"}, True),  # another key
        ({"key": p.TO_BE_DELETED_TAINT, "value": "1700000000", "effect": "NoSchedule"}, False),
    ],
)
def test_nodes_tainted_to_leave_are_not_members(taint: dict[str, str], member: bool) -> None:
    n = node("n1", "i-1")
    n["spec"]["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}, taint]
    assert p.is_member_node(n) is member


def test_instance_id_from_provider_id():
    assert p.instance_id(node("n", "i-0123")) == "i-0123"
    assert p.instance_id({"spec": {"providerID": "aws:///i-0456"}}) == "i-0456"
    assert p.instance_id({"spec": {"providerID": "gce://x/y/z"}}) is None
    assert p.instance_id({"spec": {}}) is None


def test_decision_table():
    svc = service()
    add = delta_for("Service", "ADDED", svc)
    assert decide(add, svc, OURS).action is Action.ENSURE
    # gone: only deleted when the hint says it was ours
    assert decide(add, None, OURS).action is Action.DELETE_GONE
    cluster_ip = service(svc_type="ClusterIP")
    assert decide(delta_for("Service", "DELETED", cluster_ip), None, OURS).action is Action.NOTHING
    # type change while we were down: finalizer present -> delete path
    changed = service(svc_type="ClusterIP", finalizers=[p.FINALIZER])
    assert decide(delta_for("Service", "MODIFIED", changed), changed, OURS).action is Action.DELETE
    # never had one
    assert decide(delta_for("Service", "MODIFIED", cluster_ip), cluster_ip, OURS).action is Action.NOTHING
    # deletion in progress
    deleting = service(finalizers=[p.FINALIZER])
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert decide(delta_for("Service", "MODIFIED", deleting), deleting, OURS).action is Action.DELETE


def test_uid_change_deletes_the_previous_incarnation_first():
    old = service(uid="11111111-1111-1111-1111-111111111111")
    new = service(uid="22222222-2222-2222-2222-222222222222")
    decision = decide(delta_for("Service", "DELETED", old), new, OURS)
    assert decision.action is Action.ENSURE
    assert decision.delete_previous_uid == "11111111-1111-1111-1111-111111111111"


@pytest.mark.parametrize(
    "svc",
    [
        service(loadBalancerClass="service.k8s.aws/nlb"),
        service(annotations={p.LB_TYPE_ANNOTATION: "external"}),
        service(annotations={p.LB_TYPE_ANNOTATION: "nlb-ip"}),
    ],
)
def test_foreign_services_are_left_alone(svc):
    assert decide(delta_for("Service", "ADDED", svc), svc, OURS).action is Action.NOTHING
    svc["metadata"]["finalizers"] = [p.FINALIZER]
    assert decide(delta_for("Service", "MODIFIED", svc), svc, OURS).action is Action.CLEANUP_FOREIGN


def test_our_class_is_ours():
    svc = service(loadBalancerClass=OURS)
    assert decide(delta_for("Service", "ADDED", svc), svc, OURS).action is Action.ENSURE


def test_class_less_services_are_left_to_the_built_in_controller_when_we_do_not_claim_them():
    unclassed, ours = service(), service(loadBalancerClass=OURS)
    added = delta_for("Service", "ADDED", unclassed)
    assert decide(added, unclassed, OURS, claim_unclassed=False).action is Action.NOTHING
    assert decide(added, unclassed, OURS, claim_unclassed=True).action is Action.ENSURE
    assert decide(delta_for("Service", "ADDED", ours), ours, OURS, claim_unclassed=False).action is Action.ENSURE
    # Claimed earlier (our finalizer on it), not any more: our LB goes, their status stays.
    unclassed["metadata"]["finalizers"] = [p.FINALIZER]
    modified = delta_for("Service", "MODIFIED", unclassed)
    assert decide(modified, unclassed, OURS, claim_unclassed=False).action is Action.CLEANUP_FOREIGN


def test_ingress_equality_and_backoff():
    assert ingress_equal([{"hostname": "a"}], [{"hostname": "a"}])
    assert not ingress_equal([{"hostname": "a"}], [{"hostname": "b"}])
    assert not ingress_equal(None, [{"hostname": "a"}])
    assert ingress_equal(None, [])
    assert [failure_delay(n) for n in (1, 2, 3, 7, 8, 20)] == [5, 10, 20, 300, 300, 300]


def test_hosts_hint_updates_hosts_only_when_the_lb_is_in_place():
    from ccm.contracts.messages import Delta

    svc = service(finalizers=[p.FINALIZER])
    hosts = Delta("Service", "HOSTS", "default/web", svc["metadata"]["uid"], "hosts-1", 0.0, {"notBefore": 15.0})
    assert decide(hosts, svc, OURS).action is Action.UPDATE_HOSTS
    fresh = service()
    fresh_hosts = Delta("Service", "HOSTS", "default/web", fresh["metadata"]["uid"], "hosts-1", 0.0, {})
    assert decide(fresh_hosts, fresh, OURS).action is Action.ENSURE  # never ensured yet: full ensure
    gone = service(finalizers=[p.FINALIZER], svc_type="ClusterIP")
    assert decide(hosts, gone, OURS).action is Action.DELETE
