"""The one rule both drivers follow before deleting a load balancer (ccm.aws.ownership.ours_to_delete)."""

from __future__ import annotations

from ccm.aws.ownership import ours_to_delete

UID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
OURS = "kubernetes.io/cluster/c1"


def test_with_the_cluster_known_only_its_tag_makes_a_load_balancer_ours():
    assert ours_to_delete({OURS: "owned"}, UID, "c1")
    assert ours_to_delete({OURS: "shared"}, UID, "c1")  # any value, as cloud-provider-aws
    assert not ours_to_delete({"kubernetes.io/cluster/c2": "owned", "serverless-ccm/service-uid": UID}, UID, "c1")
    assert not ours_to_delete({}, UID, "c1")


def test_by_uid_alone_any_cluster_tag_or_our_uid_tag_but_never_a_hand_made_one():
    assert ours_to_delete({"kubernetes.io/cluster/c2": "owned"}, UID, None)
    assert ours_to_delete({"serverless-ccm/service-uid": UID}, UID, None)
    assert not ours_to_delete({"serverless-ccm/service-uid": "another-uid"}, UID, None)
    assert not ours_to_delete({"team": "web"}, UID, None)
