"""moto's SQS reports the same `SenderId` for every message (a fixed IAM user id); SQS reports the sender's
principal: "For a user, returns the user ID, for example ABCDEFGHI1JKLMNOPQ23R. For an IAM role, returns the IAM
role ID, for example ABCDE1F2GH3I4JK5LMNOP:i-a123b456" (SQS API reference, ReceiveMessage, MessageSystemAttributeName
SenderId), i.e. `<role id>:<session name>` for an assumed role such as a Lambda function's.

`faithful_moto_sqs_sender` patches moto's server-side SQS (its response handler and message model, never boto3) so
a message's SenderId is the principal of the access key that signed the SendMessage(Batch) request:
`register_sender(access_key_id, principal)` says whose a key is (the devstack gives the watcher and the functions
their own keys); an unregistered key is an IAM user whose id derives from the key. Idempotent.
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from typing import Any, Final

# The devstack's identities: the watcher (and the tests standing in for it) sign with the dummy key "testing", the
# functions with their own key; the template's role ids (`!GetAtt <Role>.RoleId`, SENDERS_*) resolve to these.
WATCHER_KEY, FUNCTIONS_KEY = "testing", "ASIADEVSTACKFUNCTION"
WATCHER_ROLE_ID, FUNCTIONS_ROLE_ID = "AROADEVSTACKWATCHER01", "AROADEVSTACKFUNCTION1"
# Each function signs with its own key, as each has its own role on AWS: SQS reports which function sent a message
# (SENDERS_* are checked for real) and devstack.call_log tells which role made an AWS call (FUNCTION_OF_KEY).
# FUNCTIONS_KEY stays a function-like identity of no function (tests forging "a function role").
FUNCTION_ROLES: Final = {  # template logical id -> (its access key, its role id)
    "ServiceReconcilerFunction": ("ASIADEVSTACKSERVICES", "AROADEVSTACKSERVICES1"),
    "NodeReconcilerFunction": ("ASIADEVSTACKNODES001", "AROADEVSTACKNODES0001"),
    "RouteReconcilerFunction": ("ASIADEVSTACKROUTES01", "AROADEVSTACKROUTES001"),
    "SweeperFunction": ("ASIADEVSTACKSWEEPER1", "AROADEVSTACKSWEEPER01"),
    "TeardownFunction": ("ASIADEVSTACKTEARDOWN", "AROADEVSTACKTEARDOWN1"),
}
FUNCTION_OF_KEY: Final = {key: fn for fn, (key, _) in FUNCTION_ROLES.items()}
ROLE_IDS: Final = {
    "WatcherRole.RoleId": WATCHER_ROLE_ID,
    **{f"{fn}Role.RoleId": role_id for fn, (_, role_id) in FUNCTION_ROLES.items()},
}
_principals: dict[str, str] = {
    WATCHER_KEY: f"{WATCHER_ROLE_ID}:watcher",
    FUNCTIONS_KEY: f"{FUNCTIONS_ROLE_ID}:devstack-functions",
    **{key: f"{role_id}:{fn}" for fn, (key, role_id) in FUNCTION_ROLES.items()},
}
_current = threading.local()
_PATCHED: Final = "_ccm_sender_id"
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")  # SigV4: Credential=<access key id>/<date>/<region>/...


def register_sender(access_key_id: str, principal: str) -> None:
    """Messages signed with `access_key_id` report `principal` as their SenderId (`AROA...:session` for a role)."""
    _principals[access_key_id] = principal


def principal_for(access_key_id: str) -> str:
    if access_key_id in _principals:
        return _principals[access_key_id]
    return "AIDA" + hashlib.sha256(access_key_id.encode()).hexdigest()[:17].upper()  # an IAM user's unique id


def faithful_moto_sqs_sender() -> None:
    from moto.sqs import models
    from moto.sqs.responses import SQSResponse

    if getattr(SQSResponse, _PATCHED, False):
        return

    def signed(original: Any) -> Any:
        @functools.wraps(original)
        def wrapper(self: Any) -> Any:
            # moto's get_access_key only knows 20-character AKIA-style keys; read the SigV4 credential itself.
            found = _CREDENTIAL.search(self.headers.get("Authorization", ""))
            _current.sender = principal_for(found.group(1) if found else self.get_access_key())
            try:
                return original(self)
            finally:
                _current.sender = None

        return wrapper

    SQSResponse.send_message = signed(SQSResponse.send_message)  # type: ignore[method-assign]
    SQSResponse.send_message_batch = signed(SQSResponse.send_message_batch)  # type: ignore[method-assign]
    message_init = models.Message.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        message_init(self, *args, **kwargs)
        sender = getattr(_current, "sender", None)
        if sender:
            self.sender_id = sender

    models.Message.__init__ = init  # type: ignore[method-assign]
    setattr(SQSResponse, _PATCHED, True)
