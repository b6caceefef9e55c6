"""Adoption of an NLB cloud-provider-aws made: our UID tag on what carries only the cluster tag.

Before the first write on an existing NLB (a non-empty plan, or its deletion), one DescribeTags over the LB, the
target groups and the listeners the plan touches; those carrying a cluster tag but not our UID tag get it (IAM
changes and deletes only UID-tagged resources, and lets us add that tag to cluster-tagged ones without it:
template AdoptClusterLoadBalancers). A listener the plan must change that carries no cluster tag
(cloud-provider-aws tags none) is refused with a Warning naming the one command that fixes it: IAM cannot tell a
listener of our cluster from any other untagged listener, so it is never tagged here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ccm.aws import names
from ccm.aws import nlb_model as m
from ccm.aws.clients import AwsClients
from ccm.contracts.cloud import CloudStateError

log = logging.getLogger(__name__)


def claim(
    clients: AwsClients, uid: str, cluster_name: str, observed: m.ObservedNLB, operations: list[m.Operation]
) -> None:
    """Before changing an existing NLB: the LB, its target groups and the listeners the plan changes carry our
    UID tag; an untagged listener is refused before any of them is written."""
    listeners = {op.arn for op in operations if isinstance(op, m.ModifyListener | m.DeleteListener)}
    untagged = tag_unclaimed(clients, uid, [observed.arn, *sorted(observed.target_groups), *sorted(listeners)])
    if refused := sorted(set(untagged) & listeners):
        key = names.cluster_tag_key(cluster_name)
        raise CloudStateError(
            f"listener {', '.join(refused)} carries no {key} tag (cloud-provider-aws tags no listener) and IAM "
            f"lets this controller change only tagged ones; tag it: aws elbv2 add-tags --resource-arns "
            f"{' '.join(refused)} --tags Key={key},Value=owned"
        )


def tag_unclaimed(clients: AwsClients, uid: str, arns: Sequence[str]) -> list[str]:
    """Adds our UID tag to those of `arns` that carry a cluster tag and no UID tag (one DescribeTags per 20,
    an AddTags only when one lacks it); returns those carrying no cluster tag at all (left as they are)."""
    elbv2, unclaimed, untagged = clients.elbv2, [], []
    for start in range(0, len(arns), 20):
        for found in elbv2.describe_tags(ResourceArns=list(arns[start : start + 20]))["TagDescriptions"]:
            keys = {t["Key"] for t in found.get("Tags", [])}
            if names.SERVICE_UID_TAG in keys:
                continue
            if any(k.startswith(names.CLUSTER_TAG_PREFIX) for k in keys):
                unclaimed.append(found["ResourceArn"])
            else:
                untagged.append(found["ResourceArn"])
    for start in range(0, len(unclaimed), 20):
        batch = unclaimed[start : start + 20]
        elbv2.add_tags(ResourceArns=batch, Tags=[{"Key": names.SERVICE_UID_TAG, "Value": uid}])
        log.info("adopted %s: tagged %s", ", ".join(batch), names.SERVICE_UID_TAG)
    return untagged
