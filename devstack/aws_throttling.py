"""AWS API request throttling for the devstack's moto: token buckets per Region and action class, with the figures
AWS documents (see devstack.aws_faithful, which switches it with `FaithfulSettings.rate_limits`).

- ELB user guide, "Request throttling for the ELB API": Describe* 40 burst / 10 per s, RegisterTargets and
  DeregisterTargets 20 / 4; ELB API version 1 (Classic) and 2 have their own buckets.
- EC2 developer guide, "Request throttling for the Amazon EC2 API" (docs.aws.amazon.com/ec2/latest/devguide/
  ec2-api-throttling.html, "Request token bucket sizes and refill rates"): a bucket per action, sized by its
  category: non-mutating 100 / 20; unfiltered and unpaginated non-mutating (DescribeInstances,
  DescribeSecurityGroups, DescribeNetworkInterfaces, ... without a filter or pagination) 50 / 10; mutating 50 / 5;
  resource-intensive (AuthorizeSecurityGroupIngress, RevokeSecurityGroupIngress, ...) 50 / 5; uncategorized actions
  their own (CreateTags and DeleteTags 100 / 10, TerminateInstances 100 / 5, RunInstances 5 / 2, ...).
- We found no published figures for the other ELB actions and assume 20 / 5 (like the targets bucket).

A throttled request is answered as AWS does, `Throttling` (ELB, 400) or `RequestLimitExceeded` (EC2, 503), with the
bodies of devstack.aws_faults.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from devstack.aws_faults import READ_PREFIXES, error_response

# (bucket size, refill per second)
ELB_BUCKETS: dict[str, tuple[float, float]] = {"describe": (40, 10), "targets": (20, 4), "other": (20, 5)}
EC2_BUCKETS: dict[str, tuple[float, float]] = {"read": (100, 20), "unfiltered": (50, 10), "mutate": (50, 5)}
# Describe calls answered from the smaller bucket when sent without a filter or pagination.
EC2_UNFILTERED = frozenset({
    "DescribeInstances", "DescribeInstanceStatus", "DescribeNetworkInterfaces", "DescribeSecurityGroups",
    "DescribeSnapshots", "DescribeSpotInstanceRequests", "DescribeVolumes",
})  # fmt: skip
# Uncategorized actions with buckets of their own (those the devstack's users call).
EC2_OWN_BUCKETS: dict[str, tuple[float, float]] = {
    "CreateTags": (100, 10), "DeleteTags": (100, 10), "TerminateInstances": (100, 5), "RunInstances": (5, 2),
    "StartInstances": (5, 2), "ModifyNetworkInterfaceAttribute": (100, 5),
}  # fmt: skip

_lock = threading.Lock()
_buckets: dict[tuple[str, str, str], list[float]] = {}  # (region, api, class) -> [tokens, last refill]
throttled: dict[str, int] = {}  # "api:Action" -> throttled requests, for tests and the benchmark
_refill_scale = [1.0]


def reset(refill_scale: float = 1.0) -> None:
    """Full buckets, no counts; refill_scale x AWS's refill rates (0 freezes a drained bucket, for tests)."""
    with _lock:
        _buckets.clear()
        throttled.clear()
        _refill_scale[0] = refill_scale


def action_class(api: str, action: str, unfiltered: bool = False) -> str | None:
    """The bucket an action draws from (None: not throttled here). `unfiltered`: an EC2 request without a filter
    or pagination."""
    if api in ("elbv2", "elb"):
        if action.startswith("Describe"):
            return "describe"
        if action in ("RegisterTargets", "DeregisterTargets"):
            return "targets"
        return "other"
    if api == "ec2":
        # Per action: each action has its own bucket of its category's size.
        if action in EC2_OWN_BUCKETS:
            return f"own:{action}"
        if not action.startswith(READ_PREFIXES):
            return f"mutate:{action}"
        return f"unfiltered:{action}" if unfiltered and action in EC2_UNFILTERED else f"read:{action}"
    return None


def take_token(region: str, api: str, action: str, now: float | None = None, unfiltered: bool = False) -> bool:
    """False when the request is to be throttled."""
    klass = action_class(api, action, unfiltered)
    if klass is None:
        return True
    category = klass.split(":")[0]
    if category == "own":
        size, rate = EC2_OWN_BUCKETS[action]
    else:
        size, rate = (ELB_BUCKETS if api != "ec2" else EC2_BUCKETS)[category]
    now = time.monotonic() if now is None else now
    with _lock:
        bucket = _buckets.setdefault((region, api, klass), [size, now])
        bucket[0] = min(size, bucket[0] + (now - bucket[1]) * rate * _refill_scale[0])
        bucket[1] = now
        if bucket[0] < 1:
            throttled[f"{api}:{action}"] = throttled.get(f"{api}:{action}", 0) + 1
            return False
        bucket[0] -= 1
        return True


def patch_moto(enabled: Callable[[], bool]) -> None:
    """Throttle moto's EC2 and ELB responses while `enabled()`. Call once per process."""
    from moto.core.responses import BaseResponse

    call_action = BaseResponse.call_action

    def throttled_call_action(self: Any) -> Any:
        api = getattr(self, "service_name", None) or ""
        if enabled() and api in ("ec2", "elb", "elbv2"):
            action = self._get_action()
            if not take_token(getattr(self, "region", "") or "", api, action, unfiltered=_unfiltered(self)):
                signing = "ec2" if api == "ec2" else "elasticloadbalancing"
                status, content_type, body = error_response(signing, "throttle", str(uuid.uuid4()))
                return status, {"Content-Type": content_type}, body.decode()
        return call_action(self)

    BaseResponse.call_action = throttled_call_action  # type: ignore[method-assign]


def _unfiltered(response: Any) -> bool:
    """An EC2 request with neither a filter nor pagination (MaxResults / NextToken) in its query parameters."""
    params = getattr(response, "querystring", None) or {}
    return not any(k.startswith("Filter.") or k in ("MaxResults", "NextToken") for k in params)
