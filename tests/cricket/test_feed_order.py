"""The engine never goes behind its own state: a fixture whose content is older than the state's is skipped.

The feed leader reads the live matches from two SportMonks endpoints in turn and one can lag the other; a
match actor is handed fixtures from two sources (the leader's polls in process, the fixture cache elsewhere)
and a match passes from owner to owner. An older fixture taken as news looks like a correction withdrawing the
newest wicket, and the next fresh fixture reports that wicket again: an alert shown twice on every device.
These tests drive the engine on synthesised tapes, fixture by fixture, in the orders those paths produce,
with the state carried through its record form as the match actor carries it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.cricket.engine import TickResult, is_behind, process_tick
from daemon.cricket.order import Gate, compare, mark_of_fixture, stamp_of_snapshot
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import snapshot_from_fixture
from daemon.cricket.state import MatchState
from daemon.replay.synth import synthesise
from daemon.replay.tape import Tape
from tests.cricket.match_script import carried

SETTINGS = EngineSettings()
NOW = 1_900_000_000.0


@cache
def tape(seed: int = 5, overs: int | None = None) -> Tape:
    return synthesise("T10", seed=seed, overs=overs)


@cache
def fixture(seed: int, overs: int | None, cursor: int) -> dict[str, Any]:
    return tape(seed, overs).fixture_at(cursor)


def first_wicket(seed: int = 5, overs: int | None = None) -> tuple[int, str]:
    """The cursor at which the tape's first wicket is posted, and its key."""
    state = None
    for cursor in range(len(tape(seed, overs)) + 1):
        snap = snapshot_from_fixture(fixture(seed, overs, cursor))
        result = process_tick(state, snap, now=NOW, marquee=False, settings=SETTINGS)
        wickets = [e.subject for e in result.events if e.type == "wicket"]
        if wickets:
            return cursor, wickets[0]
        state = result.state
    raise AssertionError("the tape has no wicket")


def run(
    cursors: Sequence[int],
    state: MatchState | None = None,
    *,
    seed: int = 5,
    overs: int | None = None,
    forget_order: bool = False,
) -> tuple[MatchState | None, list[TickResult]]:
    """Feed fixtures at ``cursors`` through the engine as the match actor does (the record round trip, the
    doubts kept in memory). ``forget_order`` drops the state's content stamp before every tick: the engine
    without its order."""
    results = []
    for i, cursor in enumerate(cursors):
        if forget_order and state is not None:
            state = replace(state, stamp=None)
        snap = snapshot_from_fixture(fixture(seed, overs, cursor))
        result = process_tick(state, snap, now=NOW + i, marquee=True, settings=SETTINGS, fetched_at=100.0 + i)
        results.append(result)
        if result.behind is None:
            state = carried(result)
    return state, results


def reports(results: list[TickResult], key: str) -> int:
    return sum(1 for r in results for e in r.events if e.type == "wicket" and e.subject == key)


def test_a_fixture_older_by_content_is_skipped_whenever_it_arrives_and_the_wicket_is_reported_once() -> None:
    at, key = first_wicket()
    # the lagging endpoint answers after the wicket's fixture: it still shows the ball before
    state, results = run([*range(at + 1), at - 1, at - 2, *range(at + 1, at + 4)])
    for stale in results[at + 1 : at + 3]:
        assert stale.behind is not None and not stale.events and not stale.display_changed
    assert reports(results, key) == 1
    assert state is not None and key in state.reported_wickets


def test_without_the_order_the_older_fixture_withdraws_the_wicket_and_it_is_reported_again() -> None:
    """The mechanism the order guards against: taken as news, the older fixture is a correction (the wicket
    withdrawn with its cooldown), so the next fixture reports the wicket a second time."""
    at, key = first_wicket()
    _, results = run([*range(at + 1), at - 1, *range(at + 1, at + 4)], forget_order=True)
    assert reports(results, key) == 2


