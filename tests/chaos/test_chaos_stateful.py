"""Chaos: random schedules of Service and Node changes interleaved with faults, then a quiesce and the invariants.

A hypothesis RuleBasedStateMachine drives the devstack (watcher process -> SQS FIFO on moto -> in-process Lambdas
-> moto through the AWS fault proxy; Kubernetes is the emulator). Faults: duplicated and stale (reordered) deltas,
a crash right after a mutating AWS call, AWS throttling and 5xx bursts, Kubernetes 409/429/500, watch drops,
410 Gone, watcher restarts (SIGTERM and SIGKILL), Lambda timeouts. After the schedule, every fault is cleared and
the system must converge (see tests/chaos/world.py for the invariants). See docs/chaos.md for budgets, the soak
mode and how to reproduce a failure.
"""

from __future__ import annotations

import json
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

from ccm.aws import faults
from ccm.messages import delta_for
from ccm.service import predicates as p
from devstack.aws_faults import FaultRule
from devstack.stack import Stack
from tests.chaos import world as w
from tests.chaos.ledger import Ledger, crash_remaining, report
from tests.e2e.test_nodes import launch, provider_id

SOAK = os.environ.get("CHAOS_SOAK") == "1"
MAX_EXAMPLES = int(os.environ.get("CHAOS_EXAMPLES") or (200 if SOAK else 6))
STEPS = int(os.environ.get("CHAOS_STEPS") or (25 if SOAK else 10))
VERBOSE = os.environ.get("CHAOS_VERBOSE") == "1"
SHRINK = os.environ.get("CHAOS_SHRINK") != "0"  # 0: report the failing schedule as found (shrinking re-runs many)
SEED = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
QUIESCE_S = 90.0  # after the faults are cleared
SETTLE_S = 20.0  # before: the armed faults meet the traffic the schedule caused
# Faults that fail a record each cost one receive of a message at most; maxReceiveCount is 5 and a host update's
# coalescing deferral takes one more, so a schedule may fail one message at most 3 times without dead-lettering
# it (docs/chaos.md). Transient AWS errors retried inside botocore (bursts < max_attempts) are not charged.
FAILURE_BUDGET = 3
# Throttling/5xx answers per schedule: botocore retries them with backoff (up to 20 s a try); more would only
# slow the test down, as long bursts end as record failures that the budget above already covers.
AWS_ERROR_CAP = 3
# SigV4 names the proxy classifies by: the load balancer APIs, EC2, tagging, and the Lambdas' own SQS (HOSTS
# messages, visibility changes) and DynamoDB (the membership table).
AWS_FAULT_SERVICES = ("elasticloadbalancing", "ec2", "tagging", "sqs", "dynamodb")

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
CRASH_POINTS = (
    "elasticloadbalancing:CreateLoadBalancer",
    "elasticloadbalancing:CreateTargetGroup",
    "elasticloadbalancing:CreateListener",
    "elasticloadbalancing:ModifyListener",
    "elasticloadbalancing:DeleteListener",
    "elasticloadbalancing:DeleteTargetGroup",
    "elasticloadbalancing:DeleteLoadBalancer",
    "elasticloadbalancing:RegisterTargets",
    "elasticloadbalancing:DeregisterTargets",
    "elasticloadbalancing:ModifyTargetGroup",
    "elasticloadbalancing:ModifyTargetGroupAttributes",
    "elasticloadbalancing:ModifyLoadBalancerAttributes",
    "elasticloadbalancing:CreateLoadBalancerListeners",
    "elasticloadbalancing:DeleteLoadBalancerListeners",
    "elasticloadbalancing:RegisterInstancesWithLoadBalancer",
    "elasticloadbalancing:DeregisterInstancesFromLoadBalancer",
    "elasticloadbalancing:ConfigureHealthCheck",
    "ec2:CreateSecurityGroup",
    "ec2:AuthorizeSecurityGroupIngress",
    "ec2:RevokeSecurityGroupIngress",
    "ec2:DeleteSecurityGroup",
)
# (method, path regex, statuses): the reconcilers' reads and writes and the watcher's list/watch requests.
K8S_TARGETS = (
    ("PATCH", r"/namespaces/[^/]+/services/[^/]+/status$", (409, 429, 500)),
    ("PATCH", r"/namespaces/[^/]+/services/[^/]+$", (409, 429, 500)),
    ("GET", r"/namespaces/[^/]+/services/[^/]+$", (429, 500)),
    ("GET", r"^/api/v1/nodes$", (429, 500)),
    ("GET", r"^/api/v1/services$", (429, 500)),
    ("PATCH", r"^/api/v1/nodes/[^/]+(/status)?$", (409, 429, 500)),
)
CHAOS_LABEL = "chaos-pool"
MAX_JOINED = 2


