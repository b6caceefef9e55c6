"""deploy/ renders with kustomize, every object is well-formed, the security properties hold, the RBAC matches the
code's Kubernetes calls exactly, and `kubectl apply --dry-run=server` passes against the API emulator."""

from __future__ import annotations

import ast
import copy
import re
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ccm.doctor.access import LAMBDA_GROUPS, LAMBDA_RULES, WATCHER_RULES
from ccm.doctor.facts import RbacRule
from devstack.k8s_emulator import Emulator
from tests.deploy import schema
from tests.deploy.conftest import REPO, TARGETS, Obj, find, make_kubectl, render, rendered_text, versioned_kubectls

WATCHER = "serverless-ccm-watcher"
NAMESPACE = "serverless-ccm"
_CALL = re.compile(r"\bcore\.([a-z_]+)\b")  # the official client's calls, and methods handed to an informer
_METHOD = re.compile(r"(read|list|create|patch|replace|delete)_(namespaced_)?([a-z]+?)(_status)?(_for_all_namespaces)?")
_VERBS = {"read": "get", "list": "list", "create": "create", "patch": "patch", "replace": "update", "delete": "delete"}
# The functions' own client (ccm.k8s.rest): `api.<method>(<path expression>, ...)`, the path resolved statically.
_REST_METHODS = {"get", "post", "patch", "delete", "request"}


def k8s_calls(*roots: Path) -> set[tuple[str, str]]:
    """(resource, verb) of every Kubernetes call in the code, the resource `qualified`:
    core.patch_namespaced_service_status -> ("services/status", "patch"),
    api.get(endpoint_slices_path(ns), query) -> ("endpointslices.discovery.k8s.io", "list")."""
    calls: set[tuple[str, str]] = set()
    files = [path for root in roots for path in sorted(root.rglob("*.py"))]
    trees = {path: ast.parse(path.read_text(), str(path)) for path in files}
    helpers = _path_helpers(trees.values())
    for path, tree in trees.items():
        for method in _CALL.findall(path.read_text()):
            match = _METHOD.fullmatch(method)
            assert match, f"{path}: unrecognised Kubernetes call core.{method}"
            resource = match[3] + "s" + ("/status" if match[4] else "")
            calls.add((resource, _VERBS[match[1]]))
        calls |= {_rest_call(path, call, scope, helpers) for call, scope in _rest_calls(tree)}
    return calls


def _path_helpers(trees: Iterable[ast.Module]) -> dict[str, ast.expr]:
    """Module-level functions whose body is `return <expression>` (after a docstring): service_path, pod_path ...
    name -> the returned expression (its parameters are unknown values). A name defined twice is left out."""
    found: dict[str, list[ast.expr]] = {}
    for tree in trees:
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]  # the docstring
            if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
                found.setdefault(node.name, []).append(body[0].value)
    return {name: exprs[0] for name, exprs in found.items() if len(exprs) == 1}


def _rest_calls(tree: ast.Module) -> Iterator[tuple[ast.Call, dict[str, list[ast.expr]]]]:
    """Each `api.<method>(...)` or `self.api.<method>(...)`, with the assignments of the innermost function holding
    it (the local names its path expression may use)."""
    scopes: list[ast.AST] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    seen: set[int] = set()
    for scope in [*reversed(scopes), tree]:  # ast.walk is breadth-first: reversed, inner functions come first
        assigned: dict[str, list[ast.expr]] = {}
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                assigned.setdefault(node.targets[0].id, []).append(node.value)
        for node in ast.walk(scope):
            if id(node) in seen or not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner = node.func.value
            is_api = (isinstance(owner, ast.Name) and owner.id == "api") or (
                isinstance(owner, ast.Attribute) and owner.attr == "api"
            )
            if is_api and node.func.attr in _REST_METHODS:
                seen.add(id(node))
                yield node, assigned


