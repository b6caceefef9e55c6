"""One sweeper run (a scheduled Lambda): read, decide (pure), act, and report every decision.

Order matters: AWS is read BEFORE the Services are listed. A resource in the inventory was created by a reconcile
of a Service that existed at that moment, so that Service (unless deleted since) is in the later list: a Service
being created right now can never look like the missing owner of its own new LB. Kubernetes: one (paginated) LIST
of Services per run, plus one Event per action taken.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, fields
from typing import Any

from aws_lambda_powertools import Logger, Metrics

from ccm.aws.clients import AwsClients, CallCounter
from ccm.aws.security_groups import SecurityGroups
from ccm.call_metrics import add_if_nonzero
from ccm.config import Settings
from ccm.contracts.cloud import KubeObject
from ccm.contracts.cluster import Cluster
from ccm.contracts.store import OrphanMarks
from ccm.k8s.events import SWEEPER
from ccm.k8s.kube import Kube, KubeRest
from ccm.logs import log_fields
from ccm.sweeper import drift as d
from ccm.sweeper import model as m
from ccm.sweeper.actions import Actions, Deleted
from ccm.sweeper.inventory import Inventory

# Process-level: the handler's decorators need these at import, before any composition root runs, and Powertools
# reads its own POWERTOOLS_* variables anyway (the defaults keep the metrics valid when they are unset).
logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME") or "sweeper")
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "ServerlessCCM")
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SweeperSettings:
    base: Settings
    services_queue_url: str
    table: str
    dry_run: bool = False
    grace_seconds: float = 1800.0
    # Built once from `base` (Settings.cluster, normalised there): every part of the sweeper judges for this value.
    cluster: Cluster = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cluster", self.base.cluster)  # frozen: set once, here

    @classmethod
    def of(cls, settings: Settings) -> SweeperSettings:
        """The sweeper's view of the settings; it cannot run without its queue and its table."""
        if not settings.services_queue_url or not settings.sweeper_table:
            raise ValueError("the sweeper needs SERVICES_QUEUE_URL and SWEEPER_TABLE (or MEMBERSHIP_TABLE)")
        return cls(
            base=settings,
            services_queue_url=settings.services_queue_url,
            table=settings.sweeper_table,
            dry_run=settings.sweeper_dry_run,
            grace_seconds=settings.sweeper_grace_seconds,
        )


@dataclass(slots=True)
class RunReport:
    dry_run: bool
    orphans: int = 0
    deleted: int = 0
    in_use: int = 0
    marked: int = 0
    requeued: int = 0
    stale_node_rules: int = 0
    failed: int = 0
    decisions: list[dict[str, Any]] = field(default_factory=list)
    aws_calls: dict[str, int] = field(default_factory=dict)
    mutating_calls: int = 0
    kube_calls: int = 0


class ServiceLister:
    """The one Kubernetes read of a run: every Service, paginated, as plain JSON."""

    def __init__(self, api: KubeRest) -> None:
        self.api = api
        self.calls = 0

    def list_services(self, page_size: int = 500) -> list[KubeObject]:
        items: list[KubeObject] = []
        token: str | None = None
        while True:
            query: dict[str, str | int] = {"limit": page_size}
            if token:
                query["continue"] = token
            self.calls += 1
            page = self.api.get("/api/v1/services", query)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items