def test_a_correction_that_withdraws_a_wicket_is_newer_and_believed() -> None:
    """Content, not arrival: the scorers' correction is stamped when it was made, so it is news, however it
    shrinks the score; the wicket is withdrawn from the state (and its batter's real dismissal later would be
    reported again)."""
    t, cat = tape(), tape().score_catalogue()
    posted: dict[int, Any] = {}
    index = -1
    for entry in t.entries:
        index += 1
        assert entry.op == "delete" or entry.ball is not None
        if entry.op == "correct" and entry.ball is not None:
            was = posted[entry.ball.id]
            if cat[was.score_id].is_wicket and not cat[entry.ball.score_id].is_wicket:
                break
        if entry.ball is not None:
            posted[entry.ball.id] = entry.ball
    else:
        raise AssertionError("the tape has no overturned wicket")
    state, results = run(list(range(index + 1)))
    assert state is not None
    given = [e.subject for r in results for e in r.events if e.type == "wicket"]
    _, after = run([index + 1], state)
    assert after[0].behind is None and after[0].state.stamp is not None
    withdrawn = set(state.reported_wickets) - set(after[0].state.reported_wickets)
    assert len(withdrawn) == 1 and withdrawn <= set(given)


def test_a_successor_loading_the_record_skips_a_cache_entry_older_than_its_predecessors_state() -> None:
    at, key = first_wicket()
    predecessor, results = run(list(range(at + 1)))
    assert reports(results, key) == 1 and predecessor is not None and predecessor.stamp is not None
    successor = MatchState.from_item(predecessor.to_item())  # the stamp went through the record
    assert successor.stamp == predecessor.stamp
    _, after = run([at - 1, at + 1], successor)
    assert after[0].behind is not None and reports(after, key) == 0


def test_the_stamp_moves_only_with_a_change_of_state() -> None:
    state, _ = run(list(range(5)))
    assert state is not None and state.fetched_at == 104.0
    again = process_tick(
        state,
        snapshot_from_fixture(fixture(5, None, 4)),
        now=NOW,
        marquee=True,
        settings=SETTINGS,
        fetched_at=150.0,
    )
    assert again.behind is None and again.state == state and again.state.fetched_at == 104.0


def test_the_stamp_survives_the_record_and_old_records_have_none() -> None:
    state, _ = run(list(range(8)))
    assert state is not None and state.stamp == stamp_of_snapshot(snapshot_from_fixture(fixture(5, None, 7)))
    assert MatchState.from_item(state.to_item()).stamp == state.stamp
    item = MatchState().to_item()
    assert "feedStamp" not in item and MatchState.from_item(item).stamp is None


def test_is_behind() -> None:
    newer = stamp_of_snapshot(snapshot_from_fixture(fixture(5, None, 9)))
    older = stamp_of_snapshot(snapshot_from_fixture(fixture(5, None, 8)))
    assert is_behind(newer, older) and not is_behind(older, newer)
    assert not is_behind(None, older) and not is_behind(newer, newer)


# ---- two sources, one behind ------------------------------------------------------------------------------
@st.composite
def interleaving(draw: st.DrawFn) -> tuple[int, list[tuple[int, bool]], int]:
    """(seed, [(fresh cursor, answered by the lagging source)], lag): a whole match of 3 overs an innings,
    the fresh cursor moving on 0-6 entries a poll; any poll may be answered by a source ``lag`` entries
    behind; the last polls (both sources) come at the end of the tape."""
    seed = draw(st.integers(0, 7))
    lag = draw(st.integers(1, 10))
    total = len(tape(seed, 3))
    polls: list[tuple[int, bool]] = [(0, False)]  # the owner's first look is before the first ball
    cursor = 0
    for step, lagging in draw(st.lists(st.tuples(st.integers(0, 6), st.booleans()), max_size=60)):
        cursor = min(total, cursor + step)
        polls.append((cursor, lagging))
    polls += [(total, False), (total, True), (total, False)]
    return seed, polls, lag


def play(
    seed: int, polls: Sequence[tuple[int, bool]], lag: int, *, gate: bool
) -> tuple[list[tuple[int, TickResult, MatchState | None]], list[int]]:
    """The polls through the feed's gate (or straight to the engine, as after a leader change), then the
    engine; returns (cursor shown, result, state after) per tick, and the fresh cursors the clean run sees."""
    state: MatchState | None = None
    g = Gate()
    ticks = []
    for i, (cursor, lagging) in enumerate(polls):
        shown = max(0, cursor - lag) if lagging else cursor
        raw = fixture(seed, 3, shown)
        if gate:
            verdict, g = g.admit(mark_of_fixture(raw))
            if verdict in ("behind", "unconfirmed"):
                continue
        result = process_tick(
            state,
            snapshot_from_fixture(raw),
            now=NOW + 3 * i,
            marquee=True,
            settings=SETTINGS,
            fetched_at=NOW + 3 * i,
        )
        if result.behind is None:
            state = carried(result)
        ticks.append((shown, result, state))
    return ticks, [c for c, lagging in polls if not lagging]


