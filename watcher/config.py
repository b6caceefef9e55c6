"""Watcher configuration: every command-line flag has an environment variable (flag wins over env)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ccm.contracts.kube import DEFAULT_LOAD_BALANCER_CLASS
from watcher.endpoints import DEFAULT_WAITING_WINDOW_SECONDS, DEFAULT_WINDOW_SECONDS

ENV_PREFIX = "WATCHER_"

# The SYNC of every LoadBalancer Service: the safety net for a lost delta. Hourly: the sweeper finds drifted
# load balancers every 15 minutes for the whole cluster in a few calls, every change arrives as a delta, and a
# relist follows every watcher restart; upstream's informers resync every 12-24 h and act only on a difference,
# the AWS Load Balancer Controller every 10 h. Each SYNC is a Lambda record: a 10-minute period costs six times
# the records, logs and read units for what the deltas and the sweeper already cover (docs/performance.md, cost).
DEFAULT_RESYNC_SECONDS = 3600.0
# Every second of window is a second more before a new pod receives traffic or a terminating one stops receiving it.
MAX_ENDPOINTS_WINDOW_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Config:
    services_queue_url: str
    nodes_queue_url: str
    kubeconfig: str | None = None
    aws_endpoint_url: str | None = None
    aws_region: str | None = None
    resync_seconds: float = DEFAULT_RESYNC_SECONDS
    health_host: str = "0.0.0.0"
    health_port: int = 8080
    buffer_size: int = 10_000
    log_level: str = "INFO"
    shutdown_timeout: float = 20.0
    # Server-side watch timeout; each watch asks for a random value in [t, 2t) like client-go, so that many
    # watchers do not reconnect in lockstep.
    watch_timeout_seconds: int = 300
    list_page_size: int = 500
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    # How often an idle sender proves SQS is reachable, and how stale that proof may get before /readyz fails.
    sqs_probe_seconds: float = 15.0
    sqs_ready_window_seconds: float = 60.0
    # Heartbeat to the services queue (-> its deletion feeds the watcher-silence alarm; its lag is logged).
    heartbeat_seconds: float = 60.0
    # How long a Service's EndpointSlice changes are merged into one ENDPOINTS hint (watcher/endpoints.py).
    endpoints_window_seconds: float = DEFAULT_WINDOW_SECONDS
    # The same for changes of not-ready endpoints only (they matter only to pods waiting on our readiness gate).
    endpoints_waiting_window_seconds: float = DEFAULT_WAITING_WINDOW_SECONDS
    # The stack's LoadBalancerClass: ENDPOINTS hints only for Services of this class or of none. The install
    # (ccm.install.render) sets it from the stack; the doctor compares them.
    load_balancer_class: str = DEFAULT_LOAD_BALANCER_CLASS
    # claim | ignore: the stack's ServicesWithoutClass as its functions apply it (claim: a Service without a class is
    # ours; its hints are sent). The install sets it; claim by default, which sends and lets the functions decide.
    services_without_class: str = "claim"


# (flag, Config field, type, help). The env var is WATCHER_<FIELD upper-cased>.
_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--kubeconfig", "kubeconfig", str, "kubeconfig path (default: in-cluster config, else ~/.kube/config)"),
    ("--services-queue-url", "services_queue_url", str, "SQS FIFO queue URL for Service deltas"),
    ("--nodes-queue-url", "nodes_queue_url", str, "SQS FIFO queue URL for Node deltas"),
    ("--aws-endpoint-url", "aws_endpoint_url", str, "AWS endpoint override for local use (or AWS_ENDPOINT_URL)"),
    ("--aws-region", "aws_region", str, "AWS region (default: boto3's resolution, e.g. AWS_REGION)"),
    ("--resync-seconds", "resync_seconds", float, "period of the SYNC resync of LoadBalancer Services"),
    ("--health-host", "health_host", str, "bind address of the health/metrics server"),
    ("--health-port", "health_port", int, "port of /healthz, /readyz, /metrics (0 = any free port)"),
    ("--buffer-size", "buffer_size", int, "max deltas held while SQS is unreachable"),
    ("--log-level", "log_level", str, "DEBUG, INFO, WARNING or ERROR"),
    ("--shutdown-timeout", "shutdown_timeout", float, "max seconds spent flushing to SQS on shutdown"),
    ("--watch-timeout-seconds", "watch_timeout_seconds", int, "minimum server-side timeout of one watch request"),
    ("--heartbeat-seconds", "heartbeat_seconds", float, "heartbeat period (to the services queue); 0 = off"),
    (
        "--endpoints-window-seconds",
        "endpoints_window_seconds",
        float,
        "window merging a Service's EndpointSlice changes into one ENDPOINTS hint (ip target mode)",
    ),
    (
        "--endpoints-waiting-window-seconds",
        "endpoints_waiting_window_seconds",
        float,
        "the same window when only not-ready endpoints changed (they matter only to readiness-gated pods)",
    ),
    ("--load-balancer-class", "load_balancer_class", str, "the stack's LoadBalancerClass (endpoint hints only)"),
    (
        "--services-without-class",
        "services_without_class",
        str,
        "claim or ignore: whether Services without a class are ours (endpoint hints only)",
    ),
)


def env_var(field: str) -> str:
    return ENV_PREFIX + field.upper()


def parse_args(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    env = os.environ if environ is None else environ
    defaults = Config(services_queue_url="", nodes_queue_url="")
    parser = argparse.ArgumentParser(
        prog="python -m watcher",
        description="Forward relevant Service/Node changes to SQS FIFO queues.",
    )
    for flag, field, typ, help_text in _FLAGS:
        var = env_var(field)
        raw = env.get(var)
        try:
            default = typ(raw) if raw not in (None, "") else getattr(defaults, field)
        except ValueError:
            parser.error(f"{var}={raw!r} is not a valid {typ.__name__}")
        parser.add_argument(flag, dest=field, type=typ, default=default, help=f"{help_text} [env {var}]")
    args = parser.parse_args(argv)
    for field in ("services_queue_url", "nodes_queue_url"):
        if not getattr(args, field):
            parser.error(f"--{field.replace('_', '-')} (or {env_var(field)}) is required")
    if args.buffer_size < 1:
        parser.error("--buffer-size must be >= 1")
    if args.heartbeat_seconds < 0:
        parser.error("--heartbeat-seconds must be >= 0 (0 = off)")
    if not 0 <= args.endpoints_window_seconds <= MAX_ENDPOINTS_WINDOW_SECONDS:
        parser.error(f"--endpoints-window-seconds must be between 0 and {MAX_ENDPOINTS_WINDOW_SECONDS:g}")
    if not 0 <= args.endpoints_waiting_window_seconds <= MAX_ENDPOINTS_WINDOW_SECONDS:
        # Below the short window it acts as the short window (watcher.endpoints.Coalescer).
        parser.error(f"--endpoints-waiting-window-seconds must be between 0 and {MAX_ENDPOINTS_WINDOW_SECONDS:g}")
    if args.services_without_class not in ("claim", "ignore"):
        parser.error("--services-without-class must be claim or ignore")
    if args.resync_seconds <= 0:
        parser.error("--resync-seconds must be > 0")
    return Config(**{field: getattr(args, field) for _, field, _, _ in _FLAGS})
