# ruff: noqa: F811  (the fixtures imported from the other modules are parameters here)
"""Issue 24 leftovers: the NLB-wide target quotas through the real Lambda handler, against moto enforcing them
as AWS does (devstack.aws_faithful_elb_targets; quotas scaled down): the plan keeps every call within them, so AWS
never answers TooManyTargets, and the endpoints left out are named in a Warning."""

from __future__ import annotations

import json
from typing import Any

from ccm.aws.ip_targets import TargetQuotas
from ccm.contracts.messages import delta_for
from devstack import aws_faithful
from tests.integration.conftest import World
from tests.integration.test_ip_mode import (  # noqa: F401
    IP_MODE,
    Pods,
    create_ip_service,
    health,
    hint,
    pods,
    registered,
    target_groups,
)
from tests.integration.test_one_model_per_pass import stack  # noqa: F401
from tests.integration.test_service_reconciler import emulator, invoke  # noqa: F401


def test_two_listeners_share_the_nlbs_quota_and_the_rest_is_a_warning(
    stack: dict[str, Any], world: World, pods: Pods, faithful_aws: aws_faithful.FaithfulSettings
) -> None:
    faithful_aws.max_targets_per_nlb = 5  # AWS's 3,000, scaled down (the plan's quota likewise)
    # The NLB deployer's registrar, as an account with that quota would configure it.
    stack["runtime"].balancer.deployers["nlb"].ip_targets.quotas = TargetQuotas(per_lb=5)
    core = stack["core"]
    pods.scale(4)  # 4 pods x 2 listeners = 8 targets for 5 places
    ports = [{"name": "http", "port": 80, "targetPort": "http"}, {"name": "alt", "port": 8080, "targetPort": "http"}]
    svc = create_ip_service(core, pods, IP_MODE, ports=ports)
    assert invoke(stack, [delta_for("Service", "ADDED", svc).to_body()]) == {"batchItemFailures": []}
    groups = target_groups()
    assert len(groups) == 2
    assert sum(len(health(tg["TargetGroupArn"])) for tg in groups) == 5
    events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)["items"]
    (warning,) = [e for e in events if e["reason"] == "TargetQuotaExceeded"]
    # pod 3 left out of one group, pod 4 out of both: each named once.
    assert "2 endpoints not registered" in warning["message"] and "at most 5 targets in all" in warning["message"]

    # The groups now serve (AWS counts them for the NLB): one pod leaves, one pod comes; the pass frees the
    # leaving pod's places before it takes new ones, within what AWS accepts (a refusal would fail the record).
    pods.set.delete(pods.set.pods()[0])
    pods.scale(1)
    assert invoke(stack, [hint(svc, pods.emu)]) == {"batchItemFailures": []}
    assert sum(len(registered(tg["TargetGroupArn"])) for tg in groups) == 5
