"""Chaos for NLB `ip` targets (issue 24 item 7): random schedules of endpoint churn and faults, then a quiesce.

The devstack of tests/chaos (watcher process -> SQS FIFO -> in-process Lambdas -> moto through the AWS fault proxy)
plus the pods of two Deployments, played here step by step: devstack.pod_world's scheduler, kubelet (on a fake
clock: a pod is ready READY_AFTER after it got its IP, a graceful deletion lasts GRACE_S) and Deployment rollouts,
and devstack.endpointslices' controller deriving the EndpointSlices. Changes: Services created (`ip` or `instance`
mode, one or two ports, a named targetPort whose number changes between revisions), switched between the modes,
deleted; scaling, rolling updates, pods evicted (graceful) or killed (force-deleted), time passing. Faults: every
rule of tests/chaos/fault_rules.py (crashes after AWS calls, throttling, 5xx, Lambda timeouts, API errors, watch
drops, 410, watcher restarts and outages across steps, the sweeper, stale Service deltas), plus:

- a crash of the services Lambda right after a DeregisterTargets, armed with pods replaced in one slice change (the
  pass deregisters the old and would register the new next);
- forged and replayed ENDPOINTS hints: another Service's uid under a key, a ClusterIP Service's key (its pods are
  ready), an `instance` Service's key, a Service that does not exist, another namespace, stale slice states;
- EndpointSlices nobody's controller wrote: one in another namespace naming a served Service, one for the
  ClusterIP decoy, with addresses of no pod of ours.

Invariants: after every step, no `ip` target group holds a target that the API never showed as a ready endpoint
of its Service (`ip_target_strangers`: a message can never register an address the API does not show for that
Service); after the quiesce, every `ip` Service's listeners' targets (not draining) equal the ready,
non-terminating endpoints of its EndpointSlices (pod IP, port resolved per slice), plus every invariant of
tests/chaos/invariants.py (no leak, membership, routes, empty DLQs).

Budget: CHAOS_IP_EXAMPLES x CHAOS_IP_STEPS (default 3 x 10, about a minute; CHAOS_SOAK=1: 40 x 25); CHAOS_SEED as
in test_chaos_stateful (docs/chaos.md).
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, note, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    get_state_machine_test,
    initialize,
    invariant,
    precondition,
    rule,
)

from ccm.aws import faults
from ccm.contracts.messages import endpoints_hint
from devstack.endpointslices import MANAGED_BY_LABEL, EndpointSliceController
from devstack.k8s_emulator.errors import ApiError
from devstack.pod_world import FakeClock, Kubelet, PodSet, RollingUpdate, container
from devstack.stack import Stack
from tests.chaos import world as w
from tests.chaos.fault_rules import FAILURE_BUDGET, FaultRules
from tests.chaos.ledger import Ledger, crash_remaining, report

T = TypeVar("T")
SOAK = os.environ.get("CHAOS_SOAK") == "1"
MAX_EXAMPLES = int(os.environ.get("CHAOS_IP_EXAMPLES") or (40 if SOAK else 3))
STEPS = int(os.environ.get("CHAOS_IP_STEPS") or (25 if SOAK else 10))
VERBOSE = os.environ.get("CHAOS_VERBOSE") == "1"
SHRINK = os.environ.get("CHAOS_SHRINK") != "0"
SEED = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
QUIESCE_S = 90.0
SETTLE_S = 5.0
NAMES = ("a", "b")
DECOY = "decoy"  # a ClusterIP Service in `ip` mode with ready pods: no message may bring its pods in
A = "service.beta.kubernetes.io/aws-load-balancer-"
IP_MODE = {A + "nlb-target-type": "ip"}
READY_AFTER = 1.0  # fake-clock seconds between a pod's IP and its containers being ready
STEP_S = 0.5  # fake-clock seconds a step of ours takes
GRACE_S = 2  # terminationGracePeriodSeconds: a gracefully deleted pod's endpoint stays terminating this long
ROGUE = ("10.0.0.250", "10.0.1.250")  # in the VPC's public subnets: no pod's (pods get addresses of the private ones)
DEREGISTER = "elasticloadbalancing:DeregisterTargets"
CRASH_WAIT_S = 3.0  # how long the crash step waits for its crash (the watcher may be down: then it comes later)
FORGERIES = ("other uid", "decoy key", "instance key", "ghost", "other namespace", "stale state", "random uid")


def template(version: int) -> dict[str, Any]:
    """The pod spec of revision `version`: the named port `http` is 8080 or 8081 (the slices resolve it)."""
    port = {"name": "http", "containerPort": 8080 + version % 2}
    return {
        "terminationGracePeriodSeconds": GRACE_S,
        "containers": [container(image=f"registry.example/app:{version}", ports=[port])],
    }


def service_body(namespace: str, name: str, lb: bool, ip: bool, two_ports: bool) -> dict[str, Any]:
    ports = [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}]
    if two_ports:
        ports.append({"name": "admin", "port": 9100, "protocol": "TCP", "targetPort": 9100})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(IP_MODE) if ip else {}},
        "spec": {"type": "LoadBalancer" if lb else "ClusterIP", "selector": {"app": name}, "ports": ports},
    }


class IpChaosMachine(FaultRules, RuleBasedStateMachine):
    stack: ClassVar[Stack]
    examples: ClassVar[int] = 0
    stats: ClassVar[Counter[str]] = Counter()
    fault_totals: ClassVar[Counter[str]] = Counter()

    def __init__(self) -> None:
        super().__init__()
        type(self).examples += 1
        emu = self.stack.emulator
        assert emu is not None
        self.emu = emu
        self.ns = f"chaos-ip-{type(self).examples}-{uuid.uuid4().hex[:6]}"
        self.other_ns = self.ns + "-x"
        for namespace in (self.ns, self.other_ns):
            emu.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        self.services: dict[str, dict[str, Any]] = {}  # name -> {lb, ip, deleted}
        self.snapshots: list[dict[str, Any]] = []
        self.joined: list[str] = []  # FaultRules' node state: this machine changes no node
        self.terminated: dict[str, str] = {}
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
        # The pods: three nodes, each giving its pods addresses from the upper half of its subnet (the VPC CNI).
        nodes = sorted(emu.list("nodes"), key=lambda n: n["metadata"]["name"])
        pools = {}
        for node in nodes:
            internal = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
            pools[node["metadata"]["name"]] = ".".join(internal.split(".")[:3]) + ".128/25"
        names = [n["metadata"]["name"] for n in nodes]
        self.clock = FakeClock()
        self.kubelet = Kubelet(emu, ready_after=READY_AFTER, clock=self.clock, ip_pools=pools)
        self.slices = EndpointSliceController(emu)
        self.pods = {
            name: PodSet(emu, name, names, namespace=self.ns, seed=hash(self.ns + name)) for name in (*NAMES, DECOY)
        }
        self.version = dict.fromkeys(self.pods, 0)
        self.rollouts: dict[str, RollingUpdate] = {}
        self.seen: dict[str, set[tuple[str, int]]] = defaultdict(set)  # key -> every (ip, port) ever ready
        self.states: list[tuple[str, dict[str, str]]] = []  # (key, slice name -> resourceVersion) seen
        self.forged_slices: list[tuple[str, str]] = []
        self.crashes_armed = 0
        # The decoy: two ready pods, an `ip` annotation, but ClusterIP: nothing of it may reach a target group.
        self.pods[DECOY].create(2, template(0))
        w.create_service(self.stack, service_body(self.ns, DECOY, lb=False, ip=True, two_ports=False))
        self._tick(READY_AFTER)

    # -- plumbing shared with FaultRules --------------------------------------------------------------------------
    def _step(self, what: str) -> None:
        self.stats[what] += 1

    def _note(self, line: str) -> None:
        note(line)
        self.lines.append(line)

    def _live(self) -> list[str]:
        return [n for n, s in self.services.items() if not s["deleted"]]

    def _wanting(self) -> list[str]:
        return [n for n in self._live() if self.services[n]["lb"]]

    def _ip_live(self) -> list[str]:
        return [n for n in self._wanting() if self.services[n]["ip"]]

    def _timeouts(self) -> int:
        assert self.stack.runner is not None
        return sum(1 for i in self.stack.runner.log if i.outcome == "timeout")

    # -- the pods' world ---------------------------------------------------------------------------------------
    def _tick(self, advance: float = STEP_S) -> None:
        """Time passes on the kubelet's clock (STEP_S by default: every change of ours takes a moment); the kubelet
        and the EndpointSlice controller catch up, and what the slices now show as ready is remembered (before
        anything could have read it)."""
        self.clock.advance(advance)
        self.kubelet.sync()
        self.kubelet.sync()  # a pod that got its IP in the first pass may be ready in the second
        self.slices.sync_all()
        for name in (*NAMES, DECOY):
            svc = w.read(self.stack, "services", self.ns, name)
            if svc is None:
                continue
            for targets in w.ready_endpoints(self.stack, svc).values():
                self.seen[f"{self.ns}/{name}"] |= targets
            state = {
                s["metadata"]["name"]: s["metadata"]["resourceVersion"]
                for s in self.emu.list("endpointslices", self.ns)
                if (s["metadata"].get("labels") or {}).get(w.SERVICE_NAME_TAG) == name
            }
            if state and (not self.states or self.states[-1] != (f"{self.ns}/{name}", state)):
                self.states.append((f"{self.ns}/{name}", state))

    def _running(self, name: str) -> list[dict[str, Any]]:
        return self.pods[name].pods()

    # -- Services ---------------------------------------------------------------------------------------------
    @initialize(replicas=st.integers(1, 4), two_ports=st.booleans())
    def first_ip_service(self, replicas: int, two_ports: bool) -> None:
        """Every schedule starts with an `ip` Service whose pods are running."""
        self.scale("a", replicas)
        self.create_service("a", True, True, two_ports)

    @rule(name=st.sampled_from(NAMES), lb=st.booleans(), ip=st.booleans(), two_ports=st.booleans())
    def create_service(self, name: str, lb: bool, ip: bool, two_ports: bool) -> None:
        self._step("create_service")
        if name in self._live():
            return
        if name in self.services and w.read(self.stack, "services", self.ns, name) is not None:
            self._note(f"create {name}: skipped, the deleted {name} is still terminating")
            return
        mode = "ip" if ip else "instance"
        self._note(f"create {name}: {'LoadBalancer' if lb else 'ClusterIP'} {mode} {'two ports' if two_ports else ''}")
        created = w.create_service(self.stack, service_body(self.ns, name, lb, ip, two_ports))
        self.snapshots.append(created)
        self.services[name] = {"lb": lb, "ip": ip, "deleted": False}
        self._tick()

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def switch_mode(self, data: st.DataObject) -> None:
        """instance <-> ip: a new target group (TargetType is create-only), filled before the listener moves."""
        self._step("switch_mode")
        name = data.draw(st.sampled_from(sorted(self._live())), label="service")
        ip = not self.services[name]["ip"]
        self._note(f"update {name}: nlb-target-type -> {'ip' if ip else 'instance'}")

        def change(svc: dict[str, Any]) -> None:
            svc["metadata"]["annotations"] = dict(IP_MODE) if ip else {}

        updated = w.replace_service(self.stack, self.ns, name, change)
        if updated:
            self.snapshots.append(updated)
        self.services[name]["ip"] = ip

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def flip_type(self, data: st.DataObject) -> None:
        self._step("flip_type")
        name = data.draw(st.sampled_from(sorted(self._live())), label="service")
        lb = not self.services[name]["lb"]
        self._note(f"update {name}: type -> {'LoadBalancer' if lb else 'ClusterIP'}")

        def change(svc: dict[str, Any]) -> None:
            svc["spec"]["type"] = "LoadBalancer" if lb else "ClusterIP"

        updated = w.replace_service(self.stack, self.ns, name, change)
        if updated:
            self.snapshots.append(updated)
        self.services[name]["lb"] = lb

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def delete_service(self, data: st.DataObject) -> None:
        self._step("delete_service")
        name = data.draw(st.sampled_from(sorted(self._live())), label="service")
        self._note(f"delete {name}")
        w.delete_service(self.stack, self.ns, name)
        self.services[name]["deleted"] = True
        self._tick()

    # -- endpoint churn ---------------------------------------------------------------------------------------
    @rule(name=st.sampled_from(NAMES), replicas=st.integers(0, 5))
    def scale(self, name: str, replicas: int) -> None:
        """The Deployment scaled: new pods of the current revision, or the newest ones deleted gracefully."""
        self._step("scale")
        running = self._running(name)
        self._note(f"scale {name}: {len(running)} -> {replicas} pods")
        if replicas > len(running):
            self.pods[name].create(replicas - len(running), template(self.version[name]))
        for pod in sorted(running, key=lambda p: p["metadata"]["creationTimestamp"])[replicas:]:
            self.pods[name].delete(pod)
        if name in self.rollouts:
            self.rollouts[name].replicas = replicas
        self._tick()

    @precondition(lambda self: any(self._running(n) for n in NAMES))
    @rule(data=st.data(), graceful=st.booleans(), count=st.integers(1, 2))
    def kill_pods(self, data: st.DataObject, graceful: bool, count: int) -> None:
        """Pods evicted (graceful: terminating endpoints for GRACE_S) or killed (force-deleted, gone at once);
        their ReplicaSet replaces them."""
        name = data.draw(st.sampled_from([n for n in NAMES if self._running(n)]), label="deployment")
        self._step("kill_pods" if not graceful else "evict_pods")
        names = [pod["metadata"]["name"] for pod in self._running(name)]
        victims = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=count, unique=True), label="pods")
        self._note(f"{'evict' if graceful else 'kill'} {name}: {victims}")
        for pod_name in victims:
            try:
                self.emu.delete("pods", self.ns, pod_name, grace_period=None if graceful else 0)
            except ApiError as err:  # gone meanwhile (the kubelet ended its grace period)
                if err.code != 404:
                    raise
        self.pods[name].create(len(victims), template(self.version[name]))
        self._tick()

    @rule(name=st.sampled_from(NAMES), steps=st.integers(1, 3), surge=st.sampled_from([1, "25%", 0]))
    def rolling_update(self, name: str, steps: int, surge: int | str) -> None:
        """A rollout to a new revision (its named port resolves to the other number), a few Deployment
        reconciles at a time with time passing in between; a later step continues it."""
        self._step("rolling_update")
        rollout = self.rollouts.get(name)
        if rollout is None:
            self.version[name] += 1
            replicas = max(1, len(self._running(name)))
            rollout = RollingUpdate(
                self.pods[name], template(self.version[name]), replicas, max_surge=surge, max_unavailable=1
            )
            self.rollouts[name] = rollout
            self._note(f"rollout {name}: to revision {self.version[name]}, {replicas} replicas, surge {surge}")
        for _ in range(steps):
            if rollout.done():
                self._note(f"rollout {name}: done")
                del self.rollouts[name]
                break
            action = rollout.step()
            self._note(f"rollout {name}: step {action}")
            self._tick(READY_AFTER)

    @rule(seconds=st.sampled_from([0.5, 1.0, 3.0]))
    def time_passes(self, seconds: float) -> None:
        """Containers become ready, graceful deletions end (their endpoints vanish)."""
        self._step("time_passes")
        self._note(f"{seconds} s pass")
        self._tick(seconds)

    # -- targeted faults --------------------------------------------------------------------------------------
    def _replaceable(self) -> list[str]:
        return [n for n in NAMES if n in self._ip_live() and self._running(n)]

    @precondition(lambda self: self.budget > 0 and self._replaceable())
    @rule(data=st.data(), count=st.integers(1, 2))
    def crash_between_deregister_and_register(self, data: st.DataObject, count: int) -> None:
        """The services Lambda dies right after its next DeregisterTargets: registered pods are replaced in one
        slice change (the old ones terminating, the new ones ready), so the pass deregisters the old and would
        register the new right after; the message's retry (a thorough pass) must finish the job."""
        self._step("crash between deregister and register")
        name = data.draw(st.sampled_from(self._replaceable()), label="deployment")
        registered = {ip for ip, _ in w.ip_targets_by_key(self.stack, self.ns).get(f"{self.ns}/{name}", set())}
        victims = [pod for pod in self._running(name) if (pod.get("status") or {}).get("podIP") in registered]
        if not victims:
            self._note(f"crash between deregister and register: skipped, no pod of {name} is registered yet")
            return
        victims = victims[:count]
        path = self.stack.faults_file  # type: ignore[attr-defined]
        plan = json.loads(path.read_text() or "{}").get("crash_after", {})
        before = plan.get(DEREGISTER, 0)
        plan[DEREGISTER] = before + 1
        faults.arm(path, plan)
        self.ledger.armed("crash after deregister", 1, lambda: int(crash_remaining(path, DEREGISTER) <= before))
        self.budget -= 1
        self._note(f"fault: crash after the next DeregisterTargets; replace {[v['metadata']['name'] for v in victims]}")
        for pod in victims:
            self.pods[name].delete(pod)
        self.pods[name].create(len(victims), template(self.version[name]))
        self.clock.advance(READY_AFTER)  # the new pods get their IP and turn ready before the slices are written
        self.kubelet.sync()
        self.clock.advance(READY_AFTER)
        self._tick()
        deadline = time.monotonic() + CRASH_WAIT_S  # let it happen now, before later steps change the slices again
        while time.monotonic() < deadline and crash_remaining(path, DEREGISTER) > before:
            time.sleep(0.1)

    @rule(kind=st.sampled_from(FORGERIES), data=st.data())
    def forged_hint(self, kind: str, data: st.DataObject) -> None:
        """An ENDPOINTS message nobody's watcher would send (or an old one again, reordered): whatever it names,
        the reconcile re-reads the live Service and its slices; it can never bring in an address of another."""
        self._step(f"forged hint: {kind}")
        uids = {
            n: svc["metadata"]["uid"]
            for n in (*NAMES, DECOY)
            if (svc := w.read(self.stack, "services", self.ns, n)) is not None
        }
        victim = data.draw(st.sampled_from(NAMES), label="victim")
        # Which Service, uid or state: an index, not a sampled list (the lists depend on timing: a deleted Service
        # lingers behind its finalizer), so that a replayed schedule draws the same way.
        pick = data.draw(st.integers(0, 1000), label="pick")
        slices = {"forged": str(data.draw(st.integers(1, 10**6), label="rv"))}
        if kind == "other uid":
            other = _pick(sorted(uids) or [DECOY], pick)
            key, uid = f"{self.ns}/{victim}", uids.get(other, str(uuid.uuid4()))
        elif kind == "decoy key":
            key, uid = f"{self.ns}/{DECOY}", uids.get(DECOY, str(uuid.uuid4()))
        elif kind == "instance key":
            instance = [n for n in self._wanting() if not self.services[n]["ip"]]
            name = _pick(instance, pick) if instance else victim
            key, uid = f"{self.ns}/{name}", uids.get(name, str(uuid.uuid4()))
        elif kind == "ghost":
            key, uid = f"{self.ns}/ghost", str(uuid.uuid4())
        elif kind == "other namespace":
            key, uid = f"{self.other_ns}/{victim}", uids.get(victim, str(uuid.uuid4()))
        elif kind == "stale state" and self.states:
            key, slices = _pick(self.states, pick)
            uid = uids.get(key.split("/", 1)[1], str(uuid.uuid4()))
        else:
            key, uid = f"{self.ns}/{victim}", str(uuid.uuid4())
        delta = endpoints_hint(key, uid, slices, {}, time.time())
        self._note(f"forged ENDPOINTS ({kind}): key {key} uid {uid[:8]} slices {sorted(slices)}")
        w.aws(self.stack, "sqs").send_message(
            QueueUrl=self.stack.queue_urls["ServicesQueue"],
            MessageBody=delta.to_body(),
            MessageGroupId=delta.group_id,
            MessageDeduplicationId=str(uuid.uuid4()),
        )

    @precondition(lambda self: len(self.forged_slices) < 2)
    @rule(where=st.sampled_from(["other namespace", "decoy"]), name=st.sampled_from(NAMES))
    def foreign_slice(self, where: str, name: str) -> None:
        """An EndpointSlice no controller of ours wrote, with a ready endpoint at an address of no pod: in another
        namespace naming one of our Services, or labelled for the ClusterIP decoy."""
        self._step(f"foreign slice: {where}")
        namespace, service = (self.other_ns, name) if where == "other namespace" else (self.ns, DECOY)
        body = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"forged-{uuid.uuid4().hex[:6]}",
                "namespace": namespace,
                "labels": {w.SERVICE_NAME_TAG: service, MANAGED_BY_LABEL: "chaos-forger"},
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "admin", "port": 9100}],
            "endpoints": [
                {
                    "addresses": [address],
                    "conditions": {"ready": True},
                    "targetRef": {"kind": "Pod", "name": "rogue", "namespace": namespace},
                }
                for address in ROGUE
            ],
        }
        created = self.emu.create(body)
        self.forged_slices.append((namespace, created["metadata"]["name"]))
        self._note(f"foreign slice {namespace}/{created['metadata']['name']} labelled for {service}: {ROGUE}")
        self._tick()

    # -- the verdict --------------------------------------------------------------------------------------------
    @invariant()
    def no_stranger_registered(self) -> None:
        problems = w.ip_target_strangers(self.stack, self.ns, self.seen)
        assert not problems, "a target the API never showed as that Service's ready endpoint:\n  " + "\n  ".join(
            problems
        )

    def _judge_faults(self) -> None:
        self.judged = self.ledger.judge()
        type(self).fault_totals.update(self.judged)

    def _expected(self, all_deleted: bool = False) -> dict[str, w.Expected]:
        out = {
            name: w.Expected(
                lb=s["lb"], valid=True, deleted=s["deleted"] or all_deleted, target_type="ip" if s["ip"] else "instance"
            )
            for name, s in self.services.items()
        }
        out[DECOY] = w.Expected(lb=False, valid=True, deleted=all_deleted)
        return out

    def _check(self) -> list[str]:
        problems = w.violations(self.stack, self.ns, self._expected(), self.stack.baseline)  # type: ignore[attr-defined]
        return problems + w.ip_target_strangers(self.stack, self.ns, self.seen)

    def teardown(self) -> None:
        self._tick(READY_AFTER)  # the last pods get ready (graceful deletions may still be under way)
        t0 = time.monotonic()
        self.stats["s schedule"] += t0 - self.started
        ticks: list[float] = []
        sweeps: list[dict[str, Any]] = []  # a Service that vanished while the watcher was down: only the sweeper
        try:
            problems = w.quiesce(
                self.stack,
                self._check,
                QUIESCE_S,
                settle=SETTLE_S,
                before_clear=self._judge_faults,
                ticks=ticks,
                sweeps=sweeps,
            )
            self.stats["safety passes"] += len(ticks)
            self.stats["sweeper runs at quiesce"] += len(sweeps)
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
        stack = self.stack
        w.clear_faults(stack)
        for name in [*self._live(), DECOY]:
            w.delete_service(stack, self.ns, name)
        for namespace, name in self.forged_slices:
            self.emu.delete("endpointslices", namespace, name)
        for namespace in (self.ns, self.other_ns):
            for pod in self.emu.list("pods", namespace):
                try:
                    self.emu.delete("pods", namespace, pod["metadata"]["name"], grace_period=0)
                except ApiError as err:
                    if err.code != 404:
                        raise
        self.slices.sync_all()
        expected = self._expected(all_deleted=True)
        baseline = stack.baseline  # type: ignore[attr-defined]
        problems = w.quiesce(stack, lambda: w.violations(stack, self.ns, expected, baseline), QUIESCE_S)
        if problems:
            try:
                w.purge(stack, self.ns)
            except Exception as err:  # what AWS still holds (a deleted NLB's interfaces): reported, not raised
                problems.append(f"purge: {err}")
        return problems


def _pick(items: Sequence[T], index: int) -> T:
    return items[index % len(items)]


@pytest.mark.timeout(3600 * 8 if SOAK else 600)
def test_ip_targets_equal_the_ready_endpoints_after_any_schedule(stack: Stack) -> None:
    print(f"chaos ip seed {SEED} (reproduce: CHAOS_SEED={SEED}); {MAX_EXAMPLES} examples x {STEPS} steps")
    IpChaosMachine.stack = stack
    chaos_settings = settings(
        max_examples=MAX_EXAMPLES,
        stateful_step_count=STEPS,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if SHRINK else []),
        print_blob=True,
        database=None,
    )
    started = time.monotonic()
    try:
        seed(SEED)(get_state_machine_test(IpChaosMachine, settings=chaos_settings))()
    finally:
        stats = {k: round(v, 1) for k, v in sorted(IpChaosMachine.stats.items())}
        assert stack.runner is not None
        outcomes = Counter(i.outcome for i in stack.runner.log)
        print(f"chaos ip: {IpChaosMachine.examples} examples in {time.monotonic() - started:.0f} s; {stats}")
        print(f"chaos ip: invocations {dict(outcomes)}")
        print(f"chaos ip: faults {report(IpChaosMachine.fault_totals)}")
