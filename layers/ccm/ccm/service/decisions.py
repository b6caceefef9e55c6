"""The service controller's decision table (k8s.io/cloud-provider controllers/service/controller.go), as pure functions.

| state                                             | action                                   |
|---------------------------------------------------|------------------------------------------|
| object gone, never ours (hint: no finalizer/LB)   | NOTHING                                  |
| object gone, was ours                             | DELETE_GONE (delete the hinted UID's LB) |
| found, UID differs from the hinted one            | delete the old UID's LB first, then ...  |
| found, belongs to another controller, no finalizer| NOTHING (ImplementedElsewhere)           |
| found, belongs to another controller, finalizer   | CLEANUP (drop our LB, keep their status) |
| found, !wantsLoadBalancer || needsCleanup         | DELETE                                   |
| HOSTS hint (member nodes changed), LB in place    | UPDATE_HOSTS (UpdateLoadBalancer)        |
| ENDPOINTS hint (its EndpointSlices changed)       | UPDATE_ENDPOINTS (ip targets only)       |
| otherwise                                         | ENSURE                                   |

A delete the table decides (DELETE, CLEANUP_FOREIGN, DELETE_GONE, an earlier UID's) happens only when the AWS side
confirms it too, in this module as well (`confirm_delete`, `hint_delete_refusal`): every resource named for that UID
must carry our tags naming exactly that `namespace/name` and that UID. A load balancer name keeps only 31
characters of the UID and a message can name any key, so without this a forged `DELETED` (the victim's UID under
another key) or a UID-change hint (a UID differing from the victim's in its last character) deleted a live
Service's load balancer. (What each driver, the sweeper and the teardown ask last, before their own deletes, is the
one ownership rule `Cluster.claim`: this cluster's tag and our UID tag.)

We keep no memory between reconciles: "was known" and "the last UID processed" come from the delta (the hint),
so a re-created Service (new UID) gets its predecessor's LB deleted first, and a Service that stopped being a
LoadBalancer while we were down is still cleaned up (its finalizer is on the live object).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ccm.contracts import kube as p
from ccm.contracts.cloud import SERVICE_NAME_TAG, SERVICE_UID_TAG
from ccm.contracts.messages import Delta

KubeObject = p.KubeObject


class Action(enum.Enum):
    NOTHING = "nothing"
    ENSURE = "ensure"
    DELETE = "delete"
    CLEANUP_FOREIGN = "cleanup-foreign"
    DELETE_GONE = "delete-gone"
    UPDATE_HOSTS = "update-hosts"
    UPDATE_ENDPOINTS = "update-endpoints"


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    delete_previous_uid: str | None = None  # an older incarnation's LB to delete before acting
    reason: str = ""


def _hint_was_ours(delta: Delta) -> bool:
    hinted = delta.object
    return hinted.get("type") == "LoadBalancer" or p.FINALIZER in (hinted.get("finalizers") or [])


def decide(delta: Delta, live: KubeObject | None, our_class: str, claim_unclassed: bool = True) -> Decision:
    if live is None:
        if _hint_was_ours(delta):
            return Decision(Action.DELETE_GONE, reason="object gone; deleting the load balancer of its UID")
        return Decision(Action.NOTHING, reason="object gone and never had a load balancer")

    live_uid = p.meta(live).get("uid")
    previous = delta.uid if delta.uid and delta.uid != live_uid and _hint_was_ours(delta) else None

    if not p.belongs_to_us(live, our_class, claim_unclassed):
        if p.has_finalizer(live):
            return Decision(Action.CLEANUP_FOREIGN, previous, "handed to another controller; removing ours")
        return Decision(Action.NOTHING, previous, "implemented elsewhere")
    if not p.wants_load_balancer(live, our_class) or p.needs_cleanup(live):
        if not p.has_finalizer(live):
            # The finalizer goes on before any cloud call, so without it we never created anything.
            return Decision(Action.NOTHING, previous, "does not want a load balancer and never had one")
        return Decision(Action.DELETE, previous, "load balancer no longer wanted")
    if delta.type == "HOSTS" and p.has_finalizer(live) and not previous:
        return Decision(Action.UPDATE_HOSTS, reason="member nodes changed")
    if delta.type == "ENDPOINTS" and p.has_finalizer(live) and not previous:
        return Decision(Action.UPDATE_ENDPOINTS, reason="endpoints changed")
    return Decision(Action.ENSURE, previous, "wants a load balancer")


# -- the AWS side of a delete (pure): what the resources named for the UID say ------------------------------------
@dataclass(frozen=True, slots=True)
class DeleteVerdict:
    action: Action  # the decided action, or NOTHING when what exists is another controller's
    refusal: str | None = None  # set: never ours to delete; nothing is deleted and the finalizer stays


def confirm_delete(
    action: Action, key: str, uid: str, found: Sequence[Mapping[str, str]], *, shared_finalizer: bool
) -> DeleteVerdict:
    """The table's DELETE or CLEANUP_FOREIGN of the live Service `key` (UID `uid`), confirmed by the tags of every
    resource named for the UID (`found`). `shared_finalizer`: the cleanup finalizer is also the built-in service
    controller's (a class-less Service we do not claim)."""
    if action is Action.CLEANUP_FOREIGN and leave_to_other_controller(found, key, uid, shared_finalizer):
        return DeleteVerdict(Action.NOTHING)
    return DeleteVerdict(action, hint_delete_refusal(key, uid, found, untagged_uid_ok=True))


