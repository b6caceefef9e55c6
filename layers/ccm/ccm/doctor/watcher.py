"""Checks of the running watcher (pure): its pods are ready, it was given the stack's queues, its heartbeats arrive.

Each heartbeat the watcher sends to the services queue is deleted from it once the service reconciler processed
it: the free AWS/SQS NumberOfMessagesDeleted of that queue counts it (with the queue's other, rarer messages), and
observability.yaml's WatcherSilenceAlarm fires on its absence. Nothing deleted over the window means nothing the
watcher sees reaches the reconcilers.
"""

from __future__ import annotations

from typing import Any

from ccm.config import DEFAULT_LOAD_BALANCER_CLASS, claims_unclassed, load_balancer_class
from ccm.doctor.facts import StackFacts, WatcherFacts
from ccm.doctor.findings import Finding, fail, ok, unknown

# The watcher's setting (watcher/config.py: WATCHER_<FIELD>) -> the stack output it must equal.
CLASS_SETTING = "WATCHER_LOAD_BALANCER_CLASS"
UNCLASSED_SETTING = "WATCHER_SERVICES_WITHOUT_CLASS"
QUEUE_SETTINGS = {"WATCHER_SERVICES_QUEUE_URL": "ServicesQueueUrl", "WATCHER_NODES_QUEUE_URL": "NodesQueueUrl"}


def heartbeat_metric(services_queue_url: str) -> dict[str, Any]:
    """The metric the WatcherSilenceAlarm watches, for the services queue at this URL (its name is the last part)."""
    return {
        "Namespace": "AWS/SQS",
        "MetricName": "NumberOfMessagesDeleted",
        "Dimensions": [{"Name": "QueueName", "Value": services_queue_url.rstrip("/").rsplit("/", 1)[-1]}],
    }


def install_fix(overlay: str | None, stack: str | None) -> str:
    """How to (re)apply the watcher's manifests: the overlay in use, else the install command that renders one from
    the stack's outputs (docs/deploy-watcher.md, Install). deploy/base alone would drop the overlay's identity."""
    if overlay:
        return f"kubectl apply -k {overlay}"
    return f"scripts/install-watcher --stack {stack}" if stack else "scripts/install-watcher (docs/deploy-watcher.md)"


def container_env(deployment: dict[str, Any], config_maps: dict[str, dict[str, str] | None]) -> dict[str, str]:
    """The environment the watcher container gets, as the kubelet builds it: envFrom sources in order (with their
    prefix), then `env` (which wins). `config_maps`: name -> data (None: not found)."""
    containers = ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
    container = next((c for c in containers if c.get("name") == "watcher"), containers[0] if containers else {})
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef") or {}
        data = config_maps.get(ref.get("name", "")) or {}
        env.update({source.get("prefix", "") + k: v for k, v in data.items()})
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        ref = (var.get("valueFrom") or {}).get("configMapKeyRef")
        if ref and (config_maps.get(ref.get("name", "")) or {}).get(ref.get("key", "")) is not None:
            env[var["name"]] = (config_maps[ref["name"]] or {})[ref["key"]]
    return env


def config_map_names(deployment: dict[str, Any]) -> list[str]:
    """The ConfigMaps the pod template reads (envFrom and env valueFrom), to be fetched."""
    names: list[str] = []
    for c in ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []:
        names += [
            s["configMapRef"]["name"] for s in c.get("envFrom") or [] if (s.get("configMapRef") or {}).get("name")
        ]
        names += [
            v["valueFrom"]["configMapKeyRef"]["name"]
            for v in c.get("env") or []
            if ((v.get("valueFrom") or {}).get("configMapKeyRef") or {}).get("name")
        ]
    return sorted(set(names))


def check_watcher(watcher: WatcherFacts, stack: StackFacts | None) -> list[Finding]:
    return [
        *_deployment(watcher),
        *_queues(watcher, stack),
        *_load_balancer_class(watcher, stack),
        _heartbeats(watcher),
    ]


