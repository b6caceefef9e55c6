"""Parameters, feature switches and per-function settings of template.yaml, evaluated as CloudFormation would."""

from __future__ import annotations

from samtranslator.yaml_helper import yaml_parse

from tests.template.cfn import SCENARIOS, TEMPLATE, Stack

NODE_RESOURCES = {
    "NodeReconcilerFunction",
    "NodeReconcilerFunctionRole",
    "NodeReconcilerFunctionNodeMessages",
    "NodeInstanceStateRule",
    "NodeSafetyPassRule",
    "NodesQueuePolicy",
    "NodeReconcilerLogGroup",
    "NodeReconcilerAccessEntry",
}


def test_the_parameters_an_operator_sets() -> None:
    params = yaml_parse(TEMPLATE.read_text())["Parameters"]
    assert set(params) >= {
        "ClusterName",
        "VpcId",
        "ClusterCidrs",
        "EnableRoutes",
        "EnableNodes",
        "DefaultLoadBalancerType",
        "LoadBalancerClass",
        "LogLevel",
        "LogRetentionDays",
        "AlarmEmail",
        "KubeAuthMode",
        "WatcherAuth",
    }
    assert params["AlarmEmail"]["Default"] == "" and params["EnableNodes"]["Default"] == "true"


def test_every_function_has_its_own_retained_log_group_and_bounded_concurrency() -> None:
    for scenario in ("routes", "defaults"):
        stack = Stack(SCENARIOS[scenario])
        groups = stack.of_type("AWS::Logs::LogGroup")
        functions = stack.of_type("AWS::Lambda::Function")
        assert len(groups) == len(functions)
        for logical_id, fn in functions.items():
            props = stack.value(fn["Properties"])
            group = props["LoggingConfig"]["LogGroup"].strip("<>")
            assert stack.value(groups[group]["Properties"]["RetentionInDays"]) == 30, logical_id
            # The teardown waits, inside the stack deletion, for LBs and their interfaces to go (Lambda's maximum).
            timeout = 900 if logical_id == "TeardownFunction" else 300
            assert props["Architectures"] == ["arm64"] and props["Timeout"] <= timeout and props["MemorySize"] >= 256
            esms = [e for e in stack.of_type("AWS::Lambda::EventSourceMapping").values()
                    if e["Properties"]["FunctionName"] == {"Ref": logical_id}]  # fmt: skip
            for esm in esms:  # queue consumers: bounded by the ESM (the scheduled sweeper runs one at a time)
                assert 2 <= int(stack.value(esm["Properties"]["ScalingConfig"]["MaximumConcurrency"])) <= 1000
            assert esms or logical_id in ("SweeperFunction", "TeardownFunction"), logical_id
    assert Stack({"LogRetentionDays": "7"}).value({"Ref": "LogRetentionDays"}) == "7"


def test_nodes_switch_off_removes_the_nodes_lambda_and_its_feeds() -> None:
    on, off = Stack({}), Stack(SCENARIOS["no-nodes"])
    assert set(on.resources) >= NODE_RESOURCES
    assert not NODE_RESOURCES & set(off.resources)
    # Without the nodes Lambda nothing keeps the membership table current: the reconciler LISTs Nodes instead.
    env = {name: off.value(fn["Properties"]["Environment"]["Variables"]) for name, fn in off.of_type(
        "AWS::Lambda::Function").items()}  # fmt: skip
    assert env["ServiceReconcilerFunction"]["MEMBERSHIP_TABLE"] == ""
    on_env = on.value(on.resources["ServiceReconcilerFunction"]["Properties"]["Environment"]["Variables"])
    assert on_env["MEMBERSHIP_TABLE"] == "<MembershipTable>"
    # The queue stays (the watcher always sends Node deltas); routes cannot run without their feed.
    assert "NodesQueue" in off.resources
    assert not Stack({"EnableNodes": "false", "EnableRoutes": "true", "ClusterCidrs": "10.0.0.0/16"}).condition(
        "RoutesEnabled"
    )
    rule = yaml_parse(TEMPLATE.read_text())["Rules"]["RoutesNeedNodes"]
    assert rule["Assertions"][0]["Assert"] == {"Fn::Equals": [{"Ref": "EnableNodes"}, "true"]}


def test_alarm_topic_only_with_an_address() -> None:
    assert "AlarmTopic" not in Stack({}).nested["Observability"].resources
    mailed = Stack(SCENARIOS["irsa-alarm-mail"]).nested["Observability"]  # the parent passes AlarmEmail through
    topic = mailed.resources["AlarmTopic"]["Properties"]
    assert topic["Subscription"] == [{"Protocol": "email", "Endpoint": {"Ref": "AlarmEmail"}}]
    assert mailed.value(topic["Subscription"])[0]["Endpoint"] == "ops@example.com"
