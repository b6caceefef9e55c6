"""Chaos: random schedules of Service and Node changes interleaved with faults, then a quiesce and the invariants.

A hypothesis RuleBasedStateMachine drives the devstack (watcher process -> SQS FIFO on moto -> in-process Lambdas
-> moto through the AWS fault proxy; Kubernetes is the emulator). Changes: Services (NLB and Classic ELB), node
joins, leaves, labels and instance terminations. Faults (tests/chaos/fault_rules.py): duplicated and stale
deltas, crashes right after mutating AWS calls, AWS throttling and 5xx bursts (ELB, EC2, tagging, SQS, DynamoDB),
Kubernetes 409/429/500, watch drops, 410 Gone, watcher restarts and outages, Lambda timeouts, the sweeper, Services
vanishing. After the schedule every fault is cleared and the system must converge (tests/chaos/invariants.py).
See docs/chaos.md for budgets, the soak mode and how to reproduce a failure.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections import Counter
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, Phase, note, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, get_state_machine_test, initialize, precondition, rule

from ccm import predicates as p
from devstack.stack import Stack
from tests.chaos import world as w
from tests.chaos.fault_rules import FAILURE_BUDGET, FaultRules
from tests.chaos.ledger import Ledger, report
from tests.e2e.test_nodes import launch, provider_id

SOAK = os.environ.get("CHAOS_SOAK") == "1"
MAX_EXAMPLES = int(os.environ.get("CHAOS_EXAMPLES") or (200 if SOAK else 6))
STEPS = int(os.environ.get("CHAOS_STEPS") or (25 if SOAK else 10))
VERBOSE = os.environ.get("CHAOS_VERBOSE") == "1"
SHRINK = os.environ.get("CHAOS_SHRINK") != "0"  # 0: report the failing schedule as found (shrinking re-runs many)
SEED = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
QUIESCE_S = 90.0  # after the faults are cleared
SETTLE_S = 20.0  # before: the armed faults meet the traffic the schedule caused
NAMES = ("a", "b", "c")
PORTS = ((80, "TCP"), (443, "TCP"), (8080, "TCP"), (53, "UDP"))
A = "service.beta.kubernetes.io/aws-load-balancer-"
# (annotations, valid) - the invalid ones are refused by the parser: a Warning, no AWS change, no retry.
ANNOTATIONS: tuple[tuple[dict[str, str], bool], ...] = (
    ({}, True),
    ({A + "healthcheck-interval": "20"}, True),
    ({w.TARGET_LABELS: "chaos-pool=a"}, True),
    ({A + "cross-zone-load-balancing-enabled": "true"}, True),
    ({A + "type": "clb"}, True),  # a Classic ELB (UDP ports make it invalid: _valid)
    ({A + "type": "clb", w.TARGET_LABELS: "chaos-pool=a"}, True),
    ({A + "healthcheck-interval": "soon"}, False),
    ({A + "healthcheck-healthy-threshold": "99"}, False),
)
CHAOS_LABEL = "chaos-pool"
MAX_JOINED = 2


class ChaosMachine(FaultRules, RuleBasedStateMachine):
    stack: ClassVar[Stack]
    examples: ClassVar[int] = 0
    stats: ClassVar[Counter[str]] = Counter()  # steps by rule, seconds by phase: printed at the end
    fault_totals: ClassVar[Counter[str]] = Counter()  # armed / fired / not fired per fault kind
    joins: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).examples += 1
        self.ns = f"chaos-{type(self).examples}-{uuid.uuid4().hex[:6]}"
        assert self.stack.emulator is not None
        self.stack.emulator.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}})
        self.services: dict[str, dict[str, Any]] = {}  # name -> {lb, ports, annotations, valid, deleted}
        self.snapshots: list[dict[str, Any]] = []  # every Service object we wrote, for stale replays
        self.base_nodes = sorted(n["metadata"]["name"] for n in self.stack.emulator.list("nodes"))
        self.joined: list[str] = []
        self.terminated: dict[str, str] = {}  # node name -> instance id, terminated by the schedule
        self.watcher_down = False
        self.swept = False
        self.ledger = Ledger()
        self.judged: Counter[str] = Counter()
        self.timeouts_at_start = self._timeouts()
        self.timeouts_armed = 0
        self.budget = FAILURE_BUDGET
        self.aws_errors = 0
        self.started = time.monotonic()
        self.lines: list[str] = []

    def _step(self, what: str) -> None:
        self.stats[what] += 1

    def _note(self, line: str) -> None:
        """A readable line of the schedule: printed by hypothesis for the failing (shrunk) example."""
        note(line)
        self.lines.append(line)

    # -- Services ---------------------------------------------------------------------------------------------
    def _live(self) -> list[str]:
        return [n for n, s in self.services.items() if not s["deleted"]]

    def _wanting(self) -> list[str]:
        return [n for n in self._live() if self.services[n]["lb"]]

    def _record(self, obj: dict[str, Any] | None) -> None:
        if obj:
            self.snapshots.append(obj)

    @rule(
        name=st.sampled_from(NAMES),
        lb=st.booleans(),
        ports=st.lists(st.sampled_from(PORTS), min_size=1, max_size=3, unique=True),
        ann=st.integers(0, len(ANNOTATIONS) - 1),
    )
    def create_service(self, name: str, lb: bool, ports: list[tuple[int, str]], ann: int) -> None:
        self._step("create_service")
        if name in self._live():
            return
        if name in self.services and w.read(self.stack, "services", self.ns, name) is not None:
            # Deleted but still terminating behind our finalizer: the API server refuses the name (409), as it
            # would refuse `kubectl create`; a user waits for the old object to go, so the schedule does too.
            self._note(f"create {name}: skipped, the deleted {name} is still terminating")
            return
        annotations, valid = ANNOTATIONS[ann]
        self._note(f"create {name}: {'LoadBalancer' if lb else 'ClusterIP'} {_ports(ports)} {annotations or ''}")
        self._record(w.create_service(self.stack, w.service_body(self.ns, name, lb, ports, annotations)))
        self.services[name] = {"lb": lb, "annotations": annotations, "valid": valid, "deleted": False, "ports": ports}

    @initialize(
        ports=st.lists(st.sampled_from(PORTS), min_size=1, max_size=3, unique=True),
        ann=st.integers(0, len(ANNOTATIONS) - 1),
    )
    def first_load_balancer(self, ports: list[tuple[int, str]], ann: int) -> None:
        """Every schedule starts with a LoadBalancer Service, so node and fault steps have something to hit."""
        self.create_service("a", True, ports, ann)

    @rule(
        name=st.sampled_from(NAMES),
        ports=st.lists(st.sampled_from(PORTS), min_size=1, max_size=3, unique=True),
        ann=st.integers(0, len(ANNOTATIONS) - 1),
    )
    def create_load_balancer(self, name: str, ports: list[tuple[int, str]], ann: int) -> None:
        self.create_service(name, True, ports, ann)

    @precondition(lambda self: self._live())
    @rule(data=st.data(), ports=st.lists(st.sampled_from(PORTS), min_size=1, max_size=3, unique=True))
    def update_ports(self, data: st.DataObject, ports: list[tuple[int, str]]) -> None:
        self._step("update_ports")
        name = data.draw(st.sampled_from(sorted(self._live())), label="service")
        self._note(f"update {name}: ports {_ports(ports)}")

        def change(svc: dict[str, Any]) -> None:
            old = {(sp["port"], sp.get("protocol", "TCP")): sp for sp in svc["spec"]["ports"]}
            svc["spec"]["ports"] = [
                old.get((port, proto))
                or {"name": f"{proto.lower()}{port}", "port": port, "protocol": proto, "targetPort": 8080}
                for port, proto in ports
            ]

        self._record(w.replace_service(self.stack, self.ns, name, change))
        self.services[name]["ports"] = ports

    @precondition(lambda self: self._live())
    @rule(data=st.data(), ann=st.integers(0, len(ANNOTATIONS) - 1))
    def update_annotations(self, data: st.DataObject, ann: int) -> None:
        self._step("update_annotations")
        name = data.draw(st.sampled_from(sorted(self._live())), label="service")
        annotations, valid = ANNOTATIONS[ann]
        self._note(f"update {name}: annotations {annotations} ({'valid' if valid else 'INVALID'})")

        def change(svc: dict[str, Any]) -> None:
            svc["metadata"]["annotations"] = dict(annotations)

        self._record(w.replace_service(self.stack, self.ns, name, change))
        self.services[name].update(annotations=annotations, valid=valid)

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def flip_type(self, data: st.DataObject) -> None:
        self._step("flip_type")
        name = data.draw(st.sampled_from(sorted(self._live())), label="service")
        lb = not self.services[name]["lb"]
        self._note(f"update {name}: type -> {'LoadBalancer' if lb else 'ClusterIP'}")

        def change(svc: dict[str, Any]) -> None:
            svc["spec"]["type"] = "LoadBalancer" if lb else "ClusterIP"

        self._record(w.replace_service(self.stack, self.ns, name, change))
        self.services[name]["lb"] = lb

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def delete_service(self, data: st.DataObject) -> None:
        self._step("delete_service")
        name = data.draw(st.sampled_from(sorted(self._live())), label="service")
        self._note(f"delete {name}")
        w.delete_service(self.stack, self.ns, name)
        self.services[name]["deleted"] = True

    # -- Nodes ------------------------------------------------------------------------------------------------
    @precondition(lambda self: self._wanting())
    @rule(data=st.data())
    def node_churn(self, data: st.DataObject) -> None:
        if self.joined and (len(self.joined) >= MAX_JOINED or data.draw(st.booleans(), label="leave")):
            name = data.draw(st.sampled_from(self.joined), label="node")
            self._step("node leave")
            self._note(f"node leave {name}")
            core = self.stack.core()
            w.retrying(lambda: core.delete_node(name))
            self.joined.remove(name)
            return
        self._step("node join")
        inst = launch(self.stack)
        name = inst["PrivateDnsName"]
        type(self).joins += 1
        cidr = f"10.244.{3 + type(self).joins % 250}.0/24"  # the seeded nodes have 10.244.0-2.0/24
        self._note(f"node join {name} ({inst['InstanceId']}, pod CIDR {cidr})")
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {
                "providerID": provider_id(inst),
                "taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "effect": "NoSchedule"}],
                "podCIDR": cidr,
                "podCIDRs": [cidr],
            },
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
        }
        core = self.stack.core()
        w.retrying(lambda: core.create_node(body, _preload_content=False))
        self.joined.append(name)

    @precondition(lambda self: self._wanting())
    @rule(data=st.data(), change=st.sampled_from(["label", "unlabel", "exclude", "include", "taint", "untaint"]))
    def node_change(self, data: st.DataObject, change: str) -> None:
        self._step("node_change")
        name = data.draw(st.sampled_from(self.base_nodes + self.joined), label="node")
        self._note(f"node {change} {name}")

        def apply(node: dict[str, Any]) -> None:
            labels = node["metadata"].setdefault("labels", {})
            taints = [t for t in node["spec"].get("taints") or [] if t["key"] != p.TO_BE_DELETED_TAINT]
            if change == "label":
                labels[CHAOS_LABEL] = "a"
            elif change == "unlabel":
                labels.pop(CHAOS_LABEL, None)
            elif change == "exclude":
                labels[p.EXCLUDE_LABEL] = "true"
            elif change == "include":
                labels.pop(p.EXCLUDE_LABEL, None)
            elif change == "taint":
                taints.append({"key": p.TO_BE_DELETED_TAINT, "value": "1", "effect": "NoSchedule"})
            node["spec"]["taints"] = taints

        w.replace_node(self.stack, name, apply)

    # -- the verdict --------------------------------------------------------------------------------------------
    def _judge_faults(self) -> None:
        """Before the quiesce clears them: which armed faults met their traffic."""
        self.judged = self.ledger.judge()
        type(self).fault_totals.update(self.judged)

    def _expected(self, all_deleted: bool = False) -> dict[str, w.Expected]:
        return {
            name: w.Expected(
                lb=s["lb"],
                valid=_valid(s),
                deleted=s["deleted"] or all_deleted,
                target_labels={CHAOS_LABEL: "a"} if w.TARGET_LABELS in s["annotations"] else {},
                lb_type=s["annotations"].get(A + "type", "nlb"),
            )
            for name, s in self.services.items()
        }

    def _timeouts(self) -> int:
        assert self.stack.runner is not None
        return sum(1 for i in self.stack.runner.log if i.outcome == "timeout")

    def _check(self) -> list[str]:
        problems = w.violations(self.stack, self.ns, self._expected(), self.stack.baseline)  # type: ignore[attr-defined]
        gone = [n for n in self.terminated if w.read(self.stack, "nodes", None, n) is not None]
        return problems + [f"node {n}: its instance was terminated, the Node is still there" for n in gone]

    def teardown(self) -> None:
        stack = self.stack
        t0 = time.monotonic()
        self.stats["s schedule"] += t0 - self.started
        ticks: list[float] = []
        sweeps: list[dict[str, Any]] = []
        try:
            problems = w.quiesce(
                stack,
                self._check,
                QUIESCE_S,
                settle=SETTLE_S,
                before_clear=self._judge_faults,
                ticks=ticks,
                sweeps=sweeps,
            )
            self.stats["sweeper runs at quiesce"] += len(sweeps)
            self.stats["safety passes"] += len(ticks)
        finally:
            t1 = time.monotonic()
            self.stats["s quiesce"] += t1 - t0
            leftovers = self._reset()
            self.stats["s reset"] += time.monotonic() - t1
            if VERBOSE:
                print(f"example {self.ns}: {self.lines} -> {report(self.judged)}")
        if problems:
            raise AssertionError("invariants violated after quiesce:\n  " + "\n  ".join(problems))
        if leftovers:
            raise AssertionError("cleanup after the schedule did not converge:\n  " + "\n  ".join(leftovers))

    def _reset(self) -> list[str]:
        """Delete every Service, restore the nodes, converge; purge by force (and report) what did not go."""
        stack = self.stack
        w.clear_faults(stack)
        for name in self._live():
            w.delete_service(stack, self.ns, name)
        core = stack.core()
        for name in self.joined + [n for n in self.terminated if w.read(stack, "nodes", None, n) is not None]:
            w.retrying(lambda name=name: core.delete_node(name))  # type: ignore[misc]
        for name in self.base_nodes:
            w.replace_node(stack, name, _restore_node)
        expected = self._expected(all_deleted=True)
        baseline = stack.baseline  # type: ignore[attr-defined]
        problems = w.quiesce(stack, lambda: w.violations(stack, self.ns, expected, baseline), QUIESCE_S)
        if problems:
            w.purge(stack, self.ns)
        return problems


def _valid(service: dict[str, Any]) -> bool:
    """Annotations that parse, and no UDP port on a Classic ELB (refused: UDP needs an NLB)."""
    udp = any(proto == "UDP" for _, proto in service["ports"])
    return bool(service["valid"]) and not (udp and service["annotations"].get(A + "type") == "clb")


def _restore_node(node: dict[str, Any]) -> None:
    labels = node["metadata"].get("labels") or {}
    for key in (CHAOS_LABEL, p.EXCLUDE_LABEL):
        labels.pop(key, None)
    node["spec"]["taints"] = [t for t in node["spec"].get("taints") or [] if t["key"] != p.TO_BE_DELETED_TAINT]


def _ports(ports: list[tuple[int, str]]) -> str:
    return ",".join(f"{port}/{proto}" for port, proto in ports)


@pytest.mark.timeout(3600 * 8 if SOAK else 600)
def test_no_schedule_of_changes_and_faults_loses_anything(stack: Stack) -> None:
    print(f"chaos seed {SEED} (reproduce: CHAOS_SEED={SEED}); {MAX_EXAMPLES} examples x {STEPS} steps")
    ChaosMachine.stack = stack
    chaos_settings = settings(
        max_examples=MAX_EXAMPLES,
        stateful_step_count=STEPS,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if SHRINK else []),
        print_blob=True,
        database=None,  # the schedule depends on timing too; the seed and the printed steps are the record
    )
    started = time.monotonic()
    try:
        seed(SEED)(get_state_machine_test(ChaosMachine, settings=chaos_settings))()
    finally:
        stats = {k: round(v, 1) for k, v in sorted(ChaosMachine.stats.items())}
        assert stack.runner is not None and stack.aws_proxy is not None
        outcomes = Counter(i.outcome for i in stack.runner.log)
        print(f"chaos: {ChaosMachine.examples} examples in {time.monotonic() - started:.0f} s; {stats}")
        injected = sum(stack.aws_proxy.injected.values())
        print(f"chaos: invocations {dict(outcomes)}; AWS requests {stack.aws_proxy.passed} + {injected} errors")
        print(f"chaos: faults {report(ChaosMachine.fault_totals)}")
