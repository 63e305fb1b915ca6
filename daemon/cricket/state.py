"""The match state the engine diffs against, and its `active-matches` record form.

Owns ``MatchState`` (what one tick leaves for the next) and its item encoding: camelCase keys named as the
data model names them (``matchPhase``, ``previousStatus``, ``previousBallId``, ``previousScore``,
``previousBatting``, ``previousBowling``, ``last30Balls``, ``cooldowns``) plus the engine's own extras
(``lastTimestamp``, ``feedClock``, ``feedFetchedAt``, ``feedStamp``, ``reportedWickets``, ``endedInnings``, ``seenBatters``,
``displayHash``, ``recentEvent``). Values are JSON-plain and compact (balls are short lists, not objects) so the record stays
near the data model's ~5 KB. Pure: it must not read or write DynamoDB itself (the match actor does).

``from_item`` accepts a record missing any key (it takes its default) and numbers as ``Decimal`` (as DynamoDB
hands them back); a present field of the wrong shape raises ``StateError`` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from daemon.cricket.errors import EngineError
from daemon.cricket.order import FINAL_PROGRESS, InningsMark, Stamp, progress_of
from daemon.cricket.snapshot import Ball

LAST_BALLS = 30


class StateError(EngineError):
    """An `active-matches` record the engine cannot read; the message names the field."""


@dataclass(frozen=True)
class ScoreMemo:
    inning: int
    team_id: str
    runs: int
    wickets: int
    legal_balls: int

    @property
    def scoreboard(self) -> str:
        return f"S{self.inning}"


@dataclass(frozen=True)
class BatterMemo:
    scoreboard: str
    player_id: str
    runs: int
    balls: int
    out: bool


@dataclass(frozen=True)
class BowlerMemo:
    scoreboard: str
    player_id: str
    legal_balls: int
    runs: int
    wickets: int
    maidens: int


@dataclass(frozen=True)
class RecentEvent:
    """The last key event, kept so the display can go on showing it for a few balls."""

    type: str
    text: str
    at_balls: int  # legal balls bowled in the match when it happened


@dataclass(frozen=True)
class Doubt:
    """A doubtful reading seen on ``polls`` consecutive ticks since ``since`` (the caller's clock), about
    ``subject`` (what must stay the same for the ticks to count together: the play shown under a final
    status, the ball held back)."""

    since: float
    polls: int = 1
    subject: tuple[int, ...] = ()

    def again(self) -> Doubt:
        return Doubt(self.since, self.polls + 1, self.subject)


@dataclass(frozen=True)
class MatchState:
    match_phase: str = "pre"
    previous_status: str = ""
    previous_ball_id: int | None = None
    previous_score: tuple[ScoreMemo, ...] = ()
    previous_batting: tuple[BatterMemo, ...] = ()
    previous_bowling: tuple[BowlerMemo, ...] = ()
    last30_balls: tuple[Ball, ...] = ()
    cooldowns: Mapping[str, float] = field(default_factory=dict)
    last_timestamp: int = 0
    feed_clock: float = 0.0
    reported_wickets: tuple[str, ...] = ()
    ended_innings: tuple[str, ...] = ()
    seen_batters: tuple[str, ...] = ()
    display_hash: str = ""
    recent_event: RecentEvent | None = None
    # When the region's feed leader fetched the fixture that last changed this state (its wall clock, as the
    # Feed and the fixture cache stamp it); None before any. A fixture fetched earlier is behind this state.
    fetched_at: float | None = None
    # How far along (by content, ``daemon.cricket.order``) the fixture that last changed this state was; None
    # before any, and in a record without the field. A fixture older by content is behind the state.
    stamp: Stamp | None = None
    # Doubts being confirmed: kept in memory by the actor only (not in the record, not compared), so a doubt
    # that goes away costs no write; an owner that restarts starts confirming again.
    end_doubt: Doubt | None = field(default=None, compare=False)
    score_doubt: Doubt | None = field(default=None, compare=False)
    ball_doubt: Doubt | None = field(default=None, compare=False)  # a ball held back (``confirm.hold_jumps``)

    # ---- lookups --------------------------------------------------------------------------------------
    def reopened(self) -> MatchState:
        """This state for a match taken back after a wrong end (the feed shows it going on): its content stamp
        no longer at the end's progress. A final status the fixture did not corroborate (a glitch before the
        first ball, or over a stalled feed) changed nothing else the stamp holds, so with the end's progress
        kept every later fixture at the same content reads as older and is skipped: the match stays ended to
        its owner until a new ball comes, however long it is live."""
        if self.stamp is None or self.stamp.progress < FINAL_PROGRESS:
            return self
        innings = [mark.inning for mark in self.stamp.innings]
        return replace(self, stamp=replace(self.stamp, progress=progress_of("", innings, None)))

    @property
    def had_play(self) -> bool:
        """The scores this state remembers show play (a ball, a run or a wicket in some innings)."""
        return any(s.legal_balls or s.runs or s.wickets for s in self.previous_score)

    def score_for(self, scoreboard: str) -> ScoreMemo | None:
        for memo in self.previous_score:
            if memo.scoreboard == scoreboard:
                return memo
        return None

    def batter(self, scoreboard: str, player_id: str) -> BatterMemo | None:
        for memo in self.previous_batting:
            if memo.scoreboard == scoreboard and memo.player_id == player_id:
                return memo
        return None

    def bowler(self, scoreboard: str, player_id: str) -> BowlerMemo | None:
        for memo in self.previous_bowling:
            if memo.scoreboard == scoreboard and memo.player_id == player_id:
                return memo
        return None

    # ---- record form ----------------------------------------------------------------------------------
    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "matchPhase": self.match_phase,
            "previousStatus": self.previous_status,
            "previousScore": {
                "innings": [
                    [s.inning, s.team_id, s.runs, s.wickets, s.legal_balls] for s in self.previous_score
                ]
            },
            "previousBatting": {
                f"{b.scoreboard}:{b.player_id}": [b.runs, b.balls, int(b.out)] for b in self.previous_batting
            },
            "previousBowling": {
                f"{b.scoreboard}:{b.player_id}": [b.legal_balls, b.runs, b.wickets, b.maidens]
                for b in self.previous_bowling
            },
            "last30Balls": [_ball_to_list(b) for b in self.last30_balls],
            "cooldowns": {k: float(v) for k, v in sorted(self.cooldowns.items())},
            "lastTimestamp": int(self.last_timestamp),
            "feedClock": float(self.feed_clock),
            "reportedWickets": list(self.reported_wickets),
            "endedInnings": list(self.ended_innings),
            "seenBatters": list(self.seen_batters),
            "displayHash": self.display_hash,
        }
        if self.previous_ball_id is not None:
            item["previousBallId"] = str(self.previous_ball_id)
        if self.fetched_at is not None:
            item["feedFetchedAt"] = float(self.fetched_at)
        if self.stamp is not None:
            item["feedStamp"] = _stamp_to_item(self.stamp)
        if self.recent_event is not None:
            e = self.recent_event
            item["recentEvent"] = {"type": e.type, "text": e.text, "atBalls": e.at_balls}
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> MatchState:
        if not isinstance(item, Mapping):
            raise StateError(f"item: expected a mapping, got {type(item).__name__}")
        score = _mapping(item, "previousScore")
        innings = _list(score, "innings", "previousScore") if score else []
        previous_score = tuple(
            ScoreMemo(
                inning=_int(row, 0, f"previousScore.innings[{i}]"),
                team_id=_text(row, 1, f"previousScore.innings[{i}]"),
                runs=_int(row, 2, f"previousScore.innings[{i}]"),
                wickets=_int(row, 3, f"previousScore.innings[{i}]"),
                legal_balls=_int(row, 4, f"previousScore.innings[{i}]"),
            )
            for i, row in enumerate(innings)
        )
        batting = []
        for key, row in (_mapping(item, "previousBatting") or {}).items():
            board, pid = _split_key(key, "previousBatting")
            path = f"previousBatting.{key}"
            batting.append(
                BatterMemo(board, pid, _int(row, 0, path), _int(row, 1, path), bool(_int(row, 2, path)))
            )
        bowling = []
        for key, row in (_mapping(item, "previousBowling") or {}).items():
            board, pid = _split_key(key, "previousBowling")
            path = f"previousBowling.{key}"
            bowling.append(
                BowlerMemo(
                    board, pid, _int(row, 0, path), _int(row, 1, path), _int(row, 2, path), _int(row, 3, path)
                )
            )
        balls = tuple(
            _ball_from_list(row, f"last30Balls[{i}]") for i, row in enumerate(_list(item, "last30Balls", ""))
        )
        cooldowns: dict[str, float] = {}
        for key, value in (_mapping(item, "cooldowns") or {}).items():
            cooldowns[str(key)] = _float(value, f"cooldowns.{key}")
        ball_id = item.get("previousBallId")
        recent = _mapping(item, "recentEvent")
        fetched_at = item.get("feedFetchedAt")
        return cls(
            match_phase=str(item.get("matchPhase") or "pre"),
            previous_status=str(item.get("previousStatus") or ""),
            previous_ball_id=_int_value(ball_id, "previousBallId") if ball_id not in (None, "") else None,
            previous_score=previous_score,
            previous_batting=tuple(batting),
            previous_bowling=tuple(bowling),
            last30_balls=tuple(sorted(balls, key=lambda b: b.id)),
            cooldowns=cooldowns,
            last_timestamp=_int_value(item.get("lastTimestamp", 0), "lastTimestamp"),
            feed_clock=_float(item.get("feedClock", 0.0), "feedClock"),
            reported_wickets=tuple(str(x) for x in _list(item, "reportedWickets", "")),
            ended_innings=tuple(str(x) for x in _list(item, "endedInnings", "")),
            seen_batters=tuple(str(x) for x in _list(item, "seenBatters", "")),
            display_hash=str(item.get("displayHash") or ""),
            fetched_at=_float(fetched_at, "feedFetchedAt") if fetched_at not in (None, "") else None,
            stamp=_stamp_from_item(item.get("feedStamp")),
            recent_event=RecentEvent(
                type=str(recent.get("type", "")),
                text=str(recent.get("text", "")),
                at_balls=_int_value(recent.get("atBalls", 0), "recentEvent.atBalls"),
            )
            if recent
            else None,
        )


# ---- the content stamp: {"at": epoch seconds to the microsecond | None, "ball": id | None, "progress": n, "innings": [[inning, legal
#      balls, runs, wickets], ...]}
def _stamp_to_item(stamp: Stamp) -> dict[str, Any]:
    return {
        "at": stamp.updated_at,
        "ball": stamp.ball_id,
        "progress": stamp.progress,
        "innings": [[m.inning, m.legal_balls, m.runs, m.wickets] for m in stamp.innings],
    }


def _stamp_from_item(value: Any) -> Stamp | None:
    if value in (None, ""):
        return None
    if not isinstance(value, Mapping):
        raise StateError(f"feedStamp: expected a map, got {type(value).__name__}")
    at, ball = value.get("at"), value.get("ball")
    return Stamp(
        updated_at=None if at is None else _float(at, "feedStamp.at"),
        ball_id=None if ball is None else _int_value(ball, "feedStamp.ball"),
        innings=tuple(
            InningsMark(*(_int(row, k, f"feedStamp.innings[{i}]") for k in range(4)))
            for i, row in enumerate(_list(value, "innings", "feedStamp"))
        ),
        progress=_int_value(value.get("progress", 0), "feedStamp.progress"),
    )


# ---- compact ball encoding ------------------------------------------------------------------------------
# [id, scoreboard, over, team, batsman, bowler, out|None, crease-list, scoreId, scoreName, runs, bye, legBye,
#  noball, noballRuns, flags, fielder|None] with flags a string of "4" four, "6" six, "W" wicket, "w" wide,
#  "R" run out. A 16-item entry (no fielder) is read too, with no fielder.
def _ball_to_list(b: Ball) -> list[Any]:
    flags = "".join(
        ch
        for ch, on in (("4", b.four), ("6", b.six), ("W", b.is_wicket), ("w", b.wide), ("R", b.run_out))
        if on
    )
    return [
        b.id,
        b.scoreboard,
        b.over,
        b.team_id,
        b.batsman_id,
        b.bowler_id,
        b.out_id,
        list(b.crease),
        b.score_id,
        b.score_name,
        b.runs,
        b.bye,
        b.leg_bye,
        b.noball,
        b.noball_runs,
        flags,
        b.fielder_id,
    ]


def _ball_from_list(row: Any, path: str) -> Ball:
    if not isinstance(row, list | tuple) or len(row) < 16:
        raise StateError(f"{path}: expected a 16-item list")
    flags = str(row[15])
    crease = row[7]
    if not isinstance(crease, list | tuple):
        raise StateError(f"{path}[7]: expected a list of crease ids")
    return Ball(
        id=_int(row, 0, path),
        scoreboard=_text(row, 1, path),
        over=_text(row, 2, path),
        team_id=_text(row, 3, path),
        batsman_id=_text(row, 4, path),
        bowler_id=_text(row, 5, path),
        out_id=None if row[6] is None else str(row[6]),
        crease=tuple(str(c) for c in crease),
        score_id=_int(row, 8, path),
        score_name=_text(row, 9, path),
        runs=_int(row, 10, path),
        bye=_int(row, 11, path),
        leg_bye=_int(row, 12, path),
        noball=_int(row, 13, path),
        noball_runs=_int(row, 14, path),
        four="4" in flags,
        six="6" in flags,
        is_wicket="W" in flags,
        wide="w" in flags,
        run_out="R" in flags,
        fielder_id=None if len(row) < 17 or row[16] is None else str(row[16]),
    )


def _mapping(item: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise StateError(f"{key}: expected a map, got {type(value).__name__}")
    return value


def _list(item: Mapping[str, Any], key: str, parent: str) -> list[Any]:
    value = item.get(key)
    where = f"{parent}.{key}" if parent else key
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise StateError(f"{where}: expected a list, got {type(value).__name__}")
    return list(value)


def _int_value(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
        raise StateError(f"{path}: expected an integer, got {value!r}")
    try:
        return int(Decimal(str(value)))
    except ArithmeticError as exc:
        raise StateError(f"{path}: expected an integer, got {value!r}") from exc


def _float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
        raise StateError(f"{path}: expected a number, got {value!r}")
    try:
        return float(value)
    except ValueError as exc:
        raise StateError(f"{path}: expected a number, got {value!r}") from exc


def _int(row: Any, index: int, path: str) -> int:
    if not isinstance(row, list | tuple) or len(row) <= index:
        raise StateError(f"{path}[{index}]: missing")
    return _int_value(row[index], f"{path}[{index}]")


def _text(row: Any, index: int, path: str) -> str:
    if not isinstance(row, list | tuple) or len(row) <= index or row[index] is None:
        raise StateError(f"{path}[{index}]: missing")
    return str(row[index])


def _split_key(key: str, parent: str) -> tuple[str, str]:
    board, sep, pid = str(key).partition(":")
    if not sep or not board or not pid:
        raise StateError(f"{parent}.{key}: expected a 'scoreboard:playerId' key")
    return board, pid
