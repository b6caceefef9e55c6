"""Every read the doctor makes (AWS via boto3, Kubernetes via an injected access checker), into `facts`.

Read-only by construction: Describe/Get/List/Simulate calls and SubjectAccessReviews, nothing else. A read that
fails is recorded on the fact (the checks report it), so one missing permission never hides the other findings.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

from ccm.aws.errors import error_code, error_message
from ccm.aws.names import cluster_tag_key
from ccm.doctor.facts import (
    AccessEntryFacts,
    Facts,
    NetworkFacts,
    QueueFacts,
    RbacFacts,
    RbacRule,
    RoleFacts,
    RoleKind,
    StackFacts,
    WatcherFacts,
)
from ccm.doctor.permissions import NODES_QUEUE, ROUTES_QUEUE, SERVICES_QUEUE, Arns, context_entries, requests
from ccm.doctor.watcher import config_map_names, container_env, heartbeat_metric

LIVE_STATES = ["pending", "running", "stopping", "stopped"]
# Where the stack names each role: an output first, then the logical id of the AWS::IAM::Role.
ROLE_OUTPUTS: dict[RoleKind, tuple[str, str]] = {
    "services": ("ServiceReconcilerFunctionRoleArn", "ServiceReconcilerFunctionRole"),
    "nodes": ("NodeReconcilerFunctionRoleArn", "NodeReconcilerFunctionRole"),
    "routes": ("RouteReconcilerFunctionRoleArn", "RouteReconcilerFunctionRole"),
    "sweeper": ("SweeperFunctionRoleArn", "SweeperFunctionRole"),
    "watcher": ("WatcherRoleArn", "WatcherRole"),
}
QUEUE_ARN_KEYS = {"ServicesQueueUrl": SERVICES_QUEUE, "NodesQueueUrl": NODES_QUEUE, "RoutesQueueUrl": ROUTES_QUEUE}
# moto raises NotImplementedError for missing APIs in-process; over HTTP an unparseable error body (an HTML 500 from
# a proxy, or moto's server) is botocore's ResponseParserError, which is no BotoCoreError: a check says UNKNOWN.
ERRORS = (ClientError, BotoCoreError, NotImplementedError, ResponseParserError)

# (user, groups, rule) -> allowed; the default asks the cluster with SubjectAccessReviews (`kube_access_checker`).
AccessChecker = Callable[[str, list[str], RbacRule], bool]


def _describe(err: BaseException) -> str:
    if isinstance(err, ClientError):
        return f"{error_code(err) or '?'}: {error_message(err)}"
    return f"{type(err).__name__}: {err}"


def _pages(client: Any, operation: str, key: str, **kwargs: Any) -> list[dict[str, Any]]:
    return [item for page in client.get_paginator(operation).paginate(**kwargs) for item in page[key]]


def gather_stack(cf: Any, name: str) -> StackFacts:
    stack = cf.describe_stacks(StackName=name)["Stacks"][0]
    resources = _pages(cf, "list_stack_resources", "StackResourceSummaries", StackName=name)
    return StackFacts(
        name=name,
        outputs={o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs") or []},
        parameters={p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters") or []},
        resources={r["LogicalResourceId"]: (r["ResourceType"], r.get("PhysicalResourceId", "")) for r in resources},
    )


def gather_network(ec2: Any, cluster: str, vpc_id: str) -> NetworkFacts:
    vpc = {"Name": "vpc-id", "Values": [vpc_id]}
    tagged = {"Name": "tag-key", "Values": [cluster_tag_key(cluster)]}
    instances = [
        i
        for r in _pages(
            ec2,
            "describe_instances",
            "Reservations",
            Filters=[vpc, tagged, {"Name": "instance-state-name", "Values": LIVE_STATES}],
        )
        for i in r["Instances"]
    ]
    return NetworkFacts(
        vpc_id=vpc_id,
        subnets=_pages(ec2, "describe_subnets", "Subnets", Filters=[vpc]),
        route_tables=_pages(ec2, "describe_route_tables", "RouteTables", Filters=[vpc]),
        security_groups=_pages(ec2, "describe_security_groups", "SecurityGroups", Filters=[vpc, tagged]),
        instances=instances,
    )


def role_arns(stack: StackFacts, iam: Any, watcher_role_arn: str | None) -> dict[RoleKind, str]:
    found: dict[RoleKind, str] = {}
    for kind, (output, logical_id) in ROLE_OUTPUTS.items():
        if arn := stack.outputs.get(output):
            found[kind] = arn
            continue
        candidates = [lid for lid, (rtype, _) in stack.resources.items() if rtype == "AWS::IAM::Role"]
        match = logical_id if logical_id in candidates else None
        if kind == "watcher" and match is None:  # any role the stack calls a watcher's
            match = next((lid for lid in sorted(candidates) if "watcher" in lid.lower()), None)
        if match:
            found[kind] = iam.get_role(RoleName=stack.resources[match][1])["Role"]["Arn"]
    if watcher_role_arn:
        found["watcher"] = watcher_role_arn
    return found


def queue_arn(url: str) -> str:
    """https://sqs.<region>.amazonaws.com/<account>/<name> -> arn:aws:sqs:<region>:<account>:<name>."""
    m = re.match(r"https?://sqs[.-]([a-z0-9-]+)\.[^/]+/(\d+)/([^/]+)$", url) or re.match(
        r"https?://[^/]+/(\d+)/([^/]+)$", url
    )
    if m is None:
        return ""
    region, account, name = m.groups() if len(m.groups()) == 3 else ("", *m.groups())
    partition = "aws-cn" if ".com.cn" in url else "aws"
    return f"arn:{partition}:sqs:{region}:{account}:{name}"


