"""Member nodes for a service reconcile: from the membership table, or (until it is seeded, or without one)
from a paginated LIST of Nodes, which then seeds the table."""

from __future__ import annotations

from ccm.contracts.kube import KubeObject, NodeLister
from ccm.contracts.store import MembershipStore
from ccm.membership import model


class MemberNodes:
    def __init__(self, kube: NodeLister, store: MembershipStore | None) -> None:
        self.kube = kube
        self.store = store

    def records(self) -> list[model.MemberRecord]:
        stored = self.store.members() if self.store is not None else None
        if stored is not None:
            return stored
        nodes = self.kube.list_nodes()
        if self.store is not None:
            self.store.seed(
                (n["metadata"]["name"], model.member_record(n), int(n["metadata"].get("resourceVersion") or 0))
                for n in nodes
            )
        return [r for r in (model.member_record(n) for n in nodes) if r is not None]

    def for_service(self, svc: KubeObject) -> list[KubeObject]:
        """Member nodes selected by the Service's target-node-labels, in the shape the drivers read."""
        return [r.as_node() for r in model.members_for(model.service_selector(svc), self.records())]

    def register(self, svc: KubeObject, first_time: bool = False) -> None:
        if self.store is not None:
            meta = svc["metadata"]
            key, selector = f"{meta['namespace']}/{meta['name']}", model.service_selector(svc)
            self.store.register_service(key, meta["uid"], selector, known_new=first_time)

    def unregister(self, svc: KubeObject) -> None:
        if self.store is not None:
            meta = svc["metadata"]
            self.store.unregister_service(f"{meta['namespace']}/{meta['name']}", meta["uid"])
