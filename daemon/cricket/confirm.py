"""Doubtful ticks: when the engine believes a final status, and a score that went back.

Owns two pure decisions the engine makes before it lets a tick change anything:

- **End confirmation.** SportMonks now and then shows ``Finished`` or ``Aban.`` for a few seconds, or for
  longer, while the match goes on. A final status is believed at once only when the fixture corroborates it
  (``corroborated_end``): a stated result (winner, ``draw_noresult``, a note saying who won, a draw, a tie,
  no result or abandonment) *and*, for a completed match, innings that are over (the last innings all out,
  out of overs or past its target; a Test's third innings all out still behind). Otherwise it is believed
  once seen on ``confirm_polls`` consecutive ticks spanning ``confirm_s`` *with the balls agreeing*: no ball
  newer than the newest one shown when the status first appeared (``play_shown``), since a final status
  contradicted by new balls is not an end however long it lasts. A new ball starts the count again. Until
  then the match goes on as the previous tick left it.
- **Balls from nowhere.** A ball whose over and ball number cannot follow the last ball standing, or open
  the match where none stands yet (three overs ahead, another innings than the next, a second delivery
  numbered like a legal one that stands) is held back (``hold_jumps``): the tick goes on without it until a
  later answer shows the balls that lead to it, or it has stood on ``confirm_polls`` ticks spanning
  ``confirm_s`` (a gap SportMonks never fills).
- **Regressions.** An innings total may go back by a correction's worth (``correction_max_*``) in one tick;
  a bigger drop (``regression``) is doubtful and believed only under the same persistence rule, so a real
  big correction by the scorers is taken after ``confirm_s`` and a glitch is never shown.

No I/O and no clock: the caller passes ``now``.
"""

from __future__ import annotations

from dataclasses import replace

from daemon.cricket.detectors import diff_balls
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import Ball, MatchSnapshot
from daemon.cricket.state import Doubt, MatchState

_RESULT_WORDS = ("won", "tied", "tie", "draw", "no result", "abandon")
_ABANDON_WORDS = ("abandon", "no result", "cancel", "postpone", "called off")


def corroborated_end(snap: MatchSnapshot) -> bool:
    """The fixture itself confirms the final status it shows (see the module doc)."""
    note = snap.note.strip().lower()
    if snap.phase == "abandoned":
        return bool(snap.draw_noresult) or any(word in note for word in _ABANDON_WORDS)
    if snap.phase != "completed":
        return False
    if snap.draw_noresult or "draw" in note or "tie" in note:
        return True
    stated = snap.winner_team_id is not None or any(word in note for word in _RESULT_WORDS)
    return stated and innings_over(snap)


def innings_over(snap: MatchSnapshot) -> bool:
    """The innings that could decide the match is over on the scores."""
    cur = snap.current_innings
    if cur is None:
        return False
    if snap.is_last_innings:
        target = snap.target
        limit = snap.balls_per_innings
        return (
            cur.wickets >= 10
            or (limit is not None and cur.legal_balls >= limit)
            or (target is not None and cur.runs >= target)
        )
    if not snap.limited_overs and cur.inning == 3 and cur.wickets >= 10:
        own = sum(i.runs for i in snap.innings if i.team_id == cur.team_id)
        other = sum(i.runs for i in snap.innings if i.team_id != cur.team_id)
        return own < other  # an innings defeat
    return False


def regression(prev: MatchState, snap: MatchSnapshot, settings: EngineSettings) -> str | None:
    """Why this snapshot goes back further than a correction can from ``prev``, or None."""
    for inns in snap.innings:
        memo = prev.score_for(inns.scoreboard)
        if memo is None:
            continue
        if memo.runs - inns.runs > settings.correction_max_runs:
            return f"{inns.scoreboard} runs went back from {memo.runs} to {inns.runs}"
        if memo.wickets - inns.wickets > settings.correction_max_wickets:
            return f"{inns.scoreboard} wickets went back from {memo.wickets} to {inns.wickets}"
        if memo.legal_balls - inns.legal_balls > settings.correction_max_balls:
            return f"{inns.scoreboard} legal balls went back from {memo.legal_balls} to {inns.legal_balls}"
    return None