def _path_template(expr: ast.expr, scope: dict[str, list[ast.expr]], helpers: dict[str, ast.expr]) -> str | None:
    """The request path an expression builds, "{}" for a value not known statically: service_path(ns, n) + "/status"
    -> "/api/v1/namespaces/{}/services/{}/status". None if the expression is not visibly a path (a parameter, a
    value computed elsewhere, a name assigned twice)."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.JoinedStr):
        parts = []
        for value in expr.values:
            inner = _path_template(value.value if isinstance(value, ast.FormattedValue) else value, scope, helpers)
            if isinstance(value, ast.FormattedValue) and not (inner or "").startswith("/"):
                inner = "{}"  # quote(name), a variable: a value, not a path
            parts.append(inner or "{}")
        return "".join(parts)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        left, right = _path_template(expr.left, scope, helpers), _path_template(expr.right, scope, helpers)
        return left + right if left is not None and right is not None else None
    if isinstance(expr, ast.Name) and len(scope.get(expr.id, [])) == 1:  # (without itself: `path = path + "/x"`)
        return _path_template(scope[expr.id][0], {k: v for k, v in scope.items() if k != expr.id}, helpers)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in helpers:
        return _path_template(helpers[expr.func.id], {}, {k: v for k, v in helpers.items() if k != expr.func.id})
    return None


def _rest_call(
    path: Path, call: ast.Call, scope: dict[str, list[ast.expr]], helpers: dict[str, ast.expr]
) -> tuple[str, str]:
    """The request as kube-apiserver reads its path (k8s.io/apiserver RequestInfoFactory): /api/v1 (the core group
    "") or /apis/<group>/<version>, then namespaces/<namespace>, then <resource>[/<name>[/<subresource>]]; a GET of a
    collection is list, of an object get."""
    source = ast.unparse(call)
    method = call.func.attr if isinstance(call.func, ast.Attribute) else ""
    assert method != "request", f"{path}: call api.get/post/patch/delete, so RBAC can be derived: {source}"
    template = _path_template(call.args[0], scope, helpers) if call.args else None
    assert template and template.startswith("/"), f"{path}: cannot tell the resource of {source}"
    parts = template.strip("/").split("/")
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    else:
        assert parts[0] == "apis" and len(parts) >= 3, f"{path}: not an API path: {template} ({source})"
        group, rest = parts[1], parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    assert 1 <= len(rest) <= 3 and "{}" not in rest[0::2], f"{path}: cannot tell the resource of {source}: {template}"
    resource = rest[0] + (f"/{rest[2]}" if len(rest) == 3 else "")
    collection = len(rest) == 1
    verb = {"get": "list" if collection else "get", "post": "create", "patch": "patch"}.get(method)
    verb = verb or ("deletecollection" if collection else "delete")
    return qualified(resource, group), verb


def qualified(resource: str, group: str) -> str:
    """A resource of a named API group as kubectl spells it: endpointslices.discovery.k8s.io, deployments.apps/scale;
    one of the core group as is: services/status."""
    base, slash, sub = resource.partition("/")
    return (f"{base}.{group}" if group else base) + slash + sub


def granted(role: Obj) -> set[tuple[str, str]]:
    """(resource, verb) pairs, the resource `qualified`."""
    out: set[tuple[str, str]] = set()
    for rule in role["rules"]:
        (group,) = rule["apiGroups"]
        assert "resourceNames" not in rule
        out |= {(qualified(r, group), v) for r in rule["resources"] for v in rule["verbs"]}
    return out


class _CfnLoader(yaml.SafeLoader):
    """template.yaml with its short-form intrinsic functions (!Ref, !GetAtt ...) read as plain values."""


_CfnLoader.add_multi_constructor(
    "!",
    lambda loader, _suffix, node: (
        loader.construct_scalar(node)
        if isinstance(node, yaml.ScalarNode)
        else loader.construct_sequence(node)
        if isinstance(node, yaml.SequenceNode)
        else loader.construct_mapping(node)
    ),
)


# ---------------------------------------------------------------------- rendering and schema


@pytest.mark.parametrize("target", TARGETS)
def test_every_target_renders_to_well_formed_objects(target: str) -> None:
    objs = render(target)
    assert objs
    problems = [e for obj in objs for e in schema.errors(obj)]
    assert problems == []


def test_the_schema_check_catches_what_the_api_server_would_refuse() -> None:
    objs = render("overlays/irsa")
    deployment = find(objs, "Deployment")
    broken: list[tuple[Obj, str]] = []
    d = copy.deepcopy(deployment)
    d["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    broken.append((d, "does not match"))
    d = copy.deepcopy(deployment)
    d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = "metrics"
    broken.append((d, "does not expose"))
    d = copy.deepcopy(find(objs, "ServiceAccount"))
    del d["metadata"]["namespace"]
    broken.append((d, "namespace missing"))
    d = copy.deepcopy(find(objs, "ClusterRole", "serverless-ccm:watcher"))
    d["rules"][0]["verbs"] = ["lsit"]
    broken.append((d, "verbs missing or unknown"))
    d = copy.deepcopy(find(objs, "PodDisruptionBudget"))
    d["spec"]["maxUnavailable"] = 1
    broken.append((d, "exactly one of"))
    broken.append(({"apiVersion": "extensions/v1beta1", "kind": "Deployment", "metadata": {"name": "x"}}, "unknown"))
    for obj, expected in broken:
        assert any(expected in e for e in schema.errors(obj)), (expected, schema.errors(obj))


# ---------------------------------------------------------------------- the watcher's Deployment


def test_the_shipped_watcher_settings_are_the_ones_the_cost_bench_assumes() -> None:
    """bench/scenarios/cost.py prices the watcher's defaults (an hourly SYNC, the 500 ms and 5 s endpoint windows):
    the manifests must not ship other values (a 10-minute resync made six times the resync records)."""
    from watcher.config import Config

    (config_map,) = [o for o in render("base") if o["kind"] == "ConfigMap" and "watcher" in o["metadata"]["name"]]
    defaults = Config(services_queue_url="", nodes_queue_url="")
    for var, value in config_map["data"].items():
        field = var.removeprefix("WATCHER_").lower()
        if field in ("resync_seconds", "endpoints_window_seconds", "endpoints_waiting_window_seconds"):
            assert float(value) == getattr(defaults, field), var


def test_watcher_deployment_is_ha_and_hardened() -> None:
    objs = render("base")
    deployment = find(objs, "Deployment", WATCHER)
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert pod["serviceAccountName"] == find(objs, "ServiceAccount")["metadata"]["name"] == WATCHER
    # Security context: the restricted Pod Security Standard, enforced on the namespace too.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
    assert sc["runAsNonRoot"] is True and isinstance(sc["runAsUser"], int) and sc["runAsUser"] > 0
    assert find(objs, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # Probes on the watcher's own endpoints and port.
    (port,) = container["ports"]
    env = {e["name"]: e.get("value") or e["valueFrom"] for e in container["env"]}
    assert env["WATCHER_HEALTH_PORT"] == str(port["containerPort"])
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # the heartbeat's replica name
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    # Resources, image, grace period long enough for the SIGTERM flush.
    assert {"cpu", "memory"} <= set(container["resources"]["requests"]) and container["resources"]["limits"]["memory"]
    image = container["image"]
    assert ":" in image and not image.endswith(":latest")
    config = find(objs, "ConfigMap")["data"]
    assert pod["terminationGracePeriodSeconds"] > float(config["WATCHER_SHUTDOWN_TIMEOUT"]) + 10
    assert container["envFrom"][0]["configMapRef"]["name"] == find(objs, "ConfigMap")["metadata"]["name"]
    assert {"WATCHER_SERVICES_QUEUE_URL", "WATCHER_NODES_QUEUE_URL"} <= set(config)
    # Spread over nodes (hard) and zones (soft); the PDB keeps one replica through voluntary disruptions.
    pod_labels = spec["template"]["metadata"]["labels"]
    spreads = {t["topologyKey"]: t for t in pod["topologySpreadConstraints"]}
    assert spreads["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    assert "topology.kubernetes.io/zone" in spreads
    for tsc in spreads.values():
        assert tsc["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    pdb = find(objs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1 and pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    # It must run on Nodes that only it can get initialised.
    assert {"key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Exists", "effect": "NoSchedule"} in (
        pod["tolerations"]
    )


def test_only_the_scraper_reaches_the_watchers_unauthenticated_metrics_port() -> None:
    """/metrics has no authentication: a NetworkPolicy admits ingress to that one port, from the scraper's namespaces
    only (and selects exactly the watcher's pods)."""
    objs = render("base")
    deployment = find(objs, "Deployment", WATCHER)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (port,) = container["ports"]
    policy = find(objs, "NetworkPolicy", WATCHER)
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert "Ingress" in policy["spec"]["policyTypes"]
    (rule,) = policy["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] in ([port["name"]], [port["containerPort"]])
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"serverless-ccm.aws/metrics-scraper": "true"}}}]
    for overlay in ("overlays/irsa", "overlays/pod-identity"):
        assert find(render(overlay), "NetworkPolicy", WATCHER)


