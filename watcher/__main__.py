"""`python -m watcher`: run until SIGTERM/SIGINT, then flush to SQS (bounded) and exit 0."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from watcher.app import Watcher
from watcher.config import parse_args
from watcher.logs import setup_logging

log = logging.getLogger("watcher")


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    setup_logging(config.log_level)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal received, shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    watcher = Watcher(config)
    watcher.start()
    # wait() with a timeout keeps the main thread responsive to signals.
    while not stop.wait(1.0):
        pass
    watcher.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
