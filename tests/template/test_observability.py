"""observability.yaml, the nested application of template.yaml that holds the alarms, their SNS topic and the
dashboard: it translates as plain CloudFormation, gets what it needs from the parent, and the parent's outputs
still name what it creates. What the alarms and widgets watch: tests/template/test_dashboard.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

from tests.template.cfn import OBSERVABILITY, PARAMS, SCENARIOS, TEMPLATE, Stack, _NoManagedPolicies, nested_templates

OBSERVED_TYPES = {"AWS::CloudWatch::Alarm", "AWS::CloudWatch::Dashboard", "AWS::SNS::Topic"}


def _raw(path: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml_parse(path.read_text())
    return doc


def test_the_parent_nests_observability_yaml_from_a_local_path() -> None:
    # A local Location: `sam build` copies it into .aws-sam/build/Observability/ and `sam package`/`sam deploy`
    # upload it (tests/template/test_sam_build.py builds it).
    assert nested_templates() == {"Observability": OBSERVABILITY}
    app = _raw(TEMPLATE)["Resources"]["Observability"]
    assert "Condition" not in app and app["Properties"]["Location"] == "observability.yaml"


def test_alarms_topic_and_dashboard_are_all_in_observability_yaml() -> None:
    """The split's point: the core stack has none of them, the nested one has nothing else."""
    parent = {v["Type"] for v in _raw(TEMPLATE)["Resources"].values()}
    child = {v["Type"] for v in _raw(OBSERVABILITY)["Resources"].values()}
    assert not parent & OBSERVED_TYPES
    assert child == OBSERVED_TYPES


def test_observability_yaml_needs_no_transform_and_translates_unchanged() -> None:
    """Plain CloudFormation: the SAM translator leaves it as it is (so it deploys as a nested stack without being
    transformed on its own), and it declares no transform that would need one."""
    raw = _raw(OBSERVABILITY)
    assert "Transform" not in raw
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        out = transform(copy.deepcopy(raw), {"ClusterName": PARAMS["ClusterName"]}, _NoManagedPolicies())  # type: ignore[arg-type]
    assert out["Resources"] == raw["Resources"] and out["Outputs"] == raw["Outputs"]


def test_passed_through_parameters_are_defined_alike() -> None:
    """AlarmEmail and QueueAgeAlarmSeconds are set on the parent (samconfig.toml, --guided) and passed on unchanged:
    the same definition in both, so the nested stack never refuses what the parent accepted."""
    parent, child = _raw(TEMPLATE), _raw(OBSERVABILITY)
    given = parent["Resources"]["Observability"]["Properties"]["Parameters"]
    passed = {k for k, v in given.items() if v == {"Ref": k}}
    assert passed == {"ClusterName", "AlarmEmail", "QueueAgeAlarmSeconds"}
    for name in passed - {"ClusterName"}:
        assert child["Parameters"][name] == parent["Parameters"][name], name
    # Only the alarms use them: nothing else in the parent refers to them.
    rest = {k: v for k, v in parent["Resources"].items() if k != "Observability"}
    assert "AlarmEmail" not in str(rest) and "QueueAgeAlarmSeconds" not in str(rest)


@pytest.mark.parametrize("scenario", [*SCENARIOS, "no-sweeper"])
def test_every_output_of_the_parent_resolves(scenario: str) -> None:
    """DashboardName and AlarmTopicArn stay outputs of the parent stack (the doctor and the docs read its outputs);
    they come from the nested stack's outputs, which exist whenever the parent's do."""
    stack = Stack(SCENARIOS.get(scenario, {"EnableSweeper": "false"}))
    outputs = {
        name: stack.value(spec["Value"])
        for name, spec in stack.tpl["Outputs"].items()
        if "Condition" not in spec or stack.condition(spec["Condition"])
    }
    assert outputs["DashboardName"] == "<Dashboard>"  # the nested stack's Ref Dashboard
    assert outputs.get("AlarmTopicArn") == ("<AlarmTopic>" if stack.params["AlarmEmail"] else None)


def test_the_dashboard_is_not_named_as_0_1_0_named_it() -> None:
    """An upgrade from 0.1.0 creates the nested stack's dashboard before CloudFormation deletes the parent's old one
    (cleanup runs last), and creating a dashboard whose name exists fails: a new name keeps that upgrade working."""
    stack = Stack({}).nested["Observability"]
    name = stack.value(stack.resources["Dashboard"]["Properties"]["DashboardName"])
    assert name == f"serverless-ccm-{PARAMS['ClusterName']}-overview"
