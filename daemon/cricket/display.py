"""The Live Activity's content-state: every string the app shows, built once per match per tick.

Owns the content-state schema below and its construction from a ``MatchSnapshot``. The app formats nothing
(platform conventions: no "87/6" built on the device), so every score, over, rate and line is a finished
string here. Pure: no I/O, no clock. It must not decide events (``detectors``) or payload size (``payloads``).

Schema (every key is always present, so the app's default ``Codable`` decoding never fails; a value the
match does not have yet is ``null`` or an empty list):

| key | type | example |
|---|---|---|
| matchId | str | "71344" |
| phase | "pre" \\| "live" \\| "innings_break" \\| "completed" \\| "abandoned" | "live" |
| perspective | team id or "neutral" | "1" |
| battingPerspective | "supported_batting" \\| "supported_bowling" \\| "neutral" | "supported_batting" |
| sentiment | "neutral" \\| "exciting" \\| "tense" | "tense" |
| title | str | "PAK v SL" (the supported team first) |
| subtitle | str | "PAK need 42 off 28" / "Innings break · PAK need 183" / the result |
| status | str | the feed's status, "2nd Innings" |
| teams | list of 2 team objects, supported (or batting) team first | see below |
| score | str | "154/3" (the batting side's current innings) |
| overs | str | "17.2" |
| battingCode | str \\| null | "PAK" |
| runRate | str \\| null | "RR 8.91" |
| target | str \\| null | "Target 183" |
| equation | str \\| null | "PAK need 42 off 28" (balls) |
| requiredRate | str \\| null | "RRR 9.00" |
| batters | list of {name, line, onStrike} | [{"name":"V Kohli","line":"72 (48)","onStrike":true}] |
| bowler | {name, line} \\| null | {"name":"N Shah","line":"2-24 (3.2)"} |
| thisOver | list of str | ["1","4","W","1wd","0"] (the current over's deliveries) |
| event | str \\| null | "WICKET! K Mendis 1 (2)" (this tick's key event, kept for a few balls) |
| eventType | str \\| null | "wicket" |
| result | str \\| null | "Sri Lanka won by 12 runs" |
| toss | str \\| null | "SL won the toss and chose to bat" |

A team object: ``{"id", "code", "name", "score", "overs", "batting": bool, "innings": ["182/8 (20)"]}``.
``events`` (the tick's short event list) is added by ``payloads.update_payload``.
"""

from __future__ import annotations

from typing import Any

from daemon.cricket.snapshot import Ball, MatchSnapshot, Team, format_overs

NEUTRAL = "neutral"


def _rate(runs: int, legal_balls: int) -> str | None:
    if legal_balls <= 0:
        return None
    return f"{runs * 6 / legal_balls:.2f}"


def _team_obj(snap: MatchSnapshot, team: Team, batting_id: str | None) -> dict[str, Any]:
    mine = [i for i in snap.innings if i.team_id == team.id]
    last = mine[-1] if mine else None
    return {
        "id": team.id,
        "code": team.code,
        "name": team.name,
        "score": last.score if last else "",
        "overs": last.overs if last else "",
        "batting": team.id == batting_id and snap.phase == "live",
        "innings": [f"{i.score} ({i.overs})" for i in mine],
    }


def _crease(snap: MatchSnapshot, board: str) -> tuple[list[str], str | None, Ball | None]:
    """Batters at the crease (slot order) and who faces next, from the ball feed; ([], None) without it."""
    balls = snap.balls_in(board)
    if not balls:
        return [], None, None
    last = balls[-1]
    crease = list(last.crease or (last.batsman_id,))
    striker: str | None = last.batsman_id
    others = [c for c in crease if c != striker]
    non_striker = others[0] if others else None
    ran = (
        0
        if (last.four or last.six)
        else last.bat_runs + last.bye + last.leg_bye + (max(0, last.runs - 1) if last.wide else 0)
    )
    if ran % 2 == 1:
        striker, non_striker = non_striker, striker
    if last.legal and last.ball_in_over == 6:
        striker, non_striker = non_striker, striker
    if last.is_wicket and last.out_id:
        crease = [c for c in crease if c != last.out_id]
        if striker == last.out_id:
            striker = None  # the new batter, not in the feed until he faces
    return crease, striker, last


def _batters(snap: MatchSnapshot, board: str) -> list[dict[str, Any]]:
    crease, striker, _ = _crease(snap, board)
    if not crease:
        not_out = sorted(
            (b for b in snap.batting if b.scoreboard == board and not b.out), key=lambda b: b.sort
        )
        crease = [b.player_id for b in not_out[-2:]]
    out = []
    for pid in crease:
        line = snap.batter(board, pid)
        if line is not None:
            figures = f"{line.runs} ({line.balls})"
        else:
            mine = [b for b in snap.balls_in(board) if b.batsman_id == pid]
            figures = f"{sum(b.bat_runs for b in mine)} ({sum(1 for b in mine if b.faced)})"
        out.append({"name": snap.name(pid), "line": figures, "onStrike": pid == striker})
    return out


