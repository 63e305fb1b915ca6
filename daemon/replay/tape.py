"""Tapes: a whole cricket match as the SportMonks ball feed delivered it, and its snapshot at any cursor.

This module owns the tape format (a pydantic model, JSON on disk, gzip when the name ends ``.gz``) and the
pure rebuild of a SportMonks fixture from the first ``cursor`` entries of a tape. It does no I/O beyond
``load_tape``/``save_tape`` and knows nothing about clocks, HTTP or the daemon; the replay server decides
*which* cursor and *when* each entry became visible, this module decides *what* the feed looks like then.

Tape format (``format_version`` 1), one JSON object:

- fixture metadata: ``fixture_id`` (SportMonks id as a string of digits), ``league_id``, ``season_id``,
  ``stage_id``, ``round``, ``type`` (``T20``/``T20I``/``T10``/``ODI``/``List A``), ``overs_per_innings``,
  ``starting_at``, ``localteam``/``visitorteam`` (id, name, code, image_path...), ``venue``, ``league``,
  ``season``, ``stage``, ``toss`` (won_team_id, elected), ``lineups`` (player_id, team_id, captain,
  wicketkeeper, substitution), ``players`` (SportMonks player objects, referenced by id from balls),
  ``scores`` (score-catalogue rows that extend or override :data:`SCORES`), ``fixture_fields`` (other
  fixture fields copied verbatim, e.g. umpire ids), ``row_ids`` (ids of runs/batting/bowling rows to
  reuse, keyed ``runs:1``, ``batting:S1:<player>``, ``bowling:S1:<player>``), ``result`` (winner_team_id,
  note, draw_noresult; when absent the result is derived from the balls), ``ms_per_ball`` (pace of the
  replay at speed 1).
- ``entries``: the feed's history in the order it happened, one change per entry:
  ``{"op": "ball", "ball": {...}}`` posts a new delivery (ids unique and increasing);
  ``{"op": "correct", "ball": {...}}`` re-sends a posted ball (same id) with different fields;
  ``{"op": "delete", "ball_id": N}`` withdraws a posted ball. An entry may carry the ``updated_at`` the
  real feed stamped on it (recorded tapes); otherwise times come from the replay server.

The snapshot's ``runs``, ``batting`` and ``bowling`` are rebuilt from the visible balls with the formulas of
spec/sportmonks-api.md §7, so a tape never stores a scorecard that could disagree with its balls.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

TAPES_DIR = Path(__file__).resolve().parent / "tapes"

# Real key order of a fixture's includes (spec §5); snapshots emit them in this order.
FIXTURE_INCLUDES: tuple[str, ...] = (
    "league",
    "season",
    "localteam",
    "visitorteam",
    "batting",
    "bowling",
    "runs",
    "lineup",
    "balls",
    "winnerteam",
    "tosswon",
    "venue",
    "stage",
)
NOT_OUT_SCORE_ID = 84  # batting rows of batters not out carry this as wicket_id/score_id (observed)
OVERS_BY_TYPE: dict[str, int] = {"T20": 20, "T20I": 20, "T10": 10, "ODI": 50, "List A": 50}
# Powerplay labels per scheduled overs. T20 is observed ("1-6"); the others are our assumption.
POWERPLAYS: dict[int, tuple[str | None, str | None, str | None]] = {
    20: ("1-6", None, None),
    10: ("1-2", None, None),
    50: ("1-10", "11-40", "41-50"),
}
STATUS_FINISHED = "Finished"
STATUS_BREAK = "Innings Break"
STATUS_NOT_STARTED = "NS"
TERMINAL_STATUSES = frozenset({"Finished", "Aban.", "Cancl.", "Postp."})


class TapeError(ValueError):
    """A tape that cannot be loaded or is inconsistent; the message names the field or entry."""


# ---------------------------------------------------------------------------------------------------------
# The score catalogue. Ids below 200 and their values are observed in real payloads (spec §6); ids from 200
# up are this project's own, for kinds the spec names without an id. Consumers must read the flags, and use
# the name only for display or to tell a run out from a bowler's wicket.
# ---------------------------------------------------------------------------------------------------------


class Score(BaseModel):
    """One row of the SportMonks score catalogue (``balls[].score``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int
    name: str
    runs: int = 0
    four: bool = False
    six: bool = False
    bye: int = 0
    leg_bye: int = 0
    noball: int = 0
    noball_runs: int = 0
    is_wicket: bool = False
    ball: bool = True
    out: bool = False

    @cached_property
    def is_wide(self) -> bool:
        return (not self.ball) or "wide" in self.name.lower()

    @cached_property
    def is_legal(self) -> bool:
        return not self.is_wide and self.noball == 0

    @cached_property
    def is_run_out(self) -> bool:
        return self.is_wicket and "run out" in self.name.lower()

    @cached_property
    def bat_runs(self) -> int:
        if self.is_wide:
            return 0
        if self.noball:
            return self.runs - self.noball_runs
        return self.runs

    @cached_property
    def team_runs(self) -> int:
        return self.runs + self.bye + self.leg_bye

    def to_json(self) -> dict[str, Any]:
        cached = _SCORE_JSON.get(id(self))
        if cached is None or cached[0] is not self:
            cached = _SCORE_JSON[id(self)] = (self, {"resource": "scores", **self.model_dump()})
        return dict(cached[1])


# Score rows are immutable and few: their JSON is built once (keyed by identity, the row kept alive with it).
_SCORE_JSON: dict[int, tuple[Score, dict[str, Any]]] = {}


def _s(id: int, name: str, **kw: Any) -> Score:
    return Score(id=id, name=name, **kw)


SCORES: dict[int, Score] = {
    s.id: s
    for s in (
        _s(82, "No Run"),
        _s(69, "1 Run", runs=1),
        _s(70, "2 Runs", runs=2),
        _s(71, "3 Runs", runs=3),
        _s(47, "FOUR", runs=4, four=True),
        _s(53, "SIX", runs=6, six=True),
        _s(1, "1 Bye", bye=1),
        _s(41, "4 Byes", bye=4),
        _s(4, "1 Leg Bye", leg_bye=1),
        _s(17, "1 Wide", runs=1, ball=False),
        _s(52, "5 Wides", runs=5, ball=False),
        _s(7, "1 No Ball", runs=1, noball=1, noball_runs=1),
        _s(8, "1 No Ball + 1 Run", runs=2, noball=1, noball_runs=1),
        _s(114, "1 No Ball + 1 Bye", runs=1, bye=1, noball=1, noball_runs=1),
        _s(54, "Catch Out", is_wicket=True, out=True),
        _s(79, "Clean Bowled", is_wicket=True, out=True),
        # --- project-defined ids (kinds named in spec §6 whose real ids are unknown) ---
        _s(201, "2 Byes", bye=2),
        _s(202, "2 Leg Byes", leg_bye=2),
        _s(203, "4 Leg Byes", leg_bye=4),
        _s(204, "2 Wides", runs=2, ball=False),
        _s(205, "1 No Ball + 4 Runs", runs=5, four=True, noball=1, noball_runs=1),
        _s(206, "1 No Ball + 6 Runs", runs=7, six=True, noball=1, noball_runs=1),
        _s(207, "1 No Ball + 2 Runs", runs=3, noball=1, noball_runs=1),
        _s(210, "LBW OUT", is_wicket=True, out=True),
        _s(211, "Stump Out", is_wicket=True, out=True),
        _s(212, "Run Out", is_wicket=True, out=True),
        _s(213, "Run Out + 1 Run", runs=1, is_wicket=True, out=True),
        _s(214, "Hit Wicket", is_wicket=True, out=True),
        _s(215, "1 Wide + Stump Out", runs=1, ball=False, is_wicket=True, out=True),
    )
}


# ---------------------------------------------------------------------------------------------------------
# Tape model (the edge: tapes are files anyone can hand us, so everything is validated on load)
# ---------------------------------------------------------------------------------------------------------


class _Open(BaseModel):
    """SportMonks objects copied from a real response: known fields typed, unknown ones kept verbatim."""

    model_config = ConfigDict(extra="allow")

    def to_json(self, resource: str) -> dict[str, Any]:
        return {"resource": resource, **self.model_dump(mode="json")}


class Team(_Open):
    id: int
    name: str
    code: str
    image_path: str | None = None
    country_id: int | None = None
    national_team: bool = False
    updated_at: str | None = None


class Position(_Open):
    id: int
    name: str


class Player(_Open):
    id: int
    country_id: int | None = None
    firstname: str = ""
    lastname: str = ""
    fullname: str
    image_path: str = "https://cdn.sportmonks.com/images/cricket/placeholder.png"
    dateofbirth: str | None = None
    gender: str = "m"
    battingstyle: str | None = None
    bowlingstyle: str | None = None
    position: Position | None = None
    updated_at: str | None = None

    def to_json(self, resource: str = "players") -> dict[str, Any]:
        data = super().to_json(resource)
        if self.position is not None:
            data["position"] = {"resource": "positions", **self.position.model_dump(mode="json")}
        return data


class Venue(_Open):
    id: int
    name: str
    country_id: int | None = None
    city: str | None = None
    image_path: str | None = None
    capacity: int | None = None
    floodlight: bool | None = None
    updated_at: str | None = None


class League(_Open):
    id: int
    name: str
    season_id: int | None = None
    country_id: int | None = None
    code: str | None = None
    image_path: str | None = None
    type: str | None = None
    updated_at: str | None = None


class Season(_Open):
    id: int
    name: str
    league_id: int | None = None
    code: str | None = None
    updated_at: str | None = None


class Stage(_Open):
    id: int
    name: str
    league_id: int | None = None
    season_id: int | None = None
    code: str | None = None
    type: str | None = None
    standings: bool = False
    updated_at: str | None = None


class LineupEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    player_id: int
    team_id: int
    captain: bool = False
    wicketkeeper: bool = False
    substitution: bool = False


class Toss(BaseModel):
    model_config = ConfigDict(extra="forbid")

    won_team_id: int
    elected: Literal["batting", "bowling"]


class TapeResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    winner_team_id: int | None = Field(default=None, description="None for a tie or no result")
    note: str = Field(description="the result text SportMonks shows in `note`")
    draw_noresult: str | None = None


class TapeBall(BaseModel):
    """One delivery as the feed posts it (the nested batsman/bowler/score/team objects are added on output)."""

    model_config = ConfigDict(extra="forbid")

    id: int
    scoreboard: str = Field(pattern=r"^S[1-9]$")
    team_id: int = Field(description="the batting side")
    ball: float = Field(ge=0, description="over.ball, e.g. 17.2")
    batsman_one_on_creeze_id: int
    batsman_two_on_creeze_id: int
    batsman_id: int
    bowler_id: int
    batsmanout_id: int | None = None
    catchstump_id: int | None = None
    runout_by_id: int | None = None
    score_id: int

    @field_validator("ball")
    @classmethod
    def _ball_in_over(cls, value: float) -> float:
        over, _, in_over = f"{value:.1f}".partition(".")
        if int(in_over) > 9:  # pragma: no cover - a one-decimal string cannot exceed 9
            raise ValueError("ball number after the dot must be 0-9")
        return round(value, 1)


class TapeEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op: Literal["ball", "correct", "delete"]
    ball: TapeBall | None = None
    ball_id: int | None = Field(default=None, description="the ball a `delete` withdraws")
    updated_at: datetime | None = Field(
        default=None, description="when the real feed stamped this change (recorded tapes)"
    )

    @model_validator(mode="after")
    def _shape(self) -> TapeEntry:
        if self.op in ("ball", "correct") and self.ball is None:
            raise ValueError(f"op {self.op!r} needs a `ball`")
        if self.op == "delete":
            if self.ball_id is None:
                raise ValueError("op 'delete' needs a `ball_id`")
            if self.ball is not None:
                raise ValueError("op 'delete' takes `ball_id`, not `ball`")
        return self

    @property
    def target_id(self) -> int:
        if self.ball is not None:
            return self.ball.id
        assert self.ball_id is not None
        return self.ball_id


class Tape(BaseModel):
    """A whole match as a feed history; see the module docstring for the format."""

    model_config = ConfigDict(extra="forbid")

    format_version: Literal[1] = 1
    source: str | None = Field(
        None, description="how the tape was made (synth seed, fixture file, recording)"
    )
    fixture_id: str = Field(pattern=r"^[0-9]{1,18}$")
    league_id: int
    season_id: int
    stage_id: int | None = None
    round: str | None = None
    type: Literal["T20", "T20I", "T10", "ODI", "List A"] = "T20"
    overs_per_innings: int = Field(default=0, ge=0, le=100, description="0 means: from `type`")
    starting_at: datetime
    localteam: Team
    visitorteam: Team
    venue: Venue | None = None
    league: League | None = None
    season: Season | None = None
    stage: Stage | None = None
    toss: Toss | None = None
    lineups: list[LineupEntry] = Field(default_factory=list)
    players: list[Player] = Field(default_factory=list)
    scores: list[Score] = Field(default_factory=list)
    fixture_fields: dict[str, Any] = Field(default_factory=dict)
    row_ids: dict[str, int] = Field(default_factory=dict)
    result: TapeResult | None = None
    ms_per_ball: float = Field(
        default=40_000.0, gt=0, description="pace at speed 1 (observed median ~40 s a ball)"
    )
    entries: list[TapeEntry] = Field(default_factory=list)
    # JSON of players and teams, which never change with the entries (so a copy with new entries may share it)
    _json_cache: dict[str, Any] = PrivateAttr(default_factory=dict)

    @field_validator("starting_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    @model_validator(mode="after")
    def _consistent(self) -> Tape:
        if not self.overs_per_innings:
            self.overs_per_innings = OVERS_BY_TYPE[self.type]
        team_ids = {self.localteam.id, self.visitorteam.id}
        if len(team_ids) != 2:
            raise ValueError("localteam and visitorteam must be different teams")
        if self.toss is not None and self.toss.won_team_id not in team_ids:
            raise ValueError(f"toss.won_team_id {self.toss.won_team_id} is neither team")
        if self.result is not None and self.result.winner_team_id not in (*team_ids, None):
            raise ValueError(f"result.winner_team_id {self.result.winner_team_id} is neither team")
        players = {p.id for p in self.players}
        scores = {**SCORES, **{s.id: s for s in self.scores}}
        for i, lineup in enumerate(self.lineups):
            if lineup.player_id not in players:
                raise ValueError(f"lineups[{i}].player_id {lineup.player_id} is not in `players`")
            if lineup.team_id not in team_ids:
                raise ValueError(f"lineups[{i}].team_id {lineup.team_id} is neither team")
        posted: set[int] = set()
        live: set[int] = set()
        for i, entry in enumerate(self.entries):
            where = f"entries[{i}]"
            if entry.ball is not None:
                b = entry.ball
                if b.score_id not in scores:
                    raise ValueError(f"{where}.ball.score_id {b.score_id} is not in the score catalogue")
                if b.team_id not in team_ids:
                    raise ValueError(f"{where}.ball.team_id {b.team_id} is neither team")
                for name in (
                    "batsman_id",
                    "bowler_id",
                    "batsman_one_on_creeze_id",
                    "batsman_two_on_creeze_id",
                ):
                    pid = getattr(b, name)
                    if pid not in players:
                        raise ValueError(f"{where}.ball.{name} {pid} is not in `players`")
            if entry.op == "ball":
                # ids are unique; they normally increase too, but a recorded feed can post a lower id late
                # (clients sort by id, spec §7), so only uniqueness is a hard rule
                if entry.target_id in posted:
                    raise ValueError(
                        f"{where}: ball id {entry.target_id} was already posted (ids are unique)"
                    )
                posted.add(entry.target_id)
                live.add(entry.target_id)
            else:
                if entry.target_id not in live:
                    state = "was deleted" if entry.target_id in posted else "was never posted"
                    raise ValueError(f"{where}: {entry.op} of ball {entry.target_id}, which {state}")
                if entry.op == "delete":
                    live.discard(entry.target_id)
        return self

    # --- lookups ------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.entries)

    def __eq__(self, other: object) -> bool:
        # the same tape whatever its render cache holds
        if not isinstance(other, Tape):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]

    @property
    def fixture_int_id(self) -> int:
        return int(self.fixture_id)

    def team(self, team_id: int) -> Team:
        return self.localteam if team_id == self.localteam.id else self.visitorteam

    def other_team_id(self, team_id: int) -> int:
        return self.visitorteam.id if team_id == self.localteam.id else self.localteam.id

    def score_catalogue(self) -> dict[int, Score]:
        return {**SCORES, **{s.id: s for s in self.scores}}

    def player_map(self) -> dict[int, Player]:
        return {p.id: p for p in self.players}

    def json_tables(self) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
        """Player and team objects as the feed nests them, built once per tape (callers copy before
        changing them)."""
        cache = self._json_cache
        if "players" not in cache:
            cache["players"] = {p.id: p.to_json() for p in self.players}
            cache["teams"] = {t.id: t.to_json("teams") for t in (self.localteam, self.visitorteam)}
        return cache["players"], cache["teams"]

    def ball_entry_indices(self) -> list[int]:
        """Indices of the entries that post a new delivery (corrections and deletions excluded)."""
        return [i for i, e in enumerate(self.entries) if e.op == "ball"]

    def entry_index_of_ball(self, ball_id: int) -> int | None:
        """The entry that first posted ``ball_id``."""
        for i, e in enumerate(self.entries):
            if e.op == "ball" and e.target_id == ball_id:
                return i
        return None

    def innings_break_index(self) -> int | None:
        """The cursor at which the first innings is over: the index of the first ball of the 2nd scoreboard.

        The replay server holds the cursor here for the innings break. None when the tape has one innings.
        """
        key = f"break:{id(self.entries)}:{len(self.entries)}"  # a tape with other entries has another list
        if key in self._json_cache:
            cached: int | None = self._json_cache[key]
            return cached
        first = next((e.ball.scoreboard for e in self.entries if e.op == "ball" and e.ball), None)
        found = None
        for i, e in enumerate(self.entries):
            if e.op == "ball" and e.ball is not None and e.ball.scoreboard != first:
                found = i
                break
        self._json_cache[key] = found
        return found

    def default_entry_times(self, *, innings_break_s: float = 1200.0) -> list[datetime]:
        """When each entry appears if nobody says otherwise: the recorded stamp, else the tape's own pace
        (``ms_per_ball`` from ``starting_at``, plus an innings break)."""
        brk = self.innings_break_index()
        out: list[datetime] = []
        for i, e in enumerate(self.entries):
            if e.updated_at is not None:
                out.append(
                    e.updated_at.astimezone(UTC) if e.updated_at.tzinfo else e.updated_at.replace(tzinfo=UTC)
                )
                continue
            offset_ms = (i + 1) * self.ms_per_ball + (
                innings_break_s * 1000 if brk is not None and i >= brk else 0
            )
            out.append(self.starting_at + timedelta(milliseconds=offset_ms))
        return out

    # --- the snapshot -------------------------------------------------------------------------------------

    def scorecard_at(self, cursor: int) -> Scorecard:
        """The balls and scorecard after the first ``cursor`` entries (pure; no timestamps)."""
        return rebuild(self, cursor)

    def fixture_at(
        self,
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
        shared, so it must not mutate the result's balls. ``scorecard`` is ``scorecard_at(cursor)`` when the
        caller already has it.
        """
        if not 0 <= cursor <= len(self.entries):
            raise TapeError(f"cursor {cursor} is outside 0..{len(self.entries)}")
        card = scorecard if scorecard is not None and scorecard.cursor == cursor else rebuild(self, cursor)
        wanted = _wanted_includes(include)
        times = _time_lookup(self, entry_times)
        fallback_now = now or self.starting_at
        return _render_fixture(
            self, card, status=status, wanted=wanted, times=times, now=fallback_now, ball_cache=ball_cache
        )


# ---------------------------------------------------------------------------------------------------------
# Pure rebuild: entries -> visible balls -> runs / batting / bowling (spec §7)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VisibleBall:
    ball: TapeBall
    entry_index: int  # the entry that last changed this ball (its `updated_at` comes from there)


@dataclass
class _Bat:
    player_id: int
    team_id: int
    sort: int
    balls: int = 0
    score: int = 0
    fours: int = 0
    sixes: int = 0
    out_ball: TapeBall | None = None
    out_score: Score | None = None
    fow_score: int = 0


@dataclass
class _Bowl:
    player_id: int
    team_id: int
    sort: int
    legal: int = 0
    runs: int = 0
    wickets: int = 0
    wide: int = 0
    noball: int = 0
    maidens: int = 0


@dataclass
class Innings:
    scoreboard: str
    team_id: int
    score: int = 0
    wickets: int = 0
    legal: int = 0
    batting: dict[int, _Bat] = field(default_factory=dict)
    bowling: dict[int, _Bowl] = field(default_factory=dict)

    @property
    def inning(self) -> int:
        return int(self.scoreboard[1:])


@dataclass
class Scorecard:
    """Everything derivable from the balls visible at a cursor."""

    cursor: int
    balls: list[VisibleBall]
    innings: list[Innings]
    complete: list[bool]  # per innings: all out, overs used up, or target passed
    last_entry_index: int | None  # the newest visible change (for aggregate `updated_at`)

    def innings_by_board(self, scoreboard: str) -> Innings | None:
        return next((inn for inn in self.innings if inn.scoreboard == scoreboard), None)


def visible_balls(tape: Tape, cursor: int) -> list[VisibleBall]:
    """Apply the first ``cursor`` entries: the ball list a client sees then, ordered by id."""
    current: dict[int, VisibleBall] = {}
    for i, entry in enumerate(tape.entries[:cursor]):
        if entry.op == "delete":
            current.pop(entry.target_id, None)
        else:
            assert entry.ball is not None
            current[entry.ball.id] = VisibleBall(entry.ball, i)
    return [current[k] for k in sorted(current)]


def _over_of(ball: float) -> tuple[int, int]:
    tenths = int(round(ball * 10))  # `ball` is rounded to one decimal on load, so this is exact
    return tenths // 10, tenths % 10


def rebuild(tape: Tape, cursor: int) -> Scorecard:
    scores = tape.score_catalogue()
    balls = visible_balls(tape, cursor)
    innings: dict[str, Innings] = {}
    # (scoreboard, over) -> [bowler ids seen, legal balls, bowler runs] for maidens
    overs: dict[tuple[str, int], tuple[set[int], list[int]]] = {}
    for vb in balls:
        b = vb.ball
        sc = scores[b.score_id]
        inn = innings.get(b.scoreboard)
        if inn is None:
            inn = innings[b.scoreboard] = Innings(b.scoreboard, b.team_id)
        # batting order = order of first appearance at the crease (a new batter takes the out batter's slot)
        for pid in (b.batsman_one_on_creeze_id, b.batsman_two_on_creeze_id, b.batsman_id):
            if pid not in inn.batting:
                inn.batting[pid] = _Bat(pid, b.team_id, len(inn.batting) + 1)
        if b.bowler_id not in inn.bowling:
            inn.bowling[b.bowler_id] = _Bowl(b.bowler_id, tape.other_team_id(b.team_id), len(inn.bowling) + 1)
        striker = inn.batting[b.batsman_id]
        bowler = inn.bowling[b.bowler_id]
        inn.score += sc.team_runs
        if not sc.is_wide:
            striker.balls += 1
        striker.score += sc.bat_runs
        striker.fours += int(sc.four)
        striker.sixes += int(sc.six)
        bowler.runs += sc.runs
        if sc.is_wide:
            bowler.wide += sc.runs
        bowler.noball += sc.noball
        if sc.is_legal:
            bowler.legal += 1
            inn.legal += 1
        over_key = (b.scoreboard, _over_of(b.ball)[0])
        bowlers_in_over, tally = overs.setdefault(over_key, (set(), [0, 0]))
        bowlers_in_over.add(b.bowler_id)
        tally[0] += int(sc.is_legal)
        tally[1] += sc.runs
        if sc.is_wicket:
            inn.wickets += 1
            if not sc.is_run_out:
                bowler.wickets += 1
            out_id = _dismissed(b)
            out = inn.batting.setdefault(out_id, _Bat(out_id, b.team_id, len(inn.batting) + 1))
            out.out_ball = b
            out.out_score = sc
            out.fow_score = inn.score
    for (board, _), (bowlers_in_over, (legal, runs)) in overs.items():
        if len(bowlers_in_over) == 1 and legal >= 6 and runs == 0:
            innings[board].bowling[next(iter(bowlers_in_over))].maidens += 1
    ordered = sorted(innings.values(), key=lambda inn: inn.inning)
    complete = [_innings_complete(tape, inn, ordered) for inn in ordered]
    last = max((vb.entry_index for vb in balls), default=None)
    if cursor and (last is None or last < cursor - 1):
        last = cursor - 1  # a deletion is a change too
    return Scorecard(cursor, balls, ordered, complete, last)


def _dismissed(b: TapeBall) -> int:
    """Who is out on a wicket ball: ``batsmanout_id`` when it names a batter at the crease, else the striker.

    The feed's ``batsmanout_id`` can be wrong (spec §9.4: 71344 ball 9.4 names a batter out since 3.3);
    a batter who is not at the crease cannot be dismissed, so that value is not trusted.
    """
    crease = {b.batsman_one_on_creeze_id, b.batsman_two_on_creeze_id, b.batsman_id}
    if b.batsmanout_id is not None and b.batsmanout_id in crease:
        return b.batsmanout_id
    return b.batsman_id


def _innings_complete(tape: Tape, inn: Innings, ordered: list[Innings]) -> bool:
    if inn.wickets >= 10 or inn.legal >= tape.overs_per_innings * 6:
        return True
    if inn.inning == 2 and ordered and ordered[0].inning == 1:
        return inn.score > ordered[0].score
    return False


# ---------------------------------------------------------------------------------------------------------
# Rendering to SportMonks JSON
# ---------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------
# From a real fixture response, and files
# ---------------------------------------------------------------------------------------------------------

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


def validate_tape(raw: Any, where: str) -> Tape:
    try:
        return Tape.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise TapeError(f"{where}: {loc or 'tape'}: {first['msg']} ({exc.error_count()} error(s))") from exc


def tape_to_json(tape: Tape) -> dict[str, Any]:
    data = tape.model_dump(mode="json", exclude_none=True)
    # keep entries compact: nulls in balls are the default anyway
    return data


def load_tape(path: str | Path) -> Tape:
    """Read a tape (``.json`` or ``.json.gz``); errors name the file and the offending field."""
    path = Path(path)
    try:
        raw_bytes = path.read_bytes()
        if path.name.endswith(".gz"):
            raw_bytes = gzip.decompress(raw_bytes)
        raw = json.loads(raw_bytes)
    except OSError as exc:
        raise TapeError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError, gzip.BadGzipFile, EOFError) as exc:
        raise TapeError(f"{path}: not a JSON tape: {exc}") from exc
    return validate_tape(raw, str(path))


def save_tape(tape: Tape, path: str | Path) -> None:
    """Write a tape atomically (a temporary file renamed into place); gzip when the name ends ``.gz``."""
    path = Path(path)
    body = json.dumps(tape_to_json(tape), separators=(",", ":"), ensure_ascii=False).encode()
    if path.name.endswith(".gz"):
        body = gzip.compress(body, mtime=0)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(body)
    tmp.replace(path)


def builtin_tape_path(name: str = "t20-demo") -> Path:
    """A tape shipped inside the package (``daemon/replay/tapes/<name>.json[.gz]``)."""
    for candidate in (TAPES_DIR / f"{name}.json", TAPES_DIR / f"{name}.json.gz", TAPES_DIR / name):
        if candidate.is_file():
            return candidate
    known = sorted(p.name.split(".")[0] for p in TAPES_DIR.glob("*.json*"))
    raise TapeError(f"no built-in tape {name!r} (have: {', '.join(known) or 'none'})")


def iter_cursors(tape: Tape) -> Iterable[int]:
    """Every cursor from an empty feed to the whole tape."""
    return range(len(tape.entries) + 1)
