"""AWS API request throttling for the devstack's moto: token buckets per Region and action class, with the figures
AWS documents (see devstack.aws_faithful, which switches it with `FaithfulSettings.rate_limits`).

- ELB user guide, "Request throttling for the ELB API": Describe* 40 burst / 10 per s, RegisterTargets and
  DeregisterTargets 20 / 4; ELB API version 1 (Classic) and 2 have their own buckets.
- EC2 developer guide, "Request throttling for the Amazon EC2 API": a bucket per action; non-mutating 100 / 20.
- We found no published figures for the rest and assume 20 / 5 for other ELB actions (like the targets bucket)
  and 50 / 5 per mutating EC2 action.

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
EC2_BUCKETS: dict[str, tuple[float, float]] = {"read": (100, 20), "mutate": (50, 5)}

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


def action_class(api: str, action: str) -> str | None:
    """The bucket an action draws from (None: not throttled here)."""
    if api in ("elbv2", "elb"):
        if action.startswith("Describe"):
            return "describe"
        if action in ("RegisterTargets", "DeregisterTargets"):
            return "targets"
        return "other"
    if api == "ec2":
        # Per action: each action has its own bucket of its class's size.
        return f"read:{action}" if action.startswith(READ_PREFIXES) else f"mutate:{action}"
    return None


def take_token(region: str, api: str, action: str, now: float | None = None) -> bool:
    """False when the request is to be throttled."""
    klass = action_class(api, action)
    if klass is None:
        return True
    size, rate = (ELB_BUCKETS if api != "ec2" else EC2_BUCKETS)[klass.split(":")[0]]
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
            if not take_token(getattr(self, "region", "") or "", api, action):
                signing = "ec2" if api == "ec2" else "elasticloadbalancing"
                status, content_type, body = error_response(signing, "throttle", str(uuid.uuid4()))
                return status, {"Content-Type": content_type}, body.decode()
        return call_action(self)

    BaseResponse.call_action = throttled_call_action  # type: ignore[method-assign]
