"""scripts/configure: only the first deploy's questions, each refused while it fails the template's pattern, the
answers saved to a samconfig.toml environment of the user's that deploys (rules hold), tracked profiles untouched."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from samtranslator.yaml_helper import yaml_parse

from ccm.install.configure import main
from tests.template.cfn import ROOT, TEMPLATE, Stack
from tests.template.test_samconfig import rule_holds


def run(tmp_path: Path, profile: str, answers: list[str]) -> tuple[int, list[str], dict[str, object], Path]:
    samconfig = tmp_path / "samconfig.toml"
    shutil.copy(ROOT / "samconfig.toml", samconfig)
    prompts: list[str] = []
    replies = iter(answers)

    def read(prompt: str) -> str:
        prompts.append(prompt.split(":")[0])
        return next(replies)

    code = main(["--profile", profile, "--samconfig", str(samconfig), "--template", str(TEMPLATE)], read)
    return code, prompts, tomllib.loads(samconfig.read_text()), samconfig


def overrides(config: dict[str, object], env: str) -> dict[str, str]:
    text = config[env]["deploy"]["parameters"]["parameter_overrides"]  # type: ignore[index]
    pairs = [p.split("=", 1) for p in text.split()]
    return {k: v.strip('"') for k, v in pairs}


def test_eks_asks_two_questions_and_refuses_placeholders(tmp_path: Path) -> None:
    code, prompts, config, _ = run(
        tmp_path, "default", ["CHANGE_ME", "prod-eu", "vpc-CHANGEME", "vpc-0123456789abcdef0"]
    )
    assert code == 0
    assert prompts == ["ClusterName", "ClusterName", "VpcId", "VpcId"]  # each placeholder asked again
    original = tomllib.loads((ROOT / "samconfig.toml").read_text())
    assert {k: config[k] for k in original} == original  # the tracked profiles as they were
    params = overrides(config, "prod-eu")
    assert params["ClusterName"] == "prod-eu" and params["VpcId"] == "vpc-0123456789abcdef0"
    assert config["prod-eu"]["global"]["parameters"]["stack_name"] == "serverless-ccm-prod-eu"  # type: ignore[index]
    stack = Stack(params)
    assert all(rule_holds(stack, rule) for rule in yaml_parse(TEMPLATE.read_text())["Rules"].values())


@pytest.mark.parametrize(("issuer", "auth"), [("oidc.internal.example.org/k1", "irsa"), ("", "none")])
def test_self_managed_asks_for_the_secret_and_the_issuer(tmp_path: Path, issuer: str, auth: str) -> None:
    secret = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ccm-kubeconfig-AbCdEf"
    code, prompts, config, _ = run(
        tmp_path,
        "self-managed",
        ["k1", "vpc-1a2b3c4d", "arn:aws:secretsmanager:REGION:ACCOUNT:secret:x", secret, issuer],
    )
    assert code == 0 and prompts.count("KubeconfigSecretArn") == 2 and len(prompts) == 5
    params = overrides(config, "k1")
    assert params["KubeAuthMode"] == "kubeconfig-secret" and params["WatcherAuth"] == auth
    assert params["KubeconfigSecretArn"] == secret
    stack = Stack(params)
    assert all(rule_holds(stack, rule) for rule in yaml_parse(TEMPLATE.read_text())["Rules"].values())


def test_an_existing_environment_is_not_overwritten(tmp_path: Path) -> None:
    code, _, _, samconfig = run(tmp_path, "default", ["prod-eu", "vpc-1a2b3c4d"])
    before = samconfig.read_text()
    replies = iter(["prod-eu", "vpc-1a2b3c4d"])
    argv = ["--samconfig", str(samconfig), "--template", str(TEMPLATE)]
    assert code == 0 and main(argv, lambda _: next(replies)) == 2
    assert samconfig.read_text() == before
