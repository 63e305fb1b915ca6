"""Key-event detectors: what happened between the previous tick and this snapshot.

Owns ``KeyEvent``, the diff of the ball feed (``diff_balls``) and one detector per event type, in two tiers
(each type's row in ``daemon.cricket.registry`` names its detector and tier). Pure: it reads a ``MatchState``
and a ``MatchSnapshot`` and returns candidate events; it must not filter them (cooldowns are ``filters.py``,
staleness ``staleness.py``), choose among them, or touch I/O.

Definitions (one line each; the tests pin them):

Tier0, score-based (batting/bowling/runs tables; every match, with or without balls):
- ``match_end``: the match reached a final state (Finished, Aban., Cancl., Postp.) this tick.
- ``innings_end``: an innings closed (a later innings appeared, status Innings Break, all out, overs used,
  or target reached). Not for the innings that ends the match: ``match_end`` says that.
- ``hundred`` / ``fifty``: a batter's score crossed 100 / 50. ``batsman_on_90s``: crossed 90 (below 100).
- ``batsman_on_fire``: a not-out batter has reached at least ``batter_on_fire_min_runs`` at a strike rate of
  at least ``batter_on_fire_min_strike_rate`` (fires on entering that state).
- ``bowler_on_fire``: a bowler reached ``bowler_on_fire_wickets`` wickets in the innings, and each wicket
  after (subject carries the count: a 3-fer and a 5-fer are different events).
- ``wicket``: the innings' n-th wicket fell. Keyed ``S1#3`` (scoreboard and wicket number), which survives a
  ball re-posted under a new id, a wrong ``batsmanout_id``, the batting table lagging the balls, and a match
  switching between ball and score feeds; the dismissed batter comes from the ball when there are balls,
  else from the batting table's newly-out rows (ordered by fall of wicket).
- ``new_batsman``: a batter not seen before in this innings comes to the crease after the innings' first
  wicket (openers are not "new").

Tier1, ball-based (marquee matches, balls bowled since the previous tick, history from ``last30Balls`` and
the feed's ball list):
- ``six`` / ``four``: a boundary off the bat (``4 Byes`` is not a four).
- ``consecutive_sixes``: one batter hit sixes off at least ``consecutive_sixes_min`` consecutive balls he
  faced (wides are not faced and do not break the run); the subject carries the count.
- ``maiden``: an over of six legal balls by one bowler with no runs charged to him (byes and leg byes do not
  count against a maiden; wides and no-balls do).
- ``hattrick``: a bowler's wickets off three consecutive deliveries of his in the innings (across overs and
  other bowlers' overs; wides and no-balls between do not count as deliveries; a run out does not count and
  breaks the sequence). ``on_hattrick``: the first two of those.

First tick (no previous state): the engine records the match as it stands and reports nothing, so a match
picked up mid-innings does not replay its history (see ``engine.process_tick``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from daemon.cricket.events import EventType
from daemon.cricket.snapshot import Ball, BatterLine, MatchSnapshot
from daemon.cricket.state import MatchState

if TYPE_CHECKING:
    from daemon.cricket.settings import EngineSettings

_NO_BALL_SEQ = 1 << 62  # events not tied to a ball sort after every ball of the tick


@dataclass(frozen=True)
class KeyEvent:
    type: str
    subject: str
    key: str
    ball_id: str | None
    over: str | None
    priority: int
    alert_worthy: bool
    title: str
    body: str
    text: str
    team_id: str | None
    # engine-internal, used by the filters and for ordering
    scoreboard: str | None = None
    player_id: str | None = None
    seq: int = _NO_BALL_SEQ

    def collapse_id(self, match_id: str) -> str:
        """``apns-collapse-id`` for an alert about this event: deterministic and at most 64 bytes."""
        plain = f"{match_id}:{self.key}"
        if len(plain.encode()) <= 64:
            return plain
        return "ss:" + hashlib.sha256(plain.encode()).hexdigest()[:48]

    def short(self) -> dict[str, str | None]:
        # subject: who or what the event is about ("S1:914" for a wicket): what a repeat is recognised by
        return {"type": self.type, "text": self.text, "ballId": self.ball_id, "subject": self.subject}


@dataclass(frozen=True)
class BallDiff:
    """The ball feed's change since the previous tick."""

    window: tuple[Ball, ...]  # known balls, oldest first: last30Balls merged with the feed's list
    new: tuple[Ball, ...]  # bowled since the previous tick (id above previousBallId), oldest first
    corrected: tuple[int, ...]  # seen before, now different: no event, except ...
    deleted: tuple[int, ...]  # seen before, now gone from the complete list: never an event
    became_wicket: tuple[Ball, ...] = ()  # ... a seen ball corrected into a wicket (a catch given late)


