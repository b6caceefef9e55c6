"""Server-side moto patches for tests: AWS keeps a deleted load balancer's security group in use for a while,
and throttles.

AWS answers DeleteSecurityGroup with DependencyViolation while any network interface uses the group, and an NLB's
interfaces are released minutes after DeleteLoadBalancer (observed on AWS; EC2 API reference,
DeleteSecurityGroup: "If you attempt to delete a security group that is associated with an instance or network
interface ... the operation fails with DependencyViolation"). moto deletes it at once. This patches moto's model
(in-process, so also behind a ThreadedMotoServer of this process), never a client library.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class Hold:
    """Refuses the first `times` deletions of groups whose name starts with `prefix`."""

    times: int
    prefix: str = "k8s-elb-"
    refused: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, group_name: str, group_id: str) -> bool:
        with self._lock:
            if not group_name.startswith(self.prefix):
                return False
            if len(self.refused) < self.times:
                self.refused.append(group_id)
                return True
            self.deleted.append(group_id)
            return False


@contextmanager
def held_security_groups(times: int, prefix: str = "k8s-elb-") -> Iterator[Hold]:
    from moto.ec2.exceptions import DependencyViolationError
    from moto.ec2.models.security_groups import SecurityGroupBackend

    hold = Hold(times, prefix)
    original = SecurityGroupBackend.delete_security_group

    def delete_security_group(self: Any, name: str | None = None, group_id: str | None = None) -> None:
        group = self.get_security_group_by_name_or_id(group_id or name) if (group_id or name) else None
        if group is not None and hold.take(group.name, group.id):
            raise DependencyViolationError(f"resource {group.id} has a dependent object")
        original(self, name, group_id)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SecurityGroupBackend, "delete_security_group", delete_security_group)
        yield hold


@contextmanager
def throttled_describe_load_balancers(latency: float = 0.0) -> Iterator[list[float]]:
    """ELBv2 answers every DescribeLoadBalancers with `Throttling` ("Rate exceeded", HTTP 400) after `latency`
    seconds, as it does when the account's request bucket is empty (ELB user guide, request throttling; the shared
    spec). Yields the times of the attempts that reached the server."""
    from moto.elbv2.exceptions import ELBClientError
    from moto.elbv2.models import ELBv2Backend

    attempts: list[float] = []

    def describe_load_balancers(self: Any, *args: Any, **kwargs: Any) -> Any:
        attempts.append(time.monotonic())
        time.sleep(latency)
        raise ELBClientError("Throttling", "Rate exceeded")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ELBv2Backend, "describe_load_balancers", describe_load_balancers)
        yield attempts
