"""Every AWS call the local AWS answers, recorded server-side: (service, action, signing access key, the parameters
that name the resource). Survives wherever the caller runs (a test thread, a function in its own process): the
moto server answers them all in this process. `start()` enables and clears; `calls()` returns a copy. Patches
moto's response dispatch (server side), never a client library. Idempotent."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
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
        if _enabled:
            try:
                found = _CREDENTIAL.search(self.headers.get("Authorization", ""))
                params = {k: self._get_param(k) for k in _RESOURCE_PARAMS}
                resource = next((str(v) for v in params.values() if v), "")
                key = found.group(1) if found else ""
                call = AwsCall(str(self.service_name), str(self._get_action()), key, resource)
                with _lock:
                    _calls.append(call)
            except Exception:  # recording must never change an answer
                pass
        return original(self)

    BaseResponse.call_action = call_action  # type: ignore[method-assign]
    BaseResponse._ccm_call_log = True  # type: ignore[attr-defined]