def simulate(iam: Any, kind: RoleKind, arn: str, arns: Arns) -> RoleFacts:
    role = RoleFacts(kind, arn)
    try:
        for resource, context, actions in requests(kind, arns):
            kwargs: dict[str, Any] = {
                "PolicySourceArn": arn,
                "ActionNames": actions,
                "ContextEntries": context_entries(context, arns.cluster),
            }
            if resource != "*":
                kwargs["ResourceArns"] = [resource]
            for result in _pages(iam, "simulate_principal_policy", "EvaluationResults", **kwargs):
                role.decisions[(result["EvalActionName"], resource, context)] = result["EvalDecision"]
    except ERRORS as err:
        role.error = _describe(err)
    return role


def gather_queues(sqs: Any, stack: StackFacts) -> list[QueueFacts]:
    queues = []
    for key, url in sorted(stack.outputs.items()):
        if not (key.endswith("QueueUrl") or key.endswith("DLQUrl")):
            continue
        q = QueueFacts(key.removesuffix("Url"), url, dlq="DLQ" in key)
        try:
            q.attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        except ERRORS as err:
            q.error = _describe(err)
        queues.append(q)
    return queues


def gather_access_entries(eks: Any, cluster: str, roles: dict[RoleKind, str]) -> list[AccessEntryFacts]:
    entries = []
    for kind in ("services", "nodes", "routes", "sweeper"):
        if kind not in roles:
            continue
        entry = AccessEntryFacts(kind, roles[kind])
        try:
            found = eks.describe_access_entry(clusterName=cluster, principalArn=roles[kind])["accessEntry"]
            entry.groups = list(found.get("kubernetesGroups") or [])
        except ClientError as err:
            if error_code(err) != "ResourceNotFoundException":
                entry.error = _describe(err)
        except (BotoCoreError, NotImplementedError) as err:
            entry.error = _describe(err)
        entries.append(entry)
    return entries


def cluster_auth_mode(eks: Any, cluster: str) -> str | None:
    try:
        found = eks.describe_cluster(name=cluster)["cluster"]
    except ERRORS:
        return None
    mode = (found.get("accessConfig") or {}).get("authenticationMode")
    return str(mode) if mode else None


def gather_rbac(
    check: AccessChecker,
    lambda_groups: Mapping[str, tuple[RbacRule, ...]],
    watcher_sa: tuple[str, str],
    watcher_rules: tuple[RbacRule, ...] = (),
) -> list[RbacFacts]:
    """One subject per function group (group -> its rules) and the watcher's ServiceAccount. Users get the groups an
    authenticator attaches (an access entry's group, a service account's)."""
    namespace, name = watcher_sa
    who: list[tuple[str, str, list[str], tuple[RbacRule, ...]]] = [
        (f"group {group}", f"doctor:probe:{group}", [group, "system:authenticated"], rules)
        for group, rules in lambda_groups.items()
    ]
    if watcher_rules:
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]
        who.append(
            (f"serviceaccount {namespace}/{name}", f"system:serviceaccount:{namespace}:{name}", groups, watcher_rules)
        )
    results = []
    for label, user, groups, rules in who:
        facts = RbacFacts(label)
        try:
            facts.results = {rule: check(user, groups, rule) for rule in rules}
        except Exception as err:  # any client/transport error: report, keep checking the rest
            facts.error = _describe(err)
        results.append(facts)
    return results


