"""The Resource Groups Tagging API as AWS answers it for Classic Load Balancers (a patch of moto's ELB backend).

AWS lists a Classic Load Balancer under the resource type `elasticloadbalancing:loadbalancer`, the same type as
an ELBv2 load balancer (Resource Groups Tagging API reference, "Services that support the Resource Groups
Tagging API": Elastic Load Balancing, `elasticloadbalancing:loadbalancer`), with the ARN
`arn:<partition>:elasticloadbalancing:<region>:<account>:loadbalancer/<name>` (Elastic Load Balancing, "Resource
types defined by Elastic Load Balancing" in the Service Authorization Reference). moto reports it as
`elb:loadbalancer`, so a GetResources filtered on `elasticloadbalancing:loadbalancer` (our ownership checks and
the sweeper's inventory) never saw a Classic ELB in the devstack, although real AWS lists it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def patch_moto() -> None:
    from moto.core.resource_tagging import TaggedResource
    from moto.elb.models import ELBBackend
    from moto.utilities.utils import get_partition

    def iter_tagged_resources(self: Any) -> Iterator[TaggedResource]:
        partition = get_partition(self.region_name)
        for balancer in self.load_balancers.values():
            yield TaggedResource(
                arn=f"arn:{partition}:elasticloadbalancing:{self.region_name}:{self.account_id}:"
                f"loadbalancer/{balancer.name}",
                tags=dict(balancer.tags or {}),
                resource_type="elasticloadbalancing:loadbalancer",
            )

    ELBBackend.iter_tagged_resources = iter_tagged_resources  # type: ignore[method-assign]