class Sweeper:
    def __init__(
        self,
        settings: SweeperSettings,
        kube: Kube,
        lister: ServiceLister,
        clients: AwsClients,
        groups: SecurityGroups,
        marks: OrphanMarks,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Built by the composition root (ccm.wiring.sweeper), which builds the security groups driver and the orphan
        marks' store; the rest (inventory, actions) are the sweeper's own AWS-side parts on the same clients."""
        self.settings = settings
        self.kube = kube
        self.lister = lister
        self.clients = clients
        self.clock = clock
        self.groups = groups
        self.inventory = Inventory(clients, settings.cluster)
        self.actions = Actions(clients, self.groups, settings.cluster, settings.services_queue_url)
        self.marks = marks

    def run(self) -> RunReport:
        s, cluster = self.settings, self.settings.cluster
        report = RunReport(dry_run=s.dry_run)
        self.clients.counter.reset_thread()
        kube_before = self.lister.calls
        now = self.clock()
        resources = self.inventory.read()  # before the Services: see the module docstring
        view = m.View(m.services_by_key(self.lister.list_services()), resources)
        marks = self.marks.load()
        decisions = m.decide(view, marks, now, s.grace_seconds, cluster)
        for key in m.forgotten(marks, decisions):
            self.marks.forget(key)
        for decision in decisions:
            try:
                self._act(decision, view, report)
            except Exception:  # one refused delete must not stop the others, nor drift repair
                logger.exception("sweeper action failed", extra={"id": decision.resource.id})
                report.failed += 1
        if not s.dry_run:
            report.stale_node_rules = len(self.groups.revoke_stale_node_rules(lambda n: self._live_lbs(n, view)))
        candidates = d.missing_candidates(view, cluster)
        present = self.inventory.existing_lb_names(name for _, name in candidates) if candidates else set()
        missing = {name for _, name in candidates} - present
        drifts = d.find_drift(view, missing, now, s.grace_seconds, cluster)
        for drift in drifts:
            reason = "; ".join(drift.reasons)
            logger.info("drift", extra={"owner": drift.key, "reason": reason, "action": "requeue"})
            self._event(drift.service, "Warning", "DriftRepaired", f"load balancer drifted ({reason}); re-syncing")
        report.requeued = self.actions.requeue(drifts, now) if drifts else 0
        report.aws_calls = dict(self.clients.counter.thread_calls())
        report.kube_calls = self.lister.calls - kube_before
        self._metrics(report)
        logger.info(
            "sweep done",
            extra=log_fields({k: v for k, v in vars_of(report).items() if k != "decisions"}),
        )
        if report.failed:
            raise RuntimeError(f"{report.failed} sweeper actions failed (logged above); the next run retries them")
        return report

    def _act(self, decision: m.Decision, view: m.View, report: RunReport) -> None:
        r, dry = decision.resource, self.settings.dry_run
        action = decision.action.value
        if decision.orphan:
            report.orphans += 1
        if decision.action is m.Action.MARK:
            self.marks.mark(r.key, decision.since or self.clock())
            report.marked += 1
        elif decision.action is m.Action.UNMARK:
            self.marks.forget(r.key)
        elif decision.action is m.Action.DELETE:
            if dry:
                action = "would-delete"
            else:
                result = self.actions.delete(r)
                action = "delete" if result is Deleted.DELETED else f"delete-{result.value}"
                if result is Deleted.IN_USE:
                    report.in_use += 1
                else:
                    self.marks.forget(r.key)
                if result is Deleted.DELETED:
                    report.deleted += 1
                    owner = view.services.get(decision.owner.key)
                    if owner is not None:
                        self._event(
                            owner,
                            "Normal",
                            "OrphanDeleted",
                            f"deleted {r.kind.value} {r.name} ({decision.reason}, owner uid {decision.owner.uid})",
                        )
        line = {
            "kind": r.kind.value,
            "id": r.id,
            "resource_name": r.name,
            "owner": decision.owner.key,
            "owner_uid": decision.owner.uid,
            "reason": decision.reason,
            "action": action,
            "dry_run": dry,
        }
        report.decisions.append(line)
        if decision.orphan or decision.action is not m.Action.KEEP:
            logger.info("sweeper decision", extra=log_fields(line))
        else:
            logger.debug("sweeper decision", extra=log_fields(line))

    def _live_lbs(self, lb_names: Collection[str], view: m.View) -> set[str]:
        known = {n for n in lb_names if view.lb(n) is not None}
        return known | self.inventory.existing_lb_names(set(lb_names) - known)

    def _event(self, svc: KubeObject, event_type: str, reason: str, message: str) -> None:
        try:
            self.kube.record_event(svc, event_type, reason, message, SWEEPER)
        except Exception:  # events are best effort
            log.warning("could not record event %s", reason, exc_info=True)

    def _metrics(self, report: RunReport) -> None:
        # Only what acted or failed, and only when non-zero. Orphans found, AWS calls and mutating calls are fields
        # of the run's "sweep done" line (the dashboard's Logs Insights widget; ccm.call_metrics says why).
        report.mutating_calls = CallCounter.mutating(report.aws_calls)
        for name, value in (
            ("SweeperDeleted", report.deleted),
            ("SweeperDriftRequeued", report.requeued),
            ("AwsThrottles", self.clients.counter.thread_throttles()),
        ):
            add_if_nonzero(metrics, name, value)


def vars_of(report: RunReport) -> dict[str, Any]:
    return {f.name: getattr(report, f.name) for f in fields(report)}
