"""The pure rebuild: a tape's first ``cursor`` entries -> the visible balls -> innings, batting and bowling.

The formulas are those of spec/sportmonks-api.md §7, so a snapshot never shows a scorecard that could
disagree with its balls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from daemon.replay.tape.scores import Score

if TYPE_CHECKING:
    from daemon.replay.tape.model import Tape, TapeBall


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