def diff_balls(prev: MatchState, snap: MatchSnapshot) -> BallDiff:
    known = {b.id: b for b in prev.last30_balls}
    corrected = tuple(sorted(i for i, b in known.items() if _changed(b, snap, i)))
    deleted: tuple[int, ...] = ()
    if snap.balls:
        current = {b.id for b in snap.balls}
        first = snap.balls[0].id
        deleted = tuple(sorted(i for i in known if i >= first and i not in current))
    merged = {i: b for i, b in known.items() if i not in deleted}
    merged.update({b.id: b for b in snap.balls})
    window = tuple(merged[i] for i in sorted(merged))
    last = prev.previous_ball_id
    new = tuple(b for b in window if last is None or b.id > last)
    became = tuple(
        b
        for b in snap.balls
        if b.id in known and b.is_wicket and not known[b.id].is_wicket and (last is None or b.id <= last)
    )
    return BallDiff(window=window, new=new, corrected=corrected, deleted=deleted, became_wicket=became)


def _changed(old: Ball, snap: MatchSnapshot, ball_id: int) -> bool:
    for b in snap.balls:
        if b.id == ball_id:
            return (b.score_id, b.batsman_id, b.bowler_id, b.over) != (
                old.score_id,
                old.batsman_id,
                old.bowler_id,
                old.over,
            )
    return False


# ---- context shared by the detectors ----------------------------------------------------------------------
@dataclass(frozen=True)
class Context:
    prev: MatchState
    snap: MatchSnapshot
    diff: BallDiff
    settings: EngineSettings
    marquee: bool
    priorities: Mapping[str, int]  # each type's priority (``daemon.cricket.registry``)

    def event(
        self,
        type_: EventType,
        subject: str,
        *,
        title: str,
        body: str,
        text: str,
        team_id: str | None,
        ball: Ball | None = None,
        over: str | None = None,
        scoreboard: str | None = None,
        player_id: str | None = None,
    ) -> KeyEvent:
        priority = self.priorities[type_]
        return KeyEvent(
            type=type_.value,
            subject=subject,
            key=f"{type_.value}:{subject}",
            ball_id=str(ball.id) if ball else None,
            over=ball.over if ball else over,
            priority=priority,
            alert_worthy=type_.value in self.settings.alert_worthy,
            title=title,
            body=body,
            text=text,
            team_id=team_id,
            scoreboard=scoreboard or (ball.scoreboard if ball else None),
            player_id=player_id,
            seq=ball.id if ball else _NO_BALL_SEQ + priority,
        )

    def name(self, player_id: str | None) -> str:
        return self.snap.name(player_id)

    def code(self, team_id: str | None) -> str:
        team = self.snap.team(team_id)
        return team.code if team else "?"

    def score_line(self, scoreboard: str) -> str:
        inns = self.snap.innings_for(scoreboard)
        if inns is None:
            return ""
        return f"{self.code(inns.team_id)} {inns.score} ({inns.overs})"

    def batting_team_of(self, scoreboard: str) -> str | None:
        inns = self.snap.innings_for(scoreboard)
        if inns is not None:
            return inns.team_id
        for b in self.diff.window:
            if b.scoreboard == scoreboard:
                return b.team_id
        return None

    def wicket_offset(self, scoreboard: str) -> int:
        """Wickets of the innings that fell before the first ball we know of (a partial ball list)."""
        inns = self.snap.innings_for(scoreboard)
        counted = sum(1 for b in self.snap.balls if b.scoreboard == scoreboard and b.is_wicket)
        return max(0, (inns.wickets if inns else 0) - counted)

    def wicket_number(self, ball: Ball) -> int:
        before = sum(
            1 for b in self.snap.balls if b.scoreboard == ball.scoreboard and b.is_wicket and b.id <= ball.id
        )
        if not any(b.id == ball.id for b in self.snap.balls):  # from the window only
            before = sum(
                1
                for b in self.diff.window
                if b.scoreboard == ball.scoreboard and b.is_wicket and b.id <= ball.id
            )
        return before + self.wicket_offset(ball.scoreboard)

    def batter_at(self, ball: Ball, player_id: str) -> tuple[int, int]:
        """A batter's runs and balls faced just after ``ball``: the table's figures minus the balls after it."""
        line = self.snap.batter(ball.scoreboard, player_id)
        later = [
            b
            for b in self.diff.window
            if b.scoreboard == ball.scoreboard and b.id > ball.id and b.batsman_id == player_id
        ]
        if line is not None:
            return (line.runs - sum(b.bat_runs for b in later), line.balls - sum(1 for b in later if b.faced))
        upto = [
            b
            for b in self.diff.window
            if b.scoreboard == ball.scoreboard and b.id <= ball.id and b.batsman_id == player_id
        ]
        return (sum(b.bat_runs for b in upto), sum(1 for b in upto if b.faced))


