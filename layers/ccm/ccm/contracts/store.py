"""The table contracts: what the controllers keep between passes, stated once; ccm.aws.table_views implements them
over the one DynamoDB table (ccm.aws.table.ClusterTable, its only caller).

- `MembershipStore`: member nodes and the LoadBalancer Services that need host updates (ccm.membership);
- `OrphanMarks`: when the sweeper first saw each orphan (ccm.sweeper);
- the checkpoints of what was applied (`AppliedStore`, ccm.contracts.cloud) live in the same table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ccm.contracts.provider_id import provider_id_for


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """What load balancers need from a member node: its instance id and labels (`target-node-labels`)."""

    name: str
    instance_id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    resource_version: int = 0

    def as_node(self) -> dict[str, Any]:
        """The minimal Node shape the load balancer drivers read (name, labels, providerID)."""
        return {
            "metadata": {"name": self.name, "labels": dict(self.labels)},
            "spec": {"providerID": provider_id_for("", self.instance_id)} if self.instance_id else {},
        }


@dataclass(frozen=True, slots=True)
class StoredNode:
    """A node item of the table: its record (None when not a member) and the resourceVersion it was written at."""

    record: MemberRecord | None
    resource_version: int


class MembershipStore(Protocol):
    """Member nodes (one item each, written only when what load balancers care about changes, conditional on a newer
    resourceVersion) and the Services registered for host updates."""

    def members(self) -> list[MemberRecord] | None:
        """Every member node, or None while the table was never seeded (callers then LIST and seed)."""
        ...

    def node_states(self) -> tuple[bool, dict[str, StoredNode]]:
        """Whether the table was seeded, and every node item (members, non-members, tombstones)."""
        ...

    def mark_seeded(self) -> None: ...

    def get(self, name: str) -> tuple[MemberRecord | None, int]:
        """A node's record (None when absent or not a member) and its stored resourceVersion (0 when absent)."""
        ...

    def write(self, name: str, record: MemberRecord | None, resource_version: int, deleted: bool = False) -> bool:
        """Store a node's state if it is newer than what is stored; False when a newer write won."""
        ...

    def seed(self, nodes: Iterable[tuple[str, MemberRecord | None, int]]) -> None:
        """Store a full LIST (name, record, rv) and mark the table seeded; newer data is kept."""
        ...

    def register_service(self, key: str, uid: str, selector: Mapping[str, str], known_new: bool = False) -> bool:
        """Record a LoadBalancer Service for host updates; True when something was written."""
        ...

    def unregister_service(self, key: str, uid: str) -> None:
        """Forget the Service, only if the stored one has this UID (a re-created one keeps its registration)."""
        ...

    def services(self) -> list[tuple[str, str, dict[str, str]]]:
        """(key, uid, target-node-labels selector) of every registered Service."""
        ...


class OrphanMarks(Protocol):
    """The first sight of each current orphan (resource id -> epoch seconds), for the sweeper's grace period."""

    def load(self) -> dict[str, float]: ...
    def mark(self, key: str, since: float) -> None: ...
    def forget(self, key: str) -> None: ...
