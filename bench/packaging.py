"""Packaging check: the layer's dependencies install for the Lambda runtime and architecture, and every handler
module imports in a fresh interpreter that sees only what Lambda would put on sys.path.

Two installs of the same pinned requirements, cached under .venv/lambda-packages/<hash> (the hash covers the
requirements file and the pip arguments, so a pin change installs afresh):
- `lambda`: `pip install --platform manylinux2014_aarch64 --implementation cp --python-version 3.13
  --only-binary=:all: --target` (python3.13, arm64: the template's Globals). Proves every dependency has a wheel
  for the runtime; its size (+ the layer's and the function's own code) is what Lambda unpacks.
- `local`: the same requirements for this interpreter (an x86_64 CPython here cannot load the aarch64/cp313
  extension modules of the first), plus boto3 in its own directory standing in for the one the runtime provides.
  The import check and timing use it, with `python -S` so nothing from the development environment leaks in.

`python -m bench.packaging` prints the figures as JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO / "layers" / "ccm" / "requirements.txt"
LAYER_CODE = REPO / "layers" / "ccm"
CACHE = REPO / ".venv" / "lambda-packages"
LAMBDA_PLATFORM = ["--platform", "manylinux2014_aarch64", "--implementation", "cp", "--python-version", "3.13"]
# What the python3.13 runtime provides itself; kept apart from the layer, after it on sys.path like in Lambda.
RUNTIME_PROVIDED = ["boto3==1.44.5", "botocore==1.44.5"]

# One fresh interpreter per sample: the handler's import (timed, with what it loaded), then the rest of the cold
# path to a first reconcile, minus the network: what the first invocation builds before its first request (the
# runtime with its Kubernetes client, boto3 and the two AWS clients every function uses). Imports deferred out of
# the handler module (boto3, urllib3) are paid there, so nothing is hidden.
HANDLER_PROBE = """
import importlib.util, json, os, sys, tempfile, time
paths, handler = json.loads(sys.argv[1]), sys.argv[2]
sys.path[:0] = paths
kubeconfig = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
json.dump({"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
           "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:9"}}],
           "users": [{"name": "u", "user": {"token": "t"}}]}, kubeconfig)
kubeconfig.close()
os.environ.update(CLUSTER_NAME="probe", VPC_ID="vpc-1", AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1",
                  AWS_ACCESS_KEY_ID="probe", AWS_SECRET_ACCESS_KEY="probe", CLUSTER_CIDRS="10.0.0.0/16",
                  KUBE_AUTH_MODE="kubeconfig", KUBECONFIG=kubeconfig.name, MEMBERSHIP_TABLE="probe",
                  SERVICES_QUEUE_URL="https://sqs.us-east-1.amazonaws.com/1/probe.fifo")
def loaded():
    names = ("kubernetes", "boto3", "urllib3", "yaml", "ccm")
    return {name: getattr(sys.modules.get(name), "__file__", None) for name in names}
