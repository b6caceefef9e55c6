"""Who can cure an AWS error (ccm.aws.refusals, the one table), and which references a reconcile must read before
its first write (ccm.aws.references, pure part)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from ccm.aws import lbconfig as a
from ccm.aws import references as r
from ccm.aws.lbconfig import LoadBalancerConfig
from ccm.aws.refusals import Cure, as_refusal, cure
from tests.factories import service

P = a.PREFIX
CERT = "arn:aws:acm:us-east-1:123456789012:certificate/0e2a7c6b-1111-2222-3333-444455556666"


@pytest.mark.parametrize(
    "code",
    [
        "CertificateNotFound",  # imported or issued later
        "InvalidGroup.NotFound",
        "InvalidSubnetID.NotFound",
        "SubnetNotFound",
        "InvalidAllocationID.NotFound",
        "TooManyLoadBalancers",  # quotas are raised by the account
        "RulesPerSecurityGroupLimitExceeded",
        "Throttling",
        "SomethingNew",  # unknown: retrying is harmless, giving up is not
    ],
)
def test_what_aws_side_changes_can_cure_is_retried(code: str) -> None:
    assert cure(code) is Cure.AWS
    assert as_refusal(ClientError({"Error": {"Code": code, "Message": "m"}}, "CreateListener")) is None


@pytest.mark.parametrize(
    "code",
    ["ValidationError", "InvalidConfigurationRequest", "UnsupportedCertificate", "InvalidGroupId.Malformed"],
)
def test_only_what_the_author_must_change_is_invalid(code: str) -> None:
    refusal = as_refusal(ClientError({"Error": {"Code": code, "Message": "nope"}}, "CreateLoadBalancer"))
    assert refusal is not None and code in str(refusal) and "nope" in str(refusal)


def config(ann: dict[str, str]) -> LoadBalancerConfig:
    svc = service(annotations={P + "type": "nlb", **ann})
    return a.parse_load_balancer_config(svc)


def test_references_are_read_only_when_about_to_be_used() -> None:
    cfg = config(
        {
            P + "ssl-cert": CERT,
            P + "security-groups": "sg-0123456789abcdef0",
            P + "subnets": "subnet-0123456789abcdef0,subnet-0123456789abcdef1",
            P + "eip-allocations": "eipalloc-0123456789abcdef0,eipalloc-0123456789abcdef1",
        }
    )
    creating = r.wanted(cfg, creating=True, placement_fixed=True)
    assert creating.certificates == {CERT} and creating.security_groups == {"sg-0123456789abcdef0"}
    assert len(creating.subnets) == 2 and len(creating.allocations) == 2
    # A live NLB: placement is fixed at creation, and what it already uses is known to exist.
    live = {"SecurityGroups": ["sg-0123456789abcdef0"], "AvailabilityZones": [{"SubnetId": "subnet-x"}]}
    assert r.wanted(cfg, creating=False, placement_fixed=True) - r.in_use(live, [CERT]) == r.References()
    assert r.wanted(cfg, creating=False, placement_fixed=True) - r.in_use(live) == r.References(frozenset({CERT}))
    # A Service naming nothing costs no read at all.
    assert r.wanted(config({}), creating=True) == r.References()


def test_a_certificate_of_another_region_can_never_serve() -> None:
    assert r.certificate_problem(CERT, "us-east-1") is None
    assert "eu-west-1" in (r.certificate_problem(CERT.replace("us-east-1", "eu-west-1"), "us-east-1") or "")
    assert r.certificate_problem("arn:aws:iam::123456789012:server-certificate/web", "us-east-1") is None
