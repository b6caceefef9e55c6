"""`python -m devstack.demo` run end to end as scripts/demo.sh runs it (the current virtualenv stands in for the
one bootstrap.sh makes): it must get its hostname and finish its delete, and say how the devstack differs from AWS."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.aws_faithful import ENV_SG_RELEASE
from devstack.demo import DEMO_SG_RELEASE_SECONDS

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(360)
def test_the_demo_runs_as_scripts_demo_sh_runs_it(tmp_path: Path) -> None:
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is not on PATH (the demo drives the cluster with it)")
    env = {k: v for k, v in os.environ.items() if k != ENV_SG_RELEASE}  # the suite shortens the hold; demo.sh not
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "layers" / "ccm"), str(REPO)])
    log = tmp_path / "demo.log"
    with log.open("w") as stderr:
        done = subprocess.run(
            [sys.executable, "-m", "devstack.demo"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=330,
        )
    out = done.stdout
    assert done.returncode == 0, f"demo failed:\n{out}\n--- stderr (tail) ---\n{log.read_text()[-4000:]}"
    assert "EXTERNAL-IP hostname: " in out and ".elb." in out, out
    assert f"The demo shortens the hold to {DEMO_SG_RELEASE_SECONDS:g} s" in out, out
    assert "AWS keeps a deleted NLB's network interfaces" in out, out
    assert "Service gone after" in out, out
    assert "load balancers left: 0" in out, out
