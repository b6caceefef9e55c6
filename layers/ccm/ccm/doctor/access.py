"""Pure checks of what runs after deploy: EKS access entries, Kubernetes RBAC, the queues and their DLQs."""

from __future__ import annotations

from ccm.doctor.facts import AccessEntryFacts, QueueFacts, RbacFacts, RbacRule, RoleKind
from ccm.doctor.findings import Finding, fail, ok, unknown, warn

# The Kubernetes group of each function role: template.yaml's access entries map the role to it, deploy/lambda-rbac
# binds it to exactly that function's verbs.
LAMBDA_GROUPS: dict[RoleKind, str] = {
    "services": "serverless-ccm:services",
    "nodes": "serverless-ccm:nodes",
    "routes": "serverless-ccm:routes",
    "sweeper": "serverless-ccm:sweeper",
}


def _rules(allowed: bool, *specs: str) -> tuple[RbacRule, ...]:
    """Each spec is "verb resource[.group][/subresource]", as kubectl spells it: "patch services/status",
    "list endpointslices.discovery.k8s.io" (a core resource's name has no dot)."""
    rules = []
    for verb, spec in (spec.split() for spec in specs):
        qualified, _, sub = spec.partition("/")
        resource, _, group = qualified.partition(".")
        rules.append(RbacRule(verb, resource, sub, allowed, group))
    return tuple(rules)


# Every verb each function uses (ccm/k8s/kube.py, ccm/k8s/endpoints.py, ccm/node/api.py, ccm/route/kube.py,
# ccm/sweeper/runtime.py), then what it must not have: what another function needs (least privilege per function) and
# what none does.
NEVER = ("delete services", "get secrets")
LAMBDA_RULES: dict[RoleKind, tuple[RbacRule, ...]] = {
    "services": _rules(
        True,
        "get services",
        "patch services",
        "patch services/status",
        "list nodes",
        "list endpointslices.discovery.k8s.io",  # `ip` targets (k8s/endpoints.py)
        "get pods",  # the pods of gated endpoints: by name ...
        "list pods",  # ... or by the Service's selector
        "patch pods/status",  # our readiness-gate condition
        "create events",
        "get events",
        "patch events",
    )
    + _rules(False, "patch nodes", "delete nodes", "patch nodes/status", "delete pods", "update pods/status", *NEVER),
    "nodes": _rules(
        True,
        "get nodes",
        "list nodes",
        "patch nodes",
        "delete nodes",
        "patch nodes/status",
        "create events",
        "get events",
        "patch events",
    )
    + _rules(False, "get services", "patch services", "patch services/status", "patch pods/status", *NEVER),
    "routes": _rules(True, "list nodes", "patch nodes/status", "create events", "get events", "patch events")
    + _rules(
        False, "patch nodes", "delete nodes", "patch services", "patch services/status", "patch pods/status", *NEVER
    ),
    "sweeper": _rules(True, "list services", "create events", "get events", "patch events")
    + _rules(False, "patch services", "list nodes", "delete nodes", "patch nodes", "patch pods/status", *NEVER),
}
# The watcher only lists and watches (watcher/informer.py; EndpointSlices for `ip` Services, watcher/endpoint_hints.py).
WATCHER_RULES: tuple[RbacRule, ...] = (
    RbacRule("list", "services"),
    RbacRule("watch", "services"),
    RbacRule("list", "nodes"),
    RbacRule("watch", "nodes"),
    RbacRule("list", "endpointslices", group="discovery.k8s.io"),
    RbacRule("watch", "endpointslices", group="discovery.k8s.io"),
    RbacRule("patch", "services", allowed=False),
    RbacRule("get", "secrets", allowed=False),
)


