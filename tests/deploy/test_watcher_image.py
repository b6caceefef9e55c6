"""The watcher image, built by scripts/build-watcher-image.sh (buildah, base from Debian packages) and run by podman
(runc) as the Deployment runs it: read-only root filesystem, only /tmp writable, all capabilities dropped, no
privilege escalation, the image's own user. Against the devstack's API emulator and moto server it must be ready,
forward a LoadBalancer Service to the services queue, serve /metrics and its HEALTHCHECK, and end with exit code 0
within a few seconds of SIGTERM.

Needs root and `apt-get install -y --no-install-recommends buildah debootstrap podman runc` (.ci/run installs them).
Missing tools fail the test: it is part of the suite, not optional. The build is reused while its inputs are
unchanged (the script compares a source digest), so a second run costs only the container run."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.stack import DUMMY_AWS_ENV, Stack, StackConfig
from tests.deploy.conftest import REPO

# Building the base (debootstrap) takes about 2 minutes and the image about 1 on this 2-core machine.
pytestmark = pytest.mark.timeout(1500)
TOOLS = ("buildah", "debootstrap", "podman", "runc")
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
UID = 10001
# runc: this machine's cgroup v1 hierarchy is not one crun accepts. The rlimits are set to values any host allows
# (podman's defaults are above the hard limits of a sandbox without CAP_SYS_RESOURCE).
PODMAN = ("podman", "--runtime", "runc")
LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")


def run(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}: {proc.stderr[-3000:]}")
    return proc


def poll(predicate: Any, timeout: float, what: str, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture(scope="module")
def image() -> str:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"not on PATH: {', '.join(missing)} (apt-get install -y --no-install-recommends {' '.join(TOOLS)})")
    if os.geteuid() != 0:
        pytest.fail("building the base image (debootstrap) and running it with podman need root")
    started = time.monotonic()
    # The script's default base is pulled from a registry by digest; this machine reaches none, so the test builds
    # on the base made from Debian packages (same Python minor), unless WATCHER_IMAGE_BASE says otherwise.
    env = {**os.environ, "BASE": os.environ.get("WATCHER_IMAGE_BASE", "local")}
    proc = subprocess.run(
        ["bash", "scripts/build-watcher-image.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1200
    )
    assert proc.returncode == 0, f"image build failed:\n{proc.stderr[-5000:]}"
    print(f"image {proc.stdout.strip()} ready in {time.monotonic() - started:.0f} s: {proc.stderr.splitlines()[-1]}")
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Emulator + moto server + the template's queues; the watcher is the container, nothing else runs."""
    state = tmp_path_factory.mktemp("stack")
    with Stack(StackConfig(nodes=1, watcher=False, runner=False, state_dir=state)) as running:
        yield running


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read()
    except OSError:
        return 0, b""


@pytest.fixture
def container(image: str, stack: Stack, tmp_path: Path) -> Iterator[tuple[str, int]]:
    # A file mounted read-only, readable by the image's user, as a Secret volume would be.
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copy(stack.kubeconfig, kubeconfig)
    kubeconfig.chmod(0o644)
    port = free_port()
    name = f"watcher-image-test-{os.getpid()}-{port}"
    env = {
        **DUMMY_AWS_ENV,
        "WATCHER_KUBECONFIG": "/etc/watcher/kubeconfig",
        "WATCHER_SERVICES_QUEUE_URL": stack.queue_urls["ServicesQueue"],
        "WATCHER_NODES_QUEUE_URL": stack.queue_urls["NodesQueue"],
        "WATCHER_AWS_ENDPOINT_URL": stack.endpoint_url,
        "WATCHER_AWS_REGION": stack.config.region,
        "WATCHER_HEALTH_PORT": str(port),
    }
    # What deploy/base/deployment.yaml asks of the runtime: readOnlyRootFilesystem, a 16 MiB /tmp emptyDir,
    # capabilities dropped, allowPrivilegeEscalation false. No --user: the image's USER must be the non-root one.
    # The host network reaches the emulator and moto on 127.0.0.1.
    run(
        *PODMAN, "run", "-d", "--name", name, "--network", "host",
        "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp:rw,size=16m,mode=1777",
        "--cap-drop", "all", "--security-opt", "no-new-privileges", *LIMITS,
        "-v", f"{kubeconfig}:/etc/watcher/kubeconfig:ro",
        *(f"--env={key}={value}" for key, value in env.items()),
        image,
    )  # fmt: skip
    try:
        yield name, port
    finally:
        logs = run("podman", "logs", name, check=False)
        print(logs.stdout[-4000:], logs.stderr[-4000:])
        run("podman", "rm", "-f", "-t", "0", name, check=False)