def seen(doubt: Doubt | None, now: float, subject: tuple[int, ...] = ()) -> Doubt:
    """The doubt after one more tick shows it; a doubt about something else starts again."""
    if doubt is not None and doubt.subject == subject:
        return doubt.again()
    return Doubt(since=now, subject=subject)


def play_shown(snap: MatchSnapshot) -> tuple[int, ...]:
    """How much play a fixture shows: its newest ball id and its legal balls (-1 without balls). A final
    status is an end only while this stays what it was when the status appeared."""
    newest = max((b.id for b in snap.balls), default=-1)
    return (newest, sum(i.legal_balls for i in snap.innings))


# ---- balls from nowhere --------------------------------------------------------------------------------
# How far a ball's number may move from the last one standing: the next delivery is the same number after a
# wide or no-ball (SportMonks numbers an extra with the legal ball still to come: 0.2 wd, 0.2) and the next
# number after a legal one; one number more or less is let through for a ball posted out of order.
MAX_STEP = 2
NEW_INNINGS_MAX_POSITION = 2  # the first ball of the next innings is numbered 0.1 (0.2 after a missed one)


def position(ball: Ball) -> int:
    """Legal balls into the innings a delivery's number says (``3.4`` -> 22)."""
    overs, _, balls = ball.over.partition(".")
    return int(overs) * 6 + int(balls or 0)


def _board(ball: Ball) -> int:
    digits = "".join(ch for ch in ball.scoreboard if ch.isdigit())
    return int(digits) if digits else 0


def can_follow(last: Ball | None, ball: Ball) -> bool:
    """Whether ``ball`` can be the delivery after ``last`` (None: the match's first)."""
    if last is None:
        return _board(ball) <= 1 and position(ball) <= NEW_INNINGS_MAX_POSITION
    if ball.scoreboard == last.scoreboard:
        return abs(position(ball) - position(last)) <= MAX_STEP
    return _board(ball) == _board(last) + 1 and position(ball) <= NEW_INNINGS_MAX_POSITION


def hold_jumps(
    prev: MatchState, snap: MatchSnapshot, now: float, settings: EngineSettings
) -> tuple[MatchSnapshot, Doubt | None]:
    """``snap`` without the new balls that cannot follow the balls standing, and the doubt about the first
    one held (see the module doc). Balls already in the state and a match's ball history arriving for the
    first time after play (the engine takes those as history) are taken as they are; the first balls after a
    state without play (a pre-match look, or the engine's baseline for a match just begun) must lead from the
    match's first delivery like any others."""
    if not snap.balls:
        return snap, None
    last_id = prev.previous_ball_id
    if last_id is None:
        if prev.had_play:
            return snap, None
        last_id = min(b.id for b in snap.balls) - 1  # every ball is new: none stands yet
    # the balls standing: the state's, less those this answer deleted, with this answer's corrections
    admitted = [b for b in diff_balls(prev, snap).window if b.id <= last_id]
    legal_at = {(b.scoreboard, b.over) for b in admitted if b.legal}
    doubt = prev.ball_doubt
    held: list[int] = []
    first_doubt: Doubt | None = None
    for ball in sorted((b for b in snap.balls if b.id > last_id), key=lambda b: b.id):
        last = admitted[-1] if admitted else None
        # a number a legal delivery already has cannot come again: an extra carries the number of the legal
        # ball still to come, so after that ball nothing else can
        fits = can_follow(last, ball) and (ball.scoreboard, ball.over) not in legal_at
        if not fits and first_doubt is None:
            first_doubt = seen(doubt, now, (ball.id,))
            fits = confirmed(first_doubt, now, settings)
            if fits:
                first_doubt = None
        if fits:
            admitted.append(ball)
            if ball.legal:
                legal_at.add((ball.scoreboard, ball.over))
        else:
            held.append(ball.id)
    if not held:
        return snap, None
    return replace(snap, balls=tuple(b for b in snap.balls if b.id not in held)), first_doubt


def confirmed(doubt: Doubt, now: float, settings: EngineSettings) -> bool:
    return doubt.polls >= settings.confirm_polls and now - doubt.since >= settings.confirm_s
