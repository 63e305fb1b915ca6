"""The engine never goes behind its own state: a fixture fetched before the one the state came from is skipped.

The match actor is handed fixtures from two sources (the feed leader's polls in process, the fixture cache on
other instances) and a match passes from owner to owner; on a switch the fixture handed on can be older than the
state. Taken as news it looks like a correction withdrawing the newest wicket, and the next fresh fixture
reports that wicket again: an alert shown twice on every device. These tests drive the engine on a synthesised
tape, fixture by fixture, with the fetch times the feed would stamp.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from daemon.cricket.engine import TickResult, is_behind, process_tick
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import snapshot_from_fixture
from daemon.cricket.state import MatchState
from daemon.replay.synth import synthesise

SETTINGS = EngineSettings()
NOW = 1_900_000_000.0


@pytest.fixture(scope="module")
def tape() -> Any:
    return synthesise("T10", seed=5)


def first_wicket(tape: Any) -> tuple[int, str]:
    """The cursor at which the tape's first wicket is posted, and its key."""
    state = None
    for cursor in range(len(tape) + 1):
        result = process_tick(
            state, snapshot_from_fixture(tape.fixture_at(cursor)), now=NOW, marquee=False, settings=SETTINGS
        )
        wickets = [e.subject for e in result.events if e.type == "wicket"]
        if wickets:
            return cursor, wickets[0]
        state = result.state
    raise AssertionError("the tape has no wicket")


def run(
    tape: Any, ticks: list[tuple[int, float | None]], state: MatchState | None = None
) -> tuple[MatchState | None, list[TickResult]]:
    """Feed (cursor, fetched_at) pairs through the engine as the match actor does; the state goes through its
    record form each tick, as it does through DynamoDB."""
    results = []
    for cursor, fetched_at in ticks:
        result = process_tick(
            state,
            snapshot_from_fixture(tape.fixture_at(cursor)),
            now=NOW,
            marquee=False,
            settings=SETTINGS,
            fetched_at=fetched_at,
        )
        results.append(result)
        if result.behind is None:
            state = MatchState.from_item(result.state.to_item())
    return state, results


def wicket_reports(results: list[TickResult], key: str) -> int:
    return sum(1 for r in results for e in r.events if e.type == "wicket" and e.subject == key)


def test_a_fixture_fetched_before_the_states_is_skipped_and_the_wicket_is_reported_once(tape: Any) -> None:
    at, key = first_wicket(tape)
    fresh = [(c, 100.0 + c) for c in range(at + 1)]
    # the leader steps down after the wicket's fixture went out in process; the cache still holds the one before
    older = [(at - 1, 100.0 + at - 1)]
    later = [(c, 100.0 + c) for c in range(at + 1, at + 4)]
    state, results = run(tape, fresh + older + later)
    stale = results[len(fresh)]
    assert stale.behind is not None and not stale.events and not stale.display_changed
    assert wicket_reports(results, key) == 1
    assert state is not None and key in state.reported_wickets


def test_the_same_older_fixture_as_news_withdraws_the_wicket_and_reports_it_again(tape: Any) -> None:
    """The mechanism the order guards against: with no fetch time the older fixture is taken as a correction
    (the wicket withdrawn with its cooldown), so the next fixture reports the wicket a second time."""
    at, key = first_wicket(tape)
    ticks: list[tuple[int, float | None]] = [(c, None) for c in range(at + 1)]
    ticks += [(at - 1, None)] + [(c, None) for c in range(at + 1, at + 4)]
    _, results = run(tape, ticks)
    assert wicket_reports(results, key) == 2


def test_a_later_fetch_that_withdraws_a_wicket_is_still_a_correction(tape: Any) -> None:
    """Order, not content: the scorers' correction arrives in a later fetch and is believed (and the batter's
    real dismissal later reported), as before."""
    at, key = first_wicket(tape)
    ticks: list[tuple[int, float | None]] = [(c, 100.0 + c) for c in range(at + 1)]
    ticks.append((at - 1, 200.0))  # fetched after everything else: what SportMonks shows now
    state, results = run(tape, ticks)
    assert results[-1].behind is None
    assert state is not None and key not in state.reported_wickets


def test_a_successor_loading_the_record_skips_a_cache_entry_older_than_its_predecessors_state(
    tape: Any,
) -> None:
    at, key = first_wicket(tape)
    predecessor, results = run(tape, [(c, 100.0 + c) for c in range(at + 1)])
    assert wicket_reports(results, key) == 1
    assert predecessor is not None and predecessor.fetched_at == 100.0 + at
    # the successor reads the record; the cache reader hands it the entry written before the wicket's
    successor_state = MatchState.from_item(predecessor.to_item())
    _, after = run(tape, [(at - 1, 100.0 + at - 1), (at + 1, 100.0 + at + 1)], successor_state)
    assert after[0].behind is not None
    assert wicket_reports(after, key) == 0


def test_the_position_moves_only_with_a_change_of_state(tape: Any) -> None:
    """A fixture that changes nothing leaves the state equal (no write); the position stays with the fixture
    that last changed it."""
    state, _ = run(tape, [(c, 100.0 + c) for c in range(5)])
    assert state is not None and state.fetched_at == 104.0
    again = process_tick(
        state,
        snapshot_from_fixture(tape.fixture_at(4)),
        now=NOW,
        marquee=False,
        settings=SETTINGS,
        fetched_at=150.0,
    )
    assert again.behind is None and again.state == state and again.state.fetched_at == 104.0


def test_a_tick_without_a_fetch_time_keeps_the_position(tape: Any) -> None:
    state, _ = run(tape, [(0, 100.0)])
    assert state is not None and state.fetched_at == 100.0
    result = process_tick(
        state, snapshot_from_fixture(tape.fixture_at(6)), now=NOW, marquee=False, settings=SETTINGS
    )
    assert result.behind is None and result.state.fetched_at == 100.0


def test_the_position_survives_the_record_and_old_records_have_none() -> None:
    state = replace(MatchState(), fetched_at=1234.5)
    assert MatchState.from_item(state.to_item()).fetched_at == 1234.5
    item = MatchState().to_item()
    assert "feedFetchedAt" not in item and MatchState.from_item(item).fetched_at is None


@pytest.mark.parametrize(
    ("state_at", "fetched_at", "behind"),
    [(None, 5.0, False), (5.0, None, False), (5.0, 5.0, False), (5.0, 6.0, False), (5.0, 4.999, True)],
)
def test_is_behind(state_at: float | None, fetched_at: float | None, behind: bool) -> None:
    assert is_behind(state_at, fetched_at) is behind