def test_the_image_user_is_the_one_the_pod_runs_as() -> None:
    dockerfile = (REPO / "watcher/Dockerfile").read_text()
    (user,) = re.findall(r"^USER (\d+):(\d+)$", dockerfile, re.M)
    pod = find(render("base"), "Deployment")["spec"]["template"]["spec"]
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == tuple(map(int, user))


# ---------------------------------------------------------------------- RBAC = exactly what the code calls


def test_watcher_role_is_list_and_watch_of_services_nodes_and_endpointslices_only() -> None:
    objs = render("base")
    role = find(objs, "ClusterRole", "serverless-ccm:watcher")
    # The informers list and then watch the collections watcher/app.py gives them (watcher/informer.py, through
    # ccm.k8s.watch); no other Kubernetes call is made by the watcher.
    assert k8s_calls(REPO / "watcher") == set()
    sources = [path.read_text() for path in (REPO / "watcher").glob("*.py")]
    collections = {m for text in sources for m in re.findall(r'"/api/v1/(\w+)"', text)} | {
        f"{resource}.{group}" for text in sources for group, resource in re.findall(r'"/apis/([\w.]+)/v1/(\w+)"', text)
    }
    listed = {(resource, "list") for resource in collections}
    assert listed == {("services", "list"), ("nodes", "list"), ("endpointslices.discovery.k8s.io", "list")}
    assert granted(role) == listed | {(r, "watch") for r, _ in listed}
    binding = find(objs, "ClusterRoleBinding", "serverless-ccm:watcher")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": WATCHER, "namespace": NAMESPACE}]


