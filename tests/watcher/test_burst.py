"""The burst hint of Service creations (watcher.burst): counted over the window, a lone creation held once."""

from __future__ import annotations

from ccm.contracts.messages import Delta, parse_delta
from watcher.burst import BURST_WINDOW_SECONDS, CreationWindow


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


def test_a_lone_creation_is_held_once_and_only_with_none_in_the_window() -> None:
    clock = Clock()
    window = CreationWindow(clock=clock)
    alone = [delta("default/a")]
    assert window.should_linger(alone)
    assert not window.should_linger(alone)  # held once: then sent
    assert not window.should_linger([delta("default/a"), delta("default/b")])  # already a burst
    assert not window.should_linger([delta("default/c", type_="MODIFIED")])
    window.stamp(alone)
    assert not window.should_linger([delta("default/x")])  # another creation was just sent: no wait
    clock.now += BURST_WINDOW_SECONDS + 0.1
    assert window.should_linger([delta("default/x")])


def test_the_hint_travels_in_the_body_only_when_there_is_one() -> None:
    one, burst = delta("default/a"), delta("default/a").with_burst(7)
    assert "burst" not in one.to_body()
    assert parse_delta(burst.to_body()).burst == 7
    assert parse_delta(one.to_body()).burst == 1
