"""What an AWS error means for a Service: the ONE table saying who can cure it.

The rule (upstream's service controller retries every failed sync, 5 s doubling to 300 s): only what the Service
author must change is "invalid" (a Warning, no retry until the Service changes); whatever a change on the AWS side
can cure (a certificate issued or imported, a group or subnet created by the author's IaC, a subnet tagged, a
quota raised) is retried with backoff and a Warning each time. An error not in the table is retried too: retrying
is harmless, giving up on a transient error is not.

AWS side (retried, Warning each time):
- `CertificateNotFound`: the certificate may be imported or issued later (ACM).
- `InvalidGroup.NotFound`, `InvalidSecurityGroup`: the group may be created later.
- `InvalidSubnetID.NotFound`, `SubnetNotFound`: the subnet may be created later.
- `InvalidAllocationID.NotFound`, `AllocationIdNotFound`: the Elastic IP may be allocated later.
- `InvalidSubnet`: Classic ELB, the VPC has no internet gateway yet.
- `TooMany*`, `*LimitExceeded`: a quota, raised by the account or freed by other deletions.
- throttling, 5xx and every code not listed here.

Author (invalid, no retry until the Service changes):
- `ValidationError`, `InvalidParameterValue`, `InvalidParameterCombination`, `*.Malformed`: AWS refuses the value
  itself, whatever it holds.
- `InvalidConfigurationRequest`, `IncompatibleProtocols`, `UnsupportedProtocol`: a combination AWS never accepts
  (e.g. two subnets of one zone).
- `UnsupportedCertificate`, `SSLPolicyNotFound`, `PolicyTypeNotFound`: the certificate type or TLS policy named is
  not one AWS offers here.
- `AvailabilityZoneNotSupported`, `InvalidScheme`: the subnets or scheme named cannot carry this load balancer.

Our own checks follow the same rule (raised before the first write as `CloudStateError` or `InvalidServiceConfig`):
- AWS side: a certificate, security group, subnet or Elastic IP the Service names that does not exist (yet); a
  subnet Name tag not found; no usable (tagged) subnet; a Classic ELB of our name without the cluster tag; the
  managed group's rule quota.
- Author: a malformed or out-of-range annotation value, a hard rule of the service controller, a security group or
  subnet of another VPC, a certificate of another Region, an EIP or private-IP count that does not match the
  subnets. (A scheme change is neither: the live LB is kept and the rest converged, ccm.aws.fixed_settings.)

References named by a Service are read before the first write (`ccm.aws.references`), so these answers normally
arrive from those reads, not from a half-done creation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Final

from botocore.exceptions import ClientError

from ccm.aws.errors import error_code, error_message
from ccm.contracts.cloud import InvalidServiceConfig


class Cure(Enum):
    AUTHOR = "author"  # only a change of the Service cures it: invalid, no retry until it changes
    AWS = "aws"  # a change in AWS may cure it: Warning and retry with backoff


_AUTHOR: Final = frozenset(
    {
        "ValidationError",
        "InvalidParameterValue",
        "InvalidParameterCombination",
        "InvalidConfigurationRequest",
        "IncompatibleProtocols",
        "UnsupportedProtocol",
        "UnsupportedCertificate",
        "SSLPolicyNotFound",
        "PolicyTypeNotFound",
        "AvailabilityZoneNotSupported",
        "InvalidScheme",
    }
)


def cure(code: str) -> Cure:
    """Who can cure an AWS error code (see the module table; unknown codes: AWS side, i.e. retried)."""
    if code in _AUTHOR or code.endswith(".Malformed"):
        return Cure.AUTHOR
    return Cure.AWS


def as_refusal(err: ClientError) -> InvalidServiceConfig | None:
    """The InvalidServiceConfig to report instead of `err` when only the Service author can cure it, else None."""
    code = error_code(err)
    if cure(code) is not Cure.AUTHOR:
        return None
    message = error_message(err) or str(err)
    return InvalidServiceConfig(f"AWS refused the configuration ({code}): {message}")


GROUP_GONE: Final = ("InvalidSecurityGroup", "InvalidGroup.NotFound")


@contextmanager
def refusals_raised(on_group_gone: Callable[[], None]) -> Iterator[None]:
    """Around a deploy: an AWS answer only the author can cure becomes InvalidServiceConfig (no retry), every other
    one passes on (retried). `on_group_gone` runs when a security group the deploy used is gone (a cached shared
    group: it is found or made again by the retry)."""
    try:
        yield
    except ClientError as err:
        if error_code(err) in GROUP_GONE:
            on_group_gone()
        refusal = as_refusal(err)
        if refusal is None:
            raise
        raise refusal from err