def hint_delete_refusal(
    key: str, uid: str, found: Sequence[Mapping[str, str]], *, untagged_uid_ok: bool = False
) -> str | None:
    """None when the resources named for `uid` (their tags, `found`) may be deleted on a hint about `key`;
    otherwise why not. Nothing found: nothing of another Service can be hit (target groups are found by the exact
    UID tag), so the leftovers of `uid` may be cleaned up. `untagged_uid_ok`: the live Service itself is being
    deleted by us, so a resource without a UID tag (naming its key, or no Service at all: cloud-provider-aws tags
    its security groups with the cluster only) is cloud-provider-aws's for this very Service: the name carries
    the UID."""
    for tags in found:
        owner_uid, owner_key = tags.get(SERVICE_UID_TAG), tags.get(SERVICE_NAME_TAG)
        if owner_uid is None and untagged_uid_ok and owner_key in (None, key):  # upstream tags its groups so
            continue
        if owner_uid == uid and untagged_uid_ok and owner_key is None:  # such a group we claimed while deleting
            continue
        if owner_uid != uid:
            return f"the load balancer named for UID {uid} is tagged for UID {owner_uid or '<none>'}"
        if owner_key != key:
            return f"the load balancer of UID {uid} is tagged for Service {owner_key or '<none>'}, not {key}"
    return None


def leave_to_other_controller(found: Sequence[Mapping[str, str]], key: str, uid: str, shared_finalizer: bool) -> bool:
    """A Service another controller implements still carries the cleanup finalizer. It is ours to clean only when
    what exists is ours; the finalizer is also the built-in service controller's (a class-less Service we do not
    claim, `shared_finalizer`): with nothing of ours it is theirs, and their load balancer is never ours to delete.
    """
    if hint_delete_refusal(key, uid, found) is not None:
        return True
    return not found and shared_finalizer


def ingress_equal(current: list[dict[str, object]] | None, desired: list[dict[str, object]] | None) -> bool:
    """Status skip-if-equal: ip, hostname, ipMode and ports, in order, compared only as far as the server keeps them.

    A server with the LoadBalancerIPMode gate off (1.28, 1.29) drops ipMode from every write, and one with it on
    gives an ip without one ipMode VIP: so an entry of the current status with an ip and no ipMode says the server
    does not keep it, and the desired ipMode of that entry is not compared (else every reconcile re-patched). An
    entry without an ip has no ipMode on either server."""
    current, desired = current or [], desired or []
    if len(current) != len(desired):
        return False
    for now, want in zip(current, desired, strict=True):
        if any(now.get(f, "") != want.get(f, "") for f in ("ip", "hostname")):
            return False
        if now.get("ip") and "ipMode" in now and now["ipMode"] != (want.get("ipMode") or "VIP"):
            return False  # the server keeps ipMode (and defaults an ip's to VIP): compare it
        if repr(now.get("ports") or []) != repr(want.get("ports") or []):
            return False
    return True
