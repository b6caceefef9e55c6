"""The invocation's deadline lives in a context variable: helper threads of one record keep it (they run in a copy
of its context), other threads (the devstack's other Lambdas) never see it, and leaving the block restores the
caller's."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from ccm import deadline
from ccm.aws.clients import CallCounter
from ccm.aws.parallel import in_parallel


def test_parallel_tasks_keep_the_record_deadline_and_an_out_of_time_task_raises_on_the_caller() -> None:
    seen: list[float | None] = []

    def read() -> float | None:
        left = deadline.calls_remaining()
        seen.append(left)
        return left

    def too_long() -> None:
        deadline.check(100.0, "DescribeSubnets")

    with deadline.invocation(lambda: 30.0, finish_reserve=6.0):
        assert in_parallel(CallCounter(), read, read) == [24.0, 24.0]
        with pytest.raises(deadline.OutOfTime, match=r"DescribeSubnets: 24\.0 s left"):
            in_parallel(CallCounter(), read, too_long)
    assert seen == [24.0, 24.0, 24.0]
    assert deadline.calls_remaining() is None  # after the block: no deadline


def test_another_thread_never_sees_this_invocation_deadline() -> None:
    other: list[float | None] = []
    started, release = threading.Event(), threading.Event()

    def other_lambda() -> None:
        started.wait()
        other.append(deadline.calls_remaining())
        release.set()

    thread = threading.Thread(target=other_lambda)
    thread.start()
    with deadline.invocation(lambda: 10.0, finish_reserve=1.0):
        started.set()
        release.wait(5)
        assert deadline.calls_remaining() == 9.0
    thread.join()
    assert other == [None]


def test_nested_invocations_restore_the_outer_deadline() -> None:
    outer: Callable[[], float] = lambda: 50.0  # noqa: E731
    with deadline.invocation(outer, finish_reserve=0.0):
        with deadline.invocation(None):
            assert deadline.calls_remaining() is None
        assert deadline.calls_remaining() == 50.0