class ChaosMachine(RuleBasedStateMachine):
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

    # -- message faults ---------------------------------------------------------------------------------------
    @precondition(lambda self: self.snapshots)
    @rule(data=st.data(), event=st.sampled_from(["ADDED", "MODIFIED", "DELETED"]))
    def replay_stale_delta(self, data: st.DataObject, event: str) -> None:
        """A duplicate or reordered message: an old observation sent again under a new deduplication id."""
        self._step("replay_stale_delta")
        obj = data.draw(st.sampled_from(self.snapshots), label="snapshot")
        delta = delta_for("Service", event, obj)
        self._note(f"replay {event} of {delta.key} rv={delta.resource_version} uid={delta.uid[:8]}")
        w.aws(self.stack, "sqs").send_message(
            QueueUrl=self.stack.queue_urls["ServicesQueue"],
            MessageBody=delta.to_body(),
            MessageGroupId=delta.group_id,
            MessageDeduplicationId=str(uuid.uuid4()),
        )

    # -- AWS faults -------------------------------------------------------------------------------------------
    @rule(data=st.data())
    def aws_fault(self, data: st.DataObject) -> None:
        kinds = (["throttle", "5xx"] if self.aws_errors < AWS_ERROR_CAP else []) + (
            ["crash", "lambda timeout"] if self.budget > 0 else []
        )
        if not kinds:
            return
        kind = data.draw(st.sampled_from(kinds), label="kind")
        self._step(f"aws: {kind}")
        if kind == "crash":
            op = data.draw(st.sampled_from(CRASH_POINTS), label="operation")
            self._note(f"fault: crash right after the next {op}")
            path = self.stack.faults_file  # type: ignore[attr-defined]
            plan = json.loads(path.read_text()).get("crash_after", {})
            before = plan.get(op, 0)
            plan[op] = before + 1
            faults.arm(path, plan)
            self.ledger.armed("crash", 1, lambda: int(crash_remaining(path, op) <= before))
            self.budget -= 1
        elif kind == "lambda timeout":
            self._note(
                "fault: the next invocation times out mid-batch (its records come back after the visibility timeout)"
            )
            assert self.stack.runner is not None
            self.stack.runner.abandon_next(1)
            self.timeouts_armed += 1
            nth = self.timeouts_armed
            self.ledger.armed("lambda timeout", 1, lambda: int(self._timeouts() - self.timeouts_at_start >= nth))
            self.budget -= 1
        else:
            service = data.draw(st.sampled_from(AWS_FAULT_SERVICES), label="service")
            count = data.draw(st.integers(1, AWS_ERROR_CAP - self.aws_errors), label="count")
            self.aws_errors += count
            self._note(f"fault: the next {count} {service} requests answer {kind}")
            assert self.stack.aws_proxy is not None
            fault = FaultRule(service, "throttle" if kind == "throttle" else "5xx", count)
            self.stack.aws_proxy.inject(fault)
            self.ledger.armed(f"aws {service} {kind}", count, lambda: count - fault.count)

    # -- Kubernetes and watcher faults ---------------------------------------------------------------------------
    @rule(data=st.data())
    def cluster_fault(self, data: st.DataObject) -> None:
        kinds = ["watch drop", "410 Gone", "watcher SIGTERM", "watcher SIGKILL"]
        kind = data.draw(st.sampled_from(kinds + (["api errors"] if self.budget > 0 else [])), label="kind")
        self._step(f"cluster: {kind}")
        emulator = self.stack.emulator
        assert emulator is not None
        if kind == "api errors":
            method, path, statuses = data.draw(st.sampled_from(K8S_TARGETS), label="where")
            status = data.draw(st.sampled_from(statuses), label="status")
            count = data.draw(st.integers(1, min(2, self.budget)), label="count")
            self._note(f"fault: the next {count} {method} {path} answer {status}")
            rule = emulator.faults.arm(count, status=status, method=method, path_regex=path)
            self.ledger.armed(f"k8s {method} {status}", count, lambda: count - rule.remaining)
            self.budget -= count
        elif kind == "watch drop":
            self._note("fault: every watch stream ends")
            emulator.drop_watches()
            self.ledger.fired_now(kind)
        elif kind == "410 Gone":
            self._note("fault: etcd compaction (open watches get 410 Gone)")
            emulator.compact()
            self.ledger.fired_now(kind)
        else:
            self._note(f"fault: {kind.replace('watcher', 'watcher restart after')}")
            proc = self.stack.watcher_process
            if kind == "watcher SIGKILL" and proc is not None:
                proc.kill()
                proc.wait()
                self.stack.watcher_process = None
            self.stack.stop_watcher()
            self.stack.start_watcher()
            self.watcher_down = False
            self.ledger.fired_now(kind)

    @precondition(lambda self: not self.watcher_down)
    @rule()
    def watcher_stays_down(self) -> None:
        """The watcher stays down across the next steps (an outage, a crash loop): whatever changes meanwhile,
        deletions included, reaches the reconcilers only through its relist and the periodic passes."""
        self._step("cluster: watcher down")
        self._note("fault: the watcher stops (and stays down across the next steps)")
        self.stack.stop_watcher()
        self.watcher_down = True
        self.ledger.fired_now("watcher down across steps")

    @precondition(lambda self: self.watcher_down)
    @rule()
    def watcher_up(self) -> None:
        self._step("cluster: watcher up")
        self._note("the watcher starts again")
        self.stack.start_watcher()
        self.watcher_down = False

    @precondition(lambda self: self.joined)
    @rule(data=st.data(), announced=st.booleans())
    def terminate_instance(self, data: st.DataObject, announced: bool) -> None:
        """A joined node's instance is terminated: its kubelet goes silent (the node lifecycle controller sets
        Ready=Unknown) and EventBridge delivers the state change, or the event is lost (`announced` False) and
        only the nodes Lambda's safety pass finds it. Either way the Node must go, and with it the targets."""
        self._step("node: instance terminated" + ("" if announced else " (event lost)"))
        name = data.draw(st.sampled_from(self.joined), label="node")
        node = w.read(self.stack, "nodes", None, name)
        instance = p.instance_id(node) if node else None
        self._note(f"instance of {name} ({instance}) terminated{'' if announced else ', its EC2 event lost'}")
        if instance:
            w.aws(self.stack, "ec2").terminate_instances(InstanceIds=[instance])
        core = self.stack.core()
        status = {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]}}
        w.retrying(lambda: core.patch_node_status(name, status, _content_type="application/merge-patch+json"))
        if instance and announced:
            w.instance_state_event(self.stack, instance, "terminated")
        self.joined.remove(name)
        self.terminated[name] = instance or ""
        self.ledger.fired_now("instance terminated")

    # -- the sweeper ----------------------------------------------------------------------------------------------
    @precondition(lambda self: not self.swept)
    @rule()
    def sweeper_run(self) -> None:
        """The sweeper runs in the middle of the schedule with no grace period (the most aggressive setting: an
        orphan is deleted on first sight): it may delete only what no live Service wants; anything else shows up
        as a missing load balancer or target group after the quiesce. Once per schedule (a run is a process)."""
        self._step("sweeper run")
        summary = w.run_sweeper(self.stack)
        self.swept = True
        self._note(f"sweeper run (grace 0): deleted {summary.get('deleted')}, requeued {summary.get('requeued')}")
        self.stats["sweeper deleted"] += summary.get("deleted", 0)
        self.ledger.fired_now("sweeper run")

    @precondition(lambda self: self._wanting())
    @rule(data=st.data())
    def vanish_service(self, data: st.DataObject) -> None:
        """Someone strips the cleanup finalizer by hand and deletes the Service: only the DELETED delta (or, if
        the watcher is down, the sweeper) can still clean its load balancer up."""
        self._step("service vanishes (finalizer stripped)")
        name = data.draw(st.sampled_from(sorted(self._wanting())), label="service")
        self._note(f"vanish {name}: finalizer removed by hand, then deleted")
        w.replace_service(self.stack, self.ns, name, lambda svc: svc["metadata"].update(finalizers=[]))
        w.delete_service(self.stack, self.ns, name)
        self.services[name]["deleted"] = True
        self.ledger.fired_now("service vanished")

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
