"""The match engine's one entry point: ``process_tick`` (previous state + snapshot -> events, display, state).

Owns the pipeline of platform-docs §11 (Tier0 and Tier1 detectors, staleness and cooldown filters,
``pick_best_event``), the display per perspective, and the next ``MatchState``. Pure and deterministic: the
same previous state and snapshot give the same result. That alone does not make a repeat harmless: an owner
that takes over after a crash between push and state write usually sees a later snapshot than its
predecessor did, so it decides on different data. Alerts are kept to once per device by the match actor's
alert intents (``daemon.cricket.intent``, docs/delivery.md). It must not do I/O or read the wall clock;
``now`` is used only where the feed gives no time at all.

Policies the match actor relies on:
- **First tick** (``prev is None``, a match picked up at start or mid-innings): the engine records the match
  as it stands (wickets already fallen count as reported, batters as seen, innings as ended) and reports no
  event, so a match picked up mid-innings does not replay its history. The display is built (and "changed").
  A match first seen just begun (first innings, at most ``first_look_news_balls`` legal balls) has no
  history to hide: its balls are news, as if the first look had been pre-match (nobody persisted a state for
  it, so nobody alerted for it: nothing can be shown twice).
  Likewise, when the ball feed first appears for a match that already had play (``previousBallId`` unset),
  those balls are history: ball events are not reported from them, wickets are reported only if the
  tables had not shown them.
- **Clock**: cooldowns run on the feed's clock (the newest ``updated_at`` in the fixture, never going
  backwards), falling back to ``now`` only when the feed carries no time. A re-run therefore decides the
  same, and a replay at any speed keeps cooldowns in match time.
- **timestamp** = ``max(prev.last_timestamp + 1, snapshot time)`` on a tick whose display changed (or that has
  events), else the previous one: strictly increasing across pushes, deterministic for a given snapshot.
- **display_changed** is false when no perspective's content-state changed and there is no event: the actor
  then sends nothing.
- **Doubtful ticks** (``daemon.cricket.confirm``): a final status is believed when the fixture corroborates
  it, else once seen on ``confirm_polls`` consecutive ticks spanning ``confirm_s`` (by ``now``) with no new
  ball meanwhile; meanwhile
  the tick is processed as if the status were still the previous one (``end_pending``), so balls keep
  flowing and nothing ends. A final status that flips back is reported as ``end_withdrawn`` and has cost
  nothing. A score that goes back further than a correction can is skipped (``skipped`` names why; the
  state is the previous one, with the doubt counted) until it has persisted as long. A match whose state
  is final and that the feed shows live again (it was ended wrongly, then taken again) carries on, its
  ``match_end`` cooldown dropped so the real end is reported.
- **Never behind its own state**: the state keeps the content stamp (``daemon.cricket.order``) of the
  fixture that last changed it, and a fixture whose content is older than that is *behind* the state: it is
  skipped (``behind``), nothing is detected, pushed or written. Order is by content, never by arrival: the
  feed leader reads two SportMonks endpoints in turn and one can lag the other, a match actor is handed
  fixtures from two sources (the leader's polls in process, the fixture cache elsewhere) and a match passes
  from owner to owner, so the fixture that arrives last can be the older one. Taken as news, it looks like a
  correction that withdrew the newest wicket; the next fresh fixture shows it again and it would be
  reported a second time, to every device. ``fetched_at`` (when the leader fetched it) is kept as the
  state's position for the actor, not as the order.
- **Balls from nowhere** are held back (``confirm.hold_jumps``): a ball whose number cannot follow the
  last one standing is left out of the tick until the balls before it arrive or it has stood for the
  confirmation time.
- **Wickets exactly once**: reported wickets are kept in the state (bounded) keyed by innings and dismissed
  batter (``S1:914``; see ``detectors.detect_wickets`` for why not ball ids). A key is forgotten, with its
  cooldown, only when the snapshot shows the wicket corrected away (the batter not out and no wicket ball
  names him), so his real dismissal later is reported.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from daemon.cricket import confirm, registry
from daemon.cricket.detectors import (
    BallDiff,
    Context,
    KeyEvent,
    batters_met,
    detect_wickets,
    diff_balls,
    ended_innings,
    result_text,
    still_out,
)
from daemon.cricket.display import build_display
from daemon.cricket.events import EventType
from daemon.cricket.filters import (
    arm_cooldowns,
    cooldown_filter,
    ordered,
    pick_best_event,
    staleness_filter,
)
from daemon.cricket.order import Stamp, compare, stamp_of_snapshot
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import FINAL_PHASES, MatchSnapshot
from daemon.cricket.state import LAST_BALLS, BatterMemo, BowlerMemo, MatchState, RecentEvent, ScoreMemo

__all__ = ["KeyEvent", "TickResult", "process_tick", "pick_best_event"]


@dataclass(frozen=True)
class TickResult:
    state: MatchState
    events: tuple[KeyEvent, ...]
    best: KeyEvent | None
    display: Mapping[str, dict[str, Any]]
    display_changed: bool
    phase: str
    ended: bool
    timestamp: int
    end_pending: bool = False  # the feed shows a final status not yet confirmed; the match goes on
    end_withdrawn: bool = False  # a final status seen on earlier ticks is gone again
    skipped: str | None = None  # why this tick changed nothing (a doubtful regression being confirmed)
    behind: str | None = None  # why this tick was skipped as older than the state (see ``is_behind``)


def _legal_balls(snap: MatchSnapshot) -> int:
    return sum(i.legal_balls for i in snap.innings)


def _just_begun(snap: MatchSnapshot, settings: EngineSettings) -> bool:
    """A match in its first innings with at most ``first_look_news_balls`` legal balls bowled."""
    if snap.final or settings.first_look_news_balls <= 0 or not (snap.innings or snap.balls):
        return False
    if any(i.inning > 1 for i in snap.innings) or any(b.scoreboard not in ("S1", "") for b in snap.balls):
        return False
    return _legal_balls(snap) <= settings.first_look_news_balls


def is_behind(state_stamp: Stamp | None, stamp: Stamp) -> bool:
    """Whether a fixture stamped ``stamp`` is older content than the one the state was last changed by."""
    return state_stamp is not None and compare(state_stamp, stamp) < 0


def process_tick(
    prev: MatchState | None,
    snap: MatchSnapshot,
    *,
    now: float,
    marquee: bool,
    settings: EngineSettings,
    fetched_at: float | None = None,
) -> TickResult:
    """One tick: ``prev`` (None for a match nobody has persisted) and the snapshot give the events, the display
    and the next state. A fixture older by content than the state's is skipped (``behind``). ``fetched_at``
    is when the region's feed leader fetched the snapshot's fixture (None where unknown), kept as the state's
    position."""
    ball_doubt = None
    if prev is None and _just_begun(snap, settings):
        prev = MatchState()  # a pre-match baseline: what the first over showed is news
    if prev is not None:
        snap, ball_doubt = confirm.hold_jumps(prev, snap, now, settings)
        stamp = stamp_of_snapshot(snap)
        if is_behind(prev.stamp, stamp):
            return replace(
                _skipped(prev, snap, "behind", prev),
                skipped=None,
                behind=f"content {_describe(stamp)} is older than the state's ({_describe(prev.stamp)})",
            )
    result = _process(prev, snap, now=now, marquee=marquee, settings=settings)
    result = replace(result, state=replace(result.state, ball_doubt=ball_doubt))
    if result.skipped is not None:
        return result  # the previous state, position and all
    # The position moves only with a change of state, so a fixture that changes nothing costs no write.
    position = prev.fetched_at if prev is not None else None
    if fetched_at is not None and (prev is None or replace(result.state, fetched_at=position) != prev):
        position = fetched_at
    return replace(result, state=replace(result.state, fetched_at=position))


def _describe(stamp: Stamp | None) -> str:
    if stamp is None:
        return "none"
    return f"updated_at {stamp.updated_at}, ball {stamp.ball_id}, progress {stamp.progress}"


def _process(
    prev: MatchState | None, snap: MatchSnapshot, *, now: float, marquee: bool, settings: EngineSettings
) -> TickResult:
    base = prev if prev is not None else MatchState()
    score_doubt = None
    if prev is not None:
        why = confirm.regression(prev, snap, settings)
        if why is not None:
            score_doubt = confirm.seen(prev.score_doubt, now)
            if not confirm.confirmed(score_doubt, now, settings):
                return _skipped(prev, snap, why, replace(prev, score_doubt=score_doubt))
    end_doubt = None
    end_withdrawn = base.end_doubt is not None and not snap.final
    if snap.final and base.match_phase not in FINAL_PHASES and not confirm.corroborated_end(snap):
        end_doubt = confirm.seen(base.end_doubt, now, confirm.play_shown(snap))
        if not confirm.confirmed(end_doubt, now, settings):
            snap = _as_before(snap, base)
        else:
            end_doubt = None
    if base.match_phase in FINAL_PHASES and snap.phase in ("live", "innings_break"):
        # Ended on a feed glitch and taken again: the real end must not be muted by the wrong one's cooldown.
        base = replace(
            base, cooldowns={k: v for k, v in base.cooldowns.items() if not k.startswith("match_end:")}
        )
    result = _tick(prev, base, snap, now=now, marquee=marquee, settings=settings)
    state = replace(result.state, end_doubt=end_doubt, score_doubt=None)
    return replace(result, state=state, end_pending=end_doubt is not None, end_withdrawn=end_withdrawn)


def _as_before(snap: MatchSnapshot, base: MatchState) -> MatchSnapshot:
    """The snapshot with the status the match had before an unconfirmed final one."""
    phase = base.match_phase
    if phase in FINAL_PHASES or phase == "pre":
        phase = "live" if (snap.innings or snap.balls) else "pre"
    status = base.previous_status if base.previous_status and phase == base.match_phase else ""
    return replace(snap, status=status, phase=phase)


def _skipped(prev: MatchState, snap: MatchSnapshot, why: str, state: MatchState) -> TickResult:
    return TickResult(
        state=state,
        events=(),
        best=None,
        display={},
        display_changed=False,
        phase=prev.match_phase,
        ended=False,
        timestamp=prev.last_timestamp,
        skipped=why,
    )


def _tick(
    prev: MatchState | None,
    base: MatchState,
    snap: MatchSnapshot,
    *,
    now: float,
    marquee: bool,
    settings: EngineSettings,
) -> TickResult:
    first = prev is None
    clock = max(base.feed_clock, float(snap.updated_at) if snap.updated_at else float(now))

    diff = diff_balls(base, snap) if (snap.balls or base.last30_balls) else BallDiff((), (), (), ())
    ball_history = base.previous_ball_id is None and base.had_play
    detect_diff = BallDiff(diff.window, (), diff.corrected, diff.deleted) if ball_history else diff
    ctx = Context(
        prev=base,
        snap=snap,
        diff=detect_diff,
        settings=settings,
        marquee=marquee,
        priorities=registry.PRIORITY,
    )

    # The state remembers every wicket and batter these two detectors see, a first tick's too, reported or not.
    wickets = detect_wickets(ctx)
    new_batsmen, seen = batters_met(ctx)
    if ball_history:
        # Batters at the crease in the newly arrived ball history are not news either.
        seen = tuple(
            dict.fromkeys(seen + tuple(f"{b.scoreboard}:{c}" for b in diff.window for c in b.crease))
        )
    candidates: list[KeyEvent] = []
    if not first:
        candidates = registry.detect(
            ctx,
            ball_events=marquee and bool(snap.balls),
            known={EventType.WICKET: wickets, EventType.NEW_BATSMAN: new_batsmen},
        )

    fresh = staleness_filter(ordered(candidates), snap, diff.window, settings)
    events = tuple(cooldown_filter(fresh, base.cooldowns, clock))
    best = pick_best_event(events)

    # ---- the next state ---------------------------------------------------------------------------------
    reported = list(base.reported_wickets)
    for event in wickets:  # every detected wicket is now known, emitted or (a repeat) filtered
        if event.subject not in reported:
            reported.append(event.subject)
    withdrawn = [key for key in reported if not still_out(key, snap)]
    reported = [key for key in reported if key not in withdrawn][-settings.reported_wickets_max :]

    recent = base.recent_event
    if best is not None:
        recent = RecentEvent(type=best.type, text=best.text, at_balls=_legal_balls(snap))
    show = None
    if recent is not None and _legal_balls(snap) - recent.at_balls <= settings.recent_event_balls:
        show = recent
    result = result_text(snap) if snap.final else None
    display = build_display(
        snap,
        event=show.text if show else None,
        event_type=show.type if show else None,
        result=result,
        alert_event=bool(show and show.type in settings.alert_worthy),
    )
    display_hash = hashlib.sha256(json.dumps(display, sort_keys=True).encode()).hexdigest()[:20]
    display_changed = display_hash != base.display_hash or bool(events)
    timestamp = base.last_timestamp
    if display_changed or first:
        timestamp = max(base.last_timestamp + 1, int(snap.updated_at or now))

    ball_ids = [b.id for b in snap.balls]
    previous_ball_id = max([*ball_ids, base.previous_ball_id or 0]) if ball_ids else base.previous_ball_id
    state = MatchState(
        match_phase=snap.phase,
        previous_status=snap.status,
        previous_ball_id=previous_ball_id,
        previous_score=_merge_scores(base, snap),
        previous_batting=_merge_batting(base, snap),
        previous_bowling=_merge_bowling(base, snap),
        last30_balls=diff.window[-LAST_BALLS:],
        # A withdrawn wicket's cooldown goes with it, so the batter's real dismissal later is not muted.
        cooldowns={
            k: v
            for k, v in arm_cooldowns(base.cooldowns, events, clock, settings).items()
            if k.removeprefix("wicket:") not in withdrawn
        },
        last_timestamp=timestamp,
        feed_clock=clock,
        reported_wickets=tuple(reported),
        ended_innings=tuple(dict.fromkeys(base.ended_innings + ended_innings(snap, diff.window))),
        seen_batters=seen,
        display_hash=display_hash,
        recent_event=recent,
        stamp=stamp_of_snapshot(snap),
    )
    return TickResult(
        state=state,
        events=events,
        best=best,
        display=display,
        display_changed=display_changed,
        phase=snap.phase,
        ended=snap.phase in FINAL_PHASES and base.match_phase not in FINAL_PHASES,
        timestamp=timestamp,
    )


def _merge_scores(base: MatchState, snap: MatchSnapshot) -> tuple[ScoreMemo, ...]:
    # A row missing from this snapshot keeps its last known value, so a partial response does not make the
    # next tick see old milestones and wickets as new.
    rows = {s.inning: s for s in base.previous_score}
    for i in snap.innings:
        rows[i.inning] = ScoreMemo(i.inning, i.team_id, i.runs, i.wickets, i.legal_balls)
    return tuple(rows[k] for k in sorted(rows))


def _merge_batting(base: MatchState, snap: MatchSnapshot) -> tuple[BatterMemo, ...]:
    rows = {(b.scoreboard, b.player_id): b for b in base.previous_batting}
    for b in snap.batting:
        rows[(b.scoreboard, b.player_id)] = BatterMemo(b.scoreboard, b.player_id, b.runs, b.balls, b.out)
    return tuple(rows[k] for k in sorted(rows))


def _merge_bowling(base: MatchState, snap: MatchSnapshot) -> tuple[BowlerMemo, ...]:
    rows = {(b.scoreboard, b.player_id): b for b in base.previous_bowling}
    for b in snap.bowling:
        rows[(b.scoreboard, b.player_id)] = BowlerMemo(
            b.scoreboard, b.player_id, b.legal_balls, b.runs, b.wickets, b.maidens
        )
    return tuple(rows[k] for k in sorted(rows))