def kube_access_checker(kubeconfig: str | None) -> AccessChecker:
    """SubjectAccessReviews with the caller's kubeconfig (needs create on subjectaccessreviews: a cluster admin)."""
    from kubernetes import client, config  # the kubernetes client is imported only when RBAC is checked

    api = client.AuthorizationV1Api(config.new_client_from_config(config_file=kubeconfig))

    def check(user: str, groups: list[str], rule: RbacRule) -> bool:
        attributes = client.V1ResourceAttributes(
            verb=rule.verb, group=rule.group, resource=rule.resource, subresource=rule.subresource or None
        )
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(user=user, groups=groups, resource_attributes=attributes)
        )
        answer = api.create_subject_access_review(review)
        return bool(answer.status and answer.status.allowed)

    return check


# GET of an API path -> the decoded object, None on 404; other errors raise.
KubeReader = Callable[[str, str, str], "dict[str, Any] | None"]  # (kind, namespace, name)


def kube_reader(kubeconfig: str | None) -> KubeReader:
    """Deployments and ConfigMaps as plain dicts, with the caller's kubeconfig (the official client)."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api = config.new_client_from_config(config_file=kubeconfig)
    reads = {
        "Deployment": client.AppsV1Api(api).read_namespaced_deployment,
        "ConfigMap": client.CoreV1Api(api).read_namespaced_config_map,
    }

    def read(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            response: Any = reads[kind](name, namespace, _preload_content=False, _request_timeout=(5, 20))
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        found: dict[str, Any] = json.loads(response.data)
        return found

    return read


def gather_watcher(read: KubeReader | None, namespace: str, name: str, kube_error: str | None = None) -> WatcherFacts:
    """The watcher's Deployment (ready vs desired replicas) and the environment its pods get."""
    facts = WatcherFacts(namespace, name, error=kube_error)
    if read is None:
        return facts
    try:
        deployment = read("Deployment", namespace, name)
        if deployment is None:
            return facts
        facts.found = True
        facts.desired = int((deployment.get("spec") or {}).get("replicas", 1))
        facts.ready = int((deployment.get("status") or {}).get("readyReplicas") or 0)
        maps = {cm: read("ConfigMap", namespace, cm) for cm in config_map_names(deployment)}
        facts.env = container_env(deployment, {k: (v or {}).get("data") if v else None for k, v in maps.items()})
    except Exception as err:  # any client/transport error: report, keep checking the rest
        facts.error = _describe(err)
    return facts


def gather_heartbeats(cloudwatch: Any, facts: WatcherFacts, now: datetime.datetime, services_queue_url: str) -> None:
    """Sum of the services queue's deleted messages over the window (one-minute buckets, all added): heartbeats
    processed, with the queue's other messages (ccm.doctor.watcher)."""
    try:
        points = cloudwatch.get_metric_statistics(
            **heartbeat_metric(services_queue_url),
            StartTime=now - datetime.timedelta(minutes=facts.heartbeat_window_minutes),
            EndTime=now,
            Period=60,
            Statistics=["Sum"],
        )["Datapoints"]
        facts.heartbeats = float(sum(p.get("Sum", 0.0) for p in points))
    except ERRORS as err:
        facts.heartbeat_error = _describe(err)


def arns_for(session: boto3.session.Session, facts: Facts, vpc_id: str) -> Arns:
    identity = session.client("sts").get_caller_identity()
    partition, account = identity["Arn"].split(":")[1], identity["Account"]
    stack = facts.stack
    queues: list[tuple[str, str]] = []
    table_arn = ""
    if stack:
        queues = [(QUEUE_ARN_KEYS[k], queue_arn(v)) for k, v in stack.outputs.items() if k in QUEUE_ARN_KEYS]
        table = stack.resources.get("MembershipTable")
        if table:
            table_arn = f"arn:{partition}:dynamodb:{facts.region}:{account}:table/{table[1]}"
    return Arns(partition, facts.region, account, facts.cluster, vpc_id, tuple(queues), table_arn)
