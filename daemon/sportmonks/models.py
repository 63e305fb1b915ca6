"""Pydantic models of SportMonks cricket v2.0 responses: the edge where untrusted JSON enters the daemon.

Owns the shape checks of every response the client returns (fixtures with their includes, teams, leagues,
seasons, players with careers, standings, the list/paginated envelopes) and the one function that turns a
pydantic ``ValidationError`` into field paths a human can act on. It must not do I/O, and it does not convert
the data: callers keep the plain JSON dicts (the exact SportMonks shape that the match engine and the replay
server share); these models only vouch for them.

Validation policy (spec §5, §9):
- Unknown fields are kept and ignored (``extra="allow"``): SportMonks adds fields, and sparse fieldsets drop
  them, so almost every field is optional.
- Types are checked strictly when a value is present: ``"12"`` for an integer, ``1`` for a boolean or a number
  for a string is malformed. Numbers that switch between int and float in the real data (``overs: 4`` vs
  ``3.4``, ``rate``, ``ball``, ``fow_balls``) are typed ``float``, which accepts both.
- ``null`` is accepted everywhere except for the few fields without which an object is meaningless to the
  engine: every object's ``id``; a ball's ``ball``, ``scoreboard`` and ``team_id``; an innings total's
  ``team_id``, ``inning``, ``score``, ``wickets`` and ``overs``.
- Includes may arrive bare or wrapped as ``{"data": ...}`` (spec §9.11); ``unwrap_includes`` normalises the
  raw JSON to the bare form before validation, so callers only ever see bare includes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

# ----------------------------------------------------------------------------------------------------------
# Base


class SportMonksModel(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    resource: str | None = None
    updated_at: str | None = None


# ----------------------------------------------------------------------------------------------------------
# Reference objects


class Position(SportMonksModel):
    id: int
    name: str | None = None


class Team(SportMonksModel):
    id: int
    name: str | None = None
    code: str | None = None
    image_path: str | None = None
    country_id: int | None = None
    national_team: bool | None = None


class Venue(SportMonksModel):
    id: int
    country_id: int | None = None
    name: str | None = None
    city: str | None = None
    image_path: str | None = None
    capacity: int | None = None
    floodlight: bool | None = None


class Stage(SportMonksModel):
    id: int
    league_id: int | None = None
    season_id: int | None = None
    name: str | None = None
    code: str | None = None
    type: str | None = None
    standings: bool | None = None


class LineupInfo(SportMonksModel):
    """The ``lineup`` object a player carries inside a fixture's ``lineup[]`` include."""

    team_id: int | None = None
    captain: bool | None = None
    wicketkeeper: bool | None = None
    substitution: bool | None = None


class CareerBatting(SportMonksModel):
    matches: int | None = None
    innings: int | None = None
    runs_scored: int | None = None
    not_outs: int | None = None
    highest_inning_score: int | None = None
    strike_rate: float | None = None
    balls_faced: int | None = None
    average: float | None = None
    four_x: int | None = None
    six_x: int | None = None
    fow_score: float | None = None
    fow_balls: float | None = None
    hundreds: int | None = None
    fifties: int | None = None


class CareerBowling(SportMonksModel):
    matches: int | None = None
    overs: float | None = None
    innings: int | None = None
    average: float | None = None
    econ_rate: float | None = None
    medians: int | None = None
    runs: int | None = None
    wickets: int | None = None
    wide: int | None = None
    noball: int | None = None
    strike_rate: float | None = None
    four_wickets: int | None = None
    five_wickets: int | None = None
    ten_wickets: int | None = None
    rate: float | None = None


class Career(SportMonksModel):
    type: str | None = None
    season_id: int | None = None
    player_id: int | None = None
    batting: CareerBatting | None = None
    bowling: CareerBowling | None = None


class Player(SportMonksModel):
    id: int
    country_id: int | None = None
    firstname: str | None = None
    lastname: str | None = None
    fullname: str | None = None
    image_path: str | None = None
    dateofbirth: str | None = None
    gender: str | None = None
    battingstyle: str | None = None
    bowlingstyle: str | None = None
    position: Position | None = None
    lineup: LineupInfo | None = None
    career: list[Career] | None = None


class Season(SportMonksModel):
    id: int
    league_id: int | None = None
    name: str | None = None
    code: str | None = None
    league: League | None = None
    teams: list[Team] | None = None
    stages: list[Stage] | None = None
    fixtures: list[Fixture] | None = None


class League(SportMonksModel):
    id: int
    season_id: int | None = None
    country_id: int | None = None
    name: str | None = None
    code: str | None = None
    image_path: str | None = None
    type: str | None = None
    season: Season | None = None
    seasons: list[Season] | None = None


# ----------------------------------------------------------------------------------------------------------
# Scoring objects (spec §5, §6)


