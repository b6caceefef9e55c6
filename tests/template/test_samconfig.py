"""samconfig.toml: both profiles deploy with parameters the template has, values it allows and rules it keeps."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from tests.template.cfn import ROOT, TEMPLATE, Stack

CONFIG = tomllib.loads((ROOT / "samconfig.toml").read_text())


def overrides(profile: str) -> dict[str, str]:
    text = CONFIG[profile]["deploy"]["parameters"]["parameter_overrides"]
    pairs = re.findall(r'(\w+)="([^"]*)"', text)
    assert " ".join(f'{k}="{v}"' for k, v in pairs) == text, "unparsable parameter_overrides"
    return dict(pairs)


def rule_holds(stack: Stack, rule: dict[str, Any]) -> bool:
    if "RuleCondition" in rule and not stack._cond(rule["RuleCondition"]):
        return True
    return all(stack._cond(a["Assert"]) for a in rule["Assertions"])


def test_two_profiles() -> None:
    assert {"default", "self-managed"} <= set(CONFIG)
    assert CONFIG["default"]["validate"]["parameters"]["lint"] is True


# What `sam deploy --guided` asks the user for: no profile carries a value for these.
USER_GIVEN = {
    "default": {"ClusterName": "prod-eu", "VpcId": "vpc-0123456789abcdef0"},
    "self-managed": {
        "ClusterName": "kubeadm-1",
        "VpcId": "vpc-0123456789abcdef0",
        "KubeconfigSecretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ccm-kubeconfig-AbCdEf",
        "WatcherOidcIssuer": "oidc.example.org/cluster-1",
    },
}


@pytest.mark.parametrize("profile", ["default", "self-managed"])
def test_profiles_hold_no_placeholder_and_no_identity(profile: str) -> None:
    """A profile that deploys as it stands would deploy a placeholder: the identity of the cluster is never in it."""
    params = overrides(profile)
    assert not set(params) & set(USER_GIVEN[profile]), "these are the user's to give (sam deploy --guided asks)"
    assert not [v for v in params.values() if "CHANGE" in v.upper() or "REGION" in v or "ACCOUNT" in v]


@pytest.mark.parametrize("profile", ["default", "self-managed"])
def test_profile_parameters_are_valid(profile: str) -> None:
    raw = yaml_parse(TEMPLATE.read_text())
    params = {**overrides(profile), **USER_GIVEN[profile]}
    for name, value in params.items():
        spec = raw["Parameters"][name]  # KeyError: a parameter the template does not have
        if "AllowedValues" in spec:
            assert value in [str(v) for v in spec["AllowedValues"]], (name, value)
        if "AllowedPattern" in spec:
            assert re.fullmatch(spec["AllowedPattern"], value), (name, value)
    stack = Stack(params)
    for name, rule in raw["Rules"].items():
        assert rule_holds(stack, rule), f"{profile} breaks rule {name}"
    # IAM: the stack creates roles; AUTO_EXPAND: it nests an application (observability.yaml), which a stack may
    # only do with that capability acknowledged.
    assert CONFIG[profile]["deploy"]["parameters"]["capabilities"].split() == [
        "CAPABILITY_IAM",
        "CAPABILITY_AUTO_EXPAND",
    ]


def test_profiles_differ_where_it_matters() -> None:
    default = {**overrides("default"), **USER_GIVEN["default"]}
    managed = {**overrides("self-managed"), **USER_GIVEN["self-managed"]}
    assert (default["KubeAuthMode"], managed["KubeAuthMode"]) == ("eks", "kubeconfig-secret")
    assert Stack(managed).resources.keys() >= {"RouteReconcilerFunction", "WatcherRole"}
    assert "ServiceReconcilerAccessEntry" not in Stack(managed).resources
    assert "WatcherPodIdentityAssociation" in Stack(default).resources
