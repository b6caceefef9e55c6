"""`sam build` works on a machine with only Python 3.11+ (no python3.13, no container engine) and produces what the
Lambda runtime loads: python3.13 on arm64. The SAM CLI comes from requirements-sam.txt (scripts/bootstrap.sh puts it
in .venv/sam); the build runs on a copy of the sources so nothing is written into the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from samtranslator.yaml_helper import yaml_parse

from tests.template.cfn import OBSERVABILITY, ROOT, TEMPLATE

SAM = ROOT / ".venv" / "sam" / "bin" / "sam"
EM_AARCH64 = 183  # ELF e_machine of arm64
LAYER_LIMIT_BYTES = 250 * 1024 * 1024  # Lambda: function + layers unzipped


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert SAM.exists(), "the SAM CLI is missing: run scripts/bootstrap.sh (it installs requirements-sam.txt)"
    work = tmp_path_factory.mktemp("sam")
    shutil.copy(TEMPLATE, work / "template.yaml")
    shutil.copy(OBSERVABILITY, work / OBSERVABILITY.name)  # the nested application (alarms, dashboard)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("functions", "layers"):
        shutil.copytree(ROOT / folder, work / folder, ignore=ignore)
    # Only this interpreter's directory on the PATH besides the system's: no python3.13 for SAM's own builder to find.
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0", "PATH": f"{Path(os.sys.executable).parent}:/usr/bin:/bin"}
    done = subprocess.run(
        [str(SAM), "build", "--no-cached"], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return work / ".aws-sam" / "build"


def test_every_function_and_the_layer_are_built(built: Path) -> None:
    resources = yaml_parse(TEMPLATE.read_text())["Resources"]
    functions = [k for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"]
    for logical_id in functions:
        handler = resources[logical_id]["Properties"]["Handler"].split(".")[0]
        assert (built / logical_id / f"{handler}.py").is_file(), logical_id
    layer = built / "SharedLayer" / "python"
    assert (layer / "ccm" / "service" / "reconciler.py").is_file()
    assert (layer / "aws_lambda_powertools").is_dir() and (layer / "fastjsonschema").is_dir()


def test_the_nested_application_is_built_with_the_stack(built: Path) -> None:
    """`sam build` copies the local nested template next to the built one and points Location at it; `sam deploy`
    then uploads it (no extra step for the user)."""
    parent = yaml_parse((built / "template.yaml").read_text())
    app = parent["Resources"]["Observability"]["Properties"]
    assert app["Location"] == "Observability/template.yaml"
    child = yaml_parse((built / app["Location"]).read_text())
    assert child["Resources"] == yaml_parse(OBSERVABILITY.read_text())["Resources"]


def test_layer_is_built_for_python313_on_arm64(built: Path) -> None:
    layer = built / "SharedLayer" / "python"
    wheels = list(layer.glob("*.dist-info/WHEEL"))
    assert wheels
    for wheel in wheels:
        tags = [line.split(": ", 1)[1] for line in wheel.read_text().splitlines() if line.startswith("Tag: ")]
        assert all(t.startswith("py3-none-") or ("cp313" in t and "aarch64" in t) for t in tags), (wheel, tags)
    extensions = list(layer.rglob("*.so"))
    assert extensions, "PyYAML's C extension expected: a compiled wheel proves the platform options took effect"
    for so in extensions:
        header = so.read_bytes()[:20]
        assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == EM_AARCH64, so
        assert "cpython-313-aarch64" in so.name, so


def test_layer_size_is_far_below_the_lambda_limit(built: Path) -> None:
    size = sum(f.stat().st_size for f in (built / "SharedLayer").rglob("*") if f.is_file())
    assert size < LAYER_LIMIT_BYTES / 10, size  # 13 MB measured; a regression to the old 104 MB would fail here


def test_the_layer_declares_exactly_the_runtime_and_architecture_it_is_built_for() -> None:
    template = yaml_parse(TEMPLATE.read_text())
    function_globals = template["Globals"]["Function"]
    layer = template["Resources"]["SharedLayer"]["Properties"]
    assert layer["CompatibleRuntimes"] == [function_globals["Runtime"]] == ["python3.13"]
    assert layer["CompatibleArchitectures"] == function_globals["Architectures"] == ["arm64"]


# What the Lambda Python runtime puts on sys.path besides the function and its layers: the AWS SDK.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "six", "urllib3")


def test_every_handler_imports_from_the_built_artifacts_alone(built: Path, tmp_path: Path) -> None:
    """The built function folders and the layer hold everything a handler imports; the only other modules are the
    SDK the runtime provides. Run here on this interpreter with site-packages off (-S): the cp313 extension is
    skipped by 3.11 (PyYAML falls back to pure Python), everything else is the same bytes Lambda loads."""
    sdk = tmp_path / "runtime"
    sdk.mkdir()
    for name in RUNTIME_PROVIDED:
        module = __import__(name)
        origin = Path(module.__file__ or "")
        source = origin.parent if origin.name == "__init__.py" else origin
        (sdk / source.name).symlink_to(source)
    resources = yaml_parse(TEMPLATE.read_text())["Resources"]
    functions = [k for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"]
    for logical_id in functions:
        module = resources[logical_id]["Properties"]["Handler"].split(".")[0]
        path = os.pathsep.join([str(built / logical_id), str(built / "SharedLayer" / "python"), str(sdk)])
        done = subprocess.run(
            [sys.executable, "-S", "-c", f"import {module}; print({module}.lambda_handler.__name__)"],
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "AWS_DEFAULT_REGION": "us-east-1"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0 and done.stdout.strip() == "lambda_handler", (logical_id, done.stderr[-2000:])
