"""guided.yaml: template.yaml for `sam deploy --guided`, which prompts for EVERY parameter of the template it deploys
(SAM CLI's guided_context.prompt_parameters: no parameter is skipped, a default only pre-fills the answer).

guided.yaml has the same resources, conditions and outputs as template.yaml, but only the first install's
parameters (FIRST_INSTALL); every other parameter becomes a fixed value, its template.yaml default, read with
Fn::FindInMap from the mapping `Settings` (a mapping and not a literal, so conditions stay conditions for cfn-lint).
A stack deployed from guided.yaml is therefore the stack template.yaml deploys with those defaults: later deploys
can use template.yaml (`sam build && sam deploy --config-env <cluster>`) with any setting, nothing is replaced.
The rules that name a fixed parameter hold for the defaults and are left out (Rules cannot read a mapping).

    python -m ccm.install.guided           # rewrites guided.yaml from template.yaml
    python -m ccm.install.guided --check   # exit 1 when guided.yaml is not what template.yaml gives
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from ccm.install.configure import QUESTIONS, REPO

# What a first install needs: the cluster's identity and the two authentication choices with their one input each
# (the EKS and self-managed questions of scripts/configure, plus the choices the samconfig profiles make there).
FIRST_INSTALL = ("ClusterName", "VpcId", "KubeAuthMode", "KubeconfigSecretArn", "WatcherAuth", "WatcherOidcIssuer")
assert {q for questions in QUESTIONS.values() for q in questions} <= set(FIRST_INSTALL)
MAPPING = "Settings"
KEY = "Default"
HEADER = """\
# GENERATED from template.yaml by `python -m ccm.install.guided`: do not edit (a test fails when it is stale).
# The template for `sam deploy --guided`, which prompts for every parameter of the template it deploys: this one has
# only the first install's parameters; every other setting is template.yaml's default (mapping Settings). Same
# resources as template.yaml, so later deploys may use template.yaml and change any setting (docs/deploy.md).
"""


class _Loader(yaml.SafeLoader):
    """template.yaml with CloudFormation's short tags in their long form (!Ref X -> {"Ref": X}, !Sub -> Fn::Sub)."""


def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if suffix in ("Ref", "Condition"):
        return {suffix: value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


_Loader.add_multi_constructor("!", _tag)


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.load(path.read_text(), Loader=_Loader)  # a SafeLoader
    return doc


def _fixed(name: str) -> dict[str, Any]:
    return {"Fn::FindInMap": [MAPPING, KEY, name]}


def _rewrite(node: Any, fixed: set[str]) -> Any:
    if isinstance(node, list):
        return [_rewrite(x, fixed) for x in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Ref"} and node["Ref"] in fixed:
        return _fixed(node["Ref"])
    if set(node) == {"Fn::Sub"}:
        arg = node["Fn::Sub"]
        text, local = (arg, {}) if isinstance(arg, str) else (arg[0], dict(arg[1]))
        names = [n for n in re.findall(r"\$\{([^}!][^}]*)\}", text) if n in fixed and n not in local]
        local = {k: _rewrite(v, fixed) for k, v in local.items()}
        local.update({n: _fixed(n) for n in dict.fromkeys(names)})
        return {"Fn::Sub": [text, local] if local else text}
    return {k: _rewrite(v, fixed) for k, v in node.items()}


def _names(node: Any) -> set[str]:
    text = json.dumps(node)
    return set(re.findall(r'"Ref": "([A-Za-z0-9]+)"', text)) | set(re.findall(r"\$\{([A-Za-z0-9]+)\}", text))


def _default(spec: dict[str, Any]) -> Any:
    value = spec["Default"]
    if spec["Type"] == "CommaDelimitedList":  # what !Ref gives: a list
        return str(value).split(",")
    return str(value)


def guided(template: dict[str, Any]) -> dict[str, Any]:
    params = template["Parameters"]
    fixed = set(params) - set(FIRST_INSTALL)
    missing = [p for p in fixed if "Default" not in params[p]]
    if missing:
        raise ValueError(f"parameters without a default cannot be fixed: {missing}")
    out: dict[str, Any] = {}
    for key, value in template.items():
        if key == "Parameters":
            out[key] = {p: params[p] for p in FIRST_INSTALL}
            out["Mappings"] = {MAPPING: {KEY: {p: _default(params[p]) for p in params if p in fixed}}}
        elif key == "Rules":
            out[key] = {k: v for k, v in value.items() if not _names(v) & fixed}
        elif key in ("Conditions", "Globals", "Resources", "Outputs"):
            out[key] = _rewrite(value, fixed)
        else:
            out[key] = value
    return out


def render(template_path: Path) -> str:
    doc = guided(load(template_path))
    body = yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True)
    return HEADER + body


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccm.install.guided", description=__doc__)
    p.add_argument("--template", default=str(REPO / "template.yaml"))
    p.add_argument("--out", default=str(REPO / "guided.yaml"))
    p.add_argument("--check", action="store_true", help="only compare: exit 1 when --out is stale")
    args = p.parse_args(argv)
    text = render(Path(args.template))
    out = Path(args.out)
    if args.check:
        if not out.exists() or out.read_text() != text:
            print(f"{out} is not what {args.template} gives: run python -m ccm.install.guided", file=sys.stderr)
            return 1
        return 0
    out.write_text(text)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