def _deployment(w: WatcherFacts) -> list[Finding]:
    where = f"Deployment {w.namespace}/{w.name}"
    if w.error:
        return [unknown("watcher.pods", f"{where} not readable: {w.error}", "pass --kubeconfig (or set KUBECONFIG)")]
    if not w.found:
        return [fail("watcher.pods", f"{where} not found", w.install_fix)]
    if w.desired == 0:
        return [fail("watcher.pods", f"{where} is scaled to 0: no change reaches the reconcilers", "scale it to 2")]
    if w.ready < w.desired:
        return [
            fail(
                "watcher.pods",
                f"{where}: {w.ready} of {w.desired} pod(s) ready",
                f"kubectl -n {w.namespace} describe deployment {w.name}; kubectl -n {w.namespace} logs "
                f"deployment/{w.name} (readiness needs both initial lists and SQS reachable)",
            )
        ]
    return [ok("watcher.pods", f"{where}: {w.ready}/{w.desired} pod(s) ready")]


def _queues(w: WatcherFacts, stack: StackFacts | None) -> list[Finding]:
    if w.error or not w.found or stack is None:
        return []  # reported by watcher.pods / stack
    findings: list[Finding] = []
    for setting, output in QUEUE_SETTINGS.items():
        expected = stack.outputs.get(output)
        if expected is None:
            continue
        check = f"watcher.{output}"
        given = w.env.get(setting)
        if given == expected:
            findings.append(ok(check, f"{setting} is the stack's {output}"))
            continue
        fix = f"{w.install_fix} (it sets {setting}={expected} from the stack's outputs)"
        what = "not set" if given is None else f"{given}, not the stack's {output} {expected}"
        findings.append(fail(check, f"the watcher's {setting} is {what}", fix))
    return findings


def _load_balancer_class(w: WatcherFacts, stack: StackFacts | None) -> list[Finding]:
    """The watcher forwards EndpointSlice hints only for Services it believes ours (its class; none, when it claims
    those): another class, or ignoring what the functions claim, leaves their `ip` Services without hints."""
    if w.error or not w.found or stack is None:
        return []
    findings = []
    claim = "claim" if claims_unclassed(stack.parameters) else "ignore"
    for check, setting, expected, default in (
        (
            "watcher.LoadBalancerClass",
            CLASS_SETTING,
            load_balancer_class(stack.parameters),
            DEFAULT_LOAD_BALANCER_CLASS,
        ),
        ("watcher.ServicesWithoutClass", UNCLASSED_SETTING, claim, "claim"),
    ):
        given = w.env.get(setting, default)
        if given == expected:
            findings.append(ok(check, f"{setting} is the stack's {check.split('.')[1]} ({expected})"))
            continue
        if setting == UNCLASSED_SETTING and given == "claim":
            # Hints for Services the functions ignore: one GET each there, nothing lost.
            findings.append(ok(check, f"{setting}=claim sends hints the functions ignore ({expected}): harmless"))
            continue
        fix = f"{w.install_fix} (it sets {setting}={expected} from the stack's parameters)"
        findings.append(fail(check, f"the watcher's {setting} is {given}, not the stack's {expected}", fix))
    return findings


def _heartbeats(w: WatcherFacts) -> Finding:
    window = f"the last {w.heartbeat_window_minutes} minutes"
    if w.heartbeat_error or w.heartbeats is None:
        return unknown(
            "watcher.heartbeat", f"CloudWatch not readable: {w.heartbeat_error}", "allow cloudwatch:GetMetricStatistics"
        )
    if w.heartbeats <= 0:
        return fail(
            "watcher.heartbeat",
            f"no watcher heartbeat processed in {window} (AWS/SQS NumberOfMessagesDeleted of the services queue): "
            "the watcher is down, "
            "cannot send to SQS, or the service reconciler is not consuming",
            "docs/operations.md (WatcherSilenceAlarm): check the watcher's logs and /readyz, then the services queue",
        )
    return ok("watcher.heartbeat", f"{w.heartbeats:g} services queue message(s) processed in {window}")
