"""The tape's vocabulary: the feed's statuses and include order, the score ids the rebuild relies on, and the
errors and results every part of ``daemon.replay.tape`` shares (a module of its own so that ``render`` and
``scorecard`` use them without importing the model that calls them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from daemon.replay.errors import ReplayError

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


class TapeError(ReplayError, ValueError):
    """A tape that cannot be loaded or is inconsistent; the message names the field or entry."""


class TapeResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    winner_team_id: int | None = Field(default=None, description="None for a tie or no result")
    note: str = Field(description="the result text SportMonks shows in `note`")
    draw_noresult: str | None = None
