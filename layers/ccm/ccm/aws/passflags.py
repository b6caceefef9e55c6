"""Per-reconcile switches of a load balancer driver, set by the Lambda runtime before each record.

Thread-local because the devstack runner (and a test) may run several reconciles of one process at once; in
Lambda there is one per execution environment anyway.
"""

from __future__ import annotations

import threading


class PassFlags:
    """`thorough`: also look for what a crash may have orphaned (retries, resyncs, deletes).
    `check_attributes`: read and converge attributes (every pass but node-driven host updates)."""

    def __init__(self) -> None:
        self._state = threading.local()

    @property
    def thorough(self) -> bool:
        return bool(getattr(self._state, "thorough", False))

    @thorough.setter
    def thorough(self, value: bool) -> None:
        self._state.thorough = value

    @property
    def check_attributes(self) -> bool:
        return bool(getattr(self._state, "check_attributes", True))

    @check_attributes.setter
    def check_attributes(self, value: bool) -> None:
        self._state.check_attributes = value
