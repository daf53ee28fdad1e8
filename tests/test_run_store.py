"""RunStore: a framework's nested runs grouped by their root run, one state per turn, bounded."""

from __future__ import annotations

import pytest

from ragaudit.errors import ConfigurationError
from ragaudit.integrations._common import RunStore


def _store(max_runs: int = 10) -> RunStore[dict[str, str]]:
    return RunStore(max_runs=max_runs)


def test_child_runs_join_their_roots_turn_and_the_turn_completes_once() -> None:
    store = _store()
    with store.lock:
        state, is_root, evicted = store.start("root", None, lambda: {"name": "turn"})
        assert is_root and evicted == [] and state == {"name": "turn"}
        child, child_is_root, _ = store.start("retriever", "root", lambda: {"name": "other"})
        assert child is state and not child_is_root
        grandchild, _, _ = store.start("embed", "retriever", None)
        assert grandchild is state and store.state_of("embed") is state
        assert store.end("embed") == (state, False)
        assert store.end("retriever") == (state, False)
        assert store.end("root") == (state, True)  # the root ended last: complete, removed
        assert len(store) == 0
        assert store.end("root") == (None, False)  # exactly one caller sees it complete


def test_a_root_ending_before_its_children_completes_when_the_last_child_ends() -> None:
    store = _store()
    with store.lock:
        state, _, _ = store.start("root", None, dict)
        store.start("stream", "root", None)
        assert store.end("root") == (state, False)  # a stream the consumer has not finished yet
        assert store.end("stream") == (state, True)


def test_force_completes_a_failed_root_at_once() -> None:
    store = _store()
    with store.lock:
        state, _, _ = store.start("root", None, dict)
        store.start("tool", "root", None)
        assert store.end("root", force=True) == (state, True)


def test_runs_of_a_closed_turn_and_runs_under_them_are_ignored() -> None:
    store = _store()
    with store.lock:
        store.start("root", None, dict)
        store.end("root")
        assert store.start("late", "root", dict) == (None, False, [])
        assert store.start("later", "late", dict) == (None, False, [])
        assert store.start("root", None, dict) == (None, False, [])  # a closed root does not start again


def test_a_run_with_an_unknown_parent_starts_a_turn_and_one_without_new_state_is_ignored() -> None:
    store = _store()
    with store.lock:
        assert store.start("orphan", "never-seen", None) == (None, False, [])
        state, is_root, _ = store.start("below-top", "never-seen", dict)
        assert is_root and state == {}


def test_past_max_runs_the_oldest_turn_is_evicted_and_counted() -> None:
    store = _store(max_runs=2)
    with store.lock:
        first, _, _ = store.start("a", None, lambda: {"id": "a"})
        store.start("b", None, lambda: {"id": "b"})
        _, _, evicted = store.start("c", None, lambda: {"id": "c"})
        assert evicted == [first] and store.evicted == 1 and len(store) == 2
        assert store.state_of("a") is None


def test_pop_ended_returns_turns_whose_root_ended_with_children_still_open() -> None:
    store = _store()
    with store.lock:
        hung, _, _ = store.start("root", None, lambda: {"id": "hung"})
        store.start("tool", "root", None)
        store.end("root")
        open_turn, _, _ = store.start("other", None, lambda: {"id": "open"})
        assert store.pop_ended() == [hung]
        assert store.state_of("other") is open_turn and len(store) == 1


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "10"])
def test_max_runs_is_checked_at_construction(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="max_runs"):
        RunStore(max_runs=bad)  # type: ignore[arg-type]