def check_access_entries(
    entries: list[AccessEntryFacts], kube_auth_mode: str, cluster_auth_mode: str | None, cluster: str
) -> list[Finding]:
    if kube_auth_mode != "eks":
        return [ok("access-entry", f"KubeAuthMode={kube_auth_mode}: the Lambdas use a kubeconfig, no access entry")]
    findings: list[Finding] = []
    if cluster_auth_mode == "CONFIG_MAP":
        findings.append(
            fail(
                "access-entry",
                f"cluster {cluster} authenticates with the aws-auth ConfigMap only: access entries are ignored",
                f"aws eks update-cluster-config --name {cluster} --access-config authenticationMode=API_AND_CONFIG_MAP",
            )
        )
    for entry in entries:
        check, group = f"access-entry.{entry.kind}", LAMBDA_GROUPS.get(entry.kind, "")
        if entry.error:
            findings.append(unknown(check, f"could not read the access entry of {entry.role_arn}: {entry.error}"))
        elif entry.groups is None:
            findings.append(
                fail(
                    check,
                    f"{entry.role_arn} has no access entry in {cluster}: its Kubernetes calls get 401 Unauthorized",
                    f"aws eks create-access-entry --cluster-name {cluster} --principal-arn {entry.role_arn} "
                    f"--kubernetes-groups {group}   (or deploy with CreateEksAccessEntry=true)",
                )
            )
        elif group not in entry.groups:
            findings.append(
                fail(
                    check,
                    f"the access entry of {entry.role_arn} maps to {entry.groups or 'no group'}, not {group}: "
                    "the function's RBAC of deploy/lambda-rbac does not apply",
                    f"aws eks update-access-entry --cluster-name {cluster} --principal-arn {entry.role_arn} "
                    f"--kubernetes-groups {group}",
                )
            )
        elif extra := [g for g in entry.groups if g != group]:
            findings.append(
                warn(
                    check,
                    f"the access entry of {entry.role_arn} also maps to {extra}: more than its own RBAC",
                    f"aws eks update-access-entry --cluster-name {cluster} --principal-arn {entry.role_arn} "
                    f"--kubernetes-groups {group}",
                )
            )
        else:
            findings.append(ok(check, f"{entry.role_arn} -> group {group}"))
    return findings


def check_rbac(
    results: list[RbacFacts], error: str | None, watcher_fix: str = "scripts/install-watcher"
) -> list[Finding]:
    """`watcher_fix`: what re-applies the watcher's RBAC (the overlay in use, watcher.install_fix)."""
    if error:
        return [unknown("rbac", f"Kubernetes not reachable: {error}", "pass --kubeconfig (or set KUBECONFIG)")]
    findings: list[Finding] = []
    for subject in results:
        kind, _, who = subject.subject.partition(" ")
        check = f"rbac.{kind}" + (f".{who.rpartition(':')[2]}" if kind == "group" else "")
        if subject.error:
            findings.append(unknown(check, f"{subject.subject}: {subject.error}"))
            continue
        missing = [str(r) for r, allowed in subject.results.items() if r.allowed and not allowed]
        excess = [str(r) for r, allowed in subject.results.items() if not r.allowed and allowed]
        if missing:
            fix = "kubectl apply -k deploy/lambda-rbac" if "group" in subject.subject else watcher_fix
            findings.append(fail(check, f"{subject.subject} may not: {', '.join(missing)}", fix))
        if excess:
            findings.append(
                warn(check, f"{subject.subject} may also: {', '.join(excess)}", "narrow the (Cluster)RoleBindings")
            )
        if not missing and not excess:
            findings.append(ok(check, f"{subject.subject}: {len(subject.results)} verbs as expected"))
    return findings


def check_queues(queues: list[QueueFacts]) -> list[Finding]:
    if not queues:
        return [fail("queues", "no queue URL in the stack outputs", "deploy the stack and pass --stack with its name")]
    findings: list[Finding] = []
    for q in queues:
        check = f"queue.{q.name}"
        if q.error or q.attributes is None:
            findings.append(
                fail(check, f"{q.url} not reachable: {q.error}", "check the region and the caller's sqs permissions")
            )
            continue
        a = q.attributes
        depth = sum(int(a.get(f"ApproximateNumberOf{k}", "0")) for k in ("Messages", "MessagesNotVisible"))
        problems: list[Finding] = []
        if a.get("FifoQueue") != "true":
            problems.append(fail(check, f"{q.url} is not FIFO: per-object ordering is lost", "recreate it as FIFO"))
        if a.get("SqsManagedSseEnabled") != "true" and not a.get("KmsMasterKeyId"):
            problems.append(warn(check, f"{q.url} is not encrypted at rest", "enable SqsManagedSseEnabled"))
        if q.dlq and depth:
            problems.append(
                warn(
                    check,
                    f"{depth} message(s) in the dead-letter queue {q.url}: deltas that failed 5 times",
                    "inspect them, fix the cause, then redrive (docs/runbook.md):\n"
                    f"aws sqs receive-message --queue-url {q.url} --max-number-of-messages 10 "
                    "--attribute-names All\n"
                    f"aws sqs start-message-move-task --source-arn {a.get('QueueArn', '<dlq-arn>')}",
                )
            )
        if not q.dlq and "RedrivePolicy" not in a:
            problems.append(warn(check, f"{q.url} has no dead-letter queue", "deploy the stack's template unchanged"))
        findings += problems or [ok(check, f"reachable, {depth} message(s) in flight")]
    return findings
