"""The tape format: a whole cricket match as the SportMonks ball feed delivered it.

The tape is a pydantic model validated on load (tapes are files anyone can hand us). The snapshot at a
cursor is ``scorecard`` (the pure rebuild) and ``render`` (SportMonks JSON); ``files`` reads and writes
tapes; ``convert`` makes them from real fixture responses. None of them knows about clocks, HTTP or the
daemon: the replay server decides *which* cursor and *when* each entry became visible.

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

from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from daemon.replay.tape.scores import SCORES, Score
from daemon.replay.tape.terms import (
    OVERS_BY_TYPE,
    TapeResult,
)

if TYPE_CHECKING:
    from daemon.replay.tape.scorecard import Scorecard


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
    gap_ms: float | None = Field(
        default=None,
        ge=0,
        description="match time since the previous entry (the first: since the start); unset: ms_per_ball",
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
        default=40_000.0,
        gt=0,
        description="pace at speed 1: the mean gap between entries (each entry's own gap_ms, when the tape "
        "has them, keeps its share of it)",
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

    def entry_index_of_wicket(self, ball_id: int) -> int | None:
        """The entry from which ``ball_id`` stands as a wicket (its score is a wicket and it names the batter
        out) to the end of the tape: the ball's first posting, or the correction that gave a wicket late;
        None when it does not stand at the end (never a wicket, overturned, or deleted)."""
        scores = self.score_catalogue()
        since: int | None = None
        for i, e in enumerate(self.entries):
            if e.target_id != ball_id:
                continue
            ball = e.ball
            score = scores.get(ball.score_id) if ball is not None else None
            if ball is None or score is None or not (score.is_wicket and ball.batsmanout_id):
                since = None
            elif since is None:
                since = i
        return since

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

    def entry_offsets_ms(self, ms_per_ball: float | None = None) -> list[float]:
        """Match time at which each entry falls due, before any innings break: the running sum of the entries'
        gaps (``gap_ms``, else ``ms_per_ball``). ``ms_per_ball`` other than the tape's scales every gap, so the
        pace changes and the shape of the gaps stays."""
        scale = 1.0 if ms_per_ball is None else ms_per_ball / self.ms_per_ball
        out: list[float] = []
        at = 0.0
        for e in self.entries:
            at += (self.ms_per_ball if e.gap_ms is None else e.gap_ms) * scale
            out.append(at)
        return out

    def default_entry_times(self, *, innings_break_s: float = 1200.0) -> list[datetime]:
        """When each entry appears if nobody says otherwise: the recorded stamp, else the tape's own pace
        (its gaps from ``starting_at``, plus an innings break)."""
        brk = self.innings_break_index()
        out: list[datetime] = []
        for i, (e, offset_ms) in enumerate(zip(self.entries, self.entry_offsets_ms(), strict=True)):
            if e.updated_at is not None:
                out.append(
                    e.updated_at.astimezone(UTC) if e.updated_at.tzinfo else e.updated_at.replace(tzinfo=UTC)
                )
                continue
            offset_ms += innings_break_s * 1000 if brk is not None and i >= brk else 0
            out.append(self.starting_at + timedelta(milliseconds=offset_ms))
        return out

    # --- the snapshot -------------------------------------------------------------------------------------

    def scorecard_at(self, cursor: int) -> Scorecard:
        """The balls and scorecard after the first ``cursor`` entries (pure; no timestamps)."""
        # The rebuild reads the model, so it is imported on use rather than at the top of this module.
        from daemon.replay.tape.scorecard import rebuild

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
        """The SportMonks fixture object after the first ``cursor`` entries: ``render.fixture_at``."""
        from daemon.replay.tape.render import fixture_at

        return fixture_at(
            self,
            cursor,
            status=status,
            include=include,
            now=now,
            entry_times=entry_times,
            ball_cache=ball_cache,
            scorecard=scorecard,
        )
