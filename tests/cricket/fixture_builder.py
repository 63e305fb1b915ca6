"""Test helpers: SportMonks fixtures rebuilt from a ball list, as the feed would show them part-way through.

``truncated(fixture, n)`` keeps the first ``n`` balls (by id) of a real fixture and rebuilds ``runs``,
``batting`` and ``bowling`` from them with the formulas of spec/sportmonks-api.md §7 (checked there to
reproduce the real tables exactly). ``make_ball`` builds one synthetic ball in the feed's shape. These are
independent of the engine (they build input; they never call it).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

SCORES: dict[str, dict[str, Any]] = {
    "0": {"id": 82, "name": "No Run", "runs": 0},
    "1": {"id": 69, "name": "1 Run", "runs": 1},
    "2": {"id": 70, "name": "2 Runs", "runs": 2},
    "3": {"id": 71, "name": "3 Runs", "runs": 3},
    "4": {"id": 47, "name": "FOUR", "runs": 4, "four": True},
    "6": {"id": 53, "name": "SIX", "runs": 6, "six": True},
    "1b": {"id": 1, "name": "1 Bye", "runs": 0, "bye": 1},
    "4b": {"id": 41, "name": "4 Byes", "runs": 0, "bye": 4},
    "1lb": {"id": 4, "name": "1 Leg Bye", "runs": 0, "leg_bye": 1},
    "wd": {"id": 17, "name": "1 Wide", "runs": 1, "ball": False},
    "5wd": {"id": 52, "name": "5 Wides", "runs": 5, "ball": False},
    "nb": {"id": 7, "name": "1 No Ball", "runs": 1, "noball": 1, "noball_runs": 1},
    "W": {"id": 54, "name": "Catch Out", "runs": 0, "is_wicket": True, "out": True},
    "B": {"id": 79, "name": "Clean Bowled", "runs": 0, "is_wicket": True, "out": True},
    "RO": {"id": 90, "name": "Run Out", "runs": 0, "is_wicket": True, "out": True},
}


def score_obj(code: str) -> dict[str, Any]:
    base = {
        "resource": "scores",
        "runs": 0,
        "four": False,
        "six": False,
        "bye": 0,
        "leg_bye": 0,
        "noball": 0,
        "noball_runs": 0,
        "is_wicket": False,
        "ball": True,
        "out": False,
    }
    base.update(SCORES[code])
    return base


def legal(score: Mapping[str, Any]) -> bool:
    return score.get("ball") is not False and not score.get("noball")


def bat_runs(score: Mapping[str, Any]) -> int:
    if score.get("ball") is False:
        return 0
    if score.get("noball"):
        return int(score["runs"]) - int(score.get("noball_runs") or 0)
    return int(score["runs"])


def overs_value(legal_balls: int) -> float | int:
    overs, balls = divmod(legal_balls, 6)
    return overs if balls == 0 else float(f"{overs}.{balls}")


def rebuild(
    base: Mapping[str, Any],
    balls: Iterable[Mapping[str, Any]],
    *,
    status: str | None = None,
    dismissed: Mapping[tuple[str, str], int] | None = None,
    changed_at: str | None = None,
) -> dict[str, Any]:
    """``base`` with runs/batting/bowling/status/note rebuilt from ``balls`` (sorted by id). Each innings'
    row is stamped with its newest ball's ``updated_at``, or ``changed_at`` when later (the time of a
    deletion, which SportMonks stamps on the rows it changes)."""
    fx = {k: copy.deepcopy(v) for k, v in base.items() if k not in ("balls", "runs", "batting", "bowling")}
    balls = sorted(balls, key=lambda b: b["id"])
    fx["balls"] = [copy.deepcopy(b) for b in balls]
    boards: dict[str, dict[str, Any]] = {}
    batting: dict[tuple[str, int], dict[str, Any]] = {}
    bowling: dict[tuple[str, int], dict[str, Any]] = {}
    overs_runs: dict[tuple[str, int, int], list[int]] = {}
    for b in balls:
        s = b["score"]
        sb = b["scoreboard"]
        inn = boards.setdefault(sb, {"team_id": b["team_id"], "score": 0, "wickets": 0, "legal": 0, "at": ""})
        inn["score"] += int(s["runs"]) + int(s.get("bye") or 0) + int(s.get("leg_bye") or 0)
        inn["at"] = max(inn["at"], b.get("updated_at") or "")
        if legal(s):
            inn["legal"] += 1
        bowl = bowling.setdefault(
            (sb, b["bowler_id"]),
            {
                "player_id": b["bowler_id"],
                "scoreboard": sb,
                "team_id": None,
                "legal": 0,
                "runs": 0,
                "wickets": 0,
                "medians": 0,
                "wide": 0,
                "noball": 0,
            },
        )
        bowl["runs"] += int(s["runs"])
        if s.get("ball") is False:
            bowl["wide"] += int(s["runs"])
        if s.get("noball"):
            bowl["noball"] += 1
        if legal(s):
            bowl["legal"] += 1
        over_index = int(f"{float(b['ball']):.1f}".split(".")[0])
        key = (sb, over_index, b["bowler_id"])
        overs_runs.setdefault(key, [0, 0])
        overs_runs[key][0] += int(s["runs"])
        overs_runs[key][1] += 1 if legal(s) else 0
        if s.get("is_wicket") and "run out" not in str(s.get("name", "")).lower():
            bowl["wickets"] += 1
        if s.get("ball") is not False:
            bat = batting.setdefault((sb, b["batsman_id"]), _bat_row(sb, b["batsman_id"], b["team_id"]))
            bat["ball"] += 1
            bat["score"] += bat_runs(s)
            bat["four_x"] += 1 if s.get("four") else 0
            bat["six_x"] += 1 if s.get("six") else 0
        if s.get("is_wicket"):
            inn["wickets"] += 1
            over = f"{float(b['ball']):.1f}"
            out = (dismissed or {}).get((sb, over)) or b.get("batsmanout_id") or b["batsman_id"]
            row = batting.setdefault((sb, out), _bat_row(sb, out, b["team_id"]))
            row.update(
                {
                    "score_id": s["id"],
                    "wicket_id": s["id"],
                    "fow_score": inn["score"],
                    "fow_balls": float(over),
                    "bowling_player_id": b["bowler_id"],
                    "catch_stump_player_id": b.get("catchstump_id"),
                }
            )
    for (sb, _over, bowler), (runs, legal_count) in overs_runs.items():
        if legal_count == 6 and runs == 0:
            bowling[(sb, bowler)]["medians"] += 1
    ordered = sorted(boards.items(), key=lambda kv: int(kv[0][1:]))
    teams = {str(fx.get("localteam_id")), str(fx.get("visitorteam_id"))}
    fx["runs"] = [
        {
            "resource": "runs",
            "fixture_id": fx["id"],
            "team_id": v["team_id"],
            "inning": int(sb[1:]),
            "score": v["score"],
            "wickets": v["wickets"],
            "overs": overs_value(v["legal"]),
            "updated_at": max(v["at"], changed_at or ""),
        }
        for sb, v in ordered
    ]
    sort_counter: dict[str, int] = {}
    fx["batting"] = []
    for (sb, _pid), row in batting.items():
        sort_counter[sb] = sort_counter.get(sb, 0) + 1
        row["sort"] = sort_counter[sb]
        row["rate"] = round(100 * row["score"] / row["ball"]) if row["ball"] else 0
        fx["batting"].append(row)
    fx["bowling"] = []
    for (sb, pid), row in bowling.items():
        batting_team = boards[sb]["team_id"]
        fielding = next((t for t in teams if t != str(batting_team)), None)
        fx["bowling"].append(
            {
                "resource": "bowlings",
                "scoreboard": sb,
                "player_id": pid,
                "team_id": int(fielding) if fielding and fielding.isdigit() else fielding,
                "overs": overs_value(row["legal"]),
                "medians": row["medians"],
                "runs": row["runs"],
                "wickets": row["wickets"],
                "wide": row["wide"],
                "noball": row["noball"],
            }
        )
    if status is None:
        status = f"{len(ordered)}{_suffix(len(ordered))} Innings" if ordered else "NS"
    fx["status"] = status
    if len(ordered) >= 2 and status != "Finished":
        fx["note"] = f"Target {ordered[0][1]['score'] + 1} runs"
    elif status != "Finished":
        fx["note"] = None
    return fx


def _suffix(n: int) -> str:
    return {1: "st", 2: "nd", 3: "rd"}.get(n, "th")


def _bat_row(sb: str, pid: int, team: int) -> dict[str, Any]:
    return {
        "resource": "battings",
        "scoreboard": sb,
        "player_id": pid,
        "team_id": team,
        "ball": 0,
        "score": 0,
        "four_x": 0,
        "six_x": 0,
        "score_id": 84,
        "wicket_id": 84,
        "fow_score": 0,
        "fow_balls": 0,
        "catch_stump_player_id": None,
        "bowling_player_id": None,
        "runout_by_id": None,
    }


def dismissed_from_table(fixture: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """(scoreboard, over) -> dismissed player, from a complete fixture's batting table."""
    out: dict[tuple[str, str], int] = {}
    for row in fixture.get("batting") or []:
        if row.get("fow_balls"):
            out[(row["scoreboard"], f"{float(row['fow_balls']):.1f}")] = row["player_id"]
    return out


