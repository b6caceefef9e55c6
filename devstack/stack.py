"""The whole local stack in one object: Kubernetes API emulator (or a given kubeconfig), moto server seeded with a
VPC and instances, the template's queues, the watcher (a real `python -m watcher` process) and the event-source
runner invoking the real handlers. `python -m devstack up` and the end-to-end tests both use it."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from devstack.aws import World, client, register_eks_cluster, seed_world, start_moto_server
from devstack.aws_faithful import FaithfulSettings
from devstack.aws_faults import AwsFaultProxy
from devstack.k8s_emulator import Emulator
from devstack.k8s_emulator.eks_auth import EksTokenValidator
from devstack.queues import create_queues, create_tables
from devstack.runner import EventSourceRunner
from devstack.sqs_sender import FUNCTION_ROLES, FUNCTIONS_KEY, ROLE_IDS
from devstack.template import TemplateFacts, load_template

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parent.parent
KEY, SECRET = "testing", "testing"
DUMMY_AWS_ENV = {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET}
# Who the functions are on the cluster in EKS mode (their role; deploy/ binds its access-entry group).
FUNCTIONS_PRINCIPAL = "arn:aws:iam::123456789012:role/serverless-ccm-functions"


@dataclass
class StackConfig:
    nodes: int = 3
    kubeconfig: str | None = None  # an existing cluster instead of the emulator
    cluster_name: str = "devstack"
    region: str = "us-east-1"
    state_dir: Path = field(default_factory=lambda: REPO / ".devstack")
    template: Path = REPO / "template.yaml"
    concurrency: int | None = None  # override the template's MaximumConcurrency (None: keep it)
    watcher: bool = True
    runner: bool = True
    resync_seconds: float = 600.0
    extra_env: dict[str, str] = field(default_factory=dict)  # on top of the template's function environment
    log_level: str | None = None  # template LogLevel (the functions' ApplicationLogLevel); None: its default, INFO
    function_logs: TextIO | None = None  # also write the functions' log lines there (the runner keeps them anyway)
    # The devstack shows NLBs by default (moto's Classic ELB has gaps, see tests/integration/test_clb_driver.py);
    # the template's own default is clb, as cloud-provider-aws.
    default_lb_type: str = "nlb"
    routes: bool = False  # template EnableRoutes: the routes queue and the route reconciler
    cluster_cidrs: tuple[str, ...] = ("10.244.0.0/16",)  # the node objects' pod CIDRs are 10.244.<i>.0/24
    route_table_per_az: bool = False  # one cluster-tagged private route table per AZ instead of one
    # Emulator only: run on the started emulator before anything talks to it (RBAC objects, tokens), and the
    # bearer tokens of the watcher and of the functions (None: the admin token), so each can run as its own user.
    prepare_emulator: Callable[[Emulator], None] | None = None
    watcher_token: str | None = None
    functions_token: str | None = None
    # Per function (template logical id -> token): each function runs as its own user, as each function role is
    # its own access entry and group on EKS; the others keep functions_token.
    function_tokens: dict[str, str] = field(default_factory=dict)
    # Route the Lambdas' AWS calls through devstack.aws_faults.AwsFaultProxy (Stack.aws_proxy) for chaos tests.
    aws_fault_proxy: bool = False
    # "eks": the functions authenticate as on EKS (DescribeCluster against moto, locally minted tokens) and the
    # emulator serves TLS and verifies each token's signature for this cluster; "kubeconfig": a static token.
    kube_auth: str = "kubeconfig"
    # How AWS really answers (devstack.aws_faithful): security-group release hold, quotas, target refusals, EC2
    # eventual consistency on; request throttling off unless FaithfulSettings(rate_limits=True).
    aws: FaithfulSettings = field(default_factory=FaithfulSettings)


class Stack:
    def __init__(self, config: StackConfig | None = None) -> None:
        self.config = config or StackConfig()
        self.emulator: Emulator | None = None
        self.world: World | None = None
        self.runner: EventSourceRunner | None = None
        self.watcher_process: subprocess.Popen[bytes] | None = None
        self.queue_urls: dict[str, str] = {}
        self.tables: dict[str, str] = {}
        self.facts: TemplateFacts | None = None
        self.kubeconfig = ""
        self.watcher_kubeconfig = ""
        self.functions_kubeconfig = ""
        self.function_kubeconfigs: dict[str, str] = {}  # logical id -> its own kubeconfig (function_tokens)
        self.endpoint_url = ""
        self.watcher_health_port = 0
        self.aws_proxy: AwsFaultProxy | None = None
        self._moto: Any = None

    # -- lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> Stack:
        cfg = self.config
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        for key, value in DUMMY_AWS_ENV.items():
            os.environ.setdefault(key, value)
        self._moto, self.endpoint_url = start_moto_server(faithful=cfg.aws)
        if cfg.aws_fault_proxy:
            self.aws_proxy = AwsFaultProxy(self.endpoint_url).start()
        self.world = seed_world(
            self.endpoint_url, cfg.region, cfg.cluster_name, nodes=cfg.nodes, route_table_per_az=cfg.route_table_per_az
        )
        if cfg.kubeconfig:
            self.kubeconfig = cfg.kubeconfig
        else:
            eks = cfg.kube_auth == "eks"
            function_keys = [FUNCTIONS_KEY, *(key for key, _ in FUNCTION_ROLES.values())]
            keys = {KEY: SECRET, **dict.fromkeys(function_keys, SECRET)}
            principals = {KEY: FUNCTIONS_PRINCIPAL, **dict.fromkeys(function_keys, FUNCTIONS_PRINCIPAL)}
            validator = EksTokenValidator(cfg.cluster_name, keys, principals) if eks else None
            self.emulator = Emulator(tls=eks, require_token=eks, token_validator=validator).start()
            if eks:
                assert self.emulator.ca_pem is not None
                register_eks_cluster(
                    self.endpoint_url,
                    cfg.region,
                    cfg.cluster_name,
                    self.emulator.url,
                    self.emulator.ca_pem,
                    FUNCTIONS_PRINCIPAL,
                )
            self.kubeconfig = self.emulator.write_kubeconfig(str(cfg.state_dir / "kubeconfig"))
            if cfg.prepare_emulator is not None:
                cfg.prepare_emulator(self.emulator)
            for node in self.world.node_objects():
                node["metadata"].pop("uid", None)
                node["metadata"].pop("resourceVersion", None)
                self.emulator.create(node)
        self.watcher_kubeconfig = self._kubeconfig_for("watcher", cfg.watcher_token)
        self.functions_kubeconfig = self._kubeconfig_for("functions", cfg.functions_token)
        if self.emulator is not None and cfg.kube_auth != "eks":
            self.function_kubeconfigs = {fn: self._kubeconfig_for(fn, t) for fn, t in cfg.function_tokens.items()}
        params: dict[str, str | int] = {
            "ClusterName": cfg.cluster_name,
            "VpcId": self.world.vpc_id,
            "DefaultLoadBalancerType": cfg.default_lb_type,
            # Like a self-managed cluster: no other controller serves class-less Services here.
            "ServicesWithoutClass": "claim",
        }
        if cfg.concurrency is not None:
            params["ServiceReconcilerConcurrency"] = cfg.concurrency
        if cfg.log_level is not None:
            params["LogLevel"] = cfg.log_level
        if cfg.routes:
            params.update(EnableRoutes="true", ClusterCidrs=",".join(cfg.cluster_cidrs))
        self.facts = load_template(cfg.template, params, region=cfg.region)
        self.queue_urls = create_queues(self.sqs(), self.facts, cfg.cluster_name)
        self.tables = create_tables(self.aws("dynamodb"), self.facts)
        self.facts = self.facts.with_resources({**self.tables, **ROLE_IDS})
        if cfg.runner:
            self.runner = EventSourceRunner(
                self.facts,
                self.queue_urls,
                endpoint_url=self.endpoint_url,
                region=cfg.region,
                env_overrides=self.lambda_environment(),
                function_env=self._function_env(),
                echo_logs=cfg.function_logs,
            )
            self.runner.start()
        if cfg.watcher:
            self.start_watcher()
        return self

    def stop(self) -> None:
        self.stop_watcher()
        if self.runner is not None:
            self.runner.stop(timeout=30)
        if self.emulator is not None:
            self.emulator.stop()
        if self.aws_proxy is not None:
            self.aws_proxy.stop()
        if self._moto is not None:
            self._moto.stop()

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the watcher process ----------------------------------------------------------------------------------
    def start_watcher(self) -> None:
        if not self.watcher_health_port:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.watcher_health_port = probe.getsockname()[1]
        args = [
            sys.executable, "-m", "watcher",
            "--kubeconfig", self.watcher_kubeconfig or self.kubeconfig,
            "--services-queue-url", self.queue_urls["ServicesQueue"],
            "--nodes-queue-url", self.queue_urls["NodesQueue"],
            "--aws-endpoint-url", self.endpoint_url,
            "--aws-region", self.config.region,
            "--health-port", str(self.watcher_health_port),
            "--health-host", "127.0.0.1",
            "--resync-seconds", str(self.config.resync_seconds),
        ]  # fmt: skip
        env = {**os.environ, **DUMMY_AWS_ENV, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "layers/ccm")])}
        log_file = (self.config.state_dir / "watcher.log").open("ab")
        self.watcher_process = subprocess.Popen(args, cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT)
        self.wait_for(self.watcher_ready, timeout=60, interval=0.1, what="watcher /readyz")

    def watcher_ready(self) -> bool:
        """True once the watcher listed everything and reached SQS (its /readyz)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.watcher_health_port}/readyz", timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            if self.watcher_process is not None and self.watcher_process.poll() is not None:
                raise RuntimeError(f"watcher exited with {self.watcher_process.returncode}") from None
            return False

    def stop_watcher(self, timeout: float = 30) -> int | None:
        proc, self.watcher_process = self.watcher_process, None
        if proc is None:
            return None
        proc.terminate()  # SIGTERM: the watcher flushes what it holds, then exits
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def _function_env(self) -> dict[str, dict[str, str]]:
        """Per function: its own access key (its role's identity: SenderId, devstack.call_log) and kubeconfig."""
        env = {fn: {"AWS_ACCESS_KEY_ID": key} for fn, (key, _) in FUNCTION_ROLES.items()}
        for fn, path in self.function_kubeconfigs.items():
            env.setdefault(fn, {})["KUBECONFIG"] = path
        return env

    def _kubeconfig_for(self, who: str, token: str | None) -> str:
        if self.emulator is None or token is None:
            return self.kubeconfig
        return self.emulator.write_kubeconfig(str(self.config.state_dir / f"kubeconfig-{who}"), token=token)

    # -- what other processes and tests need ------------------------------------------------------------------
    def function_environment(self, function: str) -> dict[str, str]:
        """What a process running `function` (a logical id) by hand gets: the stack's endpoints and that function's
        own identity (its access key: the SenderId its messages carry, the role its calls are judged against)."""
        return {**self.lambda_environment(), **self._function_env().get(function, {})}

    def lambda_environment(self) -> dict[str, str]:
        assert self.world is not None
        return {
            **DUMMY_AWS_ENV,
            "AWS_ACCESS_KEY_ID": FUNCTIONS_KEY,
            "AWS_ENDPOINT_URL": self.aws_proxy.url if self.aws_proxy else self.endpoint_url,
            "AWS_REGION": self.config.region,
            "AWS_DEFAULT_REGION": self.config.region,
            **(
                {"KUBE_AUTH_MODE": "eks"}
                if self.config.kube_auth == "eks" and self.emulator is not None
                else {"KUBECONFIG": self.functions_kubeconfig or self.kubeconfig, "KUBE_AUTH_MODE": "kubeconfig"}
            ),
            "CLUSTER_NAME": self.config.cluster_name,
            "VPC_ID": self.world.vpc_id,
            **self.config.extra_env,
        }

    def state(self) -> dict[str, Any]:
        assert self.world is not None
        return {
            "kubeconfig": self.kubeconfig,
            "aws_endpoint_url": self.endpoint_url,
            "aws_region": self.config.region,
            "cluster_name": self.config.cluster_name,
            "vpc_id": self.world.vpc_id,
            "queues": self.queue_urls,
            "instances": [i.instance_id for i in self.world.instances],
        }

    def write_state(self, path: str | Path) -> dict[str, Any]:
        state = self.state()
        Path(path).write_text(json.dumps(state, indent=2) + "\n")
        return state

    def aws(self, service: str) -> Any:
        return client(service, self.endpoint_url, self.config.region)

    def sqs(self) -> Any:
        return self.aws("sqs")

    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=self.kubeconfig))

    def wait_for(self, predicate: Any, timeout: float = 30, interval: float = 0.1, what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(interval)
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
