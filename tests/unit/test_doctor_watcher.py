"""The doctor's watcher checks (pure): pods ready, the queue URLs the pods get are the stack's, heartbeats arrive."""

from __future__ import annotations

from typing import Any

import pytest

from ccm.doctor.checks import run_checks
from ccm.doctor.facts import Facts, StackFacts, WatcherFacts
from ccm.doctor.findings import exit_code
from ccm.doctor.watcher import check_watcher, config_map_names, container_env

SERVICES = "https://sqs.us-east-1.amazonaws.com/111122223333/prod-ccm-services.fifo"
NODES = "https://sqs.us-east-1.amazonaws.com/111122223333/prod-ccm-nodes.fifo"
STACK = StackFacts("ccm", {"ServicesQueueUrl": SERVICES, "NodesQueueUrl": NODES}, {}, {})
GOOD_ENV = {"WATCHER_SERVICES_QUEUE_URL": SERVICES, "WATCHER_NODES_QUEUE_URL": NODES}


def watcher(**changes: Any) -> WatcherFacts:
    facts = WatcherFacts("serverless-ccm", "serverless-ccm-watcher", found=True, desired=2, ready=2)
    facts.env, facts.heartbeats = dict(GOOD_ENV), 10.0
    for key, value in changes.items():
        setattr(facts, key, value)
    return facts


def statuses(facts: WatcherFacts, stack: StackFacts | None = STACK) -> dict[str, str]:
    return {f.check: f.status for f in check_watcher(facts, stack)}


def test_a_healthy_watcher_passes_every_check() -> None:
    findings = check_watcher(watcher(), STACK)
    assert {f.check: f.status for f in findings} == {
        "watcher.pods": "ok",
        "watcher.ServicesQueueUrl": "ok",
        "watcher.NodesQueueUrl": "ok",
        "watcher.LoadBalancerClass": "ok",
        "watcher.ServicesWithoutClass": "ok",
        "watcher.heartbeat": "ok",
    }
    assert "2/2 pod(s) ready" in findings[0].message and "10 services queue message(s)" in findings[-1].message


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"found": False}, "not found"),
        ({"ready": 1}, "1 of 2 pod(s) ready"),
        ({"ready": 0, "desired": 0}, "scaled to 0"),
    ],
)
def test_pods_not_ready_or_missing_fail(changes: dict[str, Any], message: str) -> None:
    [pods] = [f for f in check_watcher(watcher(**changes), STACK) if f.check == "watcher.pods"]
    assert pods.status == "fail" and message in pods.message and pods.fix


def test_a_queue_url_other_than_the_stacks_fails_with_the_value_to_set() -> None:
    other = SERVICES.replace("prod-", "staging-")
    found = {f.check: f for f in check_watcher(watcher(env={**GOOD_ENV, "WATCHER_SERVICES_QUEUE_URL": other}), STACK)}
    services = found["watcher.ServicesQueueUrl"]
    assert services.status == "fail" and other in services.message and SERVICES in services.message
    assert f"WATCHER_SERVICES_QUEUE_URL={SERVICES}" in services.fix
    assert found["watcher.NodesQueueUrl"].status == "ok"
    unset = statuses(watcher(env={"WATCHER_SERVICES_QUEUE_URL": SERVICES}))
    assert unset["watcher.NodesQueueUrl"] == "fail"
    # A stack without the nodes queue (EnableNodes=false) is not compared.
    services_only = StackFacts("ccm", {"ServicesQueueUrl": SERVICES}, {}, {})
    assert "watcher.NodesQueueUrl" not in statuses(watcher(), services_only)


def test_a_class_other_than_the_stacks_fails_and_the_defaults_agree() -> None:
    """The watcher sends EndpointSlice hints only for Services of its class (or none): another class than the
    functions' starves their `ip` Services of that class."""
    classed = StackFacts("ccm", STACK.outputs, {"LoadBalancerClass": "example.com/nlb"}, {})
    [finding] = [f for f in check_watcher(watcher(), classed) if f.check == "watcher.LoadBalancerClass"]
    assert finding.status == "fail" and "ccm.aws/serverless" in finding.message and "example.com/nlb" in finding.message
    assert "WATCHER_LOAD_BALANCER_CLASS=example.com/nlb" in finding.fix
    given = watcher(env={**GOOD_ENV, "WATCHER_LOAD_BALANCER_CLASS": "example.com/nlb"})
    assert statuses(given, classed)["watcher.LoadBalancerClass"] == "ok"
    assert statuses(given)["watcher.LoadBalancerClass"] == "fail"  # the stack keeps the default class


