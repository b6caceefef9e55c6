"""Every AWS call the local AWS answers, recorded server-side: (service, action, signing access key, the parameters
that name the resource). Survives wherever the caller runs (a test thread, a function in its own process): the
moto server answers them all in this process. `start()` enables and clears; `calls()` returns a copy. Patches
moto's response dispatch (server side), never a client library. Idempotent.

For EC2 and ELB calls it also keeps every query parameter and, read from moto's state BEFORE the call is answered,
the tags of each resource the call names (what IAM's aws:ResourceTag conditions see): an IAM evaluation of the
call needs no guess (tests/e2e/test_iam_coverage.py). Each call carries the wall time moto received it and the
status it answered (bench/scenarios/ip_targets.py times target registrations with them); a call is appended once
answered, so the list is in answer order. The signing key tells which function made it
(devstack.sqs_sender.FUNCTION_OF_KEY: each function signs with its own)."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Final

_CREDENTIAL: Final = re.compile(r"Credential=([^/,\s]+)/")
_RESOURCE_PARAMS: Final = ("QueueUrl", "QueueName", "TableName", "name")
_lock = threading.Lock()
_calls: list[AwsCall] = []
_enabled = False


@dataclass(frozen=True, slots=True)
class AwsCall:
    service: str  # moto's service name: elbv2, elb, ec2, sqs, dynamodb, resourcegroupstaggingapi, eks, ...
    action: str
    access_key: str
    resource: str = ""  # QueueUrl / TableName / cluster name when the call names one
    params: tuple[tuple[str, str], ...] = ()  # EC2/ELB: the query parameters, flattened as sent
    tags: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # resource id/ARN/name -> its tags then
    at: float = 0.0  # wall time (time.time()) moto received it: after the caller's injected latency, if any
    status: int | None = None  # the HTTP status answered (None: moto raised); a throttled attempt is recorded too

    def param(self, name: str) -> str:
        return next((v for k, v in self.params if k == name), "")

    def params_starting(self, prefix: str) -> list[tuple[str, str]]:
        return [(k, v) for k, v in self.params if k.startswith(prefix)]

    def tags_of(self, resource: str) -> dict[str, str]:
        return dict(next((t for r, t in self.tags if r == resource), ()))


def start() -> None:
    global _enabled
    _install()
    with _lock:
        _calls.clear()
        _enabled = True


def stop() -> list[AwsCall]:
    global _enabled
    with _lock:
        _enabled = False
        return list(_calls)


def calls() -> list[AwsCall]:
    with _lock:
        return list(_calls)


def _install() -> None:
    from moto.core.responses import BaseResponse

    if getattr(BaseResponse, "_ccm_call_log", False):
        return
    original = BaseResponse.call_action

    def call_action(self: Any) -> Any:
        call: AwsCall | None = None
        if _enabled:
            try:
                found = _CREDENTIAL.search(self.headers.get("Authorization", ""))
                params = {k: self._get_param(k) for k in _RESOURCE_PARAMS}
                resource = next((str(v) for v in params.values() if v), "")
                key = found.group(1) if found else ""
                flat: tuple[tuple[str, str], ...] = ()
                tags: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
                if self.service_name in ("ec2", "elb", "elbv2"):
                    flat = tuple(sorted((str(k), str(v[0])) for k, v in self.querystring.items() if v))
                    tags = _resource_tags(str(self.service_name), self.current_account, self.region, dict(flat))
                call = AwsCall(str(self.service_name), str(self._get_action()), key, resource, flat, tags, time.time())
            except Exception:  # recording must never change an answer
                call = None
        if call is None:
            return original(self)
        status: int | None = None
        try:
            answer = original(self)
            status = _status_of(answer)
            return answer
        finally:
            with _lock:
                _calls.append(replace(call, status=status))

    BaseResponse.call_action = call_action  # type: ignore[method-assign]
    BaseResponse._ccm_call_log = True  # type: ignore[attr-defined]


def _status_of(answer: Any) -> int | None:
    """moto answers (status, headers, body); a bare body is a 200."""
    if isinstance(answer, tuple) and answer and isinstance(answer[0], int):
        return answer[0]
    return 200 if isinstance(answer, (str, bytes)) else None


_EC2_IDS: Final = ("GroupId", "RouteTableId", "InstanceId", "Resource.", "ResourceId.", "SecurityGroupRuleId.")
_ELBV2_ARNS: Final = ("LoadBalancerArn", "TargetGroupArn", "ListenerArn", "ResourceArns.member.")
_ELB_NAMES: Final = ("LoadBalancerName", "LoadBalancerNames.member.")


def _resource_tags(
    service: str, account: str, region: str, params: dict[str, str]
) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """The current tags of every resource the call names, from moto's state (never creating an entry)."""

    def named(prefixes: tuple[str, ...]) -> list[str]:
        return [v for k, v in params.items() if any(k == p or (p.endswith(".") and k.startswith(p)) for p in prefixes)]

    found: dict[str, dict[str, str]] = {}
    if service == "ec2":
        from moto.ec2.models import ec2_backends

        ec2 = ec2_backends[account][region]
        found = {i: dict(ec2.tags.get(i, {})) for i in named(_EC2_IDS)}
    elif service == "elbv2":
        from moto.elbv2.models import elbv2_backends

        elbv2 = elbv2_backends[account][region]
        found = {a: dict(elbv2.tagging_service.get_tag_dict_for_resource(a)) for a in named(_ELBV2_ARNS)}
    elif service == "elb":
        from moto.elb.models import elb_backends

        elb = elb_backends[account][region]
        for name in named(_ELB_NAMES):
            lb = elb.load_balancers.get(name)
            found[name] = dict(lb.tags or {}) if lb is not None else {}
    return tuple((r, tuple(sorted(t.items()))) for r, t in sorted(found.items()))
