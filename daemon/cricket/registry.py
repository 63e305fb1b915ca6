"""The event-type registry: one row per key-event type, holding everything the engine knows of it.

A row gives the type's tier (which ticks its detector runs on), its priority (1 is the most important: the
headline of a tick and the order of events not tied to a ball), its default cooldown in seconds of feed time
and whether it is alert-worthy by default (``[engine].cooldowns_s`` and ``[engine].alert_worthy`` override
both), its staleness rule (``daemon.cricket.staleness``) and its detector (``daemon.cricket.detectors``).
``process_tick`` runs the detectors of this table in its order; the filters, the settings and the payloads
read priorities, cooldowns, alert-worthiness and staleness from it and from nowhere else.

Adding an event type is one detector function and one row (docs/architecture.md has a worked example). The
table is checked when this module is imported: every ``EventType`` has exactly one row and the priorities are
1..N, each once, so a misplaced or repeated priority stops the daemon at start rather than reordering
headlines.

Why these defaults: alert-worthy events go out at APNs priority 10 with an alert (title, body); Apple budgets
priority 10 (about 15 an hour is the folklore figure), and a T20 has roughly 14 wickets, 2 innings ends and a
few milestones over 3.5 hours, which fits. Boundaries and the rest are routine (priority 5). Cooldowns are
per event key ("type:subject"), and keys are specific (a wicket is keyed by the dismissed batter, a maiden by
its over), so a cooldown only ever suppresses a *repeat* of the same event (a flip-flopping correction, a
stale cache serving old data again), never a different event. The boundary cooldowns are the exception on
purpose: they are keyed by batter, so a batter hitting three fours in an over headlines the first only (the
over's balls still show every boundary).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from daemon.cricket import detectors, staleness
from daemon.cricket.detectors import Context, KeyEvent
from daemon.cricket.errors import EngineError
from daemon.cricket.events import EventType, Tier
from daemon.cricket.staleness import StaleRule

Detector = Callable[[Context], list[KeyEvent]]

HOUR = 3600.0


@dataclass(frozen=True)
class EventSpec:
    type: EventType
    tier: Tier
    priority: int
    cooldown_s: float
    alert_worthy: bool
    stale: StaleRule
    detect: Detector


# Most important first. The detectors run in this order (their candidates are sorted afterwards, by ball and
# then priority, so the order only needs to be fixed, not meaningful).
# fmt: off
EVENTS: tuple[EventSpec, ...] = (
    #         type                          tier        prio  cooldown_s  alert  staleness                    detector
    EventSpec(EventType.MATCH_END,         Tier.SCORE,  1,   6 * HOUR,   True,  staleness.never,             detectors.detect_match_end),
    EventSpec(EventType.INNINGS_END,       Tier.SCORE,  2,   HOUR,       True,  staleness.innings_end,       detectors.detect_innings_end),
    EventSpec(EventType.HATTRICK,          Tier.BALL,   3,   HOUR,       True,  staleness.never,             detectors.detect_hattricks),
    EventSpec(EventType.HUNDRED,           Tier.SCORE,  4,   HOUR,       True,  staleness.never,             detectors.detect_hundreds),
    EventSpec(EventType.WICKET,            Tier.SCORE,  5,   300.0,      True,  staleness.never,             detectors.detect_wickets),
    EventSpec(EventType.FIFTY,             Tier.SCORE,  6,   HOUR,       True,  staleness.fifty,             detectors.detect_fifties),
    EventSpec(EventType.ON_HATTRICK,       Tier.BALL,   7,   600.0,      True,  staleness.on_hattrick,       detectors.detect_on_hattricks),
    EventSpec(EventType.CONSECUTIVE_SIXES, Tier.BALL,   8,   300.0,      False, staleness.consecutive_sixes, detectors.detect_consecutive_sixes),
    EventSpec(EventType.BOWLER_ON_FIRE,    Tier.SCORE,  9,   HOUR,       False, staleness.bowler_on_fire,    detectors.detect_bowler_on_fire),
    EventSpec(EventType.BATSMAN_ON_FIRE,   Tier.SCORE, 10,   900.0,      False, staleness.batter_on_fire,    detectors.detect_batters_on_fire),
    EventSpec(EventType.BATSMAN_ON_90S,    Tier.SCORE, 11,   HOUR,       False, staleness.nineties,          detectors.detect_nineties),
    EventSpec(EventType.SIX,               Tier.BALL,  12,   60.0,       False, staleness.six,               detectors.detect_sixes),
    EventSpec(EventType.FOUR,              Tier.BALL,  13,   60.0,       False, staleness.aged,              detectors.detect_fours),
    EventSpec(EventType.NEW_BATSMAN,       Tier.SCORE, 14,   HOUR,       False, staleness.new_batter,        detectors.detect_new_batsmen),
    EventSpec(EventType.MAIDEN,            Tier.BALL,  15,   600.0,      False, staleness.aged,              detectors.detect_maidens),
)
# fmt: on


class RegistryError(EngineError):
    """The event table contradicts itself: a type without a row or with two, priorities not 1..N once each."""


def check(rows: Iterable[EventSpec]) -> dict[EventType, EventSpec]:
    """The rows by type, once the table is whole: every type once, priorities 1..N once each."""
    rows = tuple(rows)
    by_type: dict[EventType, EventSpec] = {}
    for row in rows:
        if row.type in by_type:
            raise RegistryError(f"{row.type.value}: two rows")
        by_type[row.type] = row
    missing = [t.value for t in EventType if t not in by_type]
    if missing:
        raise RegistryError(f"no row for {missing}")
    priorities = sorted(row.priority for row in rows)
    if priorities != list(range(1, len(rows) + 1)):
        repeated = sorted({p for p in priorities if priorities.count(p) > 1})
        raise RegistryError(
            f"priorities must be 1..{len(rows)}, each once: got {priorities}"
            + (f" ({repeated} repeated)" if repeated else "")
        )
    return by_type


BY_TYPE: Mapping[EventType, EventSpec] = MappingProxyType(check(EVENTS))
PRIORITY: Mapping[str, int] = MappingProxyType({row.type.value: row.priority for row in EVENTS})
DEFAULT_COOLDOWNS: Mapping[str, float] = MappingProxyType({row.type.value: row.cooldown_s for row in EVENTS})
DEFAULT_ALERT_WORTHY: tuple[str, ...] = tuple(row.type.value for row in EVENTS if row.alert_worthy)
NAMES: tuple[str, ...] = tuple(row.type.value for row in sorted(EVENTS, key=lambda row: row.priority))
"""Every type's name, most important first."""


def spec(event_type: str) -> EventSpec:
    """The row of ``event_type`` (its value, as a ``KeyEvent`` carries it)."""
    return BY_TYPE[EventType(event_type)]


def detect(
    ctx: Context, *, ball_events: bool, known: Mapping[EventType, list[KeyEvent]] | None = None
) -> list[KeyEvent]:
    """The tick's candidates from every detector in the table's order: the ``Tier.BALL`` ones only when
    ``ball_events`` (a marquee match whose feed has balls). ``known`` holds the results of detectors the
    caller already ran (their events are taken as they are, not detected again)."""
    known = known or {}
    candidates: list[KeyEvent] = []
    for row in EVENTS:
        if row.tier is Tier.BALL and not ball_events:
            continue
        found = known.get(row.type)
        candidates += found if found is not None else row.detect(ctx)
    return candidates