def wicket_keys(results: Sequence[TickResult]) -> list[str]:
    return sorted(e.subject for r in results for e in r.events if e.type == "wicket")


@cache
def reported_in_a_clean_run(seed: int) -> dict[str, int]:
    """How often each wicket is reported when every entry is seen once, in order (a wicket overturned and
    given again is reported twice)."""
    ticks, _ = play(seed, [(c, False) for c in range(len(tape(seed, 3)) + 1)], 0, gate=False)
    counts: dict[str, int] = {}
    for key in wicket_keys([r for _, r, _ in ticks]):
        counts[key] = counts.get(key, 0) + 1
    return counts


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(interleaving(), st.booleans())
def test_a_lagging_source_never_withdraws_a_ball_repeats_a_wicket_or_flips_a_status(
    case: tuple[int, list[tuple[int, bool]], int], through_gate: bool
) -> None:
    """Through the feed's gate, or straight to the engine (a new leader's first answers, a new owner's cache
    reads): the engine sees the match only ever move on."""
    seed, polls, lag = case
    ticks, _ = play(seed, polls, lag, gate=through_gate)
    taken = [(shown, r, state) for shown, r, state in ticks if r.behind is None]
    # what the engine takes never goes back in the match (by content) ...
    stamps = [stamp_of_snapshot(snapshot_from_fixture(fixture(seed, 3, shown))) for shown, _, _ in taken]
    assert all(compare(a, b) >= 0 for a, b in zip(stamps, stamps[1:], strict=False))
    # ... so no status flips back,
    progress = [s.progress for s in stamps]
    assert progress == sorted(progress)
    # no ball leaves the state unless the tape deleted it (or it left the window of the last 30),
    deleted_in_tape = {e.target_id for e in tape(seed, 3).entries if e.op == "delete"}
    seen_ids: set[int] = set()
    for _, _, state in taken:
        assert state is not None
        ids = {b.id for b in state.last30_balls}
        assert not [i for i in (seen_ids - ids) - deleted_in_tape if i > min(ids, default=0)]
        seen_ids |= ids
    # no wicket is reported more often than the tape gives it, each standing one is reported, one end.
    results = [r for _, r, _ in ticks]
    counts: dict[str, int] = {}
    for key in wicket_keys(results):
        counts[key] = counts.get(key, 0) + 1
    clean = reported_in_a_clean_run(seed)
    assert all(n <= clean.get(key, 1) for key, n in counts.items()), (counts, clean)
    standing = ticks[-1][2]
    assert standing is not None and set(standing.reported_wickets) <= set(counts)
    assert len([r for r in results if r.ended]) == 1


def test_a_match_taken_back_after_a_wrong_end_before_its_first_ball_reads_the_live_fixture_as_news() -> None:
    """A final status the fixture did not corroborate, before the first ball (the feed said "Finished" for a
    match waiting to start), ended the match; the feed then shows it live at the same content. Taken back,
    the state must not hold the end's progress: every live fixture before the next ball would read as older
    and be skipped, the match ended to its owner however long it is live."""
    pre = fixture(5, None, 0)
    assert not pre.get("balls")
    wrong = dict(pre, status="Finished")
    state: MatchState | None = None
    for i in range(6):  # the end confirmed over several polls, as a glitch that lasts is
        result = process_tick(
            state, snapshot_from_fixture(wrong), now=NOW + 10 * i, marquee=True, settings=SETTINGS
        )
        state = carried(result)
    assert state is not None and state.stamp is not None and state.stamp.progress == 1_000
    assert state.match_phase == "completed", "the glitch was not taken as the end"
    live = snapshot_from_fixture(dict(pre, status="1st Innings"))
    # as the state was carried before: the live fixture skipped as older than the (wrong) end
    assert process_tick(state, live, now=NOW + 100, marquee=True, settings=SETTINGS).behind is not None
    taken_back = process_tick(state.reopened(), live, now=NOW + 100, marquee=True, settings=SETTINGS)
    assert taken_back.behind is None
    assert taken_back.phase not in ("completed", "abandoned")
    # a state that never reached the end is left as it is
    assert taken_back.state.reopened() == taken_back.state
