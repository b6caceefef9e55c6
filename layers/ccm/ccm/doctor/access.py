"""Pure checks of what runs after deploy: EKS access entries, Kubernetes RBAC, the queues and their DLQs."""

from __future__ import annotations

from ccm.doctor.facts import AccessEntryFacts, QueueFacts, RbacFacts, RbacRule
from ccm.doctor.findings import Finding, fail, ok, unknown, warn

# The Kubernetes group template.yaml's access entries map the function roles to (deploy/lambda-rbac binds it).
LAMBDA_GROUP = "serverless-ccm"

# Every verb the Lambdas use (ccm/k8s/kube.py, ccm/node/api.py, ccm/route/kube.py, ccm/sweeper/runtime.py) and two
# they must not have.
LAMBDA_RULES: tuple[RbacRule, ...] = (
    RbacRule("get", "services"),
    RbacRule("list", "services"),  # the sweeper
    RbacRule("patch", "services"),  # the finalizer
    RbacRule("patch", "services", "status"),
    RbacRule("get", "nodes"),
    RbacRule("list", "nodes"),
    RbacRule("patch", "nodes"),  # taints, labels, providerID
    RbacRule("delete", "nodes"),
    RbacRule("patch", "nodes", "status"),
    RbacRule("create", "events"),
    RbacRule("delete", "services", allowed=False),
    RbacRule("get", "secrets", allowed=False),
)
# The watcher only lists and watches (watcher/informer.py).
WATCHER_RULES: tuple[RbacRule, ...] = (
    RbacRule("list", "services"),
    RbacRule("watch", "services"),
    RbacRule("list", "nodes"),
    RbacRule("watch", "nodes"),
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
        check = f"access-entry.{entry.kind}"
        if entry.error:
            findings.append(unknown(check, f"could not read the access entry of {entry.role_arn}: {entry.error}"))
        elif entry.groups is None:
            findings.append(
                fail(
                    check,
                    f"{entry.role_arn} has no access entry in {cluster}: its Kubernetes calls get 401 Unauthorized",
                    f"aws eks create-access-entry --cluster-name {cluster} --principal-arn {entry.role_arn} "
                    f"--kubernetes-groups {LAMBDA_GROUP}   (or deploy with CreateEksAccessEntry=true)",
                )
            )
        elif LAMBDA_GROUP not in entry.groups:
            findings.append(
                fail(
                    check,
                    f"the access entry of {entry.role_arn} maps to {entry.groups or 'no group'}, not {LAMBDA_GROUP}: "
                    "the RBAC of deploy/lambda-rbac does not apply",
                    f"aws eks update-access-entry --cluster-name {cluster} --principal-arn {entry.role_arn} "
                    f"--kubernetes-groups {LAMBDA_GROUP}",
                )
            )
        else:
            findings.append(ok(check, f"{entry.role_arn} -> group {LAMBDA_GROUP}"))
    return findings


def check_rbac(results: list[RbacFacts], error: str | None) -> list[Finding]:
    if error:
        return [unknown("rbac", f"Kubernetes not reachable: {error}", "pass --kubeconfig (or set KUBECONFIG)")]
    findings: list[Finding] = []
    for subject in results:
        check = f"rbac.{subject.subject.split()[0]}"
        if subject.error:
            findings.append(unknown(check, f"{subject.subject}: {subject.error}"))
            continue
        missing = [str(r) for r, allowed in subject.results.items() if r.allowed and not allowed]
        excess = [str(r) for r, allowed in subject.results.items() if not r.allowed and allowed]
        if missing:
            fix = "kubectl apply -k " + ("deploy/lambda-rbac" if "group" in subject.subject else "deploy/base")
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
