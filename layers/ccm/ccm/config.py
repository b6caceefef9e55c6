"""Runtime settings, read once per execution environment from the Lambda environment."""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_LOAD_BALANCER_CLASS = "ccm.aws/serverless"


@dataclass(frozen=True, slots=True)
class Settings:
    cluster_name: str
    vpc_id: str
    load_balancer_class: str = DEFAULT_LOAD_BALANCER_CLASS
    region: str = ""
    # cloud-provider-aws's default (Classic ELB) keeps a migration drop-in; the template lets new clusters pick nlb.
    default_lb_type: str = "clb"
    # Serve LoadBalancer Services without spec.loadBalancerClass too (self-managed clusters, migration from
    # cloud-provider-aws). The template turns it off on EKS, whose own controller serves those.
    claim_unclassed: bool = True
    # security-groups / extra-security-groups may name any group of the VPC (else only cluster-tagged ones).
    any_annotation_security_group: bool = False

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            cluster_name=os.environ["CLUSTER_NAME"],
            vpc_id=os.environ.get("VPC_ID", ""),
            load_balancer_class=os.environ.get("LOAD_BALANCER_CLASS") or DEFAULT_LOAD_BALANCER_CLASS,
            region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION", ""),
            default_lb_type=os.environ.get("DEFAULT_LOAD_BALANCER_TYPE") or "clb",
            claim_unclassed=os.environ.get("SERVICES_WITHOUT_CLASS", "claim").strip().lower() != "ignore",
            any_annotation_security_group=os.environ.get("ANNOTATION_SECURITY_GROUPS", "").strip().lower() == "any",
        )