class Score(SportMonksModel):
    """An entry of the score catalogue (what happened on a ball)."""

    id: int
    name: str | None = None
    runs: int | None = None
    four: bool | None = None
    six: bool | None = None
    bye: int | None = None
    leg_bye: int | None = None
    noball: int | None = None
    noball_runs: int | None = None
    is_wicket: bool | None = None
    ball: bool | None = None
    out: bool | None = None


class Ball(SportMonksModel):
    id: int
    fixture_id: int | None = None
    team_id: int
    ball: float
    scoreboard: str
    batsman_one_on_creeze_id: int | None = None
    batsman_two_on_creeze_id: int | None = None
    batsman_id: int | None = None
    bowler_id: int | None = None
    batsmanout_id: int | None = None
    catchstump_id: int | None = None
    runout_by_id: int | None = None
    score_id: int | None = None
    batsman: Player | None = None
    bowler: Player | None = None
    batsmanout: Player | None = None
    catchstump: Player | None = None
    runoutby: Player | None = None
    batsmanone: Player | None = None
    batsmantwo: Player | None = None
    score: Score | None = None
    team: Team | None = None


class Run(SportMonksModel):
    """An innings total (``runs[]`` include)."""

    id: int
    fixture_id: int | None = None
    team_id: int
    inning: int
    score: int
    wickets: int
    overs: float
    pp1: str | None = None
    pp2: str | None = None
    pp3: str | None = None


class Batting(SportMonksModel):
    id: int
    sort: int | None = None
    fixture_id: int | None = None
    team_id: int | None = None
    active: bool | None = None
    scoreboard: str | None = None
    player_id: int | None = None
    wicket_id: int | None = None
    ball: int | None = None
    score_id: int | None = None
    score: int | None = None
    four_x: int | None = None
    six_x: int | None = None
    catch_stump_player_id: int | None = None
    runout_by_id: int | None = None
    batsmanout_id: int | None = None
    bowling_player_id: int | None = None
    fow_score: int | None = None
    fow_balls: float | None = None
    rate: float | None = None
    batsman: Player | None = None


class Bowling(SportMonksModel):
    id: int
    sort: int | None = None
    fixture_id: int | None = None
    team_id: int | None = None
    active: bool | None = None
    scoreboard: str | None = None
    player_id: int | None = None
    overs: float | None = None
    medians: int | None = None
    runs: int | None = None
    wickets: int | None = None
    wide: int | None = None
    noball: int | None = None
    rate: float | None = None
    bowler: Player | None = None


class Scoreboard(SportMonksModel):
    id: int
    fixture_id: int | None = None
    team_id: int | None = None
    type: str | None = None
    scoreboard: str | None = None
    wide: int | None = None
    noball_runs: int | None = None
    noball_balls: int | None = None
    bye: int | None = None
    leg_bye: int | None = None
    penalty: int | None = None
    total: int | None = None
    overs: float | None = None
    wickets: int | None = None


class DLData(SportMonksModel):
    score: int | None = None
    overs: float | None = None
    wickets_out: int | None = None


class Fixture(SportMonksModel):
    id: int
    league_id: int | None = None
    season_id: int | None = None
    stage_id: int | None = None
    round: str | None = None
    localteam_id: int | None = None
    visitorteam_id: int | None = None
    starting_at: str | None = None
    type: str | None = None
    live: bool | None = None
    status: str | None = None
    last_period: str | None = None
    note: str | None = None
    venue_id: int | None = None
    toss_won_team_id: int | None = None
    winner_team_id: int | None = None
    draw_noresult: str | None = None
    first_umpire_id: int | None = None
    second_umpire_id: int | None = None
    tv_umpire_id: int | None = None
    referee_id: int | None = None
    man_of_match_id: int | None = None
    man_of_series_id: int | None = None
    total_overs_played: int | None = None
    elected: str | None = None
    super_over: bool | None = None
    follow_on: bool | None = None
    localteam_dl_data: DLData | None = None
    visitorteam_dl_data: DLData | None = None
    rpc_overs: float | None = None
    rpc_target: float | None = None
    weather_report: list[Any] | None = None
    # includes
    league: League | None = None
    season: Season | None = None
    stage: Stage | None = None
    venue: Venue | None = None
    localteam: Team | None = None
    visitorteam: Team | None = None
    tosswon: Team | None = None
    winnerteam: Team | None = None
    runs: list[Run] | None = None
    batting: list[Batting] | None = None
    bowling: list[Bowling] | None = None
    scoreboards: list[Scoreboard] | None = None
    lineup: list[Player] | None = None
    balls: list[Ball] | None = None
    manofmatch: Player | None = None
    manofseries: Player | None = None