def _bowler(snap: MatchSnapshot, board: str) -> dict[str, str] | None:
    balls = snap.balls_in(board)
    if balls:
        pid = balls[-1].bowler_id
    else:
        mid_over = [b for b in snap.bowling if b.scoreboard == board and b.legal_balls % 6]
        if not mid_over:
            return None
        pid = mid_over[-1].player_id
    line = snap.bowler(board, pid)
    if line is None:
        mine = [b for b in balls if b.bowler_id == pid]
        legal = sum(1 for b in mine if b.legal)
        wickets = sum(1 for b in mine if b.bowler_wicket)
        figures = f"{wickets}-{sum(b.runs for b in mine)} ({format_overs(legal)})"
    else:
        figures = line.figures
    return {"name": snap.name(pid), "line": figures}


def _this_over(snap: MatchSnapshot, board: str) -> list[str]:
    balls = snap.balls_in(board)
    if not balls:
        return []
    current = balls[-1].over_index
    return [b.symbol for b in balls if b.over_index == current]


def _toss(snap: MatchSnapshot) -> str | None:
    team = snap.team(snap.toss_won_team_id)
    if team is None:
        return None
    if snap.elected in ("batting", "bowling"):
        return f"{team.code} won the toss and chose to {'bat' if snap.elected == 'batting' else 'bowl'}"
    return f"{team.code} won the toss"


def build_neutral(
    snap: MatchSnapshot, *, event: str | None, event_type: str | None, result: str | None, alert_event: bool
) -> dict[str, Any]:
    """The content-state for a viewer without a supported team; perspectives reorder it."""
    inns = snap.current_innings
    board = snap.current_scoreboard
    batting_team = snap.team(inns.team_id) if inns else None
    ordered_teams = [snap.localteam, snap.visitorteam]
    if batting_team is not None and snap.phase == "live":
        ordered_teams = [batting_team, snap.other_team(batting_team.id) or snap.visitorteam]
    target = snap.target
    equation = required = None
    tense = False
    if inns is not None and target is not None and snap.phase == "live":
        need = target - inns.runs
        per = snap.balls_per_innings
        code = batting_team.code if batting_team else "?"
        if need > 0 and per is not None:
            left = per - inns.legal_balls
            if left > 0:
                equation = f"{code} need {need} off {left}"
                required = f"RRR {need * 6 / left:.2f}"
                tense = left <= 30 and need <= 2 * left
        elif need > 0:
            equation = f"{code} need {need} to win"
    if snap.phase == "pre":
        subtitle = _toss(snap) or "Match yet to begin"
    elif snap.phase == "innings_break":
        nxt = snap.other_team(inns.team_id) if inns else None
        subtitle = "Innings break"
        if inns is not None and nxt is not None and snap.limited_overs and inns.inning == 1:
            subtitle = f"Innings break · {nxt.code} need {inns.runs + 1} to win"
    elif snap.final:
        subtitle = result or ("Match abandoned" if snap.phase == "abandoned" else "Match over")
    elif equation:
        subtitle = equation
    elif inns is not None:
        subtitle = f"{batting_team.code if batting_team else '?'} {inns.score} ({inns.overs} ov)"
    else:
        subtitle = snap.status
    live_board = board if board and snap.phase in ("live", "innings_break", "completed") else None
    return {
        "matchId": snap.fixture_id,
        "phase": snap.phase,
        "perspective": NEUTRAL,
        "battingPerspective": NEUTRAL,
        "sentiment": "exciting" if alert_event else ("tense" if tense else "neutral"),
        "title": f"{ordered_teams[0].code} v {ordered_teams[1].code}",
        "subtitle": subtitle,
        "status": snap.status,
        "teams": [_team_obj(snap, t, inns.team_id if inns else None) for t in ordered_teams],
        "score": inns.score if inns else "",
        "overs": inns.overs if inns else "",
        "battingCode": batting_team.code if batting_team else None,
        "runRate": f"RR {rate}" if inns and (rate := _rate(inns.runs, inns.legal_balls)) else None,
        "target": f"Target {target}" if target is not None else None,
        "equation": equation,
        "requiredRate": required,
        "batters": _batters(snap, live_board) if live_board and snap.phase == "live" else [],
        "bowler": _bowler(snap, live_board) if live_board and snap.phase == "live" else None,
        "thisOver": _this_over(snap, live_board) if live_board and snap.phase == "live" else [],
        "event": event,
        "eventType": event_type if event else None,
        "result": result if snap.final else None,
        "toss": _toss(snap),
    }


def for_perspective(neutral: dict[str, Any], snap: MatchSnapshot, team_id: str) -> dict[str, Any]:
    """The same state for a follower of ``team_id``: their team first, and whether they bat or bowl."""
    state = dict(neutral)
    teams = list(neutral["teams"])
    teams.sort(key=lambda t: t["id"] != team_id)
    state["teams"] = teams
    state["perspective"] = team_id
    state["title"] = f"{teams[0]['code']} v {teams[1]['code']}"
    inns = snap.current_innings
    if snap.phase in ("live", "innings_break") and inns is not None:
        state["battingPerspective"] = "supported_batting" if inns.team_id == team_id else "supported_bowling"
    return state


def build_display(
    snap: MatchSnapshot, *, event: str | None, event_type: str | None, result: str | None, alert_event: bool
) -> dict[str, dict[str, Any]]:
    """Content-state per perspective: each team id, and "neutral"."""
    neutral = build_neutral(snap, event=event, event_type=event_type, result=result, alert_event=alert_event)
    return {
        snap.localteam.id: for_perspective(neutral, snap, snap.localteam.id),
        snap.visitorteam.id: for_perspective(neutral, snap, snap.visitorteam.id),
        NEUTRAL: neutral,
    }
