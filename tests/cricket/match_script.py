"""A tiny scripted match for engine tests: post balls like the feed, tick the engine like the match actor.

``Script`` keeps the crease (strike rotates on odd runs and at the end of an over; a new batter takes the
dismissed batter's slot and faces next), stamps each ball 40 s after the previous one, rebuilds the
fixture from the posted balls (tests/cricket/fixture_builder.rebuild) and runs ``process_tick`` with the
state carried through its DynamoDB item form, as the actor does (the doubts being confirmed, which the actor
keeps in memory only, are carried over as they are).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from daemon.cricket.engine import TickResult, process_tick
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import snapshot_from_fixture
from daemon.cricket.state import MatchState
from tests.cricket.fixture_builder import SCORES, base_fixture, make_ball, rebuild, score_obj

HOME = [(100 + i, f"Home{i}", f"Bat{i}") for i in range(1, 12)]
AWAY = [(200 + i, f"Away{i}", f"Bowl{i}") for i in range(1, 12)]
START = datetime(2026, 1, 1, 10, 0, tzinfo=UTC).timestamp()


def carried(result: TickResult) -> MatchState:
    """The state the match actor carries to its next tick: the record round trip, with the doubts being
    confirmed (which it keeps in memory only) as they are."""
    return replace(
        MatchState.from_item(result.state.to_item()),
        end_doubt=result.state.end_doubt,
        score_doubt=result.state.score_doubt,
        ball_doubt=result.state.ball_doubt,
    )


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z")


@dataclass
class Script:
    settings: EngineSettings = field(default_factory=EngineSettings)
    marquee: bool = True
    overs: int = 20
    balls: list[dict[str, Any]] = field(default_factory=list)
    state: MatchState | None = None
    crease: list[int] = field(default_factory=lambda: [101, 102])
    strike: int = 0
    next_batter: int = 103
    next_id: int = 1000
    clock: float = START
    legal_in_over: int = 0
    over_index: int = 0
    results: list[TickResult] = field(default_factory=list)
    changed_at: str | None = None  # when a ball was last deleted (stamped on the innings rows)

    def __post_init__(self) -> None:
        self.base = base_fixture(players=HOME + AWAY, overs=self.overs, local=1, visitor=2)

    # ---- posting balls -------------------------------------------------------------------------------
    def ball(
        self, code: str, bowler: int = 201, *, gap: float = 40.0, out_non_striker: bool = False
    ) -> dict[str, Any]:
        s = score_obj(code)
        self.clock += gap
        self.next_id += 7
        striker = self.crease[self.strike]
        over = f"{self.over_index}.{self.legal_in_over + 1}"
        out = self.crease[1 - self.strike] if out_non_striker else striker
        raw = make_ball(
            self.next_id,
            over,
            code,
            batsman=striker,
            bowler=bowler,
            crease=tuple(self.crease),
            team=1,
            out=out,
            stamp=iso(self.clock),
        )
        self.balls.append(raw)
        legal = s.get("ball") is not False and not s.get("noball")
        ran = (
            0
            if (s["four"] or s["six"])
            else (s["runs"] + s["bye"] + s["leg_bye"] - (1 if s.get("ball") is False else 0) - s["noball"])
        )
        if s["is_wicket"]:
            slot = self.crease.index(out)
            self.crease[slot] = self.next_batter
            self.next_batter += 1
            self.strike = slot
        elif ran % 2:
            self.strike = 1 - self.strike
        if legal:
            self.legal_in_over += 1
            if self.legal_in_over == 6:
                self.legal_in_over = 0
                self.over_index += 1
                self.strike = 1 - self.strike
        return raw

    def balls_of(self, codes: str, bowler: int = 201) -> list[dict[str, Any]]:
        return [self.ball(code, bowler) for code in codes.split()]

    def correct(self, raw: dict[str, Any], code: str, *, gap: float = 5.0) -> None:
        """The scorers change a posted ball: SportMonks stamps it with the time of the change."""
        self.clock += gap
        raw["updated_at"] = iso(self.clock)
        raw["score_id"] = SCORES[code]["id"]
        raw["score"] = score_obj(code)
        if SCORES[code].get("is_wicket"):
            raw["batsmanout_id"] = raw["batsman_id"]
        else:
            raw["batsmanout_id"] = None

    def delete(self, raw: dict[str, Any], *, gap: float = 5.0) -> None:
        """The scorers withdraw a posted ball: the innings rows it changed carry the time of the change."""
        self.clock += gap
        self.changed_at = iso(self.clock)
        self.balls.remove(raw)

    # ---- ticking ---------------------------------------------------------------------------------------
    def fixture(self, status: str | None = None) -> dict[str, Any]:
        fx = rebuild(
            self.base,
            self.balls,
            status=status or ("NS" if not self.balls else None),
            changed_at=self.changed_at,
        )
        if not self.marquee:
            fx.pop("balls")
        return fx

    def tick(
        self,
        status: str | None = None,
        *,
        now: float | None = None,
        winner: int | None = None,
        note: str | None = None,
    ) -> TickResult:
        fx = self.fixture(status)
        if winner is not None:
            fx["winner_team_id"] = winner
        if note is not None:
            fx["note"] = note
        result = process_tick(
            self.state,
            snapshot_from_fixture(fx),
            now=now if now is not None else self.clock,
            marquee=self.marquee,
            settings=self.settings,
        )
        self.state = carried(result)
        self.results.append(result)
        return result

    def types(self, result: TickResult | None = None) -> list[str]:
        return [e.type for e in (result or self.results[-1]).events]