def test_the_image_is_tagged_and_labelled_with_the_project_version(image: str) -> None:
    assert image.endswith(f"/serverless-ccm-watcher:{VERSION}")
    inspected = json.loads(run("podman", "image", "inspect", image).stdout)[0]
    config = inspected["Config"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == VERSION
    revision = run("git", "-C", str(REPO), "rev-parse", "HEAD").stdout.strip()
    assert labels["org.opencontainers.image.revision"] == revision
    assert not any("OWNER" in value for value in labels.values()), labels
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["python", "-m", "watcher"]


def test_the_image_is_small_and_runs_the_lambda_python(image: str) -> None:
    """Under 100 MB: botocore keeps only the models the watcher calls (SQS, and STS for IRSA's credentials); its
    Python minor is the functions' (template.yaml Runtime)."""
    size = int(json.loads(run("podman", "image", "inspect", image).stdout)[0]["Size"])
    print(f"image size: {size / 1e6:.1f} MB")
    assert size < 100 * 1000 * 1000, f"{size / 1e6:.1f} MB"
    runtime = re.search(r"Runtime: python(3\.\d+)", (REPO / "template.yaml").read_text())
    assert runtime is not None
    script = (
        "import sys, os, botocore, boto3; d = os.path.join(os.path.dirname(botocore.__file__), 'data');"
        " print('%d.%d' % sys.version_info[:2]); print(sorted(e for e in os.listdir(d) if '.' not in e));"
        " s = boto3.session.Session(region_name='us-east-1'); s.client('sqs'); s.client('sts')"
    )
    out = run(*PODMAN, "run", "--rm", *LIMITS, "--entrypoint", "python", image, "-c", script).stdout.splitlines()
    assert out[0] == runtime.group(1), out
    assert out[1] == "['sqs', 'sts']", out


def test_the_image_runs_as_the_deployment_runs_it(container: tuple[str, int], stack: Stack) -> None:
    name, port = container
    pid = int(run("podman", "inspect", "--format", "{{.State.Pid}}", name).stdout)
    status = Path(f"/proc/{pid}/status").read_text()
    # Real, effective, saved and filesystem uid/gid of the watcher process itself.
    assert f"Uid:\t{UID}\t{UID}\t{UID}\t{UID}" in status and f"Gid:\t{UID}\t{UID}\t{UID}\t{UID}" in status
    assert "CapEff:\t0000000000000000" in status and "NoNewPrivs:\t1" in status
    root = next(
        line.split() for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines() if line.split()[4] == "/"
    )
    assert "ro" in root[5].split(","), root

    ready = poll(lambda: get(port, "/readyz")[0] == 200, 90, "/readyz of the container")
    assert ready and get(port, "/healthz")[0] == 200
    checks = json.loads(get(port, "/readyz")[1])
    assert checks["ok"] is True

    # Nothing in the image is writable, /tmp is; the exec runs as the image's user too.
    write = run("podman", "exec", name, "python", "-c", "open('/app/x', 'w')", check=False)
    assert write.returncode != 0 and "Read-only file system" in write.stderr
    run("podman", "exec", name, "python", "-c", "open('/tmp/x', 'w').write('ok')")
    # The image's HEALTHCHECK (what plain Docker or Podman use) passes against the configured port.
    run("podman", "healthcheck", "run", name)

    # It does its job: a LoadBalancer Service becomes a delta on the services queue.
    stack.core().create_namespaced_service(
        "default",
        {
            "metadata": {"name": "image-smoke"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]},
        },
    )
    sqs = stack.sqs()

    def delta_seen() -> bool:
        for message in sqs.receive_message(
            QueueUrl=stack.queue_urls["ServicesQueue"], MaxNumberOfMessages=10, WaitTimeSeconds=1
        ).get("Messages", []):
            body = json.loads(message["Body"])
            if body.get("kind") == "Service" and body.get("key") == "default/image-smoke":
                return True
        return False

    poll(delta_seen, 60, "the Service delta on the services queue", interval=0)
    metrics = get(port, "/metrics")[1].decode()
    assert 'watcher_deltas_sent_total{kind="Service"}' in metrics

    # SIGTERM (what the kubelet sends) ends it cleanly: flush, exit 0, well inside terminationGracePeriodSeconds.
    started = time.monotonic()
    run("podman", "kill", "--signal", "TERM", name)
    code = run("podman", "wait", name, timeout=60).stdout.strip()
    elapsed = time.monotonic() - started
    assert code == "0", code
    assert elapsed < 10, f"{elapsed:.1f} s from SIGTERM to exit"
    print(f"SIGTERM to exit 0: {elapsed:.2f} s")
    assert "signal received" in run("podman", "logs", name).stdout
