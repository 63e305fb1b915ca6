"""Rendering a tape at a cursor as SportMonks JSON: the fixture object with its includes, as the real feed
writes it (number forms, rounding, timestamps, key order)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from daemon.replay.tape.scorecard import Scorecard, VisibleBall, rebuild
from daemon.replay.tape.scores import Score
from daemon.replay.tape.terms import (
    FIXTURE_INCLUDES,
    NOT_OUT_SCORE_ID,
    POWERPLAYS,
    STATUS_BREAK,
    STATUS_FINISHED,
    STATUS_NOT_STARTED,
    TapeError,
    TapeResult,
)

if TYPE_CHECKING:
    from daemon.replay.tape.model import Player, Tape


def number(value: float) -> int | float:
    """SportMonks drops a ``.0`` (``overs: 4`` vs ``3.4``, ``rate: 6`` vs ``12.82``)."""
    return int(value) if float(value).is_integer() else value


def overs_from_balls(legal: int) -> int | float:
    return number(legal // 6 + (legal % 6) / 10)


def _round_half_up(value: float, places: int) -> float:
    q = Decimal(1).scaleb(-places)
    return float(Decimal(repr(value)).quantize(q, rounding=ROUND_HALF_UP))


def strike_rate(score: int, balls: int) -> int:
    # round half up: 5 off 8 shows 63 in the real feed (banker's rounding would give 62)
    return int(_round_half_up(score * 100 / balls, 0)) if balls else 0


def economy(runs: int, legal: int) -> int | float:
    return number(_round_half_up(runs * 6 / legal, 2)) if legal else 0


def iso(ts: datetime) -> str:
    """SportMonks timestamps: UTC with microseconds and a Z."""
    ts = ts.astimezone(UTC)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond:06d}Z"


def _wanted_includes(include: Collection[str] | None) -> set[str]:
    if include is None:
        return set(FIXTURE_INCLUDES)
    return {name.strip().split(".", 1)[0] for name in include if name.strip()}


@lru_cache(maxsize=1 << 16)
def _iso_of(value: datetime | float) -> str:
    # entry times repeat on every request for the same cursor: format each once
    if isinstance(value, datetime):
        return iso(value if value.tzinfo else value.replace(tzinfo=UTC))
    return iso(datetime.fromtimestamp(value, UTC))


def _time_lookup(
    tape: Tape, entry_times: Sequence[datetime | float] | Callable[[int], datetime | float] | None
) -> Callable[[int], str]:
    """Entry index -> the ISO ``updated_at`` of that entry."""
    if entry_times is None:
        defaults = tape.default_entry_times()
        return lambda i: _iso_of(defaults[i])
    if callable(entry_times):
        fn = entry_times
        return lambda i: _iso_of(fn(i))
    seq = entry_times
    return lambda i: _iso_of(seq[i])


def _row_id(tape: Tape, key: str, fallback: int) -> int:
    return tape.row_ids.get(key, fallback)


def _derived_status(tape: Tape, card: Scorecard) -> str:
    if tape.result is not None and card.cursor >= len(tape.entries):
        return STATUS_FINISHED
    if not card.innings:
        return "1st Innings"
    last = card.innings[-1]
    if len(card.innings) >= 2:
        if card.complete[-1] and card.cursor >= len(tape.entries):
            return STATUS_FINISHED
        return _ordinal(last.inning) + " Innings"
    brk = tape.innings_break_index()
    if card.complete[0] or (brk is not None and card.cursor >= brk):
        return STATUS_BREAK
    return "1st Innings"


def _ordinal(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def derive_result(tape: Tape, card: Scorecard) -> TapeResult | None:
    """The result once the chase is over (tape.result wins when the tape carries one)."""
    if tape.result is not None:
        return tape.result
    if len(card.innings) < 2 or not card.complete[1]:
        return None
    first, second = card.innings[0], card.innings[1]
    if second.score > first.score:
        left = tape.overs_per_innings * 6 - second.legal
        unit = "ball" if left in (0, 1) else "balls"
        margin = 10 - second.wickets
        wickets = "wicket" if margin == 1 else "wickets"
        note = f"{tape.team(second.team_id).name} won by {margin} {wickets} (With {left} {unit} remaining)"
        return TapeResult(winner_team_id=second.team_id, note=note)
    if second.score < first.score:
        margin = first.score - second.score
        runs = "run" if margin == 1 else "runs"
        return TapeResult(
            winner_team_id=first.team_id, note=f"{tape.team(first.team_id).name} won by {margin} {runs}"
        )
    return TapeResult(winner_team_id=None, note="Match Tied")


def _render_fixture(
    tape: Tape,
    card: Scorecard,
    *,
    status: str | None,
    wanted: set[str],
    times: Callable[[int], str],
    now: datetime,
    ball_cache: dict[int, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    fid = tape.fixture_int_id
    status = status or _derived_status(tape, card)
    before_start = status == STATUS_NOT_STARTED
    note: str | None = None
    winner: int | None = None
    draw_noresult: str | None = None
    if card.innings and card.innings[0].inning == 1 and (len(card.innings) > 1 or status == STATUS_BREAK):
        note = f"Target {card.innings[0].score + 1} runs"
    if status == STATUS_FINISHED:
        result = derive_result(tape, card)
        if result is not None:
            note, winner, draw_noresult = result.note, result.winner_team_id, result.draw_noresult
    stamp = times(card.last_entry_index) if card.last_entry_index is not None else iso(now)
    data: dict[str, Any] = {
        "resource": "fixtures",
        "id": fid,
        "league_id": tape.league_id,
        "season_id": tape.season_id,
        "stage_id": tape.stage_id,
        "round": tape.round,
        "localteam_id": tape.localteam.id,
        "visitorteam_id": tape.visitorteam.id,
        "starting_at": iso(tape.starting_at),
        "type": tape.type,
        "live": True,
        "status": status,
        "last_period": None,
        "note": note,
        "venue_id": tape.venue.id if tape.venue else None,
        "toss_won_team_id": tape.toss.won_team_id if tape.toss else None,
        "winner_team_id": winner,
        "draw_noresult": draw_noresult,
        "first_umpire_id": None,
        "second_umpire_id": None,
        "tv_umpire_id": None,
        "referee_id": None,
        "man_of_match_id": None,
        "man_of_series_id": None,
        "total_overs_played": tape.overs_per_innings,
        "elected": tape.toss.elected if tape.toss else None,
        "super_over": False,
        "follow_on": False,
        "localteam_dl_data": {"score": None, "overs": None, "wickets_out": None},
        "visitorteam_dl_data": {"score": None, "overs": None, "wickets_out": None},
        "rpc_overs": None,
        "rpc_target": None,
        "weather_report": [],
    }
    for key, value in tape.fixture_fields.items():
        if key not in ("status", "note", "winner_team_id", "draw_noresult", "id"):
            data[key] = value
    players = tape.player_map()
    player_json, team_json = tape.json_tables()
    scores = tape.score_catalogue()
    builders: dict[str, Callable[[], Any]] = {
        "league": lambda: tape.league.to_json("leagues") if tape.league else None,
        "season": lambda: tape.season.to_json("seasons") if tape.season else None,
        "localteam": lambda: tape.localteam.to_json("teams"),
        "visitorteam": lambda: tape.visitorteam.to_json("teams"),
        "batting": lambda: [] if before_start else _batting_rows(tape, card, stamp),
        "bowling": lambda: [] if before_start else _bowling_rows(tape, card, stamp),
        "runs": lambda: [] if before_start else _runs_rows(tape, card, times),
        "lineup": lambda: _lineup(tape, players),
        "balls": lambda: (
            [] if before_start else _balls_json(tape, card, player_json, team_json, scores, times, ball_cache)
        ),
        "winnerteam": lambda: tape.team(winner).to_json("teams") if winner is not None else None,
        "tosswon": lambda: tape.team(tape.toss.won_team_id).to_json("teams") if tape.toss else None,
        "venue": lambda: tape.venue.to_json("venues") if tape.venue else None,
        "stage": lambda: tape.stage.to_json("stages") if tape.stage else None,
    }
    for name in FIXTURE_INCLUDES:
        if name in wanted:
            data[name] = builders[name]()
    return data


def _lineup(tape: Tape, players: dict[int, Player]) -> list[dict[str, Any]]:
    out = []
    for entry in tape.lineups:
        row = players[entry.player_id].to_json()
        row["lineup"] = {
            "team_id": entry.team_id,
            "captain": entry.captain,
            "wicketkeeper": entry.wicketkeeper,
            "substitution": entry.substitution,
        }
        out.append(row)
    return out


def _balls_json(
    tape: Tape,
    card: Scorecard,
    players: dict[int, dict[str, Any]],
    teams: dict[int, dict[str, Any]],
    scores: dict[int, Score],
    times: Callable[[int], str],
    cache: dict[int, dict[str, Any]] | None,
) -> list[dict[str, Any]]:
    if cache is None:
        return [_ball_json(tape, vb, players, teams, scores, times) for vb in card.balls]
    out = []
    for vb in card.balls:
        obj = cache.get(vb.entry_index)
        if obj is None:
            obj = cache[vb.entry_index] = _ball_json(tape, vb, players, teams, scores, times)
        out.append(obj)
    return out


def _ball_json(
    tape: Tape,
    vb: VisibleBall,
    players: dict[int, dict[str, Any]],
    teams: dict[int, dict[str, Any]],
    scores: dict[int, Score],
    times: Callable[[int], str],
) -> dict[str, Any]:
    b = vb.ball
    return {
        "resource": "balls",
        "id": b.id,
        "fixture_id": tape.fixture_int_id,
        "team_id": b.team_id,
        "ball": b.ball,
        "scoreboard": b.scoreboard,
        "batsman_one_on_creeze_id": b.batsman_one_on_creeze_id,
        "batsman_two_on_creeze_id": b.batsman_two_on_creeze_id,
        "batsman_id": b.batsman_id,
        "bowler_id": b.bowler_id,
        "batsmanout_id": b.batsmanout_id,
        "catchstump_id": b.catchstump_id,
        "runout_by_id": b.runout_by_id,
        "score_id": b.score_id,
        "batsman": dict(players[b.batsman_id]),
        "bowler": dict(players[b.bowler_id]),
        "score": scores[b.score_id].to_json(),
        "team": dict(teams[b.team_id]),
        "updated_at": times(vb.entry_index),
    }


def _runs_rows(tape: Tape, card: Scorecard, times: Callable[[int], str]) -> list[dict[str, Any]]:
    pp = POWERPLAYS.get(tape.overs_per_innings, (None, None, None))
    rows = []
    for inn in card.innings:
        last = max(vb.entry_index for vb in card.balls if vb.ball.scoreboard == inn.scoreboard)
        legal_overs = overs_from_balls(inn.legal)
        rows.append(
            {
                "resource": "runs",
                "id": _row_id(tape, f"runs:{inn.inning}", tape.fixture_int_id * 10 + inn.inning),
                "fixture_id": tape.fixture_int_id,
                "team_id": inn.team_id,
                "inning": inn.inning,
                "score": inn.score,
                "wickets": inn.wickets,
                "overs": legal_overs,
                "pp1": pp[0],
                "pp2": pp[1],
                "pp3": pp[2],
                "updated_at": times(last),
            }
        )
    return rows


def _batting_rows(tape: Tape, card: Scorecard, stamp: str) -> list[dict[str, Any]]:
    rows = []
    for inn in card.innings:
        for bat in sorted(inn.batting.values(), key=lambda x: x.sort):
            out, sc = bat.out_ball, bat.out_score
            wicket_id = sc.id if sc is not None else NOT_OUT_SCORE_ID
            fallback = tape.fixture_int_id * 1000 + inn.inning * 100 + bat.sort
            rows.append(
                {
                    "resource": "battings",
                    "id": _row_id(tape, f"batting:{inn.scoreboard}:{bat.player_id}", fallback),
                    "sort": bat.sort,
                    "fixture_id": tape.fixture_int_id,
                    "team_id": bat.team_id,
                    "active": False,  # the real feed says false even at the crease (spec §9.5)
                    "scoreboard": inn.scoreboard,
                    "player_id": bat.player_id,
                    "wicket_id": wicket_id,
                    "ball": bat.balls,
                    "score_id": wicket_id,
                    "score": bat.score,
                    "four_x": bat.fours,
                    "six_x": bat.sixes,
                    "catch_stump_player_id": out.catchstump_id if out else None,
                    "runout_by_id": out.runout_by_id if out else None,
                    "batsmanout_id": None,
                    "bowling_player_id": out.bowler_id if out and sc and not sc.is_run_out else None,
                    "fow_score": bat.fow_score if out else 0,
                    "fow_balls": out.ball if out else 0,
                    "rate": strike_rate(bat.score, bat.balls),
                    "updated_at": stamp,
                }
            )
    return rows


def _bowling_rows(tape: Tape, card: Scorecard, stamp: str) -> list[dict[str, Any]]:
    rows = []
    for inn in card.innings:
        for bowl in sorted(inn.bowling.values(), key=lambda x: x.sort):
            fallback = tape.fixture_int_id * 1000 + 500 + inn.inning * 20 + bowl.sort
            rows.append(
                {
                    "resource": "bowlings",
                    "id": _row_id(tape, f"bowling:{inn.scoreboard}:{bowl.player_id}", fallback),
                    "sort": bowl.sort,
                    "fixture_id": tape.fixture_int_id,
                    "team_id": bowl.team_id,
                    "active": False,
                    "scoreboard": inn.scoreboard,
                    "player_id": bowl.player_id,
                    "overs": overs_from_balls(bowl.legal),
                    "medians": bowl.maidens,
                    "runs": bowl.runs,
                    "wickets": bowl.wickets,
                    "wide": bowl.wide,
                    "noball": bowl.noball,
                    "rate": economy(bowl.runs, bowl.legal),
                    "updated_at": stamp,
                }
            )
    return rows


def fixture_at(
    tape: Tape,
    cursor: int,
    *,
    status: str | None = None,
    include: Collection[str] | None = None,
    now: datetime | None = None,
    entry_times: Sequence[datetime | float] | Callable[[int], datetime | float] | None = None,
    ball_cache: dict[int, dict[str, Any]] | None = None,
    scorecard: Scorecard | None = None,
) -> dict[str, Any]:
    """The SportMonks fixture object (the ``data`` of ``/fixtures/{id}``) after the first ``cursor`` entries.

    ``include`` takes SportMonks include names (``balls.score`` implies ``balls``); None means every
    include. ``status`` overrides the derived status (the server passes ``NS`` before the start).
    ``entry_times`` gives the wall time each entry became visible (epoch seconds or datetimes, a list
    or a function of the entry index); each ball's ``updated_at`` is the time of the entry that last
    changed it. Without it, recorded stamps or the tape's own pace are used. ``now`` stamps the
    aggregate rows when no ball is visible yet. ``ball_cache`` (entry index -> ball object) lets a
    caller whose entry times never change reuse the ball objects across calls; the objects in it are
    shared, so it must not mutate the result's balls. ``scorecard`` is ``tape.scorecard_at(cursor)`` when the
    caller already has it.
    """
    if not 0 <= cursor <= len(tape.entries):
        raise TapeError(f"cursor {cursor} is outside 0..{len(tape.entries)}")
    card = scorecard if scorecard is not None and scorecard.cursor == cursor else rebuild(tape, cursor)
    wanted = _wanted_includes(include)
    times = _time_lookup(tape, entry_times)
    fallback_now = now or tape.starting_at
    return _render_fixture(
        tape, card, status=status, wanted=wanted, times=times, now=fallback_now, ball_cache=ball_cache
    )