class Standing(SportMonksModel):
    legend_id: int | None = None
    team_id: int
    stage_id: int | None = None
    season_id: int | None = None
    league_id: int | None = None
    position: int | None = None
    points: int | None = None
    played: int | None = None
    won: int | None = None
    lost: int | None = None
    draw: int | None = None
    noresult: int | None = None
    runs_for: int | None = None
    overs_for: float | None = None
    runs_against: int | None = None
    overs_against: float | None = None
    netto_run_rate: float | None = None
    recent_form: list[str] | None = None
    legend: Any = None


Season.model_rebuild()
League.model_rebuild()

# ----------------------------------------------------------------------------------------------------------
# Envelopes (spec §2)


class Links(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    first: str | None = None
    last: str | None = None
    prev: str | None = None
    next: str | None = None


class Meta(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    current_page: int | None = None
    last_page: int | None = None
    per_page: int | None = None
    total: int | None = None


class Envelope(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    links: Links | None = None
    meta: Meta | None = None


class FixtureEnvelope(Envelope):
    data: Fixture


class FixtureListEnvelope(Envelope):
    data: list[Fixture]


class TeamListEnvelope(Envelope):
    data: list[Team]


class LeagueListEnvelope(Envelope):
    data: list[League]


class SeasonEnvelope(Envelope):
    data: Season


class PlayerEnvelope(Envelope):
    data: Player


class StandingListEnvelope(Envelope):
    data: list[Standing]


class ObjectListEnvelope(Envelope):
    """Only the list shape, items unchecked: used to split /livescores before checking fixture by fixture."""

    data: list[dict[str, Any]]


# ----------------------------------------------------------------------------------------------------------
# Normalisation and error reporting

_ENVELOPE_KEYS = frozenset({"data", "meta", "links"})


def _is_wrapper(value: Any) -> bool:
    return isinstance(value, dict) and "data" in value and value.keys() <= _ENVELOPE_KEYS


def may_have_wrapped_includes(text: str | bytes) -> bool:
    """Cheap pre-check on the raw body: a ``"data"`` key beyond the envelope's own means a wrapped include.

    Inside JSON strings a quote is escaped (``\\"data\\"``), so the literal ``"data"`` only occurs as a key.
    """
    needle: Any = b'"data"' if isinstance(text, bytes) else '"data"'
    return text.count(needle) > 1


def unwrap_includes(value: Any, *, _top: bool = True) -> Any:
    """Return ``value`` with every ``{"data": X}``-wrapped include replaced by bare ``X`` (recursively).

    The top-level response envelope is left alone. Objects that need no change are returned as they are
    (no copy), so the common bare case costs one walk and no allocation.
    """
    if isinstance(value, list):
        items = [unwrap_includes(item, _top=False) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if not isinstance(value, dict):
        return value
    changed: dict[str, Any] = {}
    for key, item in value.items():
        if not _top and _is_wrapper(item):
            new = unwrap_includes(item["data"], _top=False)
        elif isinstance(item, dict | list):
            new = unwrap_includes(item, _top=False)
        else:
            continue
        if new is not item:
            changed[key] = new
    if not changed:
        return value
    return {key: changed.get(key, item) for key, item in value.items()}


_EXPECTED = {
    "int_type": "expected integer",
    "int_parsing": "expected integer",
    "int_from_float": "expected integer",
    "float_type": "expected number",
    "float_parsing": "expected number",
    "string_type": "expected string",
    "bool_type": "expected boolean",
    "bool_parsing": "expected boolean",
    "list_type": "expected list",
    "dict_type": "expected object",
    "model_type": "expected object",
    "model_attributes_type": "expected object",
    "missing": "required field is missing",
}

_JSON_TYPE = {
    type(None): "null",
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "list",
    dict: "object",
}


def field_path(loc: tuple[int | str, ...]) -> str:
    """``('data', 0, 'runs', 1, 'score')`` -> ``'data[0].runs[1].score'``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "payload"


def _describe_input(value: Any) -> str:
    kind = _JSON_TYPE.get(type(value), type(value).__name__)
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        text = repr(value)
        return f"{kind} {text[:40] + '…' if len(text) > 40 else text}"
    if isinstance(value, bool):
        return f"{kind} {'true' if value else 'false'}"
    return kind


def describe_validation_error(exc: ValidationError, *, prefix: tuple[int | str, ...] = ()) -> list[str]:
    """One ``"<path>: <problem>"`` line per error, e.g. ``"data[0].runs[1].score: expected integer, got string '12'"``."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = prefix + tuple(err["loc"])
        what = _EXPECTED.get(err["type"], err["msg"])
        if err["type"] == "missing":
            problems.append(f"{field_path(loc)}: {what}")
        else:
            problems.append(f"{field_path(loc)}: {what}, got {_describe_input(err.get('input'))}")
    return problems
