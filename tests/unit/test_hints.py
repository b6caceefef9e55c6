"""Which deletes a message may cause (ccm.service.decisions) and how long a HOSTS message may wait
(ccm.contracts.messages)."""

from __future__ import annotations

import pytest

from ccm.aws import names
from ccm.contracts.messages import Delta, InvalidDelta, hosts_delay, parse_delta
from ccm.service.decisions import hint_delete_refusal, leave_to_other_controller

UID = "6f1e3c2a-0000-4000-8000-00000000abcd"


def tags(key: str = "default/web", uid: str | None = UID) -> dict[str, str]:
    found = {names.cluster_tag_key("c"): "owned", names.SERVICE_NAME_TAG: key}
    if uid is not None:
        found[names.SERVICE_UID_TAG] = uid
    return found


def test_a_hint_delete_needs_every_resource_to_name_the_key_and_the_uid():
    assert hint_delete_refusal("default/web", UID, []) is None  # nothing named for it: only exact-UID leftovers
    assert hint_delete_refusal("default/web", UID, [tags(), tags()]) is None
    assert "default/web, not other/x" in (hint_delete_refusal("other/x", UID, [tags()]) or "")
    other = UID[:-1] + "e"
    assert f"tagged for UID {UID}" in (hint_delete_refusal("default/web", other, [tags()]) or "")
    # One foreign resource among ours is enough to refuse.
    assert hint_delete_refusal("default/web", UID, [tags(), tags(uid="someone-else")]) is not None


def test_a_load_balancer_without_our_uid_tag_is_deleted_only_for_its_own_live_service():
    legacy = tags(uid=None)  # cloud-provider-aws's, not adopted yet
    assert hint_delete_refusal("default/web", UID, [legacy]) is not None
    assert hint_delete_refusal("default/web", UID, [legacy], untagged_uid_ok=True) is None
    assert hint_delete_refusal("other/x", UID, [legacy], untagged_uid_ok=True) is not None
    upstream_group = {names.cluster_tag_key("c"): "owned"}
    assert hint_delete_refusal("default/web", UID, [upstream_group], untagged_uid_ok=True) is None
    assert hint_delete_refusal("default/web", UID, [upstream_group]) is not None


def test_the_built_in_controllers_load_balancer_and_finalizer_are_left_alone():
    assert leave_to_other_controller([tags(uid=None)], "default/web", UID, shared_finalizer=True)
    assert leave_to_other_controller([tags(uid=None)], "default/web", UID, shared_finalizer=False)
    assert leave_to_other_controller([], "default/web", UID, shared_finalizer=True)
    assert not leave_to_other_controller([], "default/web", UID, shared_finalizer=False)
    assert not leave_to_other_controller([tags()], "default/web", UID, shared_finalizer=True)


def hosts(not_before: object, observed_at: float = 1000.0) -> Delta:
    body = Delta("Service", "HOSTS", "default/web", UID, "h", observed_at, {}).to_body()
    return parse_delta(body.replace('"object":{}', '"object":{"notBefore":' + str(not_before).lower() + "}"))


def test_a_hosts_message_waits_at_most_one_bucket():
    assert hosts_delay(hosts(1010), now=1000, bucket_seconds=15) == 10
    assert hosts_delay(hosts(0), now=1000, bucket_seconds=15) == 0
    assert hosts_delay(hosts(1020), now=1000, bucket_seconds=15) == 20  # clock skew allowance
    with pytest.raises(InvalidDelta, match="ahead"):
        hosts_delay(hosts(1000 + 11 * 3600), now=1000, bucket_seconds=15)
    # observedAt is the sender's word too: it does not widen the window.
    with pytest.raises(InvalidDelta, match="ahead"):
        hosts_delay(hosts(1000 + 11 * 3600, observed_at=1000 + 11 * 3600), now=1000, bucket_seconds=15)


@pytest.mark.parametrize("value", ['"soon"', "true", "null", "[1]"])
def test_a_hosts_message_needs_a_numeric_not_before(value: str):
    body = Delta("Service", "HOSTS", "default/web", UID, "h", 1.0, {}).to_body()
    with pytest.raises(InvalidDelta, match="notBefore"):
        parse_delta(body.replace('"object":{}', '"object":{"notBefore":' + value + "}"))
    node_hosts = Delta("Node", "HOSTS", "n1", UID, "h", 1.0, {}).to_body()
    with pytest.raises(InvalidDelta, match="kind Service"):
        parse_delta(node_hosts)
