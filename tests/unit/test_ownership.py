"""The one rule for "is this resource ours to delete" (ccm.contracts.cluster.Cluster.claim), which both drivers
follow whoever asked for the delete (the Service, its UID, a message), and the cluster value built once."""

from ccm.config import Settings
from ccm.contracts.cluster import Claim, Cluster

UID = "0123abcd-0000-1111-2222-333344445555"
C1 = Cluster("c1", "vpc-1")
OURS = "kubernetes.io/cluster/c1"


def test_this_clusters_tag_and_our_uid_tag_make_it_ours() -> None:
    assert C1.claim({OURS: "owned", "serverless-ccm/service-uid": UID}, UID) is Claim.OURS
    assert C1.claim({OURS: "shared", "serverless-ccm/service-uid": UID}, UID) is Claim.OURS  # any value, as IAM's


def test_without_our_uid_tag_it_is_adoptable_only_with_this_clusters_tag() -> None:
    assert C1.claim({OURS: "owned"}, UID) is Claim.ADOPTABLE  # cloud-provider-aws's, under the UID's name
    assert C1.claim({"kubernetes.io/cluster/c2": "owned"}, UID) is Claim.NOT_OURS  # no fallback to any cluster
    assert C1.claim({"serverless-ccm/service-uid": UID}, UID) is Claim.NOT_OURS  # a UID tag alone proves nothing
    assert C1.claim({}, UID) is Claim.NOT_OURS


def test_another_uid_is_never_ours_whatever_the_name() -> None:
    assert C1.claim({OURS: "owned", "serverless-ccm/service-uid": "another-uid"}, UID) is Claim.NOT_OURS


def test_the_cluster_is_normalised_once_from_the_settings() -> None:
    cluster = Settings("c1", "vpc-1", default_lb_type="NLB ", claim_unclassed=False).cluster
    assert cluster == Cluster("c1", "vpc-1", "ccm.aws/serverless", False, "clb")  # anything but "nlb" is a CLB
    assert Settings("c1", "vpc-1", default_lb_type="nlb").cluster.default_lb_type == "nlb"
    assert cluster.tag_key == OURS and cluster.owns({OURS: "owned"}) and not cluster.owns({OURS: "shared"})
