"""Who may send what (pure): each queue accepts a message kind only from the principals that own it.

SQS stamps every message with its sender (system attribute `SenderId`: an IAM user id, or `<role id>:<session>`
for an assumed role such as a Lambda function or a Pod Identity / IRSA session). Owners, by queue:

| queue    | kind/type                                      | sender                          |
|----------|------------------------------------------------|---------------------------------|
| services | Service ADDED, MODIFIED, DELETED, SYNC; HEARTBEAT | the watcher                  |
| services | Service SYNC (re-enqueued drift)               | the sweeper                     |
| services | Service HOSTS                                  | the nodes function              |
| services | Service ENDPOINTS                              | the watcher                     |
| nodes    | Node deltas                                    | the watcher                     |
| routes   | Route NODE (a forwarded node change)           | the nodes function              |

(EventBridge's messages, on the nodes and routes queues, are not deltas: the queue policy admits only our rules.)

The role ids come from the template (`SENDERS_<ROLE>` = `!GetAtt <Role>.RoleId`). Not configured at all (no
variable set): nothing is checked (unit tests, hand-run handlers). A variable set but empty (the watcher role is
not ours, `WatcherAuth=none`): that owner's kinds are accepted from any sender of the queue, which the queue
policy still limits to the account.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

WATCHER: Final = "watcher"
NODES: Final = "nodes"
SWEEPER: Final = "sweeper"
ROLES: Final = (WATCHER, NODES, SWEEPER)

_DELTA_TYPES: Final = ("ADDED", "MODIFIED", "DELETED", "SYNC")
OWNERS: Final[Mapping[tuple[str, str], frozenset[str]]] = {
    **{("Service", t): frozenset({WATCHER}) for t in _DELTA_TYPES},
    ("Service", "SYNC"): frozenset({WATCHER, SWEEPER}),
    ("Service", "HOSTS"): frozenset({NODES}),
    ("Service", "ENDPOINTS"): frozenset({WATCHER}),  # its EndpointSlices changed (ccm.contracts.messages)
    ("Watcher", "HEARTBEAT"): frozenset({WATCHER}),
    **{("Node", t): frozenset({WATCHER}) for t in _DELTA_TYPES},
    ("Route", "NODE"): frozenset({NODES}),
}

Senders = Mapping[str, frozenset[str] | None]  # role -> its principal ids (None: any)


def senders_from_env(env: Mapping[str, str]) -> Senders | None:
    """The SENDERS_* variables of `env` (the composition root passes the environment: ccm.wiring.settings)."""
    if not any(f"SENDERS_{role.upper()}" in env for role in ROLES):
        return None
    found: dict[str, frozenset[str] | None] = {}
    for role in ROLES:
        ids = frozenset(i.strip() for i in env.get(f"SENDERS_{role.upper()}", "").split(",") if i.strip())
        found[role] = ids or (None if f"SENDERS_{role.upper()}" in env else frozenset())
    return found


def sender_refusal(kind: str, event_type: str, sender_id: str | None, senders: Senders | None) -> str | None:
    """None when `sender_id` may send this kind of message; otherwise why not."""
    if senders is None:
        return None
    owners = OWNERS.get((kind, event_type), frozenset())
    principal = (sender_id or "").split(":", 1)[0]
    for role in owners:
        ids = senders.get(role, frozenset())
        if ids is None or principal in ids:
            return None
    allowed = "/".join(sorted(owners)) or "nobody"
    return f"{kind}/{event_type} is sent by the {allowed} only, not by {sender_id or '<unknown sender>'}"