# ---- Tier0 ------------------------------------------------------------------------------------------------
def ended_innings(snap: MatchSnapshot, window: Sequence[Ball] = ()) -> tuple[str, ...]:
    """Scoreboards of innings that are over in this snapshot."""
    if not snap.innings:
        return ()
    ended = [i.scoreboard for i in snap.innings[:-1]]
    last = snap.innings[-1]
    newest_board = max((b.scoreboard for b in window), default=last.scoreboard, key=_board_key)
    per_innings = snap.balls_per_innings
    target = snap.target
    # Any of the three signals may come first (spec §7): the status, a ball on a new scoreboard, a new row.
    status_inning = (
        int(snap.status[0]) if snap.status[:1].isdigit() and snap.status.endswith("Innings") else 0
    )
    if (
        snap.phase in ("innings_break", "completed", "abandoned")
        or status_inning > last.inning
        or _board_key(newest_board) > _board_key(last.scoreboard)
        or last.wickets >= 10
        or (per_innings is not None and last.legal_balls >= per_innings)
        or (target is not None and last.runs >= target)
    ):
        ended.append(last.scoreboard)
    return tuple(ended)


def _board_key(board: str) -> int:
    digits = "".join(ch for ch in board if ch.isdigit())
    return int(digits) if digits else 0


def result_text(snap: MatchSnapshot) -> str:
    """The result line, from the feed's note when it states one, else from the scores."""
    note = snap.note.strip()
    lowered = note.lower()
    if snap.phase == "abandoned":
        return note if note and "target" not in lowered else "Match abandoned"
    if any(word in lowered for word in ("won", "tied", "tie", "draw", "no result", "abandon")):
        return note
    winner = snap.team(snap.winner_team_id)
    if winner is None:
        if snap.draw_noresult:
            return snap.draw_noresult if snap.draw_noresult.lower() != "draw" else "Match drawn"
        runs = {
            t: sum(i.runs for i in snap.innings if i.team_id == t)
            for t in (snap.localteam.id, snap.visitorteam.id)
        }
        if snap.innings and len(set(runs.values())) == 1 and snap.is_last_innings:
            return "Match tied"
        return "No result"
    last = snap.current_innings
    if last is not None and last.team_id == winner.id:
        wickets = 10 - last.wickets
        return f"{winner.name} won by {wickets} wicket{'s' if wickets != 1 else ''}"
    own = sum(i.runs for i in snap.innings if i.team_id == winner.id)
    other = sum(i.runs for i in snap.innings if i.team_id != winner.id)
    margin = max(0, own - other)
    return f"{winner.name} won by {margin} run{'s' if margin != 1 else ''}"


def detect_match_end(ctx: Context) -> list[KeyEvent]:
    snap = ctx.snap
    if not snap.final or ctx.prev.match_phase in ("completed", "abandoned"):
        return []
    result = result_text(snap)
    scores = " · ".join(f"{ctx.code(i.team_id)} {i.score} ({i.overs})" for i in snap.innings)
    title = "Match abandoned" if snap.phase == "abandoned" else result
    return [
        ctx.event(
            EventType.MATCH_END,
            snap.fixture_id,
            title=title,
            body=scores or result,
            text=result,
            team_id=snap.winner_team_id,
        )
    ]


