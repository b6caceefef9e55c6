from ccm import predicates as p
from ccm.membership import model
from ccm.messages import delta_for
from tests.factories import node, service


def test_member_record_from_live_and_trimmed_nodes_agree():
    n = node("n1", "i-1", role="web")
    n["metadata"]["resourceVersion"] = "42"
    live = model.member_record(n)
    trimmed = model.member_record_from_trimmed("n1", delta_for("Node", "MODIFIED", n).object, "42")
    assert live == trimmed == model.MemberRecord("n1", "i-1", {"role": "web"}, 42)
    n["metadata"]["labels"][p.EXCLUDE_LABEL] = "true"
    assert model.member_record(n) is None


def test_readiness_and_taints_do_not_change_membership():
    a = model.member_record(node("n1", "i-1"))
    b_node = node("n1", "i-1")
    b_node["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    b_node["status"]["conditions"][0]["status"] = "False"
    assert model.same_membership(a, model.member_record(b_node))
    assert not model.same_membership(a, model.member_record(node("n1", "i-2")))
    assert not model.same_membership(a, None)
    assert model.same_membership(None, None)


def test_target_node_labels_selector():
    svc = service(annotations={model.TARGET_NODE_LABELS: "role=web, zone=a,bogus"})
    assert model.service_selector(svc) == {"role": "web", "zone": "a"}
    web = model.MemberRecord("n1", "i-1", {"role": "web", "zone": "a"})
    db = model.MemberRecord("n2", "i-2", {"role": "db", "zone": "a"})
    assert model.members_for(model.service_selector(svc), [db, web]) == [web]
    assert model.members_for({}, [web, db]) == [web, db]


def test_affected_services():
    web = model.MemberRecord("n1", "i-1", {"role": "web"})
    assert model.affected({}, None, web)  # join
    assert model.affected({}, web, None)  # leave
    assert model.affected({"role": "web"}, model.MemberRecord("n1", "i-1", {"role": "db"}), web)  # label moves in
    assert not model.affected({"role": "db"}, None, web)  # join outside the selector
    assert model.affected({}, web, model.MemberRecord("n1", "i-9", {"role": "web"}))  # new instance


def test_buckets_and_digest():
    assert model.bucket(29.9, 15) == 1 and model.bucket_end(1, 15) == 30.0
    a, b = model.MemberRecord("a", "i-1"), model.MemberRecord("b", "i-2")
    assert model.digest([a, b]) == model.digest([b, a]) != model.digest([a])


def _at(n: dict, rv: int) -> dict:
    n["metadata"]["resourceVersion"] = str(rv)
    return n


def test_membership_drift_against_one_list():
    stored = {
        "kept": model.StoredNode(model.MemberRecord("kept", "i-1", {}, 10), 10),
        "gone": model.StoredNode(model.MemberRecord("gone", "i-2", {}, 11), 11),  # DELETED delta lost
        "relabelled": model.StoredNode(model.MemberRecord("relabelled", "i-3", {}, 12), 12),  # MODIFIED lost
        "joined-later": model.StoredNode(model.MemberRecord("joined-later", "i-4", {}, 60), 60),  # after the LIST
        "tombstone": model.StoredNode(None, 13),
    }
    nodes = [
        _at(node("kept", "i-1"), 10),
        _at(node("relabelled", "i-3", role="db"), 40),
        _at(node("unseen", "i-5"), 41),  # ADDED lost: a member the table never heard of
        _at(node("not-member", "i-6", **{p.EXCLUDE_LABEL: "true"}), 42),  # not a member: nothing to store
    ]
    changes = {c.name: c for c in model.membership_drift(stored, nodes, list_rv=50)}
    assert sorted(changes) == ["gone", "relabelled", "unseen"]
    assert changes["gone"].gone and changes["gone"].new is None and changes["gone"].resource_version == 50
    assert changes["relabelled"].new == model.MemberRecord("relabelled", "i-3", {"role": "db"}, 40)
    assert changes["unseen"].old is None and changes["unseen"].new is not None and not changes["unseen"].gone


def test_membership_drift_never_reverts_a_newer_write_and_is_empty_when_converged():
    stored = {"n1": model.StoredNode(None, 30)}  # deleted (tombstone) after the LIST saw it
    assert model.membership_drift(stored, [_at(node("n1", "i-1"), 20)], list_rv=25) == []
    converged = {"n1": model.StoredNode(model.MemberRecord("n1", "i-1", {}, 20), 20)}
    assert model.membership_drift(converged, [_at(node("n1", "i-1"), 21)], list_rv=25) == []  # same membership
