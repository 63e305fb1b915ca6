"""Tapes: a whole cricket match as the SportMonks ball feed delivered it, and its snapshot at any cursor.

- ``model``: the tape format (its fields and entries are described there) and its validation.
- ``scores``: the SportMonks score catalogue the balls refer to.
- ``scorecard``: the pure rebuild of innings, batting and bowling from the visible balls.
- ``render``: the fixture object at a cursor, as the real feed writes it.
- ``convert``: tapes from real fixture responses.
- ``files``: tapes on disk, and the ones the package ships.

The names below are the public surface; ``from daemon.replay.tape import ...`` is the way to use them.
"""

from daemon.replay.tape.convert import ball_fields, tape_from_fixture, tape_metadata
from daemon.replay.tape.files import (
    TAPES_DIR,
    builtin_tape_path,
    iter_cursors,
    load_tape,
    resolve_tape,
    save_tape,
    tape_to_json,
    validate_tape,
)
from daemon.replay.tape.model import (
    League,
    LineupEntry,
    Player,
    Position,
    Season,
    Stage,
    Tape,
    TapeBall,
    TapeEntry,
    Team,
    Toss,
    Venue,
)
from daemon.replay.tape.render import derive_result, economy, iso, number, overs_from_balls, strike_rate
from daemon.replay.tape.scorecard import Innings, Scorecard, VisibleBall, rebuild, visible_balls
from daemon.replay.tape.scores import SCORES, Score
from daemon.replay.tape.terms import (
    FIXTURE_INCLUDES,
    NOT_OUT_SCORE_ID,
    OVERS_BY_TYPE,
    POWERPLAYS,
    STATUS_BREAK,
    STATUS_FINISHED,
    STATUS_NOT_STARTED,
    TERMINAL_STATUSES,
    TapeError,
    TapeResult,
)

__all__ = [
    "FIXTURE_INCLUDES",
    "NOT_OUT_SCORE_ID",
    "OVERS_BY_TYPE",
    "POWERPLAYS",
    "SCORES",
    "STATUS_BREAK",
    "STATUS_FINISHED",
    "STATUS_NOT_STARTED",
    "TAPES_DIR",
    "TERMINAL_STATUSES",
    "Innings",
    "League",
    "LineupEntry",
    "Player",
    "Position",
    "Score",
    "Scorecard",
    "Season",
    "Stage",
    "Tape",
    "TapeBall",
    "TapeEntry",
    "TapeError",
    "TapeResult",
    "Team",
    "Toss",
    "Venue",
    "VisibleBall",
    "ball_fields",
    "builtin_tape_path",
    "derive_result",
    "economy",
    "iso",
    "iter_cursors",
    "load_tape",
    "resolve_tape",
    "number",
    "overs_from_balls",
    "rebuild",
    "save_tape",
    "strike_rate",
    "tape_from_fixture",
    "tape_metadata",
    "tape_to_json",
    "validate_tape",
    "visible_balls",
]
