"""CloudFormation's intrinsic functions and conditions, evaluated as far as the devstack needs them: Ref (parameters,
pseudo parameters, resource names), Fn::Sub, Fn::GetAtt, Fn::Join, Fn::Select, Fn::If and the condition functions.

Apart from devstack.template (which reads queues and functions into facts) because evaluating intrinsics is a small
interpreter of its own, the same whichever resource property it evaluates.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devstack.template import TemplateFacts

SUB_VAR = re.compile(r"\$\{([^}]*)\}")
NO_VALUE = object()  # Ref AWS::NoValue: the enclosing key disappears


class TemplateError(ValueError):
    """The template uses something this reader cannot interpret."""


class Unresolved(LookupError):
    """A Ref/GetAtt/Sub names a parameter without value or a resource whose name was not given."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class Resolver:
    """Evaluates the intrinsic functions that matter for settings; strict=False renders unknowns as ${Name}."""

    def __init__(self, facts: TemplateFacts) -> None:
        self.facts = facts
        self.pseudo = {
            "AWS::Region": facts.region,
            "AWS::AccountId": facts.account_id,
            "AWS::StackName": facts.stack_name,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackId": f"arn:aws:cloudformation:{facts.region}:{facts.account_id}:stack/{facts.stack_name}/0",
        }

    def value(self, node: Any, strict: bool = True) -> Any:
        if isinstance(node, list):
            return [v for v in (self.value(x, strict) for x in node) if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
            if key == "Ref":
                return self.ref(str(arg), strict)
            if key == "Fn::GetAtt":
                parts = arg.split(".", 1) if isinstance(arg, str) else arg
                return self.name(f"{parts[0]}.{parts[1]}", strict)
            if key == "Fn::Sub":
                return self.sub(arg, strict)
            if key == "Fn::Join":
                sep, items = arg
                return str(sep).join(str(v) for v in self.value(items, strict))
            if key == "Fn::Select":
                index, items = arg
                return self.value(items, strict)[int(self.value(index, strict))]
            if key == "Fn::If":
                cond, yes, no = arg
                return self.value(yes if self.condition(cond) else no, strict)
            if key.startswith("Fn::"):
                raise TemplateError(f"unsupported intrinsic {key}")
        out = {k: self.value(v, strict) for k, v in node.items()}
        return {k: v for k, v in out.items() if v is not NO_VALUE}

    def ref(self, name: str, strict: bool) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.pseudo:
            return self.pseudo[name]
        if name in self.facts.parameters:
            value = self.facts.parameters[name]
            spec = (self.facts._doc.get("Parameters") or {}).get(name) or {}
            if str(spec.get("Type", "")).startswith(("CommaDelimitedList", "List<")):
                return value.split(",") if value else [""]  # CloudFormation: an empty list parameter is [""]
            return value
        return self.name(name, strict)

    def name(self, name: str, strict: bool) -> str:
        if name in self.facts.resource_names:
            return self.facts.resource_names[name]
        if strict:
            raise Unresolved(name)
        return "${" + name + "}"

    def sub(self, arg: Any, strict: bool) -> str:
        text, extra = (arg, {}) if isinstance(arg, str) else (arg[0], self.value(arg[1], strict))

        def one(match: re.Match[str]) -> str:
            var = match.group(1)
            if var.startswith("!"):  # ${!Literal} renders as ${Literal}
                return "${" + var[1:] + "}"
            if var in extra:
                return str(extra[var])
            return str(self.name(var, strict) if "." in var else self.ref(var, strict))

        return SUB_VAR.sub(one, str(text))

    def condition(self, node: Any) -> bool:
        if isinstance(node, str):
            conditions = self.facts._doc.get("Conditions") or {}
            if node not in conditions:
                raise TemplateError(f"unknown condition {node}")
            return self.condition(conditions[node])
        ((key, arg),) = node.items()
        if key == "Fn::Equals":
            return str(self.value(arg[0])) == str(self.value(arg[1]))
        if key == "Fn::Not":
            return not self.condition(arg[0])
        if key == "Fn::And":
            return all(self.condition(c) for c in arg)
        if key == "Fn::Or":
            return any(self.condition(c) for c in arg)
        if key == "Condition":
            return self.condition(arg)
        raise TemplateError(f"unsupported condition function {key}")
