from __future__ import annotations

import random

import pytest

from watcher.backoff import Backoff
from watcher.config import parse_args

REQUIRED = ["--services-queue-url", "http://q/s.fifo", "--nodes-queue-url", "http://q/n.fifo"]


def test_defaults() -> None:
    cfg = parse_args(REQUIRED, environ={})
    assert (cfg.resync_seconds, cfg.buffer_size, cfg.health_port, cfg.kubeconfig) == (3600.0, 10_000, 8080, None)


def test_every_flag_has_an_env_var_and_flags_win() -> None:
    env = {
        "WATCHER_SERVICES_QUEUE_URL": "http://q/s.fifo",
        "WATCHER_NODES_QUEUE_URL": "http://q/n.fifo",
        "WATCHER_KUBECONFIG": "/tmp/kc",
        "WATCHER_AWS_ENDPOINT_URL": "http://localhost:5000",
        "WATCHER_AWS_REGION": "eu-west-1",
        "WATCHER_RESYNC_SECONDS": "30",
        "WATCHER_HEALTH_PORT": "0",
        "WATCHER_BUFFER_SIZE": "50",
        "WATCHER_LOG_LEVEL": "DEBUG",
    }
    cfg = parse_args([], environ=env)
    assert (cfg.kubeconfig, cfg.aws_endpoint_url, cfg.aws_region) == ("/tmp/kc", "http://localhost:5000", "eu-west-1")
    assert (cfg.resync_seconds, cfg.health_port, cfg.buffer_size, cfg.log_level) == (30.0, 0, 50, "DEBUG")
    assert parse_args(["--buffer-size", "7"], environ=env).buffer_size == 7


@pytest.mark.parametrize(
    ("argv", "env"),
    [([], {}), ([*REQUIRED, "--buffer-size", "0"], {}), (REQUIRED, {"WATCHER_HEALTH_PORT": "eighty"})],
)
def test_invalid_configuration_exits(argv: list[str], env: dict[str, str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv, environ=env)
    assert exc.value.code == 2


def test_backoff_grows_jittered_and_capped_and_resets() -> None:
    backoff = Backoff(initial=1.0, maximum=8.0, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(8)]
    for attempt, value in enumerate(delays):
        ceiling = min(8.0, 2.0**attempt)
        assert ceiling / 2 <= value <= ceiling
    assert len(set(delays)) == len(delays)  # jittered, not fixed steps
    backoff.reset()
    assert 0.5 <= backoff.next_delay() <= 1.0


def test_the_endpoints_window_defaults_to_250_ms_and_is_bounded() -> None:
    assert parse_args(REQUIRED, environ={}).endpoints_window_seconds == 0.5
    assert parse_args(REQUIRED, environ={"WATCHER_ENDPOINTS_WINDOW_SECONDS": "0.5"}).endpoints_window_seconds == 0.5
    assert parse_args([*REQUIRED, "--endpoints-window-seconds", "0"], environ={}).endpoints_window_seconds == 0
    for bad in ("-1", "60"):  # a minute of window would be a minute of traffic to a terminated pod
        with pytest.raises(SystemExit):
            parse_args([*REQUIRED, "--endpoints-window-seconds", bad], environ={})
