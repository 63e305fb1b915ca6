"""Tapes from real SportMonks fixture responses: balls, players, score rows and row ids taken over."""

from __future__ import annotations

from typing import Any

from daemon.replay.tape.files import validate_tape
from daemon.replay.tape.model import Tape, TapeBall
from daemon.replay.tape.scores import SCORES
from daemon.replay.tape.terms import TERMINAL_STATUSES, TapeError

_BALL_FIELDS = tuple(TapeBall.model_fields)
_PLAYER_STRIP = {"lineup", "resource"}


def tape_from_fixture(payload: dict[str, Any], *, source: str | None = None) -> Tape:
    """A tape from a ``/fixtures/{id}`` response (or its ``data``) that includes balls.

    The balls become ``ball`` entries in id order, stamped with their ``updated_at``; players come from the
    lineup and the balls' nested objects; score rows the catalogue lacks are taken from the balls; the ids
    of runs/batting/bowling rows are kept so a replay reproduces them.
    """
    data = payload.get("data", payload) if isinstance(payload, dict) else payload
    if not isinstance(data, dict):
        raise TapeError("fixture payload: `data` must be an object")
    if not isinstance(data.get("balls"), list):
        raise TapeError("fixture payload: `balls` is missing (fetch it with include=balls)")
    entries = [
        {"op": "ball", "ball": ball_fields(ball, f"balls[{i}]"), "updated_at": ball.get("updated_at")}
        for i, ball in enumerate(sorted(data["balls"], key=lambda b: b.get("id", 0)))
    ]
    raw = tape_metadata(data)
    return validate_tape({**raw, "source": source, "entries": entries}, "fixture payload")


def ball_fields(ball: Any, where: str) -> dict[str, Any]:
    """The tape fields of one ``balls[]`` item (nested objects dropped); a clear error if any is missing."""
    if not isinstance(ball, dict):
        raise TapeError(f"{where}: a ball must be an object")
    missing = [f for f in _BALL_FIELDS if f not in ball]
    if missing:
        raise TapeError(f"{where} (id {ball.get('id')}): missing field(s) {', '.join(missing)}")
    return {f: ball[f] for f in _BALL_FIELDS}


def tape_metadata(data: dict[str, Any], previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every tape field but ``entries``/``source`` from a fixture object, merged over ``previous`` (the
    same fields from an earlier poll, so players, score rows and row ids seen once are never lost)."""
    previous = previous or {}
    try:
        players: dict[int, dict[str, Any]] = {p["id"]: p for p in previous.get("players", [])}
        for row in data.get("lineup") or []:
            players[row["id"]] = {k: v for k, v in row.items() if k not in _PLAYER_STRIP}
        scores: dict[int, dict[str, Any]] = {s["id"]: s for s in previous.get("scores", [])}
        for ball in data.get("balls") or []:
            for key in ("batsman", "bowler"):
                obj = ball.get(key)
                if isinstance(obj, dict) and obj.get("id") not in players:
                    players[obj["id"]] = {k: v for k, v in obj.items() if k not in _PLAYER_STRIP}
            score = ball.get("score")
            if isinstance(score, dict):
                row = {k: v for k, v in score.items() if k != "resource"}
                if SCORES.get(row["id"]) is None or SCORES[row["id"]].model_dump() != row:
                    scores[row["id"]] = row
            # a batter at the crease may be in no lineup and have faced nothing yet: keep the tape valid
            for key in ("batsman_id", "bowler_id", "batsman_one_on_creeze_id", "batsman_two_on_creeze_id"):
                pid = ball.get(key)
                if isinstance(pid, int) and pid not in players:
                    players[pid] = {"id": pid, "fullname": f"Player {pid}"}
        row_ids: dict[str, int] = dict(previous.get("row_ids", {}))
        for row in data.get("runs") or []:
            row_ids[f"runs:{row['inning']}"] = row["id"]
        for row in data.get("batting") or []:
            row_ids[f"batting:{row['scoreboard']}:{row['player_id']}"] = row["id"]
        for row in data.get("bowling") or []:
            row_ids[f"bowling:{row['scoreboard']}:{row['player_id']}"] = row["id"]
        lineups = [
            {"player_id": row["id"], **(row.get("lineup") or {})}
            for row in data.get("lineup") or []
            if "lineup" in row
        ] or previous.get("lineups", [])
        toss = previous.get("toss")
        if data.get("toss_won_team_id") and data.get("elected"):
            toss = {"won_team_id": data["toss_won_team_id"], "elected": data["elected"]}
        result = previous.get("result")
        if data.get("status") in TERMINAL_STATUSES and data.get("note"):
            result = {
                "winner_team_id": data.get("winner_team_id"),
                "note": data["note"],
                "draw_noresult": data.get("draw_noresult"),
            }
        kept = dict(previous.get("fixture_fields", {}))
        kept.update(
            {
                k: data[k]
                for k in (
                    "first_umpire_id",
                    "second_umpire_id",
                    "tv_umpire_id",
                    "referee_id",
                    "man_of_match_id",
                    "man_of_series_id",
                )
                if data.get(k) is not None
            }
        )

        def obj(key: str) -> dict[str, Any] | None:
            value = data.get(key)
            if isinstance(value, dict) and "data" in value and isinstance(value["data"], dict):
                value = value["data"]  # some endpoints wrap includes (spec §9.11)
            if isinstance(value, dict):
                return {k: v for k, v in value.items() if k != "resource"}
            return previous.get(key)

        localteam = obj("localteam") or {
            "id": data["localteam_id"],
            "name": str(data["localteam_id"]),
            "code": "HOME",
        }
        visitorteam = obj("visitorteam") or {
            "id": data["visitorteam_id"],
            "name": str(data["visitorteam_id"]),
            "code": "AWAY",
        }
        return {
            "fixture_id": str(data["id"]),
            "league_id": data["league_id"],
            "season_id": data["season_id"],
            "stage_id": data.get("stage_id"),
            "round": data.get("round"),
            "type": data.get("type", "T20"),
            "overs_per_innings": data.get("total_overs_played") or 0,
            "starting_at": data["starting_at"],
            "localteam": localteam,
            "visitorteam": visitorteam,
            "venue": obj("venue"),
            "league": obj("league"),
            "season": obj("season"),
            "stage": obj("stage"),
            "toss": toss,
            "lineups": lineups,
            "players": list(players.values()),
            "scores": list(scores.values()),
            "fixture_fields": kept,
            "row_ids": row_ids,
            "result": result,
        }
    except (KeyError, TypeError, AttributeError) as exc:
        raise TapeError(f"fixture payload: missing or malformed field {exc}") from exc