def detect_innings_end(ctx: Context) -> list[KeyEvent]:
    snap = ctx.snap
    if snap.final:
        return []  # match_end says it
    events = []
    for board in ended_innings(snap, ctx.diff.window):
        if board in ctx.prev.ended_innings:
            continue
        inns = snap.innings_for(board)
        if inns is None:
            continue
        if inns.inning >= (2 if snap.limited_overs else 4):
            continue  # the last possible innings ends the match: match_end reports it
        line = f"{ctx.code(inns.team_id)} {inns.score} ({inns.overs} ov)"
        chasing = snap.other_team(inns.team_id)
        body = line
        if snap.limited_overs and inns.inning == 1 and chasing is not None:
            body = f"{line}. {chasing.code} need {inns.runs + 1} to win"
        events.append(
            ctx.event(
                EventType.INNINGS_END,
                board,
                title=f"End of innings: {line}",
                body=body,
                text=f"Innings: {line}",
                team_id=inns.team_id,
                scoreboard=board,
                over=inns.overs,
            )
        )
    return events


def _milestone_ball(ctx: Context, line: BatterLine, threshold: int) -> Ball | None:
    for ball in ctx.diff.new:
        if ball.scoreboard != line.scoreboard or ball.batsman_id != line.player_id or not ball.bat_runs:
            continue
        runs_after, _ = ctx.batter_at(ball, line.player_id)
        if runs_after >= threshold > runs_after - ball.bat_runs:
            return ball
    return None


def _milestone(ctx: Context, type_: EventType, threshold: int) -> list[KeyEvent]:
    """Batters whose score crossed ``threshold`` this tick, each on the ball that took him there when the
    balls show it."""
    events: list[KeyEvent] = []
    for line in ctx.snap.batting:
        memo = ctx.prev.batter(line.scoreboard, line.player_id)
        before = memo.runs if memo else 0
        if not before < threshold <= line.runs:
            continue
        name = ctx.name(line.player_id)
        title, label = {
            EventType.HUNDRED: (f"Hundred for {name}!", "100 for"),
            EventType.BATSMAN_ON_90S: (f"{name} into the 90s", "90s for"),
            EventType.FIFTY: (f"Fifty for {name}", "50 for"),
        }[type_]
        ball = _milestone_ball(ctx, line, threshold)
        at = f"{line.runs} ({line.balls})"
        if ball is not None:  # the figures on the ball that reached it, not after a burst
            runs, faced = ctx.batter_at(ball, line.player_id)
            at = f"{runs} ({faced})"
        events.append(
            ctx.event(
                type_,
                f"{line.scoreboard}:{line.player_id}",
                title=title,
                body=f"{name} {at} · {ctx.score_line(line.scoreboard)}",
                text=f"{label} {name}: {at}",
                team_id=line.team_id or ctx.batting_team_of(line.scoreboard),
                ball=ball,
                scoreboard=line.scoreboard,
                player_id=line.player_id,
                over=_overs_of(ctx, line.scoreboard),
            )
        )
    return events


def detect_hundreds(ctx: Context) -> list[KeyEvent]:
    return _milestone(ctx, EventType.HUNDRED, 100)


def detect_nineties(ctx: Context) -> list[KeyEvent]:
    return _milestone(ctx, EventType.BATSMAN_ON_90S, 90)


def detect_fifties(ctx: Context) -> list[KeyEvent]:
    return _milestone(ctx, EventType.FIFTY, 50)


def detect_batters_on_fire(ctx: Context) -> list[KeyEvent]:
    """Not-out batters who entered ``batsman_on_fire`` this tick (runs and strike rate at least the settings')."""
    s = ctx.settings

    def on_fire(runs: int, balls: int, out: bool) -> bool:
        return (
            not out
            and runs >= s.batter_on_fire_min_runs
            and balls > 0
            and runs * 100 >= s.batter_on_fire_min_strike_rate * balls
        )

    events: list[KeyEvent] = []
    for line in ctx.snap.batting:
        memo = ctx.prev.batter(line.scoreboard, line.player_id)
        if not on_fire(line.runs, line.balls, line.out) or (
            memo and on_fire(memo.runs, memo.balls, memo.out)
        ):
            continue
        name = ctx.name(line.player_id)
        figures = f"{line.runs} ({line.balls})"
        events.append(
            ctx.event(
                EventType.BATSMAN_ON_FIRE,
                f"{line.scoreboard}:{line.player_id}",
                title=f"{name} is on fire",
                body=f"{name} {figures} · {ctx.score_line(line.scoreboard)}",
                text=f"{name} on fire: {figures}",
                team_id=line.team_id,
                scoreboard=line.scoreboard,
                player_id=line.player_id,
                over=_overs_of(ctx, line.scoreboard),
            )
        )
    return events


