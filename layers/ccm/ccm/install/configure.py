"""`scripts/configure`: the few questions a first deploy needs, each checked against the template's own
AllowedPattern (a placeholder such as CHANGE_ME or vpc-CHANGEME is asked again), saved as a new samconfig.toml
environment named after the cluster; every other parameter keeps its tracked profile's value. Then
`sam build && sam deploy --config-env <cluster>`. (`sam deploy --guided` on guided.yaml asks the same and saves the same
environment: ccm/install/guided.py, docs/deploy.md.)"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[4]
# The questions per profile: only the cluster's identity (the tracked profiles deliberately hold none of it).
QUESTIONS = {
    "default": ["ClusterName", "VpcId"],
    "self-managed": ["ClusterName", "VpcId", "KubeconfigSecretArn", "WatcherOidcIssuer"],
}
# Self-managed without a public OIDC issuer (docs/deploy.md): the watcher brings its own credentials.
NO_ISSUER = "WatcherAuth=none"


class _Loader(yaml.SafeLoader):
    """Reads template.yaml's Parameters; CloudFormation's short tags (!Ref, !Sub...) become plain values."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def template_parameters(template: Path) -> dict[str, dict[str, Any]]:
    params: dict[str, dict[str, Any]] = yaml.load(template.read_text(), Loader=_Loader)["Parameters"]  # a SafeLoader
    return params


def refusal(spec: dict[str, Any], value: str) -> str | None:
    """Why CloudFormation would refuse this value (None: it accepts it). AllowedPattern is a Java regex there; the
    template's patterns mean the same in Python's re (tests/template/test_parameters.py)."""
    if not value and "Default" not in spec:
        return "required"
    if "AllowedPattern" in spec and re.fullmatch(spec["AllowedPattern"], value) is None:
        return str(spec.get("ConstraintDescription") or f"must match {spec['AllowedPattern']}")
    return None


def ask(
    profile: str, params: dict[str, dict[str, Any]], read: Callable[[str], str], say: Callable[[str], None]
) -> dict[str, str]:
    answers: dict[str, str] = {}
    for name in QUESTIONS[profile]:
        spec = params[name]
        while True:
            value = read(f"{name}: {' '.join(str(spec.get('Description', '')).split())}\n> ").strip()
            if name == "WatcherOidcIssuer" and not value:
                say(f"no issuer: {NO_ISSUER} (give the watcher credentials yourself, docs/deploy.md)")
                break
            why = refusal(spec, value)
            if why is None:
                answers[name] = value
                break
            say(f"refused: {why}")
    return answers


def environment(config: dict[str, Any], profile: str, env: str, answers: dict[str, str]) -> str:
    """The TOML text of a new environment `env`: the profile's settings, its parameter_overrides + the answers."""
    if env in config:
        raise ValueError(f"samconfig.toml already has an environment {env!r}")
    overrides = str(config[profile]["deploy"]["parameters"]["parameter_overrides"])
    if profile == "self-managed" and "WatcherOidcIssuer" not in answers:
        overrides = overrides.replace('WatcherAuth="irsa"', 'WatcherAuth="none"')
    overrides += "".join(f' {k}="{v}"' for k, v in answers.items())
    deploy = {**config[profile]["deploy"]["parameters"], "parameter_overrides": overrides}
    deploy["s3_prefix"] = f"serverless-ccm-{env}"
    lines = [f"\n# ---- {env}: written by scripts/configure from the {profile} profile ----"]
    lines += [f"[{env}.global.parameters]", f'stack_name = "serverless-ccm-{env}"', ""]
    for section, values in (("build", config[profile]["build"]["parameters"]), ("deploy", deploy)):
        lines.append(f"[{env}.{section}.parameters]")
        for key, value in values.items():
            text = str(value).lower() if isinstance(value, bool) else value
            lines.append(f"{key} = {text}" if isinstance(value, bool) else f"{key} = {_toml_string(str(text))}")
        lines.append("")
    return "\n".join(lines)


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main(argv: Sequence[str] | None = None, read: Callable[[str], str] = input) -> int:
    p = argparse.ArgumentParser(prog="scripts/configure", description=__doc__)
    p.add_argument("--profile", choices=sorted(QUESTIONS), default="default", help="default = EKS")
    p.add_argument("--samconfig", default=str(REPO / "samconfig.toml"))
    p.add_argument("--template", default=str(REPO / "template.yaml"))
    args = p.parse_args(argv)
    samconfig = Path(args.samconfig)
    config = tomllib.loads(samconfig.read_text())
    answers = ask(args.profile, template_parameters(Path(args.template)), read, lambda m: print(m, file=sys.stderr))
    env = answers["ClusterName"]
    try:
        text = environment(config, args.profile, env, answers)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    with samconfig.open("a") as f:
        f.write(text)
    print(f"saved [{env}] in {samconfig}; next: sam build && sam deploy --config-env {env}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
