"""A SportMonks fixture as a typed, immutable match snapshot.

Owns the one translation from the raw SportMonks fixture (``/fixtures/{id}`` or a ``/livescores`` item, with
whatever includes the Feed asked for) to ``MatchSnapshot``. Pure: no I/O, no clock, no state. It must not
decide anything about events or display; it only reads the feed faithfully, applying the feed's known
quirks (spec/sportmonks-api.md §6, §7, §9):

- balls are ordered by ``id`` (``ball`` repeats for extras and ``updated_at`` is not monotonic);
- legal delivery = not a wide and ``noball == 0`` (``score.ball`` is true on no-balls);
- runs charged to the bowler = ``score.runs``; team runs = ``runs + bye + leg_bye``; bat runs = ``runs`` minus
  the no-ball penalty, 0 on a wide;
- ``batsmanout_id`` can be wrong (71344 ball 9.4 names a batter already out): the dismissed batter is taken
  from the batting table's ``fow_balls`` when it names one, else ``batsmanout_id`` when that batter is at the
  crease, else the striker;
- includes may come bare or wrapped in ``{"data": ...}``;
- ``overs`` floats (``3.4``) are read as completed overs + balls, never as a decimal.

Malformed input raises ``SnapshotError`` naming the field (``balls[12].score.runs``); the caller keeps its
last good state and skips the tick. Well-formed but impossible cricket raises ``ImplausibleSnapshot`` (a
``SnapshotError``) the same way: a negative count, more than 10 wickets, an over with more than 6 legal balls
(``overs = 3.7``), more overs than the format allows (``scheduled_overs``, else 50 for limited overs and
``MULTI_DAY_MAX_OVERS`` an innings otherwise), more runs than ``MAX_RUNS_PER_BALL`` a legal ball plus
``MAX_RUNS_SLACK`` (``runs.score = 10**40``), or an innings number past the format's. The check is on this
snapshot alone; how far a score may go *back* between ticks is the engine's (it knows the previous state).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from daemon.cricket.errors import EngineError
from daemon.cricket.order import epoch, newest_instant, unwrap

PHASES: tuple[str, ...] = ("pre", "live", "innings_break", "completed", "abandoned")
FINAL_PHASES: frozenset[str] = frozenset({"completed", "abandoned"})

_LIVE_STATUSES = ("1st Innings", "2nd Innings", "3rd Innings", "4th Innings")
_BREAK_STATUSES = ("Innings Break",)
_COMPLETED_STATUSES = {"Finished"}
_ABANDONED_STATUSES = {"Aban.", "Cancl.", "Postp."}
# Play has stopped for a while but the match is on: shown as live once a ball has been bowled, else pre.
_PAUSE_STATUSES = (
    "Stump Day 1",
    "Stump Day 2",
    "Stump Day 3",
    "Stump Day 4",
    "Lunch",
    "Tea Break",
    "Dinner",
    "Delayed",
    "Int.",
)
UNDER_WAY_STATUSES: tuple[str, ...] = _LIVE_STATUSES + _BREAK_STATUSES + _PAUSE_STATUSES
"""Every status of a match being played (spec §6: all but NS and the terminal ones)."""
_NOT_STARTED = {"NS", ""}
_NOT_OUT_SCORE_ID = 84
_MULTI_DAY_TYPES = {"Test", "Test/5day", "4day"}

# Every field the snapshot reads, per SportMonks resource (the ``resource`` of each object): what a sparse
# answer (``fields[...]``) must carry for the engine to see the match as the full answer shows it.
# tests/cricket/test_snapshot_fields.py cuts fixtures to these and checks the snapshot is the same.
FIELDS_READ: dict[str, tuple[str, ...]] = {
    "fixtures": (
        "id",
        "status",
        "league_id",
        "type",
        "round",
        "localteam_id",
        "visitorteam_id",
        "note",
        "winner_team_id",
        "draw_noresult",
        "toss_won_team_id",
        "elected",
        "total_overs_played",
        "rpc_target",
        "rpc_overs",
        "updated_at",
        "starting_at",
    ),
    "teams": ("id", "name", "code"),
    "players": ("id", "firstname", "lastname", "fullname"),
    "runs": ("inning", "team_id", "score", "wickets", "overs", "updated_at"),
    "battings": (
        "player_id",
        "team_id",
        "scoreboard",
        "sort",
        "score",
        "ball",
        "four_x",
        "six_x",
        "score_id",
        "wicket_id",
        "fow_balls",
        "fow_score",
        "catch_stump_player_id",
        "runout_by_id",
        "bowling_player_id",
        "updated_at",
    ),
    "bowlings": (
        "player_id",
        "team_id",
        "scoreboard",
        "sort",
        "overs",
        "medians",
        "runs",
        "wickets",
        "updated_at",
    ),
    "balls": (
        "id",
        "scoreboard",
        "ball",
        "team_id",
        "batsman_id",
        "bowler_id",
        "batsman_one_on_creeze_id",
        "batsman_two_on_creeze_id",
        "batsmanout_id",
        "catchstump_id",
        "runout_by_id",
        "score_id",
        "updated_at",
    ),
    "scores": (
        "id",
        "name",
        "runs",
        "four",
        "six",
        "bye",
        "leg_bye",
        "noball",
        "noball_runs",
        "is_wicket",
        "ball",
    ),
}


# Cricket's bounds, for the plausibility check. Generous on purpose: they must never refuse real cricket
# (the highest totals run at under 3 runs a legal ball; the longest Test innings lasted 335 overs).
MAX_WICKETS = 10
BALLS_PER_OVER = 6
LIMITED_MAX_OVERS = 50
MULTI_DAY_MAX_OVERS = 500
MAX_RUNS_PER_BALL = 10  # per legal ball, with no-balls, wides and overthrows around it
MAX_RUNS_SLACK = 60  # extras before the first legal balls
MAX_BALL_RUNS = 14  # one delivery: a no-ball hit for six with overthrows is about the most there is
LIMITED_MAX_INNINGS = 6  # two innings and up to two super overs each side
MULTI_DAY_MAX_INNINGS = 4


class SnapshotError(EngineError):
    """A SportMonks fixture the engine cannot read; ``field`` names the offending field."""

    def __init__(self, field_path: str, reason: str) -> None:
        super().__init__(f"{field_path}: {reason}")
        self.field = field_path
        self.reason = reason


class ImplausibleSnapshot(SnapshotError):
    """A well-formed fixture whose numbers cricket cannot produce; skipped like a malformed one."""


@dataclass(frozen=True)
class Team:
    id: str
    name: str
    code: str


@dataclass(frozen=True)
class InningsScore:
    inning: int
    scoreboard: str
    team_id: str
    runs: int
    wickets: int
    legal_balls: int

    @property
    def overs(self) -> str:
        return format_overs(self.legal_balls)

    @property
    def score(self) -> str:
        return f"{self.runs}/{self.wickets}" if self.wickets < 10 else f"{self.runs}"


@dataclass(frozen=True)
class BatterLine:
    player_id: str
    team_id: str
    scoreboard: str
    sort: int
    runs: int
    balls: int
    fours: int
    sixes: int
    out: bool
    dismissal_score_id: int | None
    fielder_id: str | None
    bowler_id: str | None
    fow_score: int
    fow_over: str | None


@dataclass(frozen=True)
class BowlerLine:
    player_id: str
    team_id: str
    scoreboard: str
    sort: int
    legal_balls: int
    maidens: int
    runs: int
    wickets: int

    @property
    def overs(self) -> str:
        return format_overs(self.legal_balls)

    @property
    def figures(self) -> str:
        return f"{self.wickets}-{self.runs} ({self.overs})"


@dataclass(frozen=True)
class Ball:
    """One delivery. ``over`` is the feed's ``ball`` formatted to one decimal ("18.3")."""

    id: int
    scoreboard: str
    over: str
    team_id: str
    batsman_id: str
    bowler_id: str
    out_id: str | None
    crease: tuple[str, ...]
    score_id: int
    score_name: str
    runs: int
    bye: int
    leg_bye: int
    noball: int
    noball_runs: int
    four: bool
    six: bool
    is_wicket: bool
    wide: bool
    run_out: bool
    fielder_id: str | None

    @property
    def legal(self) -> bool:
        return not self.wide and self.noball == 0

    @property
    def bat_runs(self) -> int:
        if self.wide:
            return 0
        if self.noball:
            return max(0, self.runs - self.noball_runs)
        return self.runs

    @property
    def team_runs(self) -> int:
        return self.runs + self.bye + self.leg_bye

    @property
    def bowler_wicket(self) -> bool:
        """A wicket credited to the bowler: run outs (and retirements, obstruction) are not."""
        if not self.is_wicket or self.run_out:
            return False
        name = self.score_name.lower()
        return "retired" not in name and "obstruct" not in name

    @property
    def over_index(self) -> int:
        return int(self.over.split(".")[0])

    @property
    def ball_in_over(self) -> int:
        return int(self.over.split(".")[1])

    @property
    def faced(self) -> bool:
        """Counts as a ball faced by the striker (wides do not)."""
        return not self.wide

    @property
    def symbol(self) -> str:
        """How the ball shows in the over's strip: "0", "4", "6", "W", "1wd", "nb", "2lb", "1b"."""
        if self.is_wicket:
            return "W"
        if self.wide:
            return f"{self.runs}wd" if self.runs != 1 else "wd"
        if self.noball:
            extra = self.bat_runs + self.bye + self.leg_bye
            return f"{extra}nb" if extra else "nb"
        if self.bye:
            return f"{self.bye}b"
        if self.leg_bye:
            return f"{self.leg_bye}lb"
        return str(self.runs)