def _overs_of(ctx: Context, scoreboard: str) -> str | None:
    inns = ctx.snap.innings_for(scoreboard)
    return inns.overs if inns else None


def detect_bowler_on_fire(ctx: Context) -> list[KeyEvent]:
    events = []
    threshold = ctx.settings.bowler_on_fire_wickets
    for line in ctx.snap.bowling:
        memo = ctx.prev.bowler(line.scoreboard, line.player_id)
        before = memo.wickets if memo else 0
        name = ctx.name(line.player_id)
        for count in range(max(before + 1, threshold), line.wickets + 1):
            ball = next(
                (
                    b
                    for b in reversed(ctx.diff.new)
                    if b.bowler_id == line.player_id and b.scoreboard == line.scoreboard and b.bowler_wicket
                ),
                None,
            )
            events.append(
                ctx.event(
                    EventType.BOWLER_ON_FIRE,
                    f"{line.scoreboard}:{line.player_id}:{count}",
                    title=f"{name} has {count} wickets",
                    body=f"{name} {line.figures} · {ctx.score_line(line.scoreboard)}",
                    text=f"{name} on fire: {line.figures}",
                    team_id=line.team_id or None,
                    ball=ball,
                    scoreboard=line.scoreboard,
                    player_id=line.player_id,
                    over=_overs_of(ctx, line.scoreboard),
                )
            )
    return events


def _dismissal(
    ctx: Context, out_id: str | None, score_name: str, bowler_id: str | None, fielder_id: str | None
) -> str:
    name = score_name.lower()
    bowler = ctx.name(bowler_id) if bowler_id else None
    fielder = ctx.name(fielder_id) if fielder_id else None
    if "run out" in name:
        return f"run out ({fielder})" if fielder else "run out"
    if "catch" in name or "caught" in name:
        if fielder and fielder_id == bowler_id:
            return f"c & b {bowler}"
        return f"c {fielder} b {bowler}" if fielder else f"c ? b {bowler}"
    if "bowled" in name:
        return f"b {bowler}"
    if "lbw" in name:
        return f"lbw b {bowler}"
    if "stump" in name:
        return f"st {fielder} b {bowler}" if fielder else f"st b {bowler}"
    return score_name or "out"


def _wicket_event(
    ctx: Context,
    board: str,
    number: int,
    *,
    out_id: str | None,
    how: str,
    figures: str | None,
    ball: Ball | None,
) -> KeyEvent:
    team = ctx.batting_team_of(board)
    code = ctx.code(team)
    inns = ctx.snap.innings_for(board)
    runs = inns.runs if inns else 0
    if ball is not None:  # the score when this ball fell, not the latest
        runs -= sum(b.team_runs for b in ctx.diff.window if b.scoreboard == board and b.id > ball.id)
    score = f"{code} {runs}/{number}"
    who = ctx.name(out_id) if out_id else "Wicket"
    fig = f" {figures}" if figures else ""
    if out_id:
        body = f"{who} {how}{fig}"
        text = f"WICKET! {who}{fig}"
        subject = f"{board}:{out_id}"
    else:
        body = f"Wicket number {number} · {ctx.score_line(board)}"
        text = f"WICKET! {score}"
        subject = f"{board}#{number}"
    return ctx.event(
        EventType.WICKET,
        subject,
        title=f"WICKET! {score}",
        body=body,
        text=text,
        team_id=team,
        ball=ball,
        scoreboard=board,
        player_id=out_id,
        over=_overs_of(ctx, board),
    )


