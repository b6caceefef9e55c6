"""Issue 23: the pass makes no AWS call itself, and the deployers' flows call AWS only through their reads and
writes. The import contracts (pyproject `pass-makes-no-aws-call`, `deployer-flows-call-through-reads-and-writes`)
keep the SDK out; this keeps out calls through a client reached by attribute (`self.clients.elbv2.x(...)`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

AWS = Path(__file__).resolve().parents[2] / "layers" / "ccm" / "ccm" / "aws"
CLIENT_ATTRIBUTES = {"elbv2", "ec2", "tagging", "client", "session", "elb"}


def client_calls(source: str) -> list[str]:
    """Calls made on something reached through a client attribute, e.g. `self.clients.elbv2.describe_tags(...)`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            chain, target = [], node.func.value
            while isinstance(target, ast.Attribute | ast.Call):
                if isinstance(target, ast.Call):
                    target = target.func
                    continue
                chain.append(target.attr)
                target = target.value
            if CLIENT_ATTRIBUTES & set(chain) and "clients" in chain:
                found.append(f"line {node.lineno}: {ast.unparse(node.func)}")
    return found


def test_the_detector_finds_a_client_call() -> None:
    assert client_calls("self.clients.elbv2.delete_load_balancer(LoadBalancerArn=a)") == [
        "line 1: self.clients.elbv2.delete_load_balancer"
    ]
    assert client_calls("self.clients.client('elb').add_tags(Tags=[])") == [
        "line 1: self.clients.client('elb').add_tags"
    ]
    assert client_calls("reads.describe_lb(self.clients, name)") == []


@pytest.mark.parametrize("module", ["balancers.py", "model.py", "deployer.py", "nlb.py", "clb.py"])
def test_the_pass_and_the_deployer_flows_call_no_client(module: str) -> None:
    assert client_calls((AWS / module).read_text()) == []