started, cpu = time.perf_counter(), time.process_time()
spec = importlib.util.spec_from_file_location("app", handler)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
elapsed, cpu = (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000
assert callable(module.lambda_handler)
at_import = loaded()
from ccm.aws.clients import AwsClients
built = module.runtime()
clients = next(v for v in vars(built).values() if isinstance(v, AwsClients))
clients.elbv2, clients.ec2
cold = (time.perf_counter() - started) * 1000
print(json.dumps({"ms": elapsed, "cpu_ms": cpu, "origins": at_import, "cold_path_ms": cold,
                  "cold_origins": loaded()}))
"""

MODULE_PROBE = """
import json, sys, time
sys.path[:0] = json.loads(sys.argv[1])
started, cpu = time.perf_counter(), time.process_time()
__import__(sys.argv[2])
print(json.dumps({"ms": (time.perf_counter() - started) * 1000, "cpu_ms": (time.process_time() - cpu) * 1000}))
"""


def functions() -> dict[str, Path]:
    """Every function directory with a handler (functions/<name>/app.py)."""
    return {p.parent.name: p.parent for p in sorted((REPO / "functions").glob("*/app.py"))}


def _key(args: list[str]) -> str:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes())
    digest.update(json.dumps([args, sys.version_info[:2]]).encode())
    return digest.hexdigest()[:16]


def _pip_target(name: str, args: list[str]) -> Path:
    """pip install ... --target into the cache; reused while the requirements and arguments are unchanged."""
    target = CACHE / f"{name}-{_key(args)}"
    if (target / ".complete").is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=CACHE))
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    result = subprocess.run([*command, "--target", str(staging), *args], capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"pip install for {name} failed:\n{result.stdout}\n{result.stderr}")
    (staging / ".complete").write_text(" ".join(args) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def lambda_install() -> Path:
    return _pip_target("lambda", [*LAMBDA_PLATFORM, "--only-binary=:all:", "-r", str(REQUIREMENTS)])


def local_install() -> tuple[Path, Path]:
    layer = _pip_target("local", ["--only-binary=:all:", "-r", str(REQUIREMENTS)])
    runtime = _pip_target("runtime", ["--only-binary=:all:", *RUNTIME_PROVIDED])
    return layer, runtime


def size_mb(*paths: Path) -> float:
    total = 0
    for root in paths:
        for path in root.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.name != ".complete":
                total += path.stat().st_size
    return round(total / 1e6, 1)


def sys_path(function_dir: Path, layer_deps: Path, runtime: Path) -> list[str]:
    """Lambda's order: the function code (/var/task), the layer (/opt/python: ccm + its deps), the runtime."""
    return [str(function_dir), str(LAYER_CODE), str(layer_deps), str(runtime)]


def _probe(code: str, *args: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    result = subprocess.run([sys.executable, "-S", "-c", code, *args], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"import probe failed ({args[-1]}):\n{result.stderr[-3000:]}")
    parsed: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


def import_handler(function_dir: Path, layer_deps: Path, runtime: Path) -> dict[str, Any]:
    """Import functions/<name>/app.py in a fresh `python -S` (only the Lambda sys.path, no site-packages), then
    build its runtime: timings and where each module came from, at import and after the cold path."""
    paths = sys_path(function_dir, layer_deps, runtime)
    return _probe(HANDLER_PROBE, json.dumps(paths), str(function_dir / "app.py"))


def import_module(module: str, layer_deps: Path, runtime: Path) -> dict[str, float]:
    paths = [str(LAYER_CODE), str(layer_deps), str(runtime)]
    return {k: float(v) for k, v in _probe(MODULE_PROBE, json.dumps(paths), module).items()}


def measure(runs: int = 5) -> dict[str, Any]:
    """cold_start: per function the median import time of its handler module over `runs` fresh interpreters and
    the unzipped package size; plus the import cost of the heavy dependencies on their own."""
    lambda_deps = lambda_install()
    layer_deps, runtime = local_install()
    deps_mb = size_mb(lambda_deps)
    layer_mb = size_mb(LAYER_CODE / "ccm")
    result: dict[str, Any] = {}
    for name, directory in functions().items():
        import_handler(directory, layer_deps, runtime)  # writes the .pyc of ccm and the function, as pip did for deps
        probes = [import_handler(directory, layer_deps, runtime) for _ in range(runs)]
        samples = [p["ms"] for p in probes]
        result[name] = {
            "import_ms": round(statistics.median(samples), 1),
            "import_cpu_ms": round(statistics.median(p["cpu_ms"] for p in probes), 1),
            "import_ms_samples": [round(s, 1) for s in samples],
            "imports_kubernetes": probes[0]["cold_origins"]["kubernetes"] is not None,
            "cold_path_ms": round(statistics.median(p["cold_path_ms"] for p in probes), 1),
            "package_mb": round(deps_mb + layer_mb + size_mb(directory), 1),
        }
    result["dependencies"] = {}
    for module in ("boto3", "urllib3", "aws_lambda_powertools.metrics", "aws_lambda_powertools.logging"):
        probes = [import_module(module, layer_deps, runtime) for _ in range(runs)]
        result["dependencies"][module] = {
            "import_ms": round(statistics.median(p["ms"] for p in probes), 1),
            "import_cpu_ms": round(statistics.median(p["cpu_ms"] for p in probes), 1),
        }
    result["sizes_mb"] = {"layer_dependencies": deps_mb, "ccm": layer_mb, **_largest(lambda_deps)}
    result["budget_import_ms"] = 300
    result["notes"] = (
        "import_ms (wall) / import_cpu_ms (process CPU, less sensitive to a busy host): median of "
        f"{runs} fresh `python -S` interpreters importing functions/<name>/app.py with Lambda's sys.path (function, "
        "layer, runtime boto3), this machine's CPython "
        f"{sys.version_info[0]}.{sys.version_info[1]} x86_64 on a shared 2-core host; package_mb: unzipped size "
        "of the python3.13/arm64 install of layers/ccm/requirements.txt + ccm + the function code (boto3 excluded: "
        "the runtime has it); cold_path_ms: the import plus what the first invocation builds before its first request "
        "(the runtime, its Kubernetes client, boto3 and the elbv2/ec2 clients), median of the same number of runs"
    )
    return result


def _largest(root: Path, top: int = 4) -> dict[str, float]:
    sizes = {p.name: size_mb(p) for p in root.iterdir() if p.is_dir() and not p.name.endswith(".dist-info")}
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1])[:top])


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