def detect_wickets(ctx: Context) -> list[KeyEvent]:
    """Wickets not reported before. A wicket is identified by the dismissed batter and the innings
    ("S1:914"): a batter is out at most once per innings, so the key survives a ball re-posted under a new
    id, a late-given catch on an old ball, a lagging batting table and a switch between ball and score
    feeds. Only when nothing in the snapshot names the batter (a score feed without a batting table) is a
    wicket keyed by its number ("S1#3")."""
    events: dict[str, KeyEvent] = {}
    reported = set(ctx.prev.reported_wickets)
    # Ball feed first: it names the ball, the bowler and the fielder. A ball corrected into a wicket (a
    # catch given late) counts like a new one.
    for ball in sorted(ctx.diff.new + ctx.diff.became_wicket, key=lambda b: b.id):
        if not ball.is_wicket or not ball.out_id:
            continue
        subject = f"{ball.scoreboard}:{ball.out_id}"
        if subject in reported or f"wicket:{subject}" in events:
            continue
        line = ctx.snap.batter(ball.scoreboard, ball.out_id)
        if line is not None and line.out:
            figures = f"{line.runs} ({line.balls})"
        else:
            runs, faced = ctx.batter_at(ball, ball.out_id)
            figures = f"{runs} ({faced})"
        how = _dismissal(ctx, ball.out_id, ball.score_name, ball.bowler_id, ball.fielder_id)
        events[f"wicket:{subject}"] = _wicket_event(
            ctx,
            ball.scoreboard,
            ctx.wicket_number(ball),
            out_id=ball.out_id,
            how=how,
            figures=figures,
            ball=ball,
        )
    # Score feed: batters the batting table shows out that the balls did not (non-marquee, lagging balls).
    for inns in ctx.snap.innings:
        board = inns.scoreboard
        memo = ctx.prev.score_for(board)
        before = memo.wickets if memo else 0
        newly_out = [
            line
            for line in ctx.snap.batting
            if line.scoreboard == board
            and line.out
            and f"{board}:{line.player_id}" not in reported
            and f"wicket:{board}:{line.player_id}" not in events
        ]
        newly_out.sort(key=lambda line: (_over_key(line.fow_over), line.fow_score, line.sort))
        counted = sum(1 for line in ctx.snap.batting if line.scoreboard == board and line.out)
        for line in newly_out:
            number = counted - len(newly_out) + newly_out.index(line) + 1
            how = _dismissal(ctx, line.player_id, _score_name(line), line.bowler_id, line.fielder_id)
            ev = _wicket_event(
                ctx,
                board,
                max(number, 1),
                out_id=line.player_id,
                how=how,
                figures=f"{line.runs} ({line.balls})",
                ball=None,
            )
            events[ev.key] = ev
        has_table = any(line.scoreboard == board for line in ctx.snap.batting)
        if not has_table and not ctx.snap.balls_in(board):
            for number in range(before + 1, inns.wickets + 1):
                if f"{board}#{number}" not in reported:
                    ev = _wicket_event(ctx, board, number, out_id=None, how="", figures=None, ball=None)
                    events[ev.key] = ev
    return list(events.values())


def still_out(subject: str, snap: MatchSnapshot) -> bool:
    """Whether a reported wicket still stands in this snapshot (False once corrected away)."""
    if "#" in subject:
        board, _, number = subject.partition("#")
        if snap.innings_for(board) is None:
            return True
        return number.isdigit() and int(number) <= wicket_count(snap, board)
    board, _, pid = subject.partition(":")
    if any(b.scoreboard == board and b.is_wicket and b.out_id == pid for b in snap.balls):
        return True
    line = snap.batter(board, pid)
    if line is not None:
        return line.out
    # No row and no wicket ball: with a ball list for the innings the wicket is gone, else we cannot tell.
    return not snap.balls_in(board)


def _was_out(prev: MatchState, line: BatterLine) -> bool:
    memo = prev.batter(line.scoreboard, line.player_id)
    return bool(memo and memo.out)


def _over_key(over: str | None) -> tuple[int, int]:
    if not over:
        return (10_000, 0)
    whole, _, part = over.partition(".")
    return (int(whole), int(part or 0))


_DISMISSAL_NAMES = {54: "Catch Out", 79: "Clean Bowled"}


def _score_name(line: BatterLine) -> str:
    return _DISMISSAL_NAMES.get(line.dismissal_score_id or 0, "out")


def wicket_count(snap: MatchSnapshot, board: str) -> int:
    """Wickets of an innings as far as anything in the snapshot shows (table or balls)."""
    inns = snap.innings_for(board)
    from_balls = sum(1 for b in snap.balls if b.scoreboard == board and b.is_wicket)
    return max(inns.wickets if inns else 0, from_balls)


def detect_new_batsmen(ctx: Context) -> list[KeyEvent]:
    """Batters not seen before in their innings who came to the crease after its first wicket."""
    return batters_met(ctx)[0]


