"""`sam deploy --guided` asks only the first install's questions: it prompts for every parameter of the template it
deploys (SAM CLI's GuidedContext.prompt_parameters), so guided.yaml, generated from template.yaml, has only those
(6 instead of 27) and the same resources. Proven with the real SAM CLI's prompts fed on stdin, offline (a moto
server answers its AWS calls); each prompted parameter refuses placeholders; the answers land in the user's
environment `<cluster>`, as scripts/configure's do, never in the tracked profiles."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import boto3
import pytest
from cfnlint.api import ManualArgs, lint_file
from moto.server import ThreadedMotoServer
from samtranslator.yaml_helper import yaml_parse

from ccm.install import guided
from ccm.install.configure import main as configure
from ccm.install.configure import refusal
from tests.template.cfn import ROOT, TEMPLATE, Stack, translated
from tests.template.test_samconfig import rule_holds

GUIDED = ROOT / "guided.yaml"
SAM = ROOT / ".venv" / "sam" / "bin" / "sam"
CLUSTER, VPC = "prod-eu", "vpc-0123456789abcdef0"
SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ccm-kubeconfig-AbCdEf"
PLACEHOLDERS = ["CHANGE-ME", "CHANGE_ME", "change-me", "changeme", "vpc-CHANGEME", "vpc-CHANGE_ME", "<cluster>"]
PLACEHOLDERS += ["arn:aws:secretsmanager:REGION:ACCOUNT:secret:CHANGE-ME", "https://CHANGE-ME"]
# What a first install answers (first-install parameters only): EKS; self-managed with and without OIDC federation.
ANSWERS = {
    "eks": {"ClusterName": CLUSTER, "VpcId": VPC},
    "eks-irsa": {"ClusterName": CLUSTER, "VpcId": VPC, "WatcherAuth": "irsa", "WatcherOidcIssuer": "oidc.example/id/1"},
    "self-managed": {
        "ClusterName": "k1",
        "VpcId": "vpc-1a2b3c4d",
        "KubeAuthMode": "kubeconfig-secret",
        "KubeconfigSecretArn": SECRET,
        "WatcherAuth": "irsa",
        "WatcherOidcIssuer": "oidc.internal.example.org/k1",
    },
    "self-managed-no-oidc": {
        "ClusterName": "k1",
        "VpcId": "vpc-1a2b3c4d",
        "KubeAuthMode": "kubeconfig-secret",
        "KubeconfigSecretArn": SECRET,
        "WatcherAuth": "none",
    },
}


def test_guided_yaml_is_what_template_yaml_gives() -> None:
    assert guided.main(["--check"]) == 0, "run: python -m ccm.install.guided"


def test_guided_yaml_has_only_the_first_install_parameters() -> None:
    full, lean = yaml_parse(TEMPLATE.read_text()), yaml_parse(GUIDED.read_text())
    assert len(full["Parameters"]) == 27
    assert list(lean["Parameters"]) == list(guided.FIRST_INSTALL)
    for name, spec in lean["Parameters"].items():
        assert spec == full["Parameters"][name]  # the same description, default and constraints
    # Every other setting keeps template.yaml's default.
    fixed = lean["Mappings"]["Settings"]["Default"]
    assert set(fixed) == set(full["Parameters"]) - set(guided.FIRST_INSTALL)
    for name, value in fixed.items():
        default = full["Parameters"][name]["Default"]
        assert value == (
            str(default).split(",") if full["Parameters"][name]["Type"] == "CommaDelimitedList" else str(default)
        )


@pytest.mark.parametrize("name", guided.FIRST_INSTALL)
@pytest.mark.parametrize("placeholder", PLACEHOLDERS)
def test_every_prompted_parameter_refuses_placeholders(name: str, placeholder: str) -> None:
    """What CloudFormation checks before it creates anything: AllowedPattern (a Java regex, the same in Python's re
    for these patterns) or AllowedValues."""
    spec = yaml_parse(GUIDED.read_text())["Parameters"][name]
    assert "AllowedPattern" in spec or "AllowedValues" in spec, name
    refused = refusal(spec, placeholder) is not None or placeholder not in [
        str(v) for v in spec.get("AllowedValues", [placeholder])
    ]
    assert refused, (name, placeholder)


@pytest.mark.parametrize("name", ["ClusterName", "VpcId"])
def test_the_identity_has_no_default(name: str) -> None:
    spec = yaml_parse(GUIDED.read_text())["Parameters"][name]
    assert "Default" not in spec and refusal(spec, "") == "required"


def test_guided_yaml_lints_clean() -> None:
    assert [str(m) for m in lint_file(GUIDED, config=ManualArgs(regions=["us-east-1"]))] == []


def _deployed(stack: Stack) -> dict[str, Any]:
    """What CloudFormation creates: every resource that exists, resolved; the nested stacks; the outputs."""
    outputs = {
        k: stack.value(v["Value"])
        for k, v in stack.tpl.get("Outputs", {}).items()
        if "Condition" not in v or stack.condition(v["Condition"])
    }
    nested = {k: _deployed(v) for k, v in stack.nested.items()}
    resources = {
        k: stack.value({kk: vv for kk, vv in v.items() if kk != "Condition"}) for k, v in stack.resources.items()
    }
    return _as_strings({"resources": resources, "nested": nested, "outputs": outputs})


def _as_strings(node: Any) -> Any:
    """A Ref to a Number parameter is a string in CloudFormation (tests/template/cfn.py keeps the default's int)."""
    if isinstance(node, dict):
        return {k: _as_strings(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_as_strings(v) for v in node]
    return str(node) if isinstance(node, int | float) and not isinstance(node, bool) else node


@pytest.mark.parametrize("answers", list(ANSWERS), ids=str)
def test_guided_yaml_deploys_the_stack_template_yaml_deploys(answers: str) -> None:
    """Same resources, properties, nested stack and outputs as template.yaml with the same answers: a stack made
    with --guided is later deployed from template.yaml (any setting changed) without replacing anything."""
    params = ANSWERS[answers]
    lean, full = Stack(params, translated(GUIDED)), Stack(params)
    assert _deployed(lean) == _deployed(full)
    rules = yaml_parse(TEMPLATE.read_text())["Rules"]
    assert all(rule_holds(full, rule) for rule in rules.values())
    # guided.yaml leaves out only the rules that name a fixed setting: they hold for the defaults.
    kept = yaml_parse(GUIDED.read_text())["Rules"]
    assert set(kept) == {"KubeconfigSecretNeeded", "WatcherOidcIssuerNeeded"} and set(kept) < set(rules)


# ------------------------------------------------------------------ the real SAM CLI, prompted on stdin


@pytest.fixture
def moto_server(monkeypatch: pytest.MonkeyPatch) -> Any:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # The bucket stack `sam deploy` creates once per account and Region (moto's change sets drop its tags).
    cfn = boto3.client("cloudformation", region_name="us-east-1", endpoint_url=endpoint)
    cfn.create_stack(
        StackName="aws-sam-cli-managed-default",
        TemplateBody=json.dumps(
            {
                "Resources": {"Bucket": {"Type": "AWS::S3::Bucket"}},
                "Outputs": {"SourceBucket": {"Value": {"Ref": "Bucket"}}},
            }
        ),
        Tags=[{"Key": "ManagedStackSource", "Value": "AwsSamCli"}],
    )
    try:
        yield endpoint
    finally:
        server.stop()


def sam_guided(work: Path, endpoint: str, answers: list[str]) -> tuple[list[str], str]:
    """docs/deploy.md's command, answers on stdin; returns the questions asked, in order, and the output."""
    assert SAM.exists(), "the SAM CLI is missing: run scripts/bootstrap.sh (it installs requirements-sam.txt)"
    argv = [str(SAM), "deploy", "--guided", "--template-file", "guided.yaml", "--config-env", CLUSTER]
    argv += ["--stack-name", f"serverless-ccm-{CLUSTER}", "--capabilities", "CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"]
    argv += ["--no-execute-changeset"]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(work / "home"),
        "SAM_CLI_TELEMETRY": "0",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    done = subprocess.run(
        argv, cwd=work, env=env, input="\n".join(answers) + "\n", capture_output=True, text=True, timeout=300
    )
    out = done.stdout + done.stderr
    asked = re.findall(r"\t(?:#[^\n\t]*\n\t)?([A-Z][A-Za-z ]+?|Parameter \w+) \[[^\]\n]*\]: ", out)
    return asked, out


def test_sam_deploy_guided_asks_only_the_first_install_questions(tmp_path: Path, moto_server: str) -> None:
    work = tmp_path / "repo"
    work.mkdir()
    for name in ("guided.yaml", "observability.yaml", "samconfig.toml"):
        shutil.copy(ROOT / name, work / name)
    for folder in ("functions", "layers"):
        shutil.copytree(ROOT / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    answers = ["", "", CLUSTER, VPC, "", "", "", ""]  # stack name and Region: the proposed ones
    answers += ["N", "Y", "N", "Y", "", ""]  # confirm changeset, IAM, rollback, save, file, environment
    asked, out = sam_guided(work, moto_server, answers)
    parameters = [q.removeprefix("Parameter ") for q in asked if q.startswith("Parameter ")]
    assert parameters == list(guided.FIRST_INSTALL), out[-3000:]  # 6 questions; template.yaml would ask 27
    assert asked[:2] == ["Stack Name", "AWS Region"] and asked[-1] == "SAM configuration environment", asked
    assert "Saved arguments to config file" in out, out[-3000:]
    config = tomllib.loads((work / "samconfig.toml").read_text())
    tracked = tomllib.loads((ROOT / "samconfig.toml").read_text())
    assert {k: config[k] for k in tracked} == tracked  # the tracked profiles as they were
    saved = config[CLUSTER]["deploy"]["parameters"]
    assert dict(re.findall(r'(\w+)="([^"]*)"', saved["parameter_overrides"])) == {
        "ClusterName": CLUSTER,
        "VpcId": VPC,
        "KubeAuthMode": "eks",
        "KubeconfigSecretArn": "",
        "WatcherAuth": "pod-identity",
        "WatcherOidcIssuer": "",
    }
    # The environment scripts/configure writes for the same cluster: same name, stack, prefix and capabilities.
    replies = iter(["other", VPC])
    shutil.copy(ROOT / "samconfig.toml", tmp_path / "configured.toml")
    argv = ["--samconfig", str(tmp_path / "configured.toml"), "--template", str(TEMPLATE)]
    assert configure(argv, lambda _: next(replies)) == 0
    configured = tomllib.loads((tmp_path / "configured.toml").read_text())["other"]
    assert saved["stack_name"] == f"serverless-ccm-{CLUSTER}" and configured["global"]["parameters"]["stack_name"] == (
        "serverless-ccm-other"
    )
    assert saved["s3_prefix"] == f"serverless-ccm-{CLUSTER}" and configured["deploy"]["parameters"]["s3_prefix"] == (
        "serverless-ccm-other"
    )
    assert saved["capabilities"] == configured["deploy"]["parameters"]["capabilities"]
