"""What a Service's annotations mean here that cloud-provider-aws or the AWS Load Balancer Controller would read
differently: Warning events, never silence (docs/migration.md "What behaves differently").

Pure: from the parsed configuration and the Service's annotations to at most three warnings, one per reason, each
naming every annotation concerned and what we do with it; an NLB's also say which `scheme` default it got; and the
EC2.19 high-risk ports its listeners open to the internet (ccm.aws.lbconfig.exposure). The
reconciler emits them when the Service changed (not on every resync), so they stay rare.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Final

from ccm.aws.lbconfig.config import LbType, LoadBalancerConfig
from ccm.aws.lbconfig.exposure import high_risk_exposure
from ccm.aws.lbconfig.parse import parse_load_balancer_config
from ccm.aws.lbconfig.table import (
    ACCESS_LOG_ANNOTATION,
    INTERNAL_ANNOTATION,
    PREFIX,
    PROXY_PROTOCOL_ANNOTATION,
    SCHEME_ANNOTATION,
    SOURCE_RANGES_ANNOTATION,
)
from ccm.contracts.cloud import ImplementedElsewhere, InvalidServiceConfig, LoadBalancerWarning

IGNORED: Final = "AnnotationIgnored"  # not acted on at all
DIFFERS: Final = "AnnotationDiffers"  # acted on, but not as one of the two upstream controllers would

# Names only the AWS Load Balancer Controller understands (its Service annotations page), with what we do instead.
# A name ending in "." is a prefix (listener-attributes.TCP-80).
LBC_ONLY: Final[Mapping[str, str]] = {
    "name": "the load balancer is named `a` + the Service UID, as cloud-provider-aws names it",
    "load-balancer-name": "the load balancer is named `a` + the Service UID, as cloud-provider-aws names it",
    "attributes": "load balancer attributes come from the access-log-* and cross-zone-load-balancing-enabled "
    "annotations",
    "alpn-policy": "TLS listeners get no ALPN policy",
    "manage-backend-security-group-rules": "node access is always one rule per load balancer on the node group",
    "healthcheck-success-codes": "HTTP health checks accept the AWS default codes",
    "inbound-sg-rules-on-private-link-traffic": "PrivateLink traffic keeps the AWS default (rules enforced)",
    "security-group-prefix-lists": "clients are allowed by spec.loadBalancerSourceRanges (or the source-ranges "
    "annotation) only",
    "enable-prefix-for-ipv6-source-nat": "no IPv6 source-NAT prefixes are set",
    "source-nat-ipv6-prefixes": "no IPv6 source-NAT prefixes are set",
    "multi-cluster-target-group": "the target groups hold this cluster's nodes only",
    "listener-attributes.": "listener attributes keep the AWS defaults",
}
_NLB_ONLY_UPSTREAM: Final = {
    PROXY_PROTOCOL_ANNOTATION: "applied to this NLB as target-group attribute proxy_protocol_v2.enabled",
    ACCESS_LOG_ANNOTATION: "applied to this NLB as its access_logs.s3.* attributes",
    PREFIX + "access-log-s3-bucket-name": "applied to this NLB as access_logs.s3.bucket",
    PREFIX + "access-log-s3-bucket-prefix": "applied to this NLB as access_logs.s3.prefix",
    PREFIX + "cross-zone-load-balancing-enabled": "applied to this NLB as load_balancing.cross_zone.enabled",
}
SCHEME_DEFAULT: Final = (
    f"{SCHEME_ANNOTATION} not set: internet-facing (the cloud-provider-aws default; the AWS Load Balancer "
    "Controller would make it internal)"
)


def _lbc_only(suffix: str) -> str | None:
    for name, instead in LBC_ONLY.items():
        if suffix == name or (name.endswith(".") and suffix.startswith(name)):
            return instead
    return None


def _set(annotations: Mapping[str, object], name: str) -> bool:
    value = annotations.get(name)
    return isinstance(value, str) and bool(value.strip())


def annotation_notices(
    config: LoadBalancerConfig, annotations: Mapping[str, object]
) -> tuple[LoadBalancerWarning, ...]:
    ignored: list[str] = []
    for name in config.ignored_annotations:
        if name == SOURCE_RANGES_ANNOTATION:
            ignored.append(f"{name}: ignored, spec.loadBalancerSourceRanges wins")
        else:
            other = "Classic ELBs" if config.lb_type == "nlb" else "NLBs"
            ignored.append(f"{name}: applies to {other} only, ignored on this {config.lb_type.upper()}")
    if config.lb_type == "nlb" and _set(annotations, PREFIX + "access-log-emit-interval"):
        # Parsed for both types, but an NLB writes its access logs every 5 minutes whatever is asked.
        ignored.append(f"{PREFIX}access-log-emit-interval: Classic ELBs only, no NLB equivalent; ignored")
    for name in config.unknown_annotations:
        instead = _lbc_only(name.removeprefix(PREFIX))
        if instead is None:
            ignored.append(f"{name}: unknown (neither cloud-provider-aws nor this controller reads it); ignored")
        else:
            ignored.append(f"{name}: only the AWS Load Balancer Controller understands it; ignored: {instead}")
    differs: list[str] = []
    if config.lb_type == "nlb":
        for name, done in _NLB_ONLY_UPSTREAM.items():
            if _set(annotations, name):
                differs.append(f"{name}: {done} (cloud-provider-aws reads it for Classic ELBs only)")
        # A Service that mixes in other controllers' annotations is told which scheme default it got (the two
        # differ); a plain cloud-provider-aws Service gets what its author expects and no Warning.
        unset = not _set(annotations, SCHEME_ANNOTATION) and annotations.get(INTERNAL_ANNOTATION) in (None, "")
        if unset and (ignored or differs):
            differs.insert(0, SCHEME_DEFAULT)
    out = [LoadBalancerWarning(IGNORED, "; ".join(ignored))] if ignored else []
    out += [LoadBalancerWarning(DIFFERS, "; ".join(differs))] if differs else []
    exposure = high_risk_exposure(config)
    out += [exposure] if exposure is not None else []
    return tuple(out)


def main(argv: Sequence[str] | None = None) -> int:
    """`kubectl get svc -A -o json | python -m ccm.aws.lbconfig.notices [clb|nlb]`: the Warnings each LoadBalancer
    Service would get, before the switch (adopted Services get them only at their next change)."""
    args = list(sys.argv[1:] if argv is None else argv)
    default: LbType = "nlb" if args == ["nlb"] else "clb"
    for svc in json.load(sys.stdin).get("items") or []:
        if (svc.get("spec") or {}).get("type") != "LoadBalancer":
            continue
        key = f"{svc['metadata'].get('namespace')}/{svc['metadata'].get('name')}"
        try:
            config = parse_load_balancer_config(svc, default_lb_type=default)
        except ImplementedElsewhere:
            continue
        except InvalidServiceConfig as err:
            print(f"{key}\tSyncLoadBalancerFailed\t{err}")
            continue
        for notice in annotation_notices(config, svc["metadata"].get("annotations") or {}):
            print(f"{key}\t{notice.reason}\t{notice.message}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
