"""Independent AWS reads of one record made at once: each waits on the network, not on the others.

Used where a pass needs several reads that do not depend on each other: a subnet discovery's DescribeSubnets and
DescribeRouteTables, and, before a new execution environment's first create, that discovery beside the scan of the
cluster's security groups (three round trips become one; bench/lambda_model.py charges them on the burst's p99).

Each task runs on its own thread in a copy of the caller's context (contextvars: the invocation's deadline,
ccm.deadline, and the log keys) and with its call counts (ccm.aws.clients.CallCounter counts per thread:
each task's calls and throttles are added back to the caller's, so the record's log line counts them all). Every task
runs to its end; the first error (in task order) is raised after all have finished, so nothing runs on unseen.
"""

from __future__ import annotations

import contextvars
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ccm.aws.clients import CallCounter


def in_parallel(counter: CallCounter, *tasks: Callable[[], Any]) -> list[Any]:
    """The tasks' results in task order. One task (or none) runs on the caller's thread."""
    if len(tasks) <= 1:
        return [task() for task in tasks]

    def run(task: Callable[[], Any]) -> tuple[Any, BaseException | None, Counter[str], Counter[str]]:
        counter.reset_thread()  # a pool thread: its counts start at zero and go back to the caller
        try:
            result, error = task(), None
        except BaseException as err:  # OutOfTime included: re-raised on the caller's thread
            result, error = None, err
        calls, throttles = counter.thread_counts()
        return result, error, calls, throttles

    with ThreadPoolExecutor(len(tasks), thread_name_prefix="aws-read") as pool:
        futures = [pool.submit(contextvars.copy_context().run, run, task) for task in tasks]
        outcomes = [future.result() for future in futures]
    for _, _, calls, throttles in outcomes:
        counter.add_to_thread(calls, throttles)
    for _, error, _, _ in outcomes:
        if error is not None:
            raise error
    return [result for result, _, _, _ in outcomes]
