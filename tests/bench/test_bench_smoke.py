"""The benchmark keeps working and its headline claims keep holding (counts, not timings)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.__main__ import main


def test_aws_calls_scenario_writes_json_and_beats_the_anchor(tmp_path: Path):
    out = tmp_path / "latest.json"
    assert main(["--only", "aws_calls", "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    nlb, anchor = results["aws_calls"]["nlb"], results["aws_calls"]["anchor"]["nlb"]
    assert nlb["mutating_noop"] == 0
    for op in ("create", "noop", "add_node"):
        assert nlb[op] < anchor[op], op
    clb, clb_anchor = results["aws_calls"]["clb"], results["aws_calls"]["anchor"]["clb"]
    assert clb["mutating_noop"] == 0
    assert clb["create"] < clb_anchor["create"] and clb["add_node"] < clb_anchor["add_node"]
    assert results["latency_ms"] is None and "latency_ms" in results["_pending"]  # pending, never made up
    # cloud-provider-aws lists every instance of the region on creation; we never need instances for an NLB
    # (tests/integration/test_security_groups.py checks that every security-group read is filtered).
    create_ops = results["aws_calls"]["nlb"]["detail"]["create"]["by_operation"]
    assert "ec2:DescribeInstances" not in create_ops
