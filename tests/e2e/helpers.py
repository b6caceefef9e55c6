"""Reading the world the way a user would: Service status from the API, load balancers from (moto) AWS."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from kubernetes import client

from devstack.stack import Stack, StackConfig


def create_service(stack: Stack, name: str, ports: list[int], **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [{"name": f"p{p}", "port": p, "targetPort": 8080} for p in ports],
            **spec,
        },
    }
    return json.loads(stack.core().create_namespaced_service("default", body, _preload_content=False).data)


def create_lb_service(
    stack: Stack,
    name: str,
    ports: list[int | dict[str, Any]],
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A LoadBalancer Service; a port is a number (TCP, name p<port>) or a full port dict."""
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [{"name": f"p{p}", "port": p, "targetPort": 8080} if isinstance(p, int) else p for p in ports],
            **spec,
        },
    }
    return json.loads(stack.core().create_namespaced_service("default", body, _preload_content=False).data)


def read_service(stack: Stack, name: str) -> dict[str, Any] | None:
    try:
        return json.loads(stack.core().read_namespaced_service(name, "default", _preload_content=False).data)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def hostname(stack: Stack, name: str) -> str | None:
    svc = read_service(stack, name)
    ingress = ((svc or {}).get("status") or {}).get("loadBalancer", {}).get("ingress") or []
    return ingress[0].get("hostname") if ingress else None


def lb_name(svc: dict[str, Any]) -> str:
    return ("a" + svc["metadata"]["uid"].replace("-", ""))[:32]


def aws_state(stack: Stack, svc: dict[str, Any]) -> dict[str, Any] | None:
    """The NLB of a Service as AWS reports it: {dns, listeners: {port: (protocol, tg port, [targets])}}."""
    elbv2 = stack.aws("elbv2")
    try:
        lb = elbv2.describe_load_balancers(Names=[lb_name(svc)])["LoadBalancers"][0]
    except elbv2.exceptions.LoadBalancerNotFoundException:
        return None
    listeners: dict[int, Any] = {}
    try:
        for listener in elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"]:
            tg_arn = listener["DefaultActions"][0]["TargetGroupArn"]
            tg = elbv2.describe_target_groups(TargetGroupArns=[tg_arn])["TargetGroups"][0]
            health = elbv2.describe_target_health(TargetGroupArn=tg_arn)["TargetHealthDescriptions"]
            listeners[listener["Port"]] = (listener["Protocol"], tg["Port"], sorted(h["Target"]["Id"] for h in health))
    except ClientError:
        return {"dns": lb["DNSName"], "listeners": "changing"}  # read while the reconciler was mid-way
    return {"dns": lb["DNSName"], "listeners": listeners}


def cluster_resources(stack: Stack) -> dict[str, list[str]]:
    """Every LB and target group tagged for the cluster (what a leak check looks at)."""
    tagging = stack.aws("resourcegroupstaggingapi")
    key = f"kubernetes.io/cluster/{stack.config.cluster_name}"
    found: dict[str, list[str]] = {"loadbalancer": [], "targetgroup": []}
    for kind in found:
        pages = tagging.get_paginator("get_resources").paginate(
            TagFilters=[{"Key": key}], ResourceTypeFilters=[f"elasticloadbalancing:{kind}"]
        )
        for page in pages:
            found[kind] += [r["ResourceARN"] for r in page["ResourceTagMappingList"]]
    return found


def node_ports(svc: dict[str, Any]) -> dict[int, int]:
    return {p["port"]: p["nodePort"] for p in svc["spec"]["ports"]}


