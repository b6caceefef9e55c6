"""A CloudFormation custom resource's side, in our own few lines: the request as CloudFormation sends it, and the
one response it waits for (a PUT of a JSON document to the pre-signed `ResponseURL`; CloudFormation user guide,
"Custom resources", request and response objects). A missing response leaves the stack waiting for an hour, so
every outcome, an unexpected error included, is answered. Kept here rather than a library: the protocol is one
PUT, and the library AWS publishes for it (crhelper) brings polling machinery the teardown does not need.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

log = logging.getLogger(__name__)

SUCCESS: Final = "SUCCESS"
FAILED: Final = "FAILED"
MAX_REASON: Final = 1000  # the whole response must stay under 4 KB


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str
    reason: str = ""


def response_body(event: Mapping[str, Any], outcome: Outcome, physical_id: str) -> dict[str, Any]:
    """Pure: the response document for `event`."""
    reason = outcome.reason if len(outcome.reason) <= MAX_REASON else outcome.reason[: MAX_REASON - 3] + "..."
    return {
        "Status": outcome.status,
        "Reason": reason or outcome.status,
        "PhysicalResourceId": event.get("PhysicalResourceId") or physical_id,
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "NoEcho": False,
        "Data": {},
    }


def respond(event: Mapping[str, Any], outcome: Outcome, physical_id: str, timeout: float = 30.0) -> None:
    body = json.dumps(response_body(event, outcome, physical_id)).encode()
    # The pre-signed URL was signed for an empty Content-Type: any other value fails its signature.
    request = urllib.request.Request(
        str(event["ResponseURL"]),
        data=body,
        method="PUT",
        headers={"Content-Type": "", "Content-Length": str(len(body))},
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        answer.read()
    log.info("answered CloudFormation: %s %s", outcome.status, outcome.reason)


def handle(
    event: Mapping[str, Any], physical_id: str, on_delete: Callable[[], Outcome], on_other: Callable[[], Outcome]
) -> Outcome:
    """Run the request's action and answer CloudFormation, whatever happens."""
    try:
        outcome = on_delete() if event.get("RequestType") == "Delete" else on_other()
    except Exception as err:
        log.exception("custom resource %s failed", event.get("RequestType"))
        outcome = Outcome(FAILED, f"{type(err).__name__}: {err}")
    respond(event, outcome, physical_id)
    return outcome
