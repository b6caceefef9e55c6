"""Just enough of CloudFormation to read our template offline: translate the SAM transform, evaluate conditions and
resolve the intrinsic functions the template uses, for one set of parameter values. A nested application with a
local Location (observability.yaml: the alarms and the dashboard) is evaluated too, with the parameters the parent
passes it, as CloudFormation would deploy it."""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
OBSERVABILITY = ROOT / "observability.yaml"  # template.yaml's nested application `Observability`
PARAMS = {"ClusterName": "unit", "VpcId": "vpc-0123456789abcdef0"}
PSEUDO = {"AWS::Partition": "aws", "AWS::Region": "us-east-1", "AWS::AccountId": "123456789012"}
# Parameter sets that switch every feature the template has a condition for.
SCENARIOS: dict[str, dict[str, str]] = {
    "defaults": {},
    "routes": {"EnableRoutes": "true", "ClusterCidrs": "10.244.0.0/16"},
    "no-nodes": {"EnableNodes": "false"},
    "irsa-alarm-mail": {
        "WatcherAuth": "irsa",
        "WatcherOidcIssuer": "oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE",
        "AlarmEmail": "ops@example.com",
    },
    "kubeconfig-no-watcher-role": {
        "KubeAuthMode": "kubeconfig-secret",
        "KubeconfigSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:kc",
        "WatcherAuth": "none",
    },
}


class _NoManagedPolicies:
    def load(self) -> dict[str, str]:
        raise AssertionError("template references a managed policy by name; use an ARN or !Ref")


@cache
def nested_templates() -> dict[str, Path]:
    """Logical id of each nested application of the template -> its local template (Location)."""
    resources = yaml_parse(TEMPLATE.read_text())["Resources"]
    return {
        k: (ROOT / v["Properties"]["Location"]).resolve()
        for k, v in resources.items()
        if v["Type"] == "AWS::Serverless::Application"
    }


@cache
def nested_raw(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml_parse(path.read_text())
    return doc


@cache
def translated(path: Path = TEMPLATE) -> dict[str, Any]:
    """The template after the SAM transform (as `sam deploy` would hand it to CloudFormation); guided.yaml too."""
    tpl: dict[str, Any] = yaml_parse(path.read_text())
    for res in tpl["Resources"].values():
        props = res.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str):
                props[key] = f"s3://artifacts/{props[key].strip('/')}.zip"
        if res["Type"] == "AWS::Serverless::Application" and isinstance(props.get("Location"), str):
            # `sam package` uploads a local nested template; the stack then names it by URL.
            props["Location"] = f"https://artifacts.s3.us-east-1.amazonaws.com/{Path(props['Location']).name}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        out: dict[str, Any] = transform(tpl, dict(PARAMS), _NoManagedPolicies())  # type: ignore[arg-type]
    return out