def lambda_roles() -> dict[str, Obj]:
    objs = render("lambda-rbac")
    return {kind: find(objs, "ClusterRole", group) for kind, group in LAMBDA_GROUPS.items()}


def test_lambda_roles_together_grant_exactly_the_calls_the_functions_make() -> None:
    used = k8s_calls(REPO / "layers/ccm/ccm", REPO / "functions")
    assert used == {
        ("services", "get"),
        ("services", "list"),  # the sweeper
        ("services", "patch"),
        ("services/status", "patch"),
        ("nodes", "get"),
        ("nodes", "list"),
        ("nodes", "patch"),
        ("nodes", "delete"),
        ("nodes/status", "patch"),
        ("endpointslices.discovery.k8s.io", "list"),  # `ip` targets: a Service's slices (k8s/endpoints.py)
        ("pods", "get"),  # the pods of gated endpoints: a few by name ...
        ("pods", "list"),  # ... many by the Service's selector
        ("pods/status", "patch"),  # the readiness-gate condition
        ("events", "create"),
        ("events", "get"),  # a repeat: read the Event another environment made, then raise its count
        ("events", "patch"),
    }
    assert set().union(*(granted(role) for role in lambda_roles().values())) == used
    assert {o["kind"] for o in render("lambda-rbac")} == {"ClusterRole", "ClusterRoleBinding"}
    assert len(render("lambda-rbac")) == 2 * len(LAMBDA_GROUPS)  # nothing shared, no catch-all group


def test_each_function_role_grants_exactly_what_the_doctor_expects() -> None:
    def key(rule: RbacRule) -> tuple[str, str]:
        return (qualified(rule.resource + (f"/{rule.subresource}" if rule.subresource else ""), rule.group), rule.verb)

    for kind, role in lambda_roles().items():
        needed = {key(r) for r in LAMBDA_RULES[kind] if r.allowed}
        assert granted(role) == needed, kind
        assert not granted(role) & {key(r) for r in LAMBDA_RULES[kind] if not r.allowed}, kind
    roles = lambda_roles()
    assert not {v for r, v in granted(roles["sweeper"]) if r.startswith("nodes")}  # the sweeper never touches Nodes
    assert not {r for r, _ in granted(roles["routes"]) if r.startswith("services")}  # nor routes Services
    assert ("nodes", "delete") not in granted(roles["services"])
    # Only the service reconciler touches pods (`ip` targets), and only their status: no pod is changed or removed.
    assert {k for k, role in roles.items() if any(r.startswith("pods") for r, _ in granted(role))} == {"services"}
    assert {(r, v) for r, v in granted(roles["services"]) if r.startswith("pods")} == {
        ("pods", "get"),
        ("pods", "list"),
        ("pods/status", "patch"),
    }


