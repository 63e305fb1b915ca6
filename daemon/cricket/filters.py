"""Filters between detection and delivery: staleness, cooldowns, and ``pick_best_event``.

Owns the rules that drop candidate events and the choice of the tick's headline. Pure functions of the
candidates, the snapshot, the ball window, the cooldown map and the engine clock; no I/O, no wall clock.

Order: staleness first, then cooldowns, and only surviving events arm a cooldown. (The platform lists the
cooldown filter first; checking staleness first means a stale event can neither arm a cooldown nor shadow a
fresh event with the same key in the same tick. The surviving set is otherwise the same.)

Staleness rules (an event is dropped when the match has already moved past it):
- ``fifty`` once the batter has 100 (``hundred`` says more); ``batsman_on_90s`` once he has 100 or is out;
- ``batsman_on_fire`` once he is out;
- ``new_batsman`` once he has faced ``new_batsman_stale_after_balls`` balls, or is out;
- ``four``, ``six``, ``maiden``, ``consecutive_sixes`` once ``ball_event_max_age`` deliveries followed the
  ball (an outage or a slow cadence does not replay old boundaries);
- ``six`` when the same ball made ``consecutive_sixes``; a ``consecutive_sixes`` or ``bowler_on_fire`` when the
  same tick has a bigger one for the same player; ``bowler_on_fire`` when the same tick has his ``hattrick``;
- ``on_hattrick`` once the bowler has bowled again, or when the same tick has his ``hattrick``;
- ``innings_end`` once the next innings is ``ball_event_max_age`` legal balls old.
Never stale: ``wicket`` (each is reported exactly once), ``hattrick``, ``hundred``, ``match_end``.

Cooldowns: ``cooldowns`` maps an event key ("type:subject") to the engine-clock second it expires; an event
whose key has not expired is a repeat and is dropped, and two events with one key in one tick keep the first
(in ball order). Expired entries are pruned so the map stays small.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from daemon.cricket.detectors import KeyEvent
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import Ball, MatchSnapshot


def ordered(events: Iterable[KeyEvent]) -> list[KeyEvent]:
    """Ball order; events not tied to a ball come after the balls, most important first."""
    return sorted(events, key=lambda e: (e.seq, e.priority, e.key))


def is_stale(
    event: KeyEvent,
    tick: Sequence[KeyEvent],
    snap: MatchSnapshot,
    window: Sequence[Ball],
    settings: EngineSettings,
) -> bool:
    board, pid = event.scoreboard, event.player_id
    line = snap.batter(board, pid) if board and pid else None
    if event.type == "fifty":
        return line is not None and line.runs >= 100
    if event.type == "batsman_on_90s":
        return line is not None and (line.runs >= 100 or line.out)
    if event.type == "batsman_on_fire":
        return line is not None and line.out
    if event.type == "new_batsman":
        if line is not None and (line.out or line.balls >= settings.new_batsman_stale_after_balls):
            return True
        faced = sum(1 for b in window if b.scoreboard == board and b.batsman_id == pid and b.faced)
        return faced >= settings.new_batsman_stale_after_balls
    if event.type in ("four", "six", "maiden", "consecutive_sixes", "on_hattrick"):
        if _age(event, window) > settings.ball_event_max_age:
            return True
    if event.type == "six":
        return any(e.type == "consecutive_sixes" and e.ball_id == event.ball_id for e in tick)
    if event.type == "bowler_on_fire" and any(e.type == "hattrick" and e.player_id == pid for e in tick):
        return True
    if event.type in ("consecutive_sixes", "bowler_on_fire"):
        mine = _count(event)
        return any(
            e.type == event.type and e.player_id == pid and e.scoreboard == board and _count(e) > mine
            for e in tick
        )
    if event.type == "on_hattrick":
        if any(e.type == "hattrick" and e.player_id == pid for e in tick):
            return True
        return any(
            b.scoreboard == board and b.bowler_id == pid and b.id > int(event.ball_id or 0) for b in window
        )
    if event.type == "innings_end":
        following = [i for i in snap.innings if board and i.inning > int(board.lstrip("S") or 0)]
        return any(i.legal_balls >= settings.ball_event_max_age for i in following)
    return False


def _age(event: KeyEvent, window: Sequence[Ball]) -> int:
    if event.ball_id is None:
        return 0
    ball_id = int(event.ball_id)
    return sum(1 for b in window if b.id > ball_id)


def _count(event: KeyEvent) -> int:
    tail = event.subject.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def staleness_filter(
    events: Sequence[KeyEvent], snap: MatchSnapshot, window: Sequence[Ball], settings: EngineSettings
) -> list[KeyEvent]:
    return [e for e in events if not is_stale(e, events, snap, window, settings)]


def cooldown_filter(
    events: Sequence[KeyEvent], cooldowns: Mapping[str, float], clock: float
) -> list[KeyEvent]:
    """Drop repeats: keys whose cooldown has not expired, and a second event with one key in one tick."""
    taken: set[str] = set()
    passed = []
    for event in ordered(events):
        if cooldowns.get(event.key, float("-inf")) > clock or event.key in taken:
            continue
        taken.add(event.key)
        passed.append(event)
    return passed


def arm_cooldowns(
    cooldowns: Mapping[str, float], events: Iterable[KeyEvent], clock: float, settings: EngineSettings
) -> dict[str, float]:
    """The cooldown map after this tick: expired entries pruned, each emitted event's key armed."""
    armed = {k: float(v) for k, v in cooldowns.items() if v > clock}
    for event in events:
        duration = settings.cooldown(event.type)
        if duration > 0:
            armed[event.key] = max(armed.get(event.key, 0.0), clock + duration)
    return armed


def pick_best_event(events: Iterable[KeyEvent]) -> KeyEvent | None:
    """The headline: the highest priority (lowest number); among equals, the latest ball."""
    best: KeyEvent | None = None
    for event in events:
        if best is None or (event.priority, -event.seq) < (best.priority, -best.seq):
            best = event
    return best
