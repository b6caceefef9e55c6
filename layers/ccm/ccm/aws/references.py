"""What a Service names in AWS, verified by reads before the first write of a reconcile.

A Service may name certificates (`ssl-cert`), security groups (`security-groups`, `extra-security-groups`),
subnets by ID (`subnets`) and Elastic IP allocations (`eip-allocations`). AWS refuses a create naming a missing
one, but only after our earlier writes (the managed security group, the load balancer, its target groups) were
made; so every reference about to be used is read first, and a refusal leaves AWS as it was.

- Missing (not created, imported or issued yet): `CloudStateError`, retried with backoff (the author's IaC may
  create it); see `ccm.aws.refusals`.
- Present but unusable whatever AWS does later (a group or subnet of another VPC, a certificate of another
  Region): `InvalidServiceConfig`.

Only what the live load balancer does not already use is read (`wanted(...) - in_use`): a converged pass reads
nothing more, and a Service without such annotations never pays a call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from ccm.aws.clients import AwsClients
from ccm.aws.errors import error_code
from ccm.aws.lbconfig import (
    EIP_ANNOTATION,
    EXTRA_SECURITY_GROUPS_ANNOTATION,
    PREFIX_LISTS_ANNOTATION,
    SECURITY_GROUPS_ANNOTATION,
    SSL_CERT_ANNOTATION,
    SUBNETS_ANNOTATION,
    LoadBalancerConfig,
)
from ccm.contracts.cloud import CloudStateError, InvalidServiceConfig


@dataclass(frozen=True, slots=True)
class References:
    certificates: frozenset[str] = frozenset()
    security_groups: frozenset[str] = frozenset()
    subnets: frozenset[str] = frozenset()
    allocations: frozenset[str] = frozenset()
    prefix_lists: frozenset[str] = frozenset()

    def __sub__(self, other: References) -> References:
        return References(
            self.certificates - other.certificates,
            self.security_groups - other.security_groups,
            self.subnets - other.subnets,
            self.allocations - other.allocations,
            self.prefix_lists - other.prefix_lists,
        )


def wanted(config: LoadBalancerConfig, creating: bool, placement_fixed: bool = False) -> References:
    """Pure: every reference the drivers will send. Subnets (NLB: only at creation) and EIPs only at creation."""
    return References(
        certificates=frozenset(c for ls in config.listeners for c in ls.certificates[:1]),
        security_groups=frozenset((*config.security_groups, *config.extra_security_groups)),
        subnets=frozenset(config.subnet_ids) if creating or not placement_fixed else frozenset(),
        allocations=frozenset(config.eip_allocations) if creating else frozenset(),
        # Managed groups only: bring-your-own groups carry no rules of ours.
        prefix_lists=frozenset(config.prefix_lists) if not config.security_groups else frozenset(),
    )


def in_use(lb: Mapping[str, Any] | None, certificates: Iterable[str] = ()) -> References:
    """Pure: what the live load balancer already uses (NLB or Classic ELB description), known to exist."""
    if lb is None:
        return References()
    subnets = [str(z.get("SubnetId", "")) for z in lb.get("AvailabilityZones") or [] if isinstance(z, dict)]
    listener_certs = [
        str(d.get("Listener", {}).get("SSLCertificateId") or "") for d in lb.get("ListenerDescriptions") or []
    ]
    return References(
        certificates=frozenset(c for c in (*certificates, *listener_certs) if c),
        security_groups=frozenset(lb.get("SecurityGroups") or ()),
        subnets=frozenset(s for s in (*subnets, *(lb.get("Subnets") or ())) if s),
    )


def certificate_problem(arn: str, region: str) -> str | None:
    """Pure: why a certificate ARN can never serve a load balancer in `region` (ACM certificates are regional)."""
    parts = arn.split(":")
    if len(parts) > 3 and parts[2] == "acm" and region and parts[3] != region:
        return f"certificate {arn} is in {parts[3]}; a load balancer in {region} needs one of its own Region"
    return None


class ReferenceChecker:
    """One read per kind of reference to verify (one per certificate: neither ACM nor IAM describes in bulk)."""

    def __init__(self, clients: AwsClients, vpc_id: str) -> None:
        self.clients = clients
        self.vpc_id = vpc_id

    def verify(self, refs: References, config: LoadBalancerConfig) -> None:
        """Raise InvalidServiceConfig (every unusable reference) or CloudStateError (every missing one)."""
        missing: list[str] = []
        invalid: list[str] = []
        region = str(self.clients.session.region_name or "")
        for arn in sorted(refs.certificates):
            if problem := certificate_problem(arn, region):
                invalid.append(f"{SSL_CERT_ANNOTATION}: {problem}")
            elif not self._certificate_exists(arn):
                missing.append(f"{SSL_CERT_ANNOTATION}: certificate {arn} was not found (not imported or issued yet?)")
        if refs.security_groups:
            found = self._vpcs_of("describe_security_groups", "SecurityGroups", "GroupId", refs.security_groups)
            for gid in sorted(refs.security_groups):
                annotation = (
                    SECURITY_GROUPS_ANNOTATION if gid in config.security_groups else EXTRA_SECURITY_GROUPS_ANNOTATION
                )
                _classify(annotation, "security group", gid, found, self.vpc_id, missing, invalid)
        if refs.subnets:
            found = self._vpcs_of("describe_subnets", "Subnets", "SubnetId", refs.subnets)
            for sid in sorted(refs.subnets):
                _classify(SUBNETS_ANNOTATION, "subnet", sid, found, self.vpc_id, missing, invalid)
        if refs.allocations:
            found_ids = {
                str(a["AllocationId"])
                for a in self.clients.ec2.describe_addresses(
                    Filters=[{"Name": "allocation-id", "Values": sorted(refs.allocations)}]
                )["Addresses"]
            }
            missing += [
                f"{EIP_ANNOTATION}: Elastic IP allocation {a} was not found"
                for a in sorted(refs.allocations - found_ids)
            ]
        if refs.prefix_lists:
            # A filter, not PrefixListIds: one unknown id must not hide which others exist. Lists shared with the
            # account (AWS RAM) and AWS-managed ones are listed too.
            found_lists = {
                str(pl["PrefixListId"])
                for pl in self.clients.ec2.describe_managed_prefix_lists(
                    Filters=[{"Name": "prefix-list-id", "Values": sorted(refs.prefix_lists)}]
                )["PrefixLists"]
            }
            missing += [
                f"{PREFIX_LISTS_ANNOTATION}: managed prefix list {pl} was not found"
                for pl in sorted(refs.prefix_lists - found_lists)
            ]
        if invalid:
            raise InvalidServiceConfig("; ".join(invalid))
        if missing:
            raise CloudStateError("; ".join(missing) + "; nothing was changed, retrying")

    def _certificate_exists(self, arn: str) -> bool:
        try:
            if ":iam:" in arn:  # arn:aws:iam::<account>:server-certificate/<path/>name
                self.clients.client("iam").get_server_certificate(ServerCertificateName=arn.rsplit("/", 1)[-1])
            else:
                self.clients.client("acm").describe_certificate(CertificateArn=arn)
        except ClientError as err:
            if error_code(err) in ("ResourceNotFoundException", "NoSuchEntity"):
                return False
            raise
        return True

    def _vpcs_of(self, operation: str, key: str, id_key: str, ids: frozenset[str]) -> dict[str, str]:
        """id -> VPC of those that exist; a filter (not the id list) so one missing id does not hide the others."""
        name = "group-id" if id_key == "GroupId" else "subnet-id"
        found = getattr(self.clients.ec2, operation)(Filters=[{"Name": name, "Values": sorted(ids)}])[key]
        return {str(item[id_key]): str(item.get("VpcId", "")) for item in found}


def _classify(
    annotation: str,
    kind: str,
    ref: str,
    found: Mapping[str, str],
    vpc_id: str,
    missing: list[str],
    invalid: list[str],
) -> None:
    if ref not in found:
        missing.append(f"{annotation}: {kind} {ref} was not found")
    elif found[ref] != vpc_id:
        invalid.append(f"{annotation}: {kind} {ref} is in {found[ref]}, not in the cluster's VPC {vpc_id}")
