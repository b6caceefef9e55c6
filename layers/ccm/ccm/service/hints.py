"""When a message may cause a delete (pure): messages are hints, never orders.

A delete by hint (the Service of a UID is gone, or was re-created under the same name) happens only when the
Kubernetes API confirms it AND the resources say whose they are. The API side is `decisions.decide`: no live
Service at the key, or a live one with another UID. The AWS side is here: every resource named for that UID (the
load balancer under either API, its managed security group) must carry our tags naming exactly that
`namespace/name` and that UID. A load balancer name keeps only 31 characters of the UID and a message can name any
key, so without this a forged `DELETED` (the victim's UID under another key) or a UID-change hint (a UID differing
from the victim's in its last character) deleted a live Service's load balancer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ccm.contracts.cloud import SERVICE_NAME_TAG, SERVICE_UID_TAG


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