def test_a_watcher_ignoring_what_the_stack_claims_fails() -> None:
    claims = StackFacts("ccm", STACK.outputs, {"ServicesWithoutClass": "claim"}, {})
    ignoring = watcher(env={**GOOD_ENV, "WATCHER_SERVICES_WITHOUT_CLASS": "ignore"})
    [finding] = [f for f in check_watcher(ignoring, claims) if f.check == "watcher.ServicesWithoutClass"]
    assert finding.status == "fail" and "WATCHER_SERVICES_WITHOUT_CLASS=claim" in finding.fix
    # auto = ignore on EKS auth, claim otherwise (template.yaml's ClaimServicesWithoutClass)
    self_managed = StackFacts("ccm", STACK.outputs, {"KubeAuthMode": "kubeconfig-secret"}, {})
    assert statuses(ignoring, self_managed)["watcher.ServicesWithoutClass"] == "fail"
    assert statuses(ignoring)["watcher.ServicesWithoutClass"] == "ok"
    # claiming more than the stack only sends hints the functions answer with nothing
    assert statuses(watcher(), STACK)["watcher.ServicesWithoutClass"] == "ok"


def test_no_heartbeat_in_the_window_fails_and_an_unreadable_metric_is_unknown() -> None:
    [beat] = [f for f in check_watcher(watcher(heartbeats=0.0), STACK) if f.check == "watcher.heartbeat"]
    assert beat.status == "fail" and "last 15 minutes" in beat.message and "WatcherSilenceAlarm" in beat.fix
    assert statuses(watcher(heartbeats=None, heartbeat_error="AccessDenied: no"))["watcher.heartbeat"] == "unknown"


def test_kubernetes_unreachable_is_unknown_and_heartbeats_are_still_judged() -> None:
    found = statuses(watcher(error="ConfigException: no kubeconfig", found=False, env={}, heartbeats=0.0))
    assert found == {"watcher.pods": "unknown", "watcher.heartbeat": "fail"}


def test_any_watcher_failure_makes_the_doctor_exit_1() -> None:
    facts = Facts("prod", "us-east-1", after_deploy=True, routes_enabled=False, stack=STACK, rbac_error="skipped")
    facts.watcher = watcher()
    assert not [f for f in run_checks(facts) if f.check.startswith("watcher.") and f.status != "ok"]
    facts.watcher = watcher(ready=0)
    assert exit_code(run_checks(facts)) == 1


def test_the_pods_environment_is_built_like_the_kubelet_builds_it() -> None:
    deployment = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "watcher",
                            "envFrom": [
                                {"configMapRef": {"name": "base-abc"}},
                                {"configMapRef": {"name": "extra"}, "prefix": "WATCHER_"},
                            ],
                            "env": [
                                {"name": "WATCHER_NODES_QUEUE_URL", "value": NODES},  # env wins over envFrom
                                {
                                    "name": "WATCHER_AWS_REGION",
                                    "valueFrom": {"configMapKeyRef": {"name": "region", "key": "r"}},
                                },
                                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            ],
                        }
                    ]
                }
            }
        }
    }
    assert config_map_names(deployment) == ["base-abc", "extra", "region"]
    env = container_env(
        deployment,
        {
            "base-abc": {"WATCHER_SERVICES_QUEUE_URL": SERVICES, "WATCHER_NODES_QUEUE_URL": "old"},
            "extra": {"LOG_LEVEL": "DEBUG"},
            "region": {"r": "eu-west-1"},
        },
    )
    assert env == {
        "WATCHER_SERVICES_QUEUE_URL": SERVICES,
        "WATCHER_NODES_QUEUE_URL": NODES,
        "WATCHER_LOG_LEVEL": "DEBUG",
        "WATCHER_AWS_REGION": "eu-west-1",
    }
    assert container_env(deployment, {}) == {"WATCHER_NODES_QUEUE_URL": NODES}  # missing ConfigMaps add nothing
