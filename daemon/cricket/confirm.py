"""Doubtful ticks: when the engine believes a final status, and a score that went back.

Owns two pure decisions the engine makes before it lets a tick change anything:

- **End confirmation.** SportMonks now and then shows ``Finished`` or ``Aban.`` for a few seconds while the
  match goes on. A final status is believed at once only when the fixture corroborates it
  (``corroborated_end``): a stated result (winner, ``draw_noresult``, a note saying who won, a draw, a tie,
  no result or abandonment) *and*, for a completed match, innings that are over (the last innings all out,
  out of overs or past its target; a Test's third innings all out still behind). Otherwise it is believed
  once seen on ``confirm_polls`` consecutive ticks spanning ``confirm_s``; until then the match goes on as
  the previous tick left it.
- **Regressions.** An innings total may go back by a correction's worth (``correction_max_*``) in one tick;
  a bigger drop (``regression``) is doubtful and believed only under the same persistence rule, so a real
  big correction by the scorers is taken after ``confirm_s`` and a glitch is never shown.

No I/O and no clock: the caller passes ``now``.
"""

from __future__ import annotations

from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import MatchSnapshot
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


def seen(doubt: Doubt | None, now: float) -> Doubt:
    """The doubt after one more tick shows it."""
    return doubt.again() if doubt is not None else Doubt(since=now)


def confirmed(doubt: Doubt, now: float, settings: EngineSettings) -> bool:
    return doubt.polls >= settings.confirm_polls and now - doubt.since >= settings.confirm_s
