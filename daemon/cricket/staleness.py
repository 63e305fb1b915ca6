"""When a candidate event is stale: the match has already moved past it, so it is dropped before cooldowns.

One rule per event type, named in the type's row of ``daemon.cricket.registry`` (``stale``); pure functions of
the event, the tick's other candidates, the snapshot, the ball window and the settings. No I/O, no clock.

- ``fifty`` once the batter has 100 (``hundred`` says more); ``batsman_on_90s`` once he has 100 or is out;
- ``batsman_on_fire`` once he is out;
- ``new_batsman`` once he has faced ``new_batsman_stale_after_balls`` balls, or is out;
- ``four``, ``six``, ``maiden``, ``consecutive_sixes``, ``on_hattrick`` once ``ball_event_max_age``
  deliveries followed the ball (an outage or a slow cadence does not replay old boundaries);
- ``six`` when the same ball made ``consecutive_sixes``; a ``consecutive_sixes`` or ``bowler_on_fire`` when the
  same tick has a bigger one for the same player; ``bowler_on_fire`` when the same tick has his ``hattrick``;
- ``on_hattrick`` once the bowler has bowled again, or when the same tick has his ``hattrick``;
- ``innings_end`` once the next innings is ``ball_event_max_age`` legal balls old.
Never stale (``never``): ``wicket`` (each is reported exactly once), ``hattrick``, ``hundred``, ``match_end``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from daemon.cricket.events import EventType
from daemon.cricket.snapshot import Ball, BatterLine, MatchSnapshot

if TYPE_CHECKING:
    from daemon.cricket.detectors import KeyEvent
    from daemon.cricket.settings import EngineSettings


@dataclass(frozen=True)
class TickView:
    """What a staleness rule may look at besides the event: the tick's candidates, the snapshot, the known
    balls (oldest first) and the engine settings."""

    events: Sequence[KeyEvent]
    snap: MatchSnapshot
    window: Sequence[Ball]
    settings: EngineSettings


StaleRule = Callable[["KeyEvent", TickView], bool]


def never(event: KeyEvent, tick: TickView) -> bool:
    return False


def fifty(event: KeyEvent, tick: TickView) -> bool:
    line = _line(event, tick)
    return line is not None and line.runs >= 100


def nineties(event: KeyEvent, tick: TickView) -> bool:
    line = _line(event, tick)
    return line is not None and (line.runs >= 100 or line.out)


def batter_on_fire(event: KeyEvent, tick: TickView) -> bool:
    line = _line(event, tick)
    return line is not None and line.out


def new_batter(event: KeyEvent, tick: TickView) -> bool:
    line = _line(event, tick)
    most = tick.settings.new_batsman_stale_after_balls
    if line is not None and (line.out or line.balls >= most):
        return True
    board, pid = event.scoreboard, event.player_id
    return sum(1 for b in tick.window if b.scoreboard == board and b.batsman_id == pid and b.faced) >= most


def aged(event: KeyEvent, tick: TickView) -> bool:
    """More than ``ball_event_max_age`` deliveries followed the event's ball."""
    if event.ball_id is None:
        return False
    ball_id = int(event.ball_id)
    return sum(1 for b in tick.window if b.id > ball_id) > tick.settings.ball_event_max_age


def six(event: KeyEvent, tick: TickView) -> bool:
    if aged(event, tick):
        return True
    return any(e.type == EventType.CONSECUTIVE_SIXES and e.ball_id == event.ball_id for e in tick.events)


def consecutive_sixes(event: KeyEvent, tick: TickView) -> bool:
    return aged(event, tick) or _outdone(event, tick)


def on_hattrick(event: KeyEvent, tick: TickView) -> bool:
    if aged(event, tick) or _has_hattrick(event, tick):
        return True
    board, pid = event.scoreboard, event.player_id
    return any(
        b.scoreboard == board and b.bowler_id == pid and b.id > int(event.ball_id or 0) for b in tick.window
    )


def bowler_on_fire(event: KeyEvent, tick: TickView) -> bool:
    return _has_hattrick(event, tick) or _outdone(event, tick)


def innings_end(event: KeyEvent, tick: TickView) -> bool:
    board = event.scoreboard
    following = [i for i in tick.snap.innings if board and i.inning > int(board.lstrip("S") or 0)]
    return any(i.legal_balls >= tick.settings.ball_event_max_age for i in following)


def _line(event: KeyEvent, tick: TickView) -> BatterLine | None:
    board, pid = event.scoreboard, event.player_id
    return tick.snap.batter(board, pid) if board and pid else None


def _has_hattrick(event: KeyEvent, tick: TickView) -> bool:
    return any(e.type == EventType.HATTRICK and e.player_id == event.player_id for e in tick.events)


def _outdone(event: KeyEvent, tick: TickView) -> bool:
    """The same tick has a bigger one of the same type for the same player (a 4-fer beside a 3-fer)."""
    mine = _count(event)
    return any(
        e.type == event.type
        and e.player_id == event.player_id
        and e.scoreboard == event.scoreboard
        and _count(e) > mine
        for e in tick.events
    )


def _count(event: KeyEvent) -> int:
    tail = event.subject.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0