def batters_met(ctx: Context) -> tuple[list[KeyEvent], tuple[str, ...]]:
    """New batters, and the updated set of batters seen at the crease ("S1:pid"), which the state keeps on
    every tick (a first one too)."""
    seen = list(ctx.prev.seen_batters)
    known = set(seen)
    events: list[KeyEvent] = []

    def meet(board: str, pid: str, wickets_before: int, ball: Ball | None) -> None:
        key = f"{board}:{pid}"
        if key in known:
            return
        known.add(key)
        seen.append(key)
        if wickets_before < 1:
            return  # an opener
        team = ctx.batting_team_of(board)
        name = ctx.name(pid)
        events.append(
            ctx.event(
                EventType.NEW_BATSMAN,
                key,
                title=f"New batter: {name}",
                body=f"{name} comes in · {ctx.score_line(board)}",
                text=f"New batter: {name}",
                team_id=team,
                ball=ball,
                scoreboard=board,
                player_id=pid,
                over=_overs_of(ctx, board),
            )
        )

    for ball in ctx.diff.new:
        before = ctx.wicket_number(ball) - (1 if ball.is_wicket else 0)
        for pid in ball.crease or (ball.batsman_id,):
            meet(ball.scoreboard, pid, before, ball)
    for line in ctx.snap.batting:
        if f"{line.scoreboard}:{line.player_id}" in known:
            continue
        if line.out:
            known.add(f"{line.scoreboard}:{line.player_id}")
            seen.append(f"{line.scoreboard}:{line.player_id}")
            continue  # came and went between two ticks: the wicket says it
        inns = ctx.snap.innings_for(line.scoreboard)
        wickets = inns.wickets if inns else 0
        meet(line.scoreboard, line.player_id, max(wickets, 1 if line.sort >= 3 else 0), None)
    return events, tuple(seen)


# ---- Tier1: one detector per ball event --------------------------------------------------------------------
def _new_balls(ctx: Context) -> Iterator[tuple[Ball, Sequence[Ball]]]:
    """Each new ball of the tick with the ball history up to and including it (the window, oldest first)."""
    window = ctx.diff.window
    index = {b.id: i for i, b in enumerate(window)}
    for ball in ctx.diff.new:
        yield ball, window[: index[ball.id] + 1]


def _trailing(balls: Sequence[Ball], streak: Callable[[Ball], bool]) -> int:
    """How many of the last balls in a row satisfy ``streak``."""
    run = 0
    for b in reversed(balls):
        if not streak(b):
            break
        run += 1
    return run


def _batting_team(ctx: Context, ball: Ball) -> str | None:
    return ball.team_id or ctx.batting_team_of(ball.scoreboard)


def _fielding_team(ctx: Context, ball: Ball) -> str | None:
    fielding = ctx.snap.other_team(_batting_team(ctx, ball))
    return fielding.id if fielding else None


def _figures(ctx: Context, ball: Ball) -> str:
    line = ctx.snap.bowler(ball.scoreboard, ball.bowler_id)
    return f" {line.figures}" if line else ""


def _boundaries(ctx: Context, type_: EventType) -> list[KeyEvent]:
    """A four or a six (``type_``) off a new ball."""
    events = []
    six = type_ is EventType.SIX
    word = "SIX" if six else "FOUR"
    for ball, _ in _new_balls(ctx):
        if not (ball.six if six else (ball.four and not ball.six)):
            continue
        board, batter, bowler = ball.scoreboard, ctx.name(ball.batsman_id), ctx.name(ball.bowler_id)
        events.append(
            ctx.event(
                type_,
                f"{board}:{ball.batsman_id}",
                title=f"{word}! {batter}",
                body=f"{batter} off {bowler} · {ctx.score_line(board)}",
                text=f"{word}! {batter}",
                team_id=_batting_team(ctx, ball),
                ball=ball,
                player_id=ball.batsman_id,
            )
        )
    return events


def detect_sixes(ctx: Context) -> list[KeyEvent]:
    return _boundaries(ctx, EventType.SIX)


def detect_fours(ctx: Context) -> list[KeyEvent]:
    return _boundaries(ctx, EventType.FOUR)


