"""The fault rules of the chaos state machine (test_chaos_stateful.ChaosMachine inherits them): stale deltas, AWS
faults (crashes, throttling and 5xx of every service the Lambdas use, Lambda timeouts), cluster faults (API
errors, watch drops, 410, watcher restarts and outages), instance terminations, the sweeper, vanishing Services.
Each arms or takes its fault, writes a readable line, and records it in the ledger (fired / not fired)."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from ccm.aws import faults
from ccm.contracts import kube as p
from ccm.contracts.messages import delta_for
from devstack.aws_faults import FaultRule
from devstack.stack import Stack
from tests.chaos import world as w
from tests.chaos.ledger import Ledger, crash_remaining

# Faults that fail a record each cost one receive of a message at most; maxReceiveCount is 10 (ccm.retry
# MAX_RECEIVES), shared with a host update's coalescing deferral and the waits on AWS (a held security group), so a
# schedule fails one message at most 3 times: the faults alone never dead-letter it (docs/chaos.md). Transient AWS
# errors retried inside botocore (standard mode, bursts < MAX_ATTEMPTS = 4) are not charged.
FAILURE_BUDGET = 3
# Throttling/5xx bursts per schedule: botocore retries them with backoff (at most 4 s before its last attempt);
# more would only slow the test down, as long bursts end as record failures that the budget above already covers.
AWS_ERROR_CAP = 3
# SigV4 names the proxy classifies by: the load balancer APIs, EC2, tagging, and the Lambdas' own SQS (HOSTS
# messages, visibility changes) and DynamoDB (the membership table).
AWS_FAULT_SERVICES = ("elasticloadbalancing", "ec2", "tagging", "sqs", "dynamodb")

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


class FaultRules:
    """Rules only; the state they use is the machine's (declared here for the type checker)."""

    stack: Stack
    ns: str
    snapshots: list[dict[str, Any]]
    services: dict[str, dict[str, Any]]
    joined: list[str]
    terminated: dict[str, str]
    watcher_down: bool
    swept: bool
    budget: int
    aws_errors: int
    timeouts_at_start: int
    timeouts_armed: int
    ledger: Ledger
    stats: Counter[str]

    def _step(self, what: str) -> None:
        raise NotImplementedError

    def _note(self, line: str) -> None:
        raise NotImplementedError

    def _wanting(self) -> list[str]:
        raise NotImplementedError

    def _timeouts(self) -> int:
        raise NotImplementedError

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
        retried = f" after {summary['attempts']} attempts" if summary.get("attempts", 1) > 1 else ""
        self._note(
            f"sweeper run (grace 0){retried}: deleted {summary.get('deleted')}, requeued {summary.get('requeued')}"
        )
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
