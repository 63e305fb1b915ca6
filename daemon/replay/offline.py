"""A tape through the match engine, offline, as the daemon would see it (``sightscreen events`` prints it).

Owns the offline replay of a tape through ``process_tick``. The poll
schedule is the replay server's (``daemon.replay.cursor.ReplayClock`` at speed 1, the tape's own
gaps, the server's default 20-minute innings break): a poll every ``cadence`` seconds from the
start until the match is over, each seeing ``Tape.fixture_at(cursor)`` with the entry stamps the server would
give. Non-marquee polls see no balls (the ``/livescores`` include set). It never opens a socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from daemon.cricket.engine import KeyEvent, TickResult, process_tick
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import snapshot_from_fixture
from daemon.cricket.state import MatchState
from daemon.replay.cursor import ReplayClock

INNINGS_BREAK_S = 1200.0  # the replay server's default
_SCORE_INCLUDES = ("localteam", "visitorteam", "runs", "batting", "bowling", "lineup", "league")


@dataclass(frozen=True)
class Poll:
    at: float  # epoch seconds of the poll
    cursor: int
    fixture: dict[str, Any]
    changed: bool  # False when the server would answer exactly what it answered to the previous poll


def poll_fixtures(tape: Any, cadence: float, *, marquee: bool = True) -> Iterator[Poll]:
    """The fixture the replay server would answer at each poll, ``cadence`` seconds apart."""
    if cadence <= 0:
        raise ValueError(f"cadence: must be > 0 seconds, got {cadence}")
    start = float(tape.starting_at.timestamp())
    clock = ReplayClock.for_tape(tape, break_ms=INNINGS_BREAK_S * 1000.0, starts_at=start)
    include = None if marquee else list(_SCORE_INCLUDES)

    def stamp(i: int) -> float:
        return start + float(clock.due_ms(i)) / 1000.0

    at = start - cadence  # one poll before the first ball: the match as NS
    last: tuple[int, str | None] | None = None
    fixture: dict[str, Any] = {}
    while True:
        cursor = clock.cursor(at) if at >= start else 0
        status = None if at >= start else "NS"
        changed = (cursor, status) != last
        if changed:  # stamps are a function of the entry, so the same cursor is the same answer
            fixture = tape.fixture_at(cursor, status=status, include=include, entry_times=stamp)
            last = (cursor, status)
        yield Poll(at=at, cursor=cursor, fixture=fixture, changed=changed)
        if cursor >= len(tape):
            return
        at += cadence


def replay_events(
    tape: Any, *, cadence: float, marquee: bool, settings: EngineSettings | None = None
) -> Iterator[tuple[Poll, TickResult]]:
    """Every poll and the engine's result for it, carrying the state as the match actor does."""
    settings = settings or EngineSettings()
    state: MatchState | None = None
    result: TickResult | None = None
    for poll in poll_fixtures(tape, cadence, marquee=marquee):
        doubting = state is not None and (state.end_doubt is not None or state.score_doubt is not None)
        if not poll.changed and result is not None and not doubting:
            # A repeated snapshot is a fixed point of process_tick (same state, no event, display
            # unchanged; tests/cricket pin this), so the tick is skipped, not recomputed.
            result = replace(result, events=(), best=None, display_changed=False, ended=False)
            yield poll, result
            continue
        result = process_tick(
            state, snapshot_from_fixture(poll.fixture), now=poll.at, marquee=marquee, settings=settings
        )
        # The actor persists the state as a DynamoDB item; going through the item form here keeps the
        # replay honest about what survives a restart. The doubts being confirmed live in the actor's memory.
        state = replace(
            MatchState.from_item(result.state.to_item()),
            end_doubt=result.state.end_doubt,
            score_doubt=result.state.score_doubt,
        )
        yield poll, result


def event_line(event: KeyEvent) -> dict[str, Any]:
    return {
        "ball": event.ball_id,
        "over": event.over,
        "type": event.type,
        "subject": event.subject,
        "priority": event.priority,
        "alert": {"title": event.title, "body": event.body} if event.alert_worthy else None,
        "text": event.text,
    }