def test_the_watcher_role_grants_exactly_what_the_doctor_expects() -> None:
    role = find(render("base"), "ClusterRole", "serverless-ccm:watcher")
    expected = {(qualified(r.resource, r.group), r.verb) for r in WATCHER_RULES if r.allowed and not r.subresource}
    assert len(expected) == len([r for r in WATCHER_RULES if r.allowed])
    assert granted(role) == expected
    assert not granted(role) & {(qualified(r.resource, r.group), r.verb) for r in WATCHER_RULES if not r.allowed}


def test_the_call_scanner_reads_paths_as_the_api_server_does(tmp_path: Path) -> None:
    """k8s_calls resolves the path of each api.<method>(...) through path helpers (across modules), local names and
    f-strings, and reads it as kube-apiserver does: group, namespace, resource, name, subresource."""
    (tmp_path / "paths.py").write_text(
        "def widgets_path(namespace):\n"
        '    """A docstring."""\n'
        '    return f"/apis/example.io/v1/namespaces/{quote(namespace)}/widgets"\n'
        "def widget_path(namespace, name):\n"
        '    return f"{widgets_path(namespace)}/{quote(name)}"\n'
    )
    (tmp_path / "calls.py").write_text(
        "def calls(api, self, ns, name, path):\n"
        "    api.get(widgets_path(ns), {'limit': 1})\n"
        "    self.api.get(widget_path(ns, name))\n"
        "    self.api.patch(widget_path(ns, name) + '/status', {})\n"
        "    collection = f'/api/v1/namespaces/{ns}/configmaps'\n"
        "    api.post(collection, {})\n"
        "    api.delete(f'{collection}/{name}')\n"
        "    api.get('/api/v1/namespaces')\n"
        "    pages(lambda q: api.get('/apis/apps/v1/deployments', q))\n"
    )
    assert k8s_calls(tmp_path) == {
        ("widgets.example.io", "list"),
        ("widgets.example.io", "get"),
        ("widgets.example.io/status", "patch"),
        ("configmaps", "create"),
        ("configmaps", "delete"),
        ("namespaces", "list"),
        ("deployments.apps", "list"),
    }
    for opaque in ("api.get(path)", "api.request('GET', '/api/v1/nodes')", "api.get(somewhere(ns))"):
        (tmp_path / "calls.py").write_text(f"def calls(api, path, ns):\n    {opaque}\n")
        with pytest.raises(AssertionError, match=r"cannot tell the resource|so RBAC can be derived"):
            k8s_calls(tmp_path)


def test_each_access_entry_maps_its_function_role_to_its_own_bound_group() -> None:
    template = yaml.load((REPO / "template.yaml").read_text(), Loader=_CfnLoader)  # a SafeLoader subclass
    entries = {
        resource["Properties"]["PrincipalArn"].split(".")[0]: resource["Properties"]["KubernetesGroups"]
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::EKS::AccessEntry"
    }  # !GetAtt <Role>.Arn reads as the string "<Role>.Arn"
    assert entries == {
        "ServiceReconcilerFunctionRole": [LAMBDA_GROUPS["services"]],
        "NodeReconcilerFunctionRole": [LAMBDA_GROUPS["nodes"]],
        "RouteReconcilerFunctionRole": [LAMBDA_GROUPS["routes"]],
        "SweeperFunctionRole": [LAMBDA_GROUPS["sweeper"]],
    }
    objs = render("lambda-rbac")
    for group in LAMBDA_GROUPS.values():
        binding = find(objs, "ClusterRoleBinding", group)
        assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": group}


# ---------------------------------------------------------------------- overlays


