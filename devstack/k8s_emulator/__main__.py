"""Run the emulator as a standalone process: ``python -m devstack.k8s_emulator --port 6443``."""

from __future__ import annotations

import argparse
import signal
import threading

from .emulator import Emulator
from .store import FUTURE_WATCH_SHAPES, FUTURE_WATCH_SILENT


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Kubernetes API server emulator")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this emulator to this path")
    parser.add_argument("--require-token", action="store_true")
    parser.add_argument(
        "--token",
        action="append",
        default=[],
        metavar="TOKEN=USER",
        help="static bearer token (repeatable); default admin-token=admin",
    )
    parser.add_argument("--tls", action="store_true", help="serve HTTPS with a self-signed certificate")
    parser.add_argument(
        "--bookmark-interval", type=float, default=60.0, help="seconds between bookmarks (the real server: 60)"
    )
    parser.add_argument(
        "--expired-watch-http-410",
        action="store_true",
        help="answer a watch from a too-old resourceVersion with HTTP 410 instead of 200 + an in-stream ERROR 410",
    )
    parser.add_argument(
        "--no-load-balancer-ip-mode",
        action="store_true",
        help="feature gate LoadBalancerIPMode off (1.28, 1.29): status.loadBalancer.ingress[].ipMode is dropped",
    )
    parser.add_argument(
        "--future-watch",
        choices=FUTURE_WATCH_SHAPES,
        default=FUTURE_WATCH_SILENT,
        help="a watch from a resourceVersion ahead of the server: a silent 200 stream (1.28+), an HTTP 504, or a "
        "200 stream whose only event is a 504 ERROR",
    )
    args = parser.parse_args(argv)
    tokens = dict(t.split("=", 1) for t in args.token) if args.token else None
    emu = Emulator(
        host=args.host,
        port=args.port,
        require_token=args.require_token,
        tokens=tokens,
        bookmark_interval=args.bookmark_interval,
        tls=args.tls,
        expired_watch_in_stream=not args.expired_watch_http_410,
        load_balancer_ip_mode=not args.no_load_balancer_ip_mode,
        future_watch=args.future_watch,
    ).start()
    if args.kubeconfig:
        emu.write_kubeconfig(args.kubeconfig, token=next(iter(emu.tokens), None))
    print(emu.url, flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    emu.stop()


if __name__ == "__main__":
    main()