def detect_consecutive_sixes(ctx: Context) -> list[KeyEvent]:
    """A six that makes at least ``consecutive_sixes_min`` sixes in a row off the balls one batter faced."""
    events = []
    for ball, history in _new_balls(ctx):
        if not ball.six:
            continue
        board = ball.scoreboard
        faced = [b for b in history if b.scoreboard == board and b.batsman_id == ball.batsman_id and b.faced]
        run = _trailing(faced, lambda b: b.six)
        if run < ctx.settings.consecutive_sixes_min:
            continue
        batter, bowler = ctx.name(ball.batsman_id), ctx.name(ball.bowler_id)
        events.append(
            ctx.event(
                EventType.CONSECUTIVE_SIXES,
                f"{board}:{ball.batsman_id}:{run}",
                title=f"{run} sixes in a row for {batter}!",
                body=f"{batter} off {bowler} · {ctx.score_line(board)}",
                text=f"{run} sixes in a row: {batter}",
                team_id=_batting_team(ctx, ball),
                ball=ball,
                player_id=ball.batsman_id,
            )
        )
    return events


def detect_maidens(ctx: Context) -> list[KeyEvent]:
    """An over's sixth legal ball ending six legal balls from one bowler that conceded no run."""
    events = []
    for ball, history in _new_balls(ctx):
        if not (ball.legal and ball.ball_in_over == 6):
            continue
        board = ball.scoreboard
        over = [b for b in history if b.scoreboard == board and b.over_index == ball.over_index]
        if (
            sum(1 for b in over if b.legal) != 6
            or {b.bowler_id for b in over} != {ball.bowler_id}
            or sum(b.runs for b in over) != 0
        ):
            continue
        bowler, figures = ctx.name(ball.bowler_id), _figures(ctx, ball)
        events.append(
            ctx.event(
                EventType.MAIDEN,
                f"{board}:{ball.bowler_id}:{ball.over_index + 1}",
                title=f"Maiden over from {bowler}",
                body=f"{bowler}{figures}",
                text=f"Maiden: {bowler}{figures}",
                team_id=_fielding_team(ctx, ball),
                ball=ball,
                player_id=ball.bowler_id,
            )
        )
    return events


def _wicket_streaks(ctx: Context) -> Iterator[tuple[Ball, int]]:
    """Each new ball that took a wicket for its bowler, with how many of his deliveries in a row, up to it,
    did (wides and no-balls between are not deliveries unless they took one)."""
    for ball, history in _new_balls(ctx):
        if not ball.bowler_wicket:
            continue
        deliveries = [
            b
            for b in history
            if b.scoreboard == ball.scoreboard and b.bowler_id == ball.bowler_id and (b.legal or b.is_wicket)
        ]
        yield ball, _trailing(deliveries, lambda b: b.bowler_wicket)


def _bowler_event(ctx: Context, type_: EventType, ball: Ball, title: str, body: str, text: str) -> KeyEvent:
    return ctx.event(
        type_,
        f"{ball.scoreboard}:{ball.bowler_id}",
        title=title,
        body=body,
        text=text,
        team_id=_fielding_team(ctx, ball),
        ball=ball,
        player_id=ball.bowler_id,
    )


def detect_hattricks(ctx: Context) -> list[KeyEvent]:
    """A bowler's wickets off three consecutive deliveries of his (and every third after): a ``hattrick``."""
    events = []
    for ball, streak in _wicket_streaks(ctx):
        if streak >= 3 and streak % 3 == 0:
            bowler, figures = ctx.name(ball.bowler_id), _figures(ctx, ball)
            body = f"{bowler}: three wickets in three balls{figures}"
            events.append(
                _bowler_event(
                    ctx, EventType.HATTRICK, ball, f"HAT-TRICK! {bowler}", body, f"HAT-TRICK! {bowler}"
                )
            )
    return events


def detect_on_hattricks(ctx: Context) -> list[KeyEvent]:
    """Two wickets in two deliveries of a bowler's: ``on_hattrick``."""
    events = []
    for ball, streak in _wicket_streaks(ctx):
        if streak == 2:
            bowler, figures = ctx.name(ball.bowler_id), _figures(ctx, ball)
            title, body = f"{bowler} is on a hat-trick", f"Two in two for {bowler}{figures}"
            events.append(
                _bowler_event(ctx, EventType.ON_HATTRICK, ball, title, body, f"{bowler} on a hat-trick")
            )
    return events