@dataclass(frozen=True)
class MatchSnapshot:
    fixture_id: str
    status: str
    phase: str
    league_id: str | None
    fixture_type: str
    round: str
    localteam: Team
    visitorteam: Team
    innings: tuple[InningsScore, ...]
    batting: tuple[BatterLine, ...]
    bowling: tuple[BowlerLine, ...]
    balls: tuple[Ball, ...]
    note: str
    winner_team_id: str | None
    draw_noresult: str | None
    toss_won_team_id: str | None
    elected: str | None
    scheduled_overs: int | None
    rpc_target: int | None
    rpc_overs: float | None
    updated_at: int | None  # the newest row's updated_at, whole seconds (the engine's clock)
    starting_at: int | None
    players: Mapping[str, str] = field(default_factory=dict, compare=False)
    stamped_at: float | None = None  # the same to the microsecond: what orders fixtures (``order``)

    # ---- derived views used by detectors and the display -------------------------------------------------
    @property
    def final(self) -> bool:
        return self.phase in FINAL_PHASES

    @property
    def limited_overs(self) -> bool:
        return self.fixture_type not in _MULTI_DAY_TYPES

    @property
    def current_innings(self) -> InningsScore | None:
        return self.innings[-1] if self.innings else None

    @property
    def current_scoreboard(self) -> str | None:
        boards = [i.scoreboard for i in self.innings]
        boards += [b.scoreboard for b in self.balls[-1:]]
        return max(boards, key=_board_order) if boards else None

    def team(self, team_id: str | None) -> Team | None:
        for team in (self.localteam, self.visitorteam):
            if team.id == team_id:
                return team
        return None

    def other_team(self, team_id: str | None) -> Team | None:
        if team_id == self.localteam.id:
            return self.visitorteam
        if team_id == self.visitorteam.id:
            return self.localteam
        return None

    def name(self, player_id: str | None) -> str:
        if not player_id:
            return "?"
        return self.players.get(player_id) or f"#{player_id}"

    def innings_for(self, scoreboard: str) -> InningsScore | None:
        for inns in self.innings:
            if inns.scoreboard == scoreboard:
                return inns
        return None

    def batter(self, scoreboard: str, player_id: str) -> BatterLine | None:
        for line in self.batting:
            if line.scoreboard == scoreboard and line.player_id == player_id:
                return line
        return None

    def bowler(self, scoreboard: str, player_id: str) -> BowlerLine | None:
        for line in self.bowling:
            if line.scoreboard == scoreboard and line.player_id == player_id:
                return line
        return None

    def balls_in(self, scoreboard: str) -> tuple[Ball, ...]:
        return tuple(b for b in self.balls if b.scoreboard == scoreboard)

    @property
    def is_last_innings(self) -> bool:
        """The current innings is the one that can finish the match (2nd of a limited-overs match, 4th Test)."""
        inns = self.current_innings
        if inns is None:
            return False
        return inns.inning >= (2 if self.limited_overs else 4)

    @property
    def target(self) -> int | None:
        """Runs the side batting last needs, when the current innings is a chase."""
        inns = self.current_innings
        if inns is None or not self.is_last_innings:
            return None
        if self.rpc_target:
            return self.rpc_target
        against = sum(i.runs for i in self.innings if i.team_id != inns.team_id)
        own_before = sum(i.runs for i in self.innings if i.team_id == inns.team_id and i.inning < inns.inning)
        return against - own_before + 1

    @property
    def balls_per_innings(self) -> int | None:
        if not self.limited_overs:
            return None
        if self.rpc_overs:
            return overs_to_balls(self.rpc_overs)
        return self.scheduled_overs * 6 if self.scheduled_overs else None