def truncated(fixture: Mapping[str, Any], n: int, *, status: str | None = None) -> dict[str, Any]:
    balls = sorted(fixture["balls"], key=lambda b: b["id"])[:n]
    return rebuild(fixture, balls, status=status, dismissed=dismissed_from_table(fixture))


def make_ball(
    ball_id: int,
    over: str,
    code: str,
    *,
    batsman: int,
    bowler: int,
    crease: tuple[int, int],
    team: int = 1,
    scoreboard: str = "S1",
    out: int | None = None,
    stamp: str | None = None,
) -> dict[str, Any]:
    return {
        "resource": "balls",
        "id": ball_id,
        "fixture_id": 1,
        "team_id": team,
        "ball": float(over),
        "scoreboard": scoreboard,
        "batsman_one_on_creeze_id": crease[0],
        "batsman_two_on_creeze_id": crease[1],
        "batsman_id": batsman,
        "bowler_id": bowler,
        "batsmanout_id": (out or batsman) if SCORES[code].get("is_wicket") else None,
        "catchstump_id": None,
        "runout_by_id": None,
        "score_id": SCORES[code]["id"],
        "score": score_obj(code),
        "updated_at": stamp or f"2026-01-01T10:{(ball_id // 60) % 60:02d}:{ball_id % 60:02d}.000000Z",
    }


def base_fixture(
    *,
    fixture_id: int = 1,
    local: int = 1,
    visitor: int = 2,
    overs: int = 20,
    players: Iterable[tuple[int, str, str]] = (),
) -> dict[str, Any]:
    return {
        "resource": "fixtures",
        "id": fixture_id,
        "league_id": 3,
        "type": "T20I",
        "round": "1st T20I",
        "localteam_id": local,
        "visitorteam_id": visitor,
        "status": "NS",
        "note": None,
        "total_overs_played": overs,
        "winner_team_id": None,
        "toss_won_team_id": None,
        "elected": None,
        "localteam": {"id": local, "name": "Home", "code": "HOM"},
        "visitorteam": {"id": visitor, "name": "Away", "code": "AWY"},
        "lineup": [
            {"id": pid, "firstname": first, "lastname": last, "fullname": f"{first} {last}"}
            for pid, first, last in players
        ],
        "balls": [],
        "runs": [],
        "batting": [],
        "bowling": [],
    }
