"""`python -m devstack up [--nodes N] [--state-file PATH] [--kubeconfig PATH]`: the whole local stack until
SIGTERM/SIGINT. Once ready it writes (and prints) {"kubeconfig", "aws_endpoint_url", "aws_region",
"cluster_name", ...} so other processes can use `kubectl --kubeconfig` and boto3 against the endpoint.

`python -m devstack dashboard [--out PATH]`: a short demo on a fresh local stack, then the template's CloudWatch
dashboard drawn from the stack's own metrics, written as one HTML page (open it in any browser)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from devstack.stack import Stack, StackConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the local stack and run until SIGTERM/SIGINT")
    up.add_argument("--nodes", type=int, default=3, help="nodes (running instances) to register (default 3)")
    up.add_argument("--state-file", type=Path, default=Path(".devstack/state.json"))
    up.add_argument("--kubeconfig", help="use this cluster instead of the emulator (no nodes are registered)")
    up.add_argument("--cluster-name", default="devstack")
    up.add_argument("--region", default="us-east-1")
    up.add_argument("--concurrency", type=int, help="override the template's MaximumConcurrency")
    up.add_argument("--log-level", choices=["DEBUG", "INFO", "WARN", "ERROR"], help="the template's LogLevel")
    dash = sub.add_parser("dashboard", help="run a short demo and write the dashboard page from its metrics")
    dash.add_argument("--out", type=Path, default=Path(".devstack/dashboard.html"))
    dash.add_argument("--nodes", type=int, default=2)
    dash.add_argument("--period", type=int, default=10, help="seconds per datapoint (CloudWatch: the widget's)")
    dash.add_argument("--timeout", type=float, default=90, help="seconds to wait for data in every widget")
    args = parser.parse_args(argv)
    if args.command == "dashboard":
        return _dashboard(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    config = StackConfig(
        nodes=args.nodes,
        kubeconfig=args.kubeconfig,
        cluster_name=args.cluster_name,
        region=args.region,
        concurrency=args.concurrency,
        state_dir=args.state_file.resolve().parent,
        log_level=args.log_level,
        function_logs=sys.stdout,  # every line of every function, prefixed with its logical id
    )
    stack = Stack(config).start()
    try:
        state = stack.write_state(args.state_file)
        print(json.dumps(state), flush=True)
        stop.wait()
    finally:
        stack.stop()
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from devstack.dashboard_demo import dashboard

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out: Path = args.out.resolve()
    config = StackConfig(nodes=args.nodes, state_dir=out.parent, function_logs=None)
    with Stack(config) as stack:
        missing = dashboard(stack, out, period=args.period, timeout=args.timeout)
    print(out)
    if missing:
        print(f"widgets without data: {missing}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
