"""What AWS fixes when a load balancer is created, and the one rule both drivers follow when a Service asks to
change it: the live load balancer is kept, everything else is converged, and a Warning says what was not applied.
"""

from __future__ import annotations

from typing import Final

from ccm.aws.lbconfig import INTERNAL_ANNOTATION, SCHEME_ANNOTATION, LoadBalancerConfig

# Warning event reason: the LB is converged otherwise; the message says what was not applied and why.
FIXED_SETTING: Final = "LoadBalancerSettingFixed"


def keep(kind: str) -> str:
    """How every fixed-setting Warning ends: what we did, and the two ways the author can settle it."""
    return f"the live {kind} is kept; delete and re-create the Service to apply it, or revert the change"


def scheme_kept(kind: str, live_scheme: str, config: LoadBalancerConfig) -> str | None:
    """Pure: the Warning for a scheme the Service asks for that the live `kind` does not have, else None.

    The rule, the same for an NLB and a Classic ELB: AWS cannot change a scheme in place, and deleting and
    re-creating the LB would take a serving load balancer (and its DNS name) away behind the author's back. So the
    live LB keeps its scheme, the rest of the Service is converged as for that scheme (its subnets included), and
    the author is told, naming the annotations. cloud-provider-aws keeps the LB too, silently ("TODO: Sync internal
    vs non-internal" in ensureLoadBalancer and ensureLoadBalancerv2, pkg/providers/v1/aws_loadbalancer.go)."""
    if not live_scheme or live_scheme == config.scheme:
        return None
    return (
        f"the {kind} scheme is {live_scheme} and cannot change to {config.scheme} after creation "
        f"(asked by {SCHEME_ANNOTATION} / {INTERNAL_ANNOTATION}): {keep(kind)}"
    )
