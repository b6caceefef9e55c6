"""A scheduled function hit by a passing API error is invoked again, as Lambda retries an asynchronous invocation
(tests/chaos/periodic.py: ASYNC_ATTEMPTS): the sweeper's one Service LIST answered 500 fails that run, the retry
lists and finishes; an outage longer than every attempt is still a failure the harness reports."""

from __future__ import annotations

import pytest

from devstack.stack import Stack
from tests.chaos.periodic import ASYNC_ATTEMPTS, run_sweeper


def test_a_sweeper_run_failing_on_a_passing_api_error_is_retried(stack: Stack) -> None:
    assert stack.emulator is not None
    rule = stack.emulator.faults.arm(1, status=500, method="GET", path_regex=r"^/api/v1/services$")
    summary = run_sweeper(stack)
    assert rule.remaining == 0, "the sweeper never met the injected 500"
    assert summary["attempts"] == 2 and summary["kube_calls"] == 1  # the retry listed once and finished


def test_an_outage_outlasting_every_attempt_fails_the_run(stack: Stack) -> None:
    assert stack.emulator is not None
    rule = stack.emulator.faults.arm(ASYNC_ATTEMPTS, status=500, method="GET", path_regex=r"^/api/v1/services$")
    try:
        with pytest.raises(AssertionError, match="every asynchronous attempt"):
            run_sweeper(stack)
        assert rule.remaining == 0
    finally:
        stack.emulator.faults.clear()
