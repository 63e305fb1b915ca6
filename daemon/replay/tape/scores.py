"""The SportMonks score catalogue: what each ``balls[].score`` id means.

Ids below 200 and their values are observed in real payloads (spec §6); ids from 200 up are this project's
own, for kinds the spec names without an id. Consumers must read the flags, and use the name only for
display or to tell a run out from a bowler's wicket.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
)


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
