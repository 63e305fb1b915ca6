"""Filters between detection and delivery: staleness, cooldowns, and ``pick_best_event``.

Owns the order the filters run in, the cooldown map and the choice of the tick's headline. Pure functions of
the candidates, the snapshot, the ball window, the cooldown map and the engine clock; no I/O, no wall clock.
Each event type's staleness rule, default cooldown and priority are its row in ``daemon.cricket.registry``.

Order: staleness first, then cooldowns, and only surviving events arm a cooldown. (The platform lists the
cooldown filter first; checking staleness first means a stale event can neither arm a cooldown nor shadow a
fresh event with the same key in the same tick. The surviving set is otherwise the same.)

Cooldowns: ``cooldowns`` maps an event key ("type:subject") to the engine-clock second it expires; an event
whose key has not expired is a repeat and is dropped, and two events with one key in one tick keep the first
(in ball order). Expired entries are pruned so the map stays small.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from daemon.cricket.detectors import KeyEvent
from daemon.cricket.registry import spec
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import Ball, MatchSnapshot
from daemon.cricket.staleness import TickView


def ordered(events: Iterable[KeyEvent]) -> list[KeyEvent]:
    """Ball order; events not tied to a ball come after the balls, most important first."""
    return sorted(events, key=lambda e: (e.seq, e.priority, e.key))


def staleness_filter(
    events: Sequence[KeyEvent], snap: MatchSnapshot, window: Sequence[Ball], settings: EngineSettings
) -> list[KeyEvent]:
    view = TickView(events, snap, window, settings)
    return [e for e in events if not spec(e.type).stale(e, view)]


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