# ---- formatting helpers shared by the engine ------------------------------------------------------------
def format_overs(legal_balls: int) -> str:
    overs, balls = divmod(max(0, legal_balls), 6)
    return f"{overs}.{balls}" if balls else f"{overs}"


def overs_to_balls(overs: float | int) -> int:
    """3.4 -> 22 legal balls. Rounded first because 18.4 is stored as 18.399999…"""
    text = f"{float(overs):.1f}"
    whole, part = text.split(".")
    return int(whole) * 6 + int(part)


def _overs_checked(value: float, path: str) -> int:
    """Legal balls from an ``overs`` value, refusing a ball part past the over's last ball (``3.7``)."""
    part = int(f"{float(value):.1f}".split(".")[1])
    if part >= BALLS_PER_OVER:
        raise ImplausibleSnapshot(path, f"{value!r} is not overs.balls (at most {BALLS_PER_OVER - 1} balls)")
    return overs_to_balls(value)


def _board_order(board: str) -> tuple[int, str]:
    digits = "".join(ch for ch in board if ch.isdigit())
    return (int(digits) if digits else 0, board)


# ---- parsing --------------------------------------------------------------------------------------------
def _req(obj: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in obj or obj[key] is None:
        raise SnapshotError(f"{path}.{key}" if path else key, "missing")
    return obj[key]


def _int(obj: Mapping[str, Any], key: str, path: str, default: int | None = None) -> int:
    value = obj.get(key)
    if type(value) is int:  # the common case, first: a fixture has thousands of these
        return value
    where = f"{path}.{key}" if path else key
    if value is None:
        if default is None:
            raise SnapshotError(where, "missing")
        return default
    if isinstance(value, bool):
        raise SnapshotError(where, f"expected a number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise SnapshotError(where, f"expected an integer, got {value!r}")


def _num(obj: Mapping[str, Any], key: str, path: str, default: float | None = None) -> float:
    where = f"{path}.{key}" if path else key
    value = obj.get(key)
    if value is None:
        if default is None:
            raise SnapshotError(where, "missing")
        return default
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SnapshotError(where, f"expected a number, got {value!r}")
    try:
        number = float(value)
    except ValueError as exc:
        raise SnapshotError(where, f"expected a number, got {value!r}") from exc
    if not math.isfinite(number) or number < 0:
        raise SnapshotError(where, f"expected a finite number >= 0, got {value!r}")
    return number


def _id(obj: Mapping[str, Any], key: str, path: str, *, required: bool = True) -> str | None:
    value = obj.get(key)
    if type(value) is int:
        return str(value)
    if value is None:
        if required:
            raise SnapshotError(f"{path}.{key}" if path else key, "missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int | str) or str(value) == "":
        raise SnapshotError(f"{path}.{key}" if path else key, f"expected an id, got {value!r}")
    return str(value)


def _str(obj: Mapping[str, Any], key: str, default: str = "") -> str:
    value = obj.get(key)
    return value if isinstance(value, str) else default


def _bool(obj: Mapping[str, Any], key: str) -> bool:
    return bool(obj.get(key) or False)


def _list(raw: Mapping[str, Any], key: str) -> list[Any]:
    value = unwrap(raw.get(key))
    if value is None:
        return []
    if not isinstance(value, list):
        raise SnapshotError(key, f"expected a list, got {type(value).__name__}")
    return value


def _over_text(value: float, path: str) -> str:
    text = f"{value:.1f}"
    ball = int(text.split(".")[1])
    if ball < 1 or ball > 9:
        raise SnapshotError(path, f"ball number {value!r} is not over.ball (ball 1-9)")
    return text


def _player_name(player: Any) -> str | None:
    """The short display name, "L Udara" (the Live Activity has little room)."""
    if not isinstance(player, Mapping):
        return None
    first = _str(player, "firstname").strip()
    last = _str(player, "lastname").strip()
    if first and last:
        return f"{first[0]} {last}"
    full = _str(player, "fullname").strip()
    return full or last or first or None


def _full_name(player: Any) -> str | None:
    if not isinstance(player, Mapping):
        return None
    full = _str(player, "fullname").strip()
    if full:
        return full
    joined = f"{_str(player, 'firstname').strip()} {_str(player, 'lastname').strip()}".strip()
    return joined or None


def _disambiguate(short: dict[str, str], full: Mapping[str, str]) -> dict[str, str]:
    """Two players with one short name (Kusal and Kamindu Mendis are both "K Mendis") get their full names."""
    by_name: dict[str, list[str]] = {}
    for pid, name in short.items():
        by_name.setdefault(name, []).append(pid)
    out = dict(short)
    for pids in by_name.values():
        if len(pids) > 1:
            for pid in pids:
                out[pid] = full.get(pid, out[pid])
    return out


def _team(raw: Mapping[str, Any], side: str) -> Team:
    team_id = _id(raw, f"{side}_id", "", required=False)
    obj = unwrap(raw.get(side))
    if obj is not None and not isinstance(obj, Mapping):
        raise SnapshotError(side, f"expected an object, got {type(obj).__name__}")
    obj = obj or {}
    if team_id is None:
        team_id = _id(obj, "id", side)
    assert team_id is not None
    name = _str(obj, "name") or f"Team {team_id}"
    code = _str(obj, "code") or name[:3].upper()
    return Team(id=team_id, name=name, code=code)


def _phase(status: str, has_play: bool) -> str:
    if status in _LIVE_STATUSES:
        return "live"
    if status in _BREAK_STATUSES:
        return "innings_break"
    if status in _COMPLETED_STATUSES:
        return "completed"
    if status in _ABANDONED_STATUSES:
        return "abandoned"
    if status in _NOT_STARTED:
        return "pre"
    # Pauses, and any status SportMonks adds later: the match is on if a ball has been bowled.
    return "live" if has_play else "pre"


def _ball(
    raw: Any, index: int, crease_out: Mapping[tuple[str, str], str], known: Mapping[str, str]
) -> tuple[Ball, dict[str, str]]:
    path = f"balls[{index}]"
    if not isinstance(raw, Mapping):
        raise SnapshotError(path, f"expected an object, got {type(raw).__name__}")
    score = raw.get("score")
    if not isinstance(score, Mapping):
        raise SnapshotError(f"{path}.score", "missing (the Feed must include balls.score)")
    spath = f"{path}.score"
    number = _num(raw, "ball", path)
    over = _over_text(number, f"{path}.ball")
    scoreboard = _str(raw, "scoreboard")
    if not scoreboard:
        raise SnapshotError(f"{path}.scoreboard", "missing")
    batsman = _id(raw, "batsman_id", path)
    assert batsman is not None
    crease = tuple(
        c
        for c in (
            _id(raw, "batsman_one_on_creeze_id", path, required=False),
            _id(raw, "batsman_two_on_creeze_id", path, required=False),
        )
        if c
    )
    name = _str(score, "name")
    is_wicket = _bool(score, "is_wicket")
    wide = (score.get("ball") is False and _int(score, "noball", spath, 0) == 0) or "wide" in name.lower()
    run_out = is_wicket and ("run out" in name.lower() or raw.get("runout_by_id") is not None)
    out_id: str | None = None
    if is_wicket:
        # batsmanout_id is sometimes wrong; the batting table's fall-of-wicket over is the better witness.
        named = _id(raw, "batsmanout_id", path, required=False)
        from_table = crease_out.get((scoreboard, over))
        if from_table:
            out_id = from_table
        elif named and (not crease or named in crease):
            out_id = named
        else:
            out_id = batsman
    ball = Ball(
        id=_int(raw, "id", path),
        scoreboard=scoreboard,
        over=over,
        team_id=_id(raw, "team_id", path) or "",
        batsman_id=batsman,
        bowler_id=_id(raw, "bowler_id", path) or "",
        out_id=out_id,
        crease=crease,
        score_id=_int(raw, "score_id", path, _int(score, "id", spath, 0)),
        score_name=name,
        runs=_int(score, "runs", spath),
        bye=_int(score, "bye", spath, 0),
        leg_bye=_int(score, "leg_bye", spath, 0),
        noball=_int(score, "noball", spath, 0),
        noball_runs=_int(score, "noball_runs", spath, 0),
        four=_bool(score, "four"),
        six=_bool(score, "six"),
        is_wicket=is_wicket,
        wide=wide,
        run_out=run_out,
        fielder_id=_id(raw, "catchstump_id", path, required=False)
        or _id(raw, "runout_by_id", path, required=False),
    )
    names: dict[str, str] = {}
    for key, pid in (("batsman", ball.batsman_id), ("bowler", ball.bowler_id)):
        if pid in known:
            continue
        name_text = _player_name(raw.get(key))
        if name_text:
            names[pid] = name_text
    return ball, names


def _rows(raw: Mapping[str, Any], key: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The rows of the list ``raw[key]`` with their paths (``batting[3]``); a row that is not an object is
    an error at its path."""
    for i, row in enumerate(_list(raw, key)):
        path = f"{key}[{i}]"
        if not isinstance(row, Mapping):
            raise SnapshotError(path, "expected an object")
        yield path, row


def _innings_score(row: Mapping[str, Any], path: str) -> InningsScore:
    """One row of ``runs``: an innings' total."""
    inning = _int(row, "inning", path)
    if inning < 1:
        raise SnapshotError(f"{path}.inning", f"expected >= 1, got {inning}")
    return InningsScore(
        inning=inning,
        scoreboard=f"S{inning}",
        team_id=_id(row, "team_id", path) or "",
        runs=_int(row, "score", path, 0),
        wickets=_int(row, "wickets", path, 0),
        legal_balls=_overs_checked(_num(row, "overs", path, 0.0), f"{path}.overs"),
    )


def _batter_line(row: Mapping[str, Any], path: str) -> BatterLine:
    """One row of ``batting``: a batter's innings, out or not, and where the wicket fell."""
    player_id = _id(row, "player_id", path)
    assert player_id is not None
    scoreboard = _str(row, "scoreboard")
    if not scoreboard:
        raise SnapshotError(f"{path}.scoreboard", "missing")
    how = row.get("score_id") if row.get("score_id") is not None else row.get("wicket_id")
    fow_balls = _num(row, "fow_balls", path, 0.0)
    return BatterLine(
        player_id=player_id,
        team_id=_id(row, "team_id", path, required=False) or "",
        scoreboard=scoreboard,
        sort=_int(row, "sort", path, 0),
        runs=_int(row, "score", path, 0),
        balls=_int(row, "ball", path, 0),
        fours=_int(row, "four_x", path, 0),
        sixes=_int(row, "six_x", path, 0),
        out=(how is not None and int(how) != _NOT_OUT_SCORE_ID) or fow_balls > 0,
        dismissal_score_id=int(how) if how is not None else None,
        fielder_id=_id(row, "catch_stump_player_id", path, required=False)
        or _id(row, "runout_by_id", path, required=False),
        bowler_id=_id(row, "bowling_player_id", path, required=False),
        fow_score=_int(row, "fow_score", path, 0),
        fow_over=_over_text(fow_balls, f"{path}.fow_balls") if fow_balls > 0 else None,
    )


def _bowler_line(row: Mapping[str, Any], path: str) -> BowlerLine:
    """One row of ``bowling``: a bowler's figures in one innings."""
    player_id = _id(row, "player_id", path)
    assert player_id is not None
    scoreboard = _str(row, "scoreboard")
    if not scoreboard:
        raise SnapshotError(f"{path}.scoreboard", "missing")
    return BowlerLine(
        player_id=player_id,
        team_id=_id(row, "team_id", path, required=False) or "",
        scoreboard=scoreboard,
        sort=_int(row, "sort", path, 0),
        legal_balls=_overs_checked(_num(row, "overs", path, 0.0), f"{path}.overs"),
        maidens=_int(row, "medians", path, 0),
        runs=_int(row, "runs", path, 0),
        wickets=_int(row, "wickets", path, 0),
    )


_Line = TypeVar("_Line", InningsScore, BatterLine, BowlerLine)


def snapshot_from_fixture(raw: Mapping[str, Any]) -> MatchSnapshot:
    """Parse one SportMonks fixture (bare, or a ``{"data": fixture}`` envelope) into a ``MatchSnapshot``."""
    raw = unwrap(raw)
    if not isinstance(raw, Mapping):
        raise SnapshotError("fixture", f"expected an object, got {type(raw).__name__}")
    fixture_id = _id(raw, "id", "")
    assert fixture_id is not None
    status = raw.get("status")
    if status is None:
        status = "NS"
    if not isinstance(status, str):
        raise SnapshotError("status", f"expected a string, got {status!r}")

    stamps: list[Any] = []  # every row's updated_at as sent
    players: dict[str, str] = {}
    full_names: dict[str, str] = {}
    for _path, player in _rows(raw, "lineup"):
        name = _player_name(player)
        if name and player.get("id") is not None:
            players[str(player["id"])] = name
            full_names[str(player["id"])] = _full_name(player) or name

    def parse(
        key: str, line: Callable[[Mapping[str, Any], str], _Line], who: str | None = None
    ) -> list[_Line]:
        """Every row of ``raw[key]`` as a line, noting its time stamp and the player it names (``who``)."""
        lines: list[_Line] = []
        for path, row in _rows(raw, key):
            parsed = line(row, path)
            lines.append(parsed)
            if who is not None:
                player_id = str(row["player_id"])  # checked by ``line``
                player = unwrap(row.get(who))
                name = _player_name(player)
                if name:
                    players.setdefault(player_id, name)
                    full_names.setdefault(player_id, _full_name(player) or name)
            stamps.append(row.get("updated_at"))
        return lines

    innings = sorted(parse("runs", _innings_score), key=lambda x: x.inning)
    if len({x.inning for x in innings}) != len(innings):
        raise SnapshotError("runs", "two rows for the same inning")
    batting = parse("batting", _batter_line, "batsman")
    bowling = parse("bowling", _bowler_line, "bowler")
    crease_out = {(line.scoreboard, line.fow_over): line.player_id for line in batting if line.fow_over}

    balls: list[Ball] = []
    seen_ids: set[int] = set()
    for i, row in enumerate(_list(raw, "balls")):
        ball, names = _ball(row, i, crease_out, players)
        for key, pid in (("batsman", ball.batsman_id), ("bowler", ball.bowler_id)):
            if pid not in full_names:
                full = _full_name(row.get(key))
                if full:
                    full_names[pid] = full
        if ball.id in seen_ids:
            raise SnapshotError(f"balls[{i}].id", f"ball id {ball.id} appears twice")
        seen_ids.add(ball.id)
        balls.append(ball)
        for pid, name in names.items():
            players.setdefault(pid, name)
        stamps.append(row.get("updated_at"))
    balls.sort(key=lambda b: b.id)
    stamps.append(raw.get("updated_at"))
    stamped_at = newest_instant(stamps)

    note = raw.get("note")
    if note is not None and not isinstance(note, str):
        raise SnapshotError("note", f"expected a string, got {note!r}")
    scheduled = raw.get("total_overs_played")
    rpc_target = raw.get("rpc_target")
    rpc_overs = raw.get("rpc_overs")
    snapshot = MatchSnapshot(
        fixture_id=fixture_id,
        status=status,
        phase=_phase(status, bool(innings or balls)),
        league_id=_id(raw, "league_id", "", required=False),
        fixture_type=_str(raw, "type", "T20"),
        round=_str(raw, "round"),
        localteam=_team(raw, "localteam"),
        visitorteam=_team(raw, "visitorteam"),
        innings=tuple(innings),
        batting=tuple(batting),
        bowling=tuple(bowling),
        balls=tuple(balls),
        note=note or "",
        winner_team_id=_id(raw, "winner_team_id", "", required=False),
        draw_noresult=raw.get("draw_noresult") if isinstance(raw.get("draw_noresult"), str) else None,
        toss_won_team_id=_id(raw, "toss_won_team_id", "", required=False),
        elected=raw.get("elected") if isinstance(raw.get("elected"), str) else None,
        scheduled_overs=_int(raw, "total_overs_played", "", 0) or None if scheduled is not None else None,
        rpc_target=_int(raw, "rpc_target", "", 0) or None if rpc_target is not None else None,
        rpc_overs=_num(raw, "rpc_overs", "", 0.0) or None if rpc_overs is not None else None,
        updated_at=int(stamped_at) if stamped_at is not None else None,
        stamped_at=stamped_at,
        starting_at=epoch(raw.get("starting_at")),
        players=_disambiguate(players, full_names),
    )
    check_plausible(snapshot)
    return snapshot


def innings_ball_limit(snap: MatchSnapshot) -> int:
    """The most legal balls one innings of this match can have."""
    if not snap.limited_overs:
        return MULTI_DAY_MAX_OVERS * BALLS_PER_OVER
    return (snap.scheduled_overs or LIMITED_MAX_OVERS) * BALLS_PER_OVER


def check_plausible(snap: MatchSnapshot) -> None:
    """Raise ``ImplausibleSnapshot`` naming the first number cricket cannot produce (see the module doc)."""
    overs = snap.scheduled_overs
    if overs is not None and snap.limited_overs and not 0 < overs <= LIMITED_MAX_OVERS:
        raise ImplausibleSnapshot("total_overs_played", f"{_short(overs)} is not 1-{LIMITED_MAX_OVERS} overs")
    if snap.rpc_target is not None and snap.rpc_target < 0:
        raise ImplausibleSnapshot("rpc_target", f"{snap.rpc_target} is negative")
    limit = innings_ball_limit(snap)
    max_innings = LIMITED_MAX_INNINGS if snap.limited_overs else MULTI_DAY_MAX_INNINGS
    max_runs = MAX_RUNS_PER_BALL * limit + MAX_RUNS_SLACK
    for inns in snap.innings:
        path = f"runs[inning {inns.inning}]"
        if inns.inning > max_innings:
            raise ImplausibleSnapshot(
                f"{path}.inning", f"a {snap.fixture_type} match has at most {max_innings}"
            )
        _bounded(f"{path}.wickets", inns.wickets, MAX_WICKETS)
        _bounded(f"{path}.overs", inns.legal_balls, limit, unit="legal balls")
        _bounded(
            f"{path}.score",
            inns.runs,
            MAX_RUNS_PER_BALL * inns.legal_balls + MAX_RUNS_SLACK,
            unit=f"runs in {format_overs(inns.legal_balls)} overs",
        )
    for line in snap.batting:
        path = f"batting[{line.scoreboard}:{line.player_id}]"
        _bounded(f"{path}.score", line.runs, max_runs)
        _bounded(f"{path}.ball", line.balls, limit)
        _bounded(f"{path}.four_x", line.fours, limit)
        _bounded(f"{path}.six_x", line.sixes, limit)
        _bounded(f"{path}.fow_score", line.fow_score, max_runs)
    for bowler in snap.bowling:
        path = f"bowling[{bowler.scoreboard}:{bowler.player_id}]"
        _bounded(f"{path}.wickets", bowler.wickets, MAX_WICKETS)
        _bounded(f"{path}.overs", bowler.legal_balls, limit, unit="legal balls")
        _bounded(f"{path}.runs", bowler.runs, max_runs)
        _bounded(f"{path}.medians", bowler.maidens, limit // BALLS_PER_OVER)
    for ball in snap.balls:
        path = f"balls[id {ball.id}]"
        _bounded(f"{path}.ball", ball.over_index, limit // BALLS_PER_OVER, unit="overs")
        for name in ("runs", "bye", "leg_bye", "noball", "noball_runs"):
            _bounded(f"{path}.score.{name}", getattr(ball, name), MAX_BALL_RUNS)


def _bounded(path: str, value: int, most: int, *, unit: str = "") -> None:
    if value < 0:
        raise ImplausibleSnapshot(path, f"{value} is negative")
    if value > most:
        allowed = f"{most} {unit}".strip()
        raise ImplausibleSnapshot(path, f"{_short(value)} is more than cricket allows ({allowed})")


def _short(value: int) -> str:
    text = str(value)
    return text if len(text) <= 20 else f"{text[:6]}...({len(text)} digits)"


def balls_faced(balls: Sequence[Ball], scoreboard: str, player_id: str) -> int:
    return sum(1 for b in balls if b.scoreboard == scoreboard and b.batsman_id == player_id and b.faced)
