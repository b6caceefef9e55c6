"""The last step of `sam delete`: the cluster's AWS leftovers go with the stack, or the deletion stops and says why.

Run by the stack's custom resource (functions/teardown) when CloudFormation deletes it, which it does before the
services function (the resource depends on it, so the function can still finish the deletions of Services that
are going away). One pass:

1. **Refuse while a load balancer of ours is left** (cluster-tagged `owned` and carrying our Service UID tag): its
   Service still needs it, or its cleanup has not run; deleting the groups under it would cut its clients, and
   deleting the stack would leave it unmanaged. The refusal names every such Service.
2. Otherwise delete what is left of ours: target groups and per-Service groups with our UID tag (leftovers of an
   interrupted cleanup), then the cluster's shared groups (listener groups, the all-ports group of 0.2, the backend
   group), each after revoking the node-group rules that name it (the one backend rule per node group).
   `DependencyViolation` (a deleted load balancer's network interfaces linger for a few minutes) is "in use":
   waited for by the caller, never forced.

Pod-CIDR routes and `SourceDestCheck` (the routes function) are not reverted: the cluster's pods still use them
while nodes run; docs/deploy.md ("Removing it") says how to remove them once the nodes are gone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ccm.aws import names
from ccm.aws import security_groups_model as sgm
from ccm.aws.clients import AwsClients
from ccm.aws.security_groups import SecurityGroups
from ccm.contracts.cluster import Cluster
from ccm.sweeper.actions import Actions, Deleted
from ccm.sweeper.custom_resource import FAILED, SUCCESS, Outcome
from ccm.sweeper.inventory import Inventory
from ccm.sweeper.model import DELETE_ORDER, LOAD_BALANCERS, Kind, Resource

log = logging.getLogger(__name__)

SHOWN_LEFT: Final = 10  # load balancers named in a refusal (CloudFormation shows a short reason)


@dataclass(frozen=True, slots=True)
class TeardownResult:
    remaining: tuple[str, ...] = ()  # "namespace/name (lb name)" of load balancers of ours still there
    in_use: tuple[str, ...] = ()  # groups AWS still holds (DependencyViolation): tried again
    deleted: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        return not self.remaining and not self.in_use


def reason(result: TeardownResult, cluster: Cluster) -> str:
    """Pure: why the stack cannot go yet, as CloudFormation shows it (DELETE_FAILED) and the log says it."""
    if result.remaining:
        shown = ", ".join(result.remaining[:SHOWN_LEFT])
        more = f" and {len(result.remaining) - SHOWN_LEFT} more" if len(result.remaining) > SHOWN_LEFT else ""
        return (
            f"{len(result.remaining)} load balancers of cluster {cluster.name} still exist ({shown}{more}): delete "
            "those Services (or change their type) and wait for their EXTERNAL-IP to go, then delete the stack "
            "again. Nothing was deleted."
        )
    if result.in_use:
        return (
            f"security groups {', '.join(result.in_use)} are still in use (a deleted load balancer's network "
            "interfaces take a few minutes to go): delete the stack again in a few minutes"
        )
    return ""


def _left(resources: list[Resource]) -> tuple[str, ...]:
    return tuple(
        sorted(f"{r.tags.get(names.SERVICE_NAME_TAG, '?')} ({r.name})" for r in resources if r.kind in LOAD_BALANCERS)
    )


class Teardown:
    def __init__(self, clients: AwsClients, cluster: Cluster, groups: SecurityGroups) -> None:
        self.clients = clients
        self.cluster = cluster
        self.groups = groups
        self.inventory = Inventory(clients, cluster)
        self.actions = Actions(clients, groups, cluster, services_queue_url="")

    def run(self) -> TeardownResult:
        resources = self.inventory.read()
        if remaining := _left(resources):
            return TeardownResult(remaining=remaining)
        # What the inventory read (ours by UID tag, the collected shared groups) and the backend group, which only
        # goes with the stack: one list, deleted in dependency order (target groups before groups).
        known = {r.id for r in resources}
        shared = [
            Resource(Kind.SECURITY_GROUP, str(g["GroupId"]), str(g["GroupId"]), str(g.get("GroupName", "")), tags)
            for g in self.groups.shared.find_all()
            if str(g["GroupId"]) not in known
            for tags in [{t["Key"]: t["Value"] for t in g.get("Tags", [])}]
            if sgm.shared_role(g, self.cluster.tag_key) is not None
        ]
        in_use: list[str] = []
        deleted: list[str] = []
        for resource in sorted([*resources, *shared], key=lambda r: (DELETE_ORDER[r.kind], r.key)):
            outcome = self.actions.delete(resource)
            if outcome is Deleted.IN_USE:
                in_use.append(resource.id)
            elif outcome is Deleted.DELETED:
                deleted.append(resource.id)
                log.info("deleted %s %s (%s)", resource.kind.value, resource.id, resource.name)
        self.groups.forget_node_groups()
        return TeardownResult(in_use=tuple(in_use), deleted=tuple(deleted))


WAIT_SECONDS: Final = 15.0  # between passes while a load balancer or a network interface is going away
MARGIN_MS: Final = 60_000  # the answer to CloudFormation must leave before the Lambda timeout
# Load balancers that stay the same this long are not being deleted (the user forgot their Services): refuse now
# rather than hold the stack deletion for the function's whole timeout.
STALLED_PASSES: Final = 8  # 2 minutes at WAIT_SECONDS


class TeardownResource:
    """The stack's custom resource: nothing on create and update; on delete, passes until done or out of time
    (a Service being deleted right now, a network interface lingering), then the refusal with its reason."""

    def __init__(self, teardown: Teardown, sleep: Callable[[float], None] = time.sleep) -> None:
        self.teardown = teardown
        self.clients = teardown.clients  # the runtime's clients, as every function's runtime exposes them
        self.physical_id = f"serverless-ccm-teardown-{teardown.cluster.name}"
        self._sleep = sleep

    def keep(self) -> Outcome:
        return Outcome(SUCCESS, "nothing to do until the stack is deleted")

    def delete(self, remaining_ms: Callable[[], int]) -> Outcome:
        seen: tuple[str, ...] = ()
        unchanged = 0
        while True:
            result = self.teardown.run()
            if result.done:
                return Outcome(SUCCESS, f"deleted {len(result.deleted)} leftover resources of the cluster")
            why = reason(result, self.teardown.cluster)
            unchanged = unchanged + 1 if result.remaining and result.remaining == seen else 0
            seen = result.remaining
            if unchanged >= STALLED_PASSES or remaining_ms() - WAIT_SECONDS * 1000 < MARGIN_MS:
                log.warning("stack deletion refused: %s", why)
                return Outcome(FAILED, why)
            log.info("waiting: %s", why)
            self._sleep(WAIT_SECONDS)
