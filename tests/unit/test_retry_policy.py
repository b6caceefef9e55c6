"""The retry policy (ccm.retry) and the deadline decisions (ccm.deadline), as pure functions."""

from __future__ import annotations

import pytest

from ccm import deadline, retry
from ccm.aws.security_groups import DELETE_RETRY_SECONDS
from ccm.contracts.cloud import RetryError
from ccm.service.reconciler import SyncFailed

FIFTEEN_MINUTES = 15 * 60


def test_failures_back_off_as_upstream_and_reach_the_dlq_in_bounded_time():
    assert [retry.failure_delay(n) for n in (1, 2, 3, 4, 5, 6, 7, 10)] == [5, 10, 20, 40, 80, 160, 300, 300]
    # A poison delta still reaches the DLQ: after MAX_RECEIVES receives, within the half hour.
    assert retry.FAILURE_BUDGET_SECONDS == 1515
    assert retry.FAILURE_BUDGET_SECONDS < 30 * 60


def test_waits_double_from_the_asked_delay_and_outlast_fifteen_minutes_within_the_receive_budget():
    held_group = [retry.wait_delay(n, DELETE_RETRY_SECONDS) for n in range(1, retry.MAX_RECEIVES + 1)]
    assert held_group == [15, 30, 60, 120, 240, 300, 300, 300, 300, 300]
    assert retry.budget_seconds(held_group) == 1965
    # Whatever a driver asks for, a wait keeps coming back for more than 15 minutes before the DLQ.
    for asked in (0, 1, 5, 10, 15, 30, 60, 299):
        assert retry.budget_seconds([retry.wait_delay(n, asked) for n in range(1, retry.MAX_RECEIVES + 1)]) > (
            FIFTEEN_MINUTES
        ), asked
    assert retry.WAIT_BUDGET_SECONDS > FIFTEEN_MINUTES
    # The old policy (a fixed 15 s, 5 receives) gave up after 75 s.
    assert retry.budget_seconds([DELETE_RETRY_SECONDS] * 5) == 75
    # A first delay longer than the cap is kept as asked (a long health check).
    assert retry.wait_delay(1, 600) == retry.wait_delay(4, 600) == 600


def test_a_wait_is_recognised_through_explicit_causes_only():
    held = RetryError("security group sg-1 is still in use", delay_seconds=15)
    try:
        try:
            raise held
        except RetryError as err:
            raise SyncFailed(str(err), retry_after=err.delay_seconds) from err
    except SyncFailed as wrapped:
        assert retry.waited_on(wrapped) is held
        assert retry.retry_for(wrapped, 3) == retry.Retry(60, "security group sg-1 is still in use")
    # An error raised while handling a wait (implicit context) is a failure.
    try:
        try:
            raise held
        except RetryError:
            raise RuntimeError("AccessDenied")  # noqa: B904
    except RuntimeError as failure:
        assert retry.waited_on(failure) is None
        assert retry.retry_for(failure, 3) == retry.Retry(20)
        assert not retry.retry_for(failure, 3).is_wait


def test_the_delay_scale_is_a_test_knob_only(monkeypatch: pytest.MonkeyPatch):
    wait = RetryError("x", 15)
    assert retry.retry_for(wait, 6).delay_seconds == 300
    monkeypatch.setenv(retry.DELAY_SCALE_ENV, "0.02")
    assert [retry.retry_for(wait, n).delay_seconds for n in (1, 4, 6)] == [1, 2, 6]
    monkeypatch.setenv(retry.DELAY_SCALE_ENV, "bogus")
    assert retry.retry_for(wait, 6).delay_seconds == 300


def test_records_start_only_with_the_reserve_left(monkeypatch: pytest.MonkeyPatch):
    assert deadline.can_start(None, 25)  # no context: no deadline
    assert deadline.can_start(25.0, 25)
    assert not deadline.can_start(24.9, 25)
    monkeypatch.delenv(deadline.RECORD_RESERVE_ENV, raising=False)
    assert deadline.record_reserve_seconds() == deadline.DEFAULT_RECORD_RESERVE_SECONDS
    monkeypatch.setenv(deadline.RECORD_RESERVE_ENV, "40")
    assert deadline.record_reserve_seconds() == 40
    monkeypatch.setenv(deadline.RECORD_RESERVE_ENV, "-3")
    assert deadline.record_reserve_seconds() == 0
    monkeypatch.setenv(deadline.RECORD_RESERVE_ENV, "soon")
    assert deadline.record_reserve_seconds() == deadline.DEFAULT_RECORD_RESERVE_SECONDS


def test_calls_check_the_invocation_deadline_minus_the_finish_reserve():
    left = [30.0]
    deadline.check(1000, "outside any invocation")  # no deadline: never refused
    with deadline.invocation(lambda: left[0], finish_reserve=6):
        assert deadline.calls_remaining() == 24.0
        deadline.check(24, "ec2:DescribeSecurityGroups")
        left[0] = 19.0
        with pytest.raises(deadline.OutOfTime, match=r"ec2:DeleteSecurityGroup: 13\.0 s left"):
            deadline.check(14, "ec2:DeleteSecurityGroup")
    assert deadline.calls_remaining() is None  # handing the batch back is not refused
    # It passes `except Exception` of drivers and reconcilers: it is not their failure.
    assert not issubclass(deadline.OutOfTime, Exception)
