"""The one providerID parser and formatter (ccm.contracts.provider_id) against upstream MapToAWSInstanceID."""

from __future__ import annotations

from typing import Any, cast

import pytest

from ccm.aws.instances import Ec2Instances
from ccm.contracts.provider_id import instance_id_from_provider_id, is_well_formed_instance_id, provider_id_for

ACCEPTED = [
    # upstream's own table (pkg/providers/v1/instances_test.go, TestMapToAWSInstanceIDs)
    ("aws:///us-east-1a/i-12345678", "i-12345678"),
    ("aws:////i-12345678", "i-12345678"),
    ("i-12345678", "i-12345678"),
    ("aws:///us-east-1a/i-12345678abcdef01", "i-12345678abcdef01"),
    ("aws:////i-12345678abcdef01", "i-12345678abcdef01"),
    ("i-12345678abcdef01", "i-12345678abcdef01"),
    # the legacy form, and what the rules around it imply
    ("aws:///i-0123abcd", "i-0123abcd"),
    ("aws:///us-east-1a/i-0123abcd/", "i-0123abcd"),  # trailing slashes do not count
    ("us-east-1a/i-0123abcd", "i-0123abcd"),  # no prefix: read as aws:////us-east-1a/i-0123abcd
    ("aws://123456789012/us-east-1a/i-0123abcd", "i-0123abcd"),  # the host is not looked at
    ("aws:///us-east-1a/i-0123abcd?x=1#y", "i-0123abcd"),  # nor the query or fragment
    ("aws:///us-east-1a%2Fi-0123abcd", "i-0123abcd"),  # the path is percent-decoded
    # upstream checks only the `i-` prefix; what EC2 can hold is is_well_formed_instance_id's question
    ("aws:///us-east-1a/i-1", "i-1"),
    ("aws:///us-east-1a/i-0ABC", "i-0ABC"),
    ("aws:///us-east-1a/i-", "i-"),
]

REFUSED = [
    # upstream's own table
    "vol-123456789",
    "aws:///us-east-1a/vol-12345678abcdef01",
    "aws://accountid/us-east-1a/vol-12345678abcdef01",
    "aws:///us-east-1a/vol-12345678abcdef01/suffix",
    "",
    # Fargate: a node ID upstream, but no EC2 instance
    "aws:///us-west-2c/1abc-2def/fargate-ip-192-168-164-88.internal",
    "aws:///us-west-2c/1abc-2def/fargate-192.168.164.88",
    "aws:///us-east-1a/fargate-ip-10-0-0-1",
    # other providers
    "eks-hybrid:///us-west-2/my-cluster/node-1",
    "gce://project/zone/name",
    "AWS:///us-east-1a/i-0123abcd",  # the prefix is case-sensitive
    # more than two segments, inner empty segments included
    "aws:///a/b/i-0123abcd",
    "aws:///us-east-1a//i-0123abcd",
    "a/b/i-0123abcd",
    # no ID
    "aws:///",
    "aws:///us-east-1a/",
    "aws:///us-east-1a/x-0123abcd",
    # what Go's url.Parse refuses
    "aws:///us-east-1a/i-0123abcd\n",
    "aws:///us-east-1a/i-01%zz",
    "aws://[::1/us-east-1a/i-0123abcd",
]


@pytest.mark.parametrize(("provider_id", "instance_id"), ACCEPTED)
def test_accepted(provider_id: str, instance_id: str) -> None:
    assert instance_id_from_provider_id(provider_id) == instance_id


@pytest.mark.parametrize("provider_id", REFUSED)
def test_refused(provider_id: str) -> None:
    assert instance_id_from_provider_id(provider_id) is None


def test_formatter_writes_what_the_parser_reads() -> None:
    assert provider_id_for("us-east-1a", "i-0123456789abcdef0") == "aws:///us-east-1a/i-0123456789abcdef0"
    assert provider_id_for("", "i-0123abcd") == "aws:////i-0123abcd"  # upstream's form without a zone
    for zone in ("us-east-1a", ""):
        assert instance_id_from_provider_id(provider_id_for(zone, "i-0123abcd")) == "i-0123abcd"


@pytest.mark.parametrize(
    ("instance_id", "well_formed"),
    [
        ("i-0123abcd", True),
        ("i-0123456789abcdef0", True),
        ("i-0123abc", False),
        ("i-0123456789abcdef01", False),
        ("i-0ABCDEF0", False),
        ("i-0123abcd\n", False),
        ("i-1", False),
        ("", False),
    ],
)
def test_well_formed_instance_id(instance_id: str, well_formed: bool) -> None:
    assert is_well_formed_instance_id(instance_id) is well_formed


def test_an_id_ec2_cannot_hold_is_not_looked_up() -> None:
    """Upstream's lookup of it fails and decides nothing; a filter would find nothing and the node would look gone.
    Not in the result means not looked up, so the node is never deleted (ccm.node.lifecycle)."""
    instances = Ec2Instances(cast(Any, None), region="us-east-1")  # no AWS call may be made
    nodes = [{"metadata": {"name": "n"}, "spec": {"providerID": "aws:///us-east-1a/i-notanid"}}]
    assert instances.instances_metadata(nodes) == {}