def dlq_depth(stack: Stack) -> int:
    attrs = stack.sqs().get_queue_attributes(
        QueueUrl=stack.queue_urls["ServicesDLQ"], AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"])


# -- additions for the load-balancer family, decision-row, validation and adoption tests -----------------------------
A = "service.beta.kubernetes.io/aws-load-balancer-"
MERGE = "application/merge-patch+json"


@contextmanager
def running_stack(tmp_path_factory: Any, **config: Any) -> Iterator[Stack]:
    """A stack like conftest's `stack` fixture but with other settings (e.g. default_lb_type="clb")."""
    state_dir = tmp_path_factory.mktemp("devstack")
    with Stack(StackConfig(state_dir=state_dir, concurrency=3, resync_seconds=3600, **config)) as running:
        yield running


def patch_service(stack: Stack, name: str, body: dict[str, Any]) -> dict[str, Any]:
    return json.loads(
        stack.core().patch_namespaced_service(name, "default", body, _content_type=MERGE, _preload_content=False).data
    )


def annotate(stack: Stack, name: str, annotations: dict[str, str | None]) -> dict[str, Any]:
    """Set (or, with None, remove) annotations of a Service."""
    return patch_service(stack, name, {"metadata": {"annotations": annotations}})


# A delete takes at least one retry now: AWS holds a deleted load balancer's security group for a while (the
# faithful devstack: 1 s in the suite), and the wait comes back after 15 s. Generous bounds, polled: no cost when fast.
DELETE_TIMEOUT = 90


def delete_service(stack: Stack, name: str, timeout: float = DELETE_TIMEOUT) -> None:
    stack.core().delete_namespaced_service(name, "default")
    stack.wait_for(lambda: read_service(stack, name) is None, timeout=timeout, what=f"{name} deleted")


def ensured(stack: Stack, name: str, timeout: float = 90) -> None:
    """Wait for the live Service's EnsuredLoadBalancer: its load balancer is complete. The hostname alone is not:
    it is written as soon as CreateLoadBalancer answers, and in a burst of creations the listeners, target groups
    and rules follow in the record's next pass (PassFlags.hostname_first, ccm.retry.CONTINUATION_DELAY_SECONDS)."""
    stack.wait_for(
        lambda: events_for(stack, name, "EnsuredLoadBalancer"), timeout=timeout, what=f"{name} EnsuredLoadBalancer"
    )


def events_for(stack: Stack, name: str, reason: str | None = None, uid: str | None = None) -> list[dict[str, Any]]:
    """Events about the Service `name`, matched by its UID: Events outlive their object, so a Service re-created
    under the same name must not be credited with its predecessor's events. Without `uid` the live Service's UID is
    used; once the Service is gone the caller passes the UID it kept."""
    if uid is None:
        live = read_service(stack, name)
        assert live is not None, f"{name} is gone: pass the uid of the incarnation whose events you want"
        uid = str(live["metadata"]["uid"])
    events = json.loads(stack.core().list_namespaced_event("default", _preload_content=False).data)["items"]
    return [
        e
        for e in events
        if e["involvedObject"].get("uid") == uid
        and e["involvedObject"]["name"] == name
        and (reason is None or e["reason"] == reason)
    ]


def wait_event(stack: Stack, name: str, reason: str, uid: str | None = None, timeout: float = 30) -> dict[str, Any]:
    found: list[dict[str, Any]] = stack.wait_for(
        lambda: events_for(stack, name, reason, uid), timeout=timeout, what=f"event {reason} for {name}"
    )
    return found[-1]


PROBES = Path(__file__).with_name("probes.py")  # loaded into the functions' execution environments
SERVICE_FUNCTION = "ServiceReconcilerFunction"


def function_calls(stack: Stack, function: str, runtime_module: str) -> Counter[str]:
    """Every AWS call `function`'s runtime made so far (botocore hooks of its own clients), summed over its live
    execution environments (each is a process of its own; see tests/e2e/probes.py)."""
    assert stack.runner is not None
    total: Counter[str] = Counter()
    for counts in stack.runner.probe(function, PROBES, "calls", runtime_module):
        total.update(counts)
    return total


def service_calls(stack: Stack) -> Counter[str]:
    """Every AWS call the service reconciler made so far (botocore hooks of its own clients)."""
    return function_calls(stack, SERVICE_FUNCTION, "ccm.wiring.services")


def mutating(calls: Counter[str]) -> Counter[str]:
    """The calls that change load balancers or security groups (the controller's own DynamoDB state and SQS
    bookkeeping are not AWS changes a user sees)."""
    reads = ("Describe", "Get", "List", "Query", "Scan", "BatchGet")
    return Counter(
        {
            op: n
            for op, n in calls.items()
            if n and op.split(":", 1)[0] in ("elb", "elbv2", "ec2") and not op.split(":", 1)[1].startswith(reads)
        }
    )


class Recording(Sequence[tuple[str, dict[str, Any]]]):
    """The calls recorded so far in every execution environment of the service function, in time order; read
    afresh on each access (the environments are other processes)."""

    def __init__(self, stack: Stack, token: str) -> None:
        self.stack, self.token = stack, token

    def _calls(self) -> list[tuple[str, dict[str, Any]]]:
        assert self.stack.runner is not None
        entries = [e for env in self.stack.runner.probe(SERVICE_FUNCTION, PROBES, "recorded", self.token) for e in env]
        return [(op, params) for _, op, params in sorted(entries, key=lambda e: e[0])]

    def __getitem__(self, index: Any) -> Any:
        return self._calls()[index]

    def __len__(self) -> int:
        return len(self._calls())

    def __eq__(self, other: object) -> bool:
        return self._calls() == list(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._calls())


def record_calls(stack: Stack, service: str, operations: list[str]) -> Recording:
    """(operation, parameters) of every later call of `operations`, in order, that the service reconciler sends
    through its `service` client (a botocore event hook, as its call counter uses): what AWS was asked, where
    moto does not keep it, and in which order. Hooked in every environment, also those created later."""
    assert stack.runner is not None
    token = uuid.uuid4().hex
    stack.runner.probe(
        SERVICE_FUNCTION, PROBES, "record", "ccm.wiring.services", token, service, operations, every_new=True
    )
    return Recording(stack, token)


def nlb(stack: Stack, svc: dict[str, Any]) -> dict[str, Any] | None:
    """Everything AWS reports about a Service's NLB: the LB (with "Attributes", "Tags"), "Listeners" by port and
    "TargetGroups" by listener port (each with "Attributes", "Tags", "Targets"). A read that races the reconciler
    (a listener or group deleted between two calls) is read again."""
    for _ in range(20):
        try:
            return _nlb(stack, svc)
        except ClientError as err:
            if not err.response["Error"]["Code"].endswith("NotFound"):
                raise
        time.sleep(0.1)
    raise TimeoutError(f"the NLB of {svc['metadata']['name']} keeps changing under the read")


def _nlb(stack: Stack, svc: dict[str, Any]) -> dict[str, Any] | None:
    elbv2 = stack.aws("elbv2")
    try:
        lb: dict[str, Any] = elbv2.describe_load_balancers(Names=[lb_name(svc)])["LoadBalancers"][0]
    except elbv2.exceptions.LoadBalancerNotFoundException:
        return None
    arn = lb["LoadBalancerArn"]
    lb["Attributes"] = _kv(elbv2.describe_load_balancer_attributes(LoadBalancerArn=arn)["Attributes"])
    lb["Tags"] = _kv(elbv2.describe_tags(ResourceArns=[arn])["TagDescriptions"][0]["Tags"])
    lb["Listeners"], lb["TargetGroups"] = {}, {}
    for listener in elbv2.describe_listeners(LoadBalancerArn=arn)["Listeners"]:
        lb["Listeners"][listener["Port"]] = listener
        tg_arn = listener["DefaultActions"][0]["TargetGroupArn"]
        tg = elbv2.describe_target_groups(TargetGroupArns=[tg_arn])["TargetGroups"][0]
        tg["Attributes"] = _kv(elbv2.describe_target_group_attributes(TargetGroupArn=tg_arn)["Attributes"])
        tg["Tags"] = _kv(elbv2.describe_tags(ResourceArns=[tg_arn])["TagDescriptions"][0]["Tags"])
        health = elbv2.describe_target_health(TargetGroupArn=tg_arn)["TargetHealthDescriptions"]
        tg["Targets"] = sorted(h["Target"]["Id"] for h in health)
        lb["TargetGroups"][listener["Port"]] = tg
    return lb


def clb(stack: Stack, svc: dict[str, Any]) -> dict[str, Any] | None:
    """A Service's Classic ELB as AWS reports it, with "Attributes", "Tags" and "Listeners" by port."""
    elb, name = stack.aws("elb"), lb_name(svc)
    try:
        lb: dict[str, Any] = elb.describe_load_balancers(LoadBalancerNames=[name])["LoadBalancerDescriptions"][0]
    except ClientError as err:
        if err.response["Error"]["Code"] == "LoadBalancerNotFound":
            return None
        raise
    lb["Attributes"] = elb.describe_load_balancer_attributes(LoadBalancerName=name)["LoadBalancerAttributes"]
    lb["Tags"] = _kv(elb.describe_tags(LoadBalancerNames=[name])["TagDescriptions"][0]["Tags"])
    lb["Listeners"] = {d["Listener"]["LoadBalancerPort"]: d for d in lb["ListenerDescriptions"]}
    return lb


def security_group(stack: Stack, group_id: str) -> dict[str, Any]:
    group: dict[str, Any] = stack.aws("ec2").describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
    return group


def managed_group(stack: Stack, svc: dict[str, Any], visible_within: float = 5.0) -> dict[str, Any] | None:
    """The Service's managed security group. EC2 reads are eventually consistent (the devstack hides a group for
    `consistency_seconds` after its creation, as AWS may): a load balancer can be served before its just-created
    group is readable, so the group is polled for a few seconds before it is declared missing."""

    def found() -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = stack.aws("ec2").describe_security_groups(
            Filters=[{"Name": "group-name", "Values": [f"k8s-elb-{lb_name(svc)}"]}]
        )["SecurityGroups"]
        return groups

    try:
        return stack.wait_for(found, timeout=visible_within, what="the managed group")[0]
    except TimeoutError:
        return None


def node_rules_from(stack: Stack, source_group: str) -> list[tuple[str, str]]:
    """Rules of the node security group whose source is `source_group`: (protocol, description) each. AWS groups
    rules of the same protocol and ports into one permission, so this counts the group pairs."""
    assert stack.world is not None
    node = security_group(stack, stack.world.node_sg_id)
    return [
        (perm["IpProtocol"], pair.get("Description", ""))
        for perm in node.get("IpPermissions", [])
        for pair in perm.get("UserIdGroupPairs", [])
        if pair["GroupId"] == source_group
    ]


def node_rule_sources(stack: Stack) -> list[str]:
    """The source groups of every group-referencing rule on the node security group."""
    assert stack.world is not None
    node = security_group(stack, stack.world.node_sg_id)
    perms = node.get("IpPermissions", [])
    return sorted(pair["GroupId"] for perm in perms for pair in perm.get("UserIdGroupPairs", []))


def tagged_for_service(stack: Stack, svc: dict[str, Any], by_name: bool = True) -> list[str]:
    """Every resource still carrying the Service's UID or (by_name) its name tag: load balancers of both APIs and
    target groups (tagging API, unfiltered by type: moto lists Classic ELBs only then) and security groups (EC2).
    A deleted Service must leave this empty. by_name=False for an old incarnation of a re-created Service."""
    uid = svc["metadata"]["uid"]
    key = f"{svc['metadata']['namespace']}/{svc['metadata']['name']}"
    found: list[str] = []
    tagging = stack.aws("resourcegroupstaggingapi")
    tags = [("serverless-ccm/service-uid", uid)] + ([("kubernetes.io/service-name", key)] if by_name else [])
    for tag_key, value in tags:
        for page in tagging.get_paginator("get_resources").paginate(TagFilters=[{"Key": tag_key, "Values": [value]}]):
            found += [r["ResourceARN"] for r in page["ResourceTagMappingList"]]
    groups = stack.aws("ec2").describe_security_groups(
        Filters=[{"Name": "tag:serverless-ccm/service-uid", "Values": [uid]}]
    )["SecurityGroups"]
    return sorted(set(found) | {g["GroupId"] for g in groups})


def leak_report(stack: Stack, svc: dict[str, Any]) -> str:
    """What a deleted Service left behind, with the functions' log lines that name it: a leak must be diagnosable
    from the CI output alone."""
    uid, name = svc["metadata"]["uid"], svc["metadata"]["name"]
    lines = [line for line in (stack.runner.logs() if stack.runner else []) if uid in line or f"/{name}" in line]
    return f"{name} ({uid}) left {tagged_for_service(stack, svc)}; its log lines:\n" + "\n".join(lines[-80:])


def _readable_groups(stack: Stack, group_ids: set[str]) -> list[dict[str, Any]] | None:
    try:
        found: list[dict[str, Any]] = stack.aws("ec2").describe_security_groups(GroupIds=sorted(group_ids))[
            "SecurityGroups"
        ]
    except ClientError as err:
        if err.response["Error"]["Code"] == "InvalidGroup.NotFound":
            return None
        raise
    return found


def gone(stack: Stack, *svcs: dict[str, Any]) -> None:
    """Delete the Services: nothing tagged for them may remain (LBs, target groups, managed security groups), and
    no node rule may still reference one of their load balancers' own groups. The cluster's shared groups
    (role tag: backend, listener groups) outlive any one Service: their one node rule serves every LB."""
    groups: set[str] = set()
    for svc in svcs:
        lb = nlb(stack, svc) or clb(stack, svc) or {}
        groups |= set(lb.get("SecurityGroups") or [])
    if groups:
        # By id, a group created a moment ago is "not found" to reads for a while (EC2's read-after-create lag, which
        # the devstack models): wait until every one is readable, as AWS eventually shows them.
        described = stack.wait_for(
            lambda: _readable_groups(stack, groups), timeout=30, what="the load balancers' groups readable"
        )
        groups -= {g["GroupId"] for g in described if any(t["Key"] == "serverless-ccm/role" for t in g.get("Tags", []))}
    for svc in svcs:
        delete_service(stack, svc["metadata"]["name"])
    for svc in svcs:
        try:
            stack.wait_for(lambda s=svc: not tagged_for_service(stack, s), DELETE_TIMEOUT, what="nothing tagged")
        except TimeoutError as err:
            raise AssertionError(leak_report(stack, svc)) from err
    assert not groups & set(node_rule_sources(stack))


def _kv(items: list[dict[str, Any]]) -> dict[str, str]:
    return {i["Key"]: i.get("Value", "") for i in items}


def shared_groups(stack: Stack) -> dict[str, str]:
    """The cluster's shared security groups: "backend", and each listener group by its key ("ipv4 tcp:80,443";
    ccm/aws/shared_groups.py, ccm/aws/frontend_model.py)."""
    role, key = "serverless-ccm/role", "serverless-ccm/listeners"

    def found() -> dict[str, str]:
        groups = stack.aws("ec2").describe_security_groups(Filters=[{"Name": "tag-key", "Values": [role]}])
        out: dict[str, str] = {}
        for g in groups["SecurityGroups"]:
            tags = _kv(g.get("Tags", []))
            out[tags.get(key) or tags[role]] = g["GroupId"]
        return out

    # EC2 reads are eventually consistent (the devstack hides a group for a moment after its creation).
    stack.wait_for(lambda: "backend" in found(), timeout=5.0, what="the shared security groups readable")
    return found()
