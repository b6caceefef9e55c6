"""The burst hint of Service creations (watcher.burst): counted over the window, a lone creation held once."""

from __future__ import annotations

from ccm.contracts.messages import BURST_CREATIONS, Delta, parse_delta
from watcher.burst import BURST_WINDOW_SECONDS, MAX_HOLDS, CreationWindow


def delta(key: str, kind: str = "Service", type_: str = "ADDED") -> Delta:
    return Delta(kind, type_, key, f"uid-{key}", "1", 0.0, {"type": "LoadBalancer"})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_creation_carries_the_creations_sent_within_the_window() -> None:
    clock = Clock()
    window = CreationWindow(clock=clock)
    first = window.stamp([delta("default/a"), delta("default/b"), delta("default/c", type_="MODIFIED")])
    assert [d.burst for d in first] == [2, 2, 1]  # a change of an existing Service is no creation
    clock.now += 1.5
    assert [d.burst for d in window.stamp([delta("default/d")])] == [3]
    clock.now = 100.0 + BURST_WINDOW_SECONDS + 0.1  # a and b are out of the window, d is not
    assert [d.burst for d in window.stamp([delta("default/e")])] == [2]
    assert [d.burst for d in window.stamp([delta("node-1", kind="Node")])] == [1]


def test_creations_below_the_threshold_are_held_while_more_join_them() -> None:
    clock = Clock()
    window = CreationWindow(clock=clock)
    alone = [delta("default/a")]
    assert window.should_linger(alone)
    assert not window.should_linger(alone)  # nothing joined during the hold: sent
    assert window.should_linger(alone)  # (a new hold, as after sending)
    assert not window.should_linger([delta("node-1", kind="Node")])  # another kind in between changes nothing
    grown = [delta("default/a"), delta("default/b")]
    assert window.should_linger(grown)  # more joined: held again
    assert window.should_linger([*grown, delta("default/c")])
    assert window.should_linger([*grown, delta("default/c"), delta("default/d")])
    assert not window.should_linger([*grown, delta("default/c"), delta("default/d")])  # no growth: sent
    assert not window.should_linger([delta("default/c", type_="MODIFIED")])  # no creation: never held
    burst = [delta(f"default/s{i}") for i in range(BURST_CREATIONS)]
    assert not window.should_linger(burst)  # a burst already: sent at once


def test_holds_stop_at_max_holds_and_the_window_counts() -> None:
    clock = Clock()
    window = CreationWindow(clock=clock)
    batch: list[Delta] = []
    holds = 0
    for i in range(BURST_CREATIONS - 1):
        batch = [*batch, delta(f"default/g{i}")] if i else [delta("default/g0")]
        holds += window.should_linger(batch)
    assert holds == min(MAX_HOLDS, BURST_CREATIONS - 1)
    window.stamp([delta(f"default/w{i}") for i in range(BURST_CREATIONS - 1)])
    assert not window.should_linger([delta("default/x")])  # with the window's 4, this one makes 5: sent at once
    clock.now += BURST_WINDOW_SECONDS + 0.1
    assert window.should_linger([delta("default/y")])


def test_the_hint_travels_in_the_body_only_when_there_is_one() -> None:
    one, burst = delta("default/a"), delta("default/a").with_burst(7)
    assert "burst" not in one.to_body()
    assert parse_delta(burst.to_body()).burst == 7
    assert parse_delta(one.to_body()).burst == 1