def test_overlays_install_everything_and_wire_the_aws_identity() -> None:
    base_and_lambda = {(o["kind"], o["metadata"]["name"]) for o in render("base") + render("lambda-rbac")}
    for overlay in ("overlays/irsa", "overlays/pod-identity"):
        assert {(o["kind"], o["metadata"]["name"]) for o in render(overlay)} == base_and_lambda
    irsa = find(render("overlays/irsa"), "ServiceAccount")["metadata"]["annotations"]
    assert re.fullmatch(r"arn:aws:iam::\d{12}:role/.+", irsa["eks.amazonaws.com/role-arn"])
    # Pod Identity is bound in EKS (a pod identity association), never by annotation.
    pod_identity = find(render("overlays/pod-identity"), "ServiceAccount")["metadata"]
    assert not any(k.startswith("eks.amazonaws.com/") for k in pod_identity.get("annotations") or {})


# ---------------------------------------------------------------------- kubectl apply --dry-run=server


@pytest.mark.parametrize(("binary", "flags"), versioned_kubectls(), ids=[Path(b).name for b, _ in versioned_kubectls()])
def test_server_dry_run_apply_against_the_emulator(
    emu: Emulator, tmp_path: Path, binary: str, flags: tuple[str, ...]
) -> None:
    run = make_kubectl(emu.write_kubeconfig(str(tmp_path / "kubeconfig")), tmp_path / "home", binary)

    def kubectl(*args: str, input: str) -> subprocess.CompletedProcess[str]:
        return run(*args, *flags, input=input)

    manifests = rendered_text("overlays/irsa")
    objs = render("overlays/irsa")
    # Like on a real cluster, a dry run cannot create objects inside a namespace it only pretends to create.
    kubectl("apply", "-f", "-", input=yaml.safe_dump(find(objs, "Namespace")))
    emu.clear_log()
    out = kubectl("apply", "--dry-run=server", "-f", "-", input=manifests).stdout
    assert out.count("(server dry run)") == len(objs), out
    # Nothing was persisted, and every write carried dryRun=All.
    assert emu.list("serviceaccounts", NAMESPACE) == [] and emu.list("deployments", NAMESPACE) == []
    writes = [e for e in emu.request_log.snapshot() if e["method"] in ("POST", "PATCH", "PUT")]
    # The namespace exists unchanged: no write for it.
    assert len(writes) == len(objs) - 1 and all("dryRun=All" in e["query"] for e in writes), writes

    # Applied for real, then dry-run again: PATCHes that change nothing stored.
    kubectl("apply", "-f", "-", input=manifests)
    stored = emu.get("deployments", NAMESPACE, WATCHER)
    assert stored is not None and stored["spec"]["replicas"] == 2
    changed = manifests.replace("replicas: 2", "replicas: 5")
    assert "configured (server dry run)" in kubectl("apply", "--dry-run=server", "-f", "-", input=changed).stdout
    after = emu.get("deployments", NAMESPACE, WATCHER)
    assert after is not None and after["spec"]["replicas"] == 2
    assert after["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    # And a dry-run delete deletes nothing.
    assert "(server dry run)" in run("delete", "--dry-run=server", "-n", NAMESPACE, f"deployment/{WATCHER}").stdout
    assert emu.get("deployments", NAMESPACE, WATCHER) == after


def test_server_dry_run_still_validates(emu: Emulator, tmp_path: Path) -> None:
    kubectl = make_kubectl(emu.write_kubeconfig(str(tmp_path / "kubeconfig")), tmp_path / "home")
    bad: dict[str, Any] = copy.deepcopy(find(render("base"), "ServiceAccount"))
    bad["metadata"]["namespace"] = "default"
    bad["metadata"]["name"] = "Not_A_Name"
    refused = kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert refused.returncode != 0 and "Invalid" in refused.stderr
    missing_ns = find(render("base"), "Deployment")
    refused = kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(missing_ns), check=False)
    assert refused.returncode != 0 and "not found" in refused.stderr
    unknown = emu.url + "/api/v1/namespaces/default/serviceaccounts?dryRun=Some"
    request = urllib.request.Request(
        unknown, data=b'{"metadata":{"name":"x"}}', method="POST", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=5)
    assert err.value.code == 400
