"""Who may send which message kind (ccm.senders)."""

from __future__ import annotations

from ccm.senders import sender_refusal, senders_from_env

ENV = {"SENDERS_WATCHER": "AROAWATCHER", "SENDERS_NODES": "AROANODES", "SENDERS_SWEEPER": "AROASWEEPER"}


def test_each_kind_only_from_its_owners():
    senders = senders_from_env(ENV)
    assert sender_refusal("Service", "DELETED", "AROAWATCHER:pod-1", senders) is None
    assert sender_refusal("Watcher", "HEARTBEAT", "AROAWATCHER:pod-2", senders) is None
    assert sender_refusal("Service", "HOSTS", "AROANODES:fn", senders) is None
    assert sender_refusal("Service", "SYNC", "AROASWEEPER:fn", senders) is None
    assert sender_refusal("Node", "MODIFIED", "AROAWATCHER:pod-1", senders) is None
    assert sender_refusal("Service", "ENDPOINTS", "AROAWATCHER:pod-1", senders) is None
    assert sender_refusal("Service", "ENDPOINTS", "AROANODES:fn", senders) is not None
    # What a compromised (or buggy) function could forge: refused.
    assert "watcher only, not by AROANODES:fn" in (sender_refusal("Service", "DELETED", "AROANODES:fn", senders) or "")
    assert sender_refusal("Service", "MODIFIED", "AROASWEEPER:fn", senders) is not None
    assert sender_refusal("Service", "HOSTS", "AROAWATCHER:pod-1", senders) is not None
    assert sender_refusal("Node", "DELETED", "AROANODES:fn", senders) is not None
    assert sender_refusal("Service", "DELETED", None, senders) is not None
    assert sender_refusal("Service", "DELETED", "AIDAUSER", senders) is not None


def test_configuration():
    assert senders_from_env({}) is None  # not configured: not checked
    assert sender_refusal("Service", "DELETED", "anyone", None) is None
    # The watcher role is not ours (WatcherAuth=none): its kinds from any sender; the others stay checked.
    senders = senders_from_env({"SENDERS_WATCHER": "", "SENDERS_NODES": "AROANODES"})
    assert sender_refusal("Service", "DELETED", "AIDAUSER", senders) is None
    assert sender_refusal("Service", "HOSTS", "AIDAUSER", senders) is not None
    # No sweeper deployed: nobody may send its kinds (SYNC still comes from the watcher).
    no_sweeper = senders_from_env({"SENDERS_WATCHER": "AROAWATCHER"})
    assert sender_refusal("Service", "SYNC", "AROASWEEPER:fn", no_sweeper) is not None
    assert sender_refusal("Service", "SYNC", "AROAWATCHER:pod", no_sweeper) is None
    assert senders_from_env({"SENDERS_NODES": " AROA1 , AROA2 "}) == {
        "watcher": frozenset(),
        "nodes": frozenset({"AROA1", "AROA2"}),
        "sweeper": frozenset(),
    }
