"""`sam deploy --guided` asks one question per parameter: each has a Description and a constraint, so a typo or a
placeholder is refused by CloudFormation before anything is created (AllowedPattern is a Java regex there; the
patterns used here mean the same in Python's `re`)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from tests.template.cfn import TEMPLATE, Stack

PARAMETERS: dict[str, dict[str, Any]] = yaml_parse(TEMPLATE.read_text())["Parameters"]


def allowed(name: str, value: str) -> bool:
    spec = PARAMETERS[name]
    if "AllowedValues" in spec and value not in [str(v) for v in spec["AllowedValues"]]:
        return False
    return "AllowedPattern" not in spec or re.fullmatch(spec["AllowedPattern"], value) is not None


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_every_parameter_is_described_and_constrained(name: str) -> None:
    spec = PARAMETERS[name]
    assert len(spec.get("Description", "")) >= 20, f"{name}: --guided shows this as the question"
    kind = spec["Type"]
    if kind == "String":
        assert "AllowedValues" in spec or "AllowedPattern" in spec, name
    elif kind == "Number":
        assert "AllowedValues" in spec or {"MinValue", "MaxValue"} <= set(spec), name
    elif kind == "CommaDelimitedList":
        # ClusterCidrs: the ClusterCidrsNeeded rule and the routes function; QueueRedriveRoleArns: SQS refuses a
        # queue policy naming something that is not an ARN, so a typo fails the deployment.
        assert name in ("ClusterCidrs", "QueueRedriveRoleArns")
    else:
        assert kind.startswith("AWS::"), name  # AWS-specific types: CloudFormation checks the resource exists


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ClusterName", "CHANGE-ME"),
        ("ClusterName", "CHANGE_ME"),
        ("ClusterName", "my-CHANGEME"),
        ("VpcId", "vpc-CHANGEME"),
        ("VpcId", "vpc-0123"),
        ("VpcId", "CHANGE-ME"),
        ("ClusterName", "changeme"),
        ("ClusterName", ""),
        ("ClusterName", "my cluster"),
        ("KubeconfigSecretArn", "arn:aws:secretsmanager:REGION:ACCOUNT:secret:CHANGE-ME"),
        ("KubeconfigSecretArn", "my-secret"),
        ("WatcherOidcIssuer", "CHANGE-ME.example.com"),
        ("WatcherOidcIssuer", "change-me"),
        ("WatcherOidcIssuer", "<issuer>"),
        ("WatcherOidcIssuer", "https://oidc.eks.us-east-1.amazonaws.com/id/ABC"),
        ("LoadBalancerClass", "serverless"),
        ("WatcherNamespace", "Serverless_CCM"),
        ("LogLevel", "TRACE"),
        ("KubeconfigSecretKmsKeyArn", "alias/aws/secretsmanager"),
        ("DefaultLoadBalancerType", "alb"),
    ],
)
def test_placeholders_and_typos_are_refused(name: str, value: str) -> None:
    assert not allowed(name, value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ClusterName", "prod-eu-1"),
        ("ClusterName", "change-management"),
        ("VpcId", "vpc-0123456789abcdef0"),
        ("VpcId", "vpc-1a2b3c4d"),
        ("KubeconfigSecretArn", ""),
        ("KubeconfigSecretArn", "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ccm/kubeconfig-AbCdEf"),
        ("KubeconfigSecretArn", "arn:aws-cn:secretsmanager:cn-north-1:123456789012:secret:kc-AbCdEf"),
        ("WatcherOidcIssuer", "oidc.eks.us-east-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE"),
        ("LoadBalancerClass", "ccm.aws/serverless"),
        ("WatcherNamespace", "serverless-ccm"),
        ("KubeconfigSecretKmsKeyArn", "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"),
    ],
)
def test_real_values_are_accepted(name: str, value: str) -> None:
    assert allowed(name, value)


@pytest.mark.parametrize(
    ("auth", "choice", "expected"),
    [
        ("eks", "auto", "nlb"),
        ("kubeconfig-secret", "auto", "clb"),
        ("eks", "clb", "clb"),
        ("kubeconfig-secret", "nlb", "nlb"),
    ],
)
def test_default_load_balancer_type_is_nlb_on_eks(auth: str, choice: str, expected: str) -> None:
    """EKS clusters have no Classic ELBs of cloud-provider-aws to adopt: NLB unless asked otherwise."""
    params = {"KubeAuthMode": auth, "DefaultLoadBalancerType": choice}
    if auth == "kubeconfig-secret":
        params["KubeconfigSecretArn"] = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kc-AbCdEf"
    stack = Stack(params)
    env = stack.value(stack.resources["ServiceReconcilerFunction"]["Properties"]["Environment"]["Variables"])
    assert env["DEFAULT_LOAD_BALANCER_TYPE"] == expected