class Stack:
    """The template as deployed with `params`: which resources exist and what an expression evaluates to.

    A Ref to a resource becomes "<LogicalId>" (its physical name is CloudFormation's choice); any reference to a
    resource whose condition is false fails the test, as CloudFormation would fail the deployment.

    `nested` holds each nested stack that exists (logical id -> Stack of its template, with the parameters this
    stack passes it: a Ref to a parent resource arrives there as "<LogicalId>")."""

    def __init__(self, params: dict[str, str], tpl: dict[str, Any] | None = None) -> None:
        self.tpl = copy.deepcopy(translated() if tpl is None else tpl)
        self.params: dict[str, Any] = {k: v.get("Default") for k, v in self.tpl["Parameters"].items()}
        if tpl is None:
            self.params.update(PARAMS)
        self.params.update(params)
        for name, spec in self.tpl["Parameters"].items():
            if spec["Type"] == "CommaDelimitedList" and isinstance(self.params[name], str):
                self.params[name] = self.params[name].split(",")
        self.resources = {
            k: v for k, v in self.tpl["Resources"].items() if "Condition" not in v or self.condition(v["Condition"])
        }
        self.nested = {k: self._nested(k, v) for k, v in self.of_type("AWS::CloudFormation::Stack").items()}

    def _nested(self, logical_id: str, res: dict[str, Any]) -> Stack:
        child = nested_raw(nested_templates()[logical_id])
        assert "Transform" not in child, f"{logical_id}: a nested template with a transform needs its own packaging"
        given = {k: str(v) for k, v in self.value(res["Properties"].get("Parameters", {})).items()}
        declared = child.get("Parameters", {})
        # CloudFormation refuses a parameter the nested template does not declare, and one it needs but is not given.
        assert set(given) <= set(declared), (logical_id, set(given) - set(declared))
        missing = {k for k, spec in declared.items() if "Default" not in spec} - set(given)
        assert not missing, (logical_id, missing)
        return Stack(given, child)

    def condition(self, name: str) -> bool:
        return self._cond(self.tpl["Conditions"][name])

    def _cond(self, node: Any) -> bool:
        (key, arg), *_ = node.items()
        if key == "Fn::Equals":
            a, b = (self.value(x) for x in arg)
            return str(a) == str(b)
        if key == "Fn::Not":
            return not self._cond(arg[0])
        if key == "Fn::And":
            return all(self._cond(x) for x in arg)
        if key == "Fn::Or":
            return any(self._cond(x) for x in arg)
        if key == "Condition":
            return self.condition(arg)
        if key == "Fn::EachMemberIn":  # rule assertions only
            members, allowed = (self.value(x) for x in arg)
            return all(m in allowed for m in members)
        raise AssertionError(f"unsupported condition {key}")

    def of_type(self, rtype: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == rtype}

    def ref(self, name: str) -> Any:
        if name in PSEUDO:
            return PSEUDO[name]
        if name in self.params:
            return self.params[name]
        assert name in self.resources, f"reference to {name}, which does not exist with {self.params}"
        return f"<{name}>"

    def get_att(self, name: str, attribute: str) -> Any:
        assert name in self.resources, f"reference to {name}, which does not exist with {self.params}"
        if attribute.startswith("Outputs.") and name in self.nested:  # a nested stack's output
            child, output = self.nested[name], attribute.removeprefix("Outputs.")
            spec = child.tpl.get("Outputs", {}).get(output)
            assert spec is not None, f"{name} has no output {output}"
            assert "Condition" not in spec or child.condition(spec["Condition"]), f"{name}.{attribute} does not exist"
            return child.value(spec["Value"])
        if attribute == "QueueName":  # what AWS::SQS::Queue returns: the name we set
            return self.value(self.resources[name]["Properties"]["QueueName"])
        return f"<{name}.{attribute}>"

    def value(self, node: Any) -> Any:
        if isinstance(node, list):
            return [v for v in (self.value(x) for x in node) if v is not _NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) != 1 or not next(iter(node)).startswith(("Fn::", "Ref")):
            return {k: v for k, v in ((k, self.value(v)) for k, v in node.items()) if v is not _NO_VALUE}
        (key, arg), *_ = node.items()
        if key == "Ref":
            return _NO_VALUE if arg == "AWS::NoValue" else self.ref(arg)
        if key == "Fn::GetAtt":
            return self.get_att(*(arg.split(".", 1) if isinstance(arg, str) else arg))
        if key == "Fn::If":
            return self.value(arg[1] if self.condition(arg[0]) else arg[2])
        if key == "Fn::Join":
            joined = self.value(arg[1])
            return arg[0].join(str(x) for x in (joined if isinstance(joined, list) else [joined]))
        if key == "Fn::FindInMap":  # guided.yaml's fixed settings
            name, first, second = (self.value(x) for x in arg)
            return self.tpl["Mappings"][name][first][second]
        if key == "Fn::Split":
            return str(self.value(arg[1])).split(arg[0])
        if key == "Fn::Sub":
            text, local = (arg, {}) if isinstance(arg, str) else (arg[0], self.value(arg[1]))
            return re.sub(r"\$\{([^}!]+)\}", lambda m: str(self._sub_var(m.group(1), local)), text)
        raise AssertionError(f"unsupported intrinsic {key}")

    def _sub_var(self, name: str, local: dict[str, Any]) -> Any:
        if name in local:
            return local[name]
        if "." in name and name.split(".", 1)[0] in self.tpl["Resources"]:
            return self.get_att(*name.split(".", 1))
        return self.ref(name)

    def policy_document(self, doc: Any) -> dict[str, Any]:
        """A policy document given as YAML or as a JSON string (our !Sub documents)."""
        resolved = self.value(doc)
        parsed: dict[str, Any] = json.loads(resolved) if isinstance(resolved, str) else resolved
        return parsed


_NO_VALUE = object()
