"""The order of a match's fixtures by their content, never by which answer came last.

Owns the one rule that says whether a fixture is older, as new as, or newer than another, from what it shows
(``Stamp``: the newest ``updated_at`` of its rows and balls, the newest ball id, each innings' legal balls,
runs and wickets, and how far the match has come), and the feed's gate built on it (``Gate``). Pure: no
I/O, no clock. It must not decide anything about events; the engine and the feed ask it which fixture to
believe.

Why content: the region's feed leader reads the live matches from two SportMonks endpoints in turn
(``/livescores`` and ``/fixtures`` filtered to live statuses), and one can lag the other (a CDN, a
replica). Taken by arrival, an answer that lags withdraws the newest ball, and the next fresh answer shows
it again: a wicket announced twice, a status flipping back and forth on the Lock Screen.

The rule (``compare``), first difference wins:

1. ``updated_at``: SportMonks stamps every row it changes, so a newer stamp is newer content, corrections
   included (a wicket given away, a ball deleted: the rows it changed carry the time of the change); a
   fixture with no stamp at all (before any row exists) is older than any stamped one.
2. the newest ball id, where both show balls (ids only grow: a new delivery has a new, higher id);
3. the innings' scores: an innings that went back on every count that moved is older, one that went on is
   newer, an innings only one of them has is further on; a mixed change (a correction) decides nothing;
4. progress: pre-match, each innings under way, its break, the end.

Where nothing differs the two are equal in order (a status-only change, a pause, shows this way).

``Gate`` is the feed's use of it for one match: an answer older than the last one delivered is dropped; a
newer one is delivered at once (the path of every new ball); one that is equal in order but differs in what
it shows (a status change at the same stamp) is delivered only once two answers in a row agree on it, so
two sources taking turns, one of them behind, cannot flip a status between them. See docs/architecture.md
("Where each delivery guarantee lives").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from daemon.cricket.snapshot import MatchSnapshot

Order = Literal[-1, 0, 1]
FINAL_PROGRESS = 1_000
_FINAL_STATUSES = frozenset({"Finished", "Aban.", "Cancl.", "Postp."})
_BREAK_STATUSES = frozenset({"Innings Break"})
_NOT_STARTED = frozenset({"NS", ""})
_ROW_KEYS = ("runs", "batting", "bowling", "balls")


@dataclass(frozen=True)
class InningsMark:
    inning: int
    legal_balls: int
    runs: int
    wickets: int


@dataclass(frozen=True)
class Stamp:
    """What a fixture's content says about how far along it is (see the module doc)."""

    updated_at: float | None  # epoch seconds (to the microsecond) of the newest updated_at; None: no stamp
    ball_id: int | None  # the newest ball id; None when the fixture carries no balls
    innings: tuple[InningsMark, ...] = ()
    progress: int = 0


def progress_of(status: str, innings: Sequence[int], board: int | None) -> int:
    """How far the match has come: 0 before it, ``2n`` during innings ``n``, ``2n + 1`` in its break,
    ``FINAL_PROGRESS`` once over. ``innings`` are the innings numbers shown, ``board`` the newest ball's
    innings (either can come before the status says so)."""
    if status in _FINAL_STATUSES:
        return FINAL_PROGRESS
    shown = max([*innings, board or 0, _inning_of_status(status)])
    if shown == 0:
        return 0 if status in _NOT_STARTED else 2
    return 2 * shown + (1 if status in _BREAK_STATUSES else 0)


def _inning_of_status(status: str) -> int:
    head = status.split(" ", 1)[0]
    digits = head[:-2] if head[-2:] in ("st", "nd", "rd", "th") else ""
    return int(digits) if digits.isdigit() and status.endswith("Innings") else 0


def compare(old: Stamp, new: Stamp) -> Order:
    """-1 when ``new`` is older content than ``old``, 1 when newer, 0 when the rule cannot tell them apart."""
    by_time = _compare_times(old.updated_at, new.updated_at)
    if by_time:
        return by_time
    if old.ball_id is not None and new.ball_id is not None and old.ball_id != new.ball_id:
        return 1 if new.ball_id > old.ball_id else -1
    by_score = _compare_innings(old.innings, new.innings)
    if by_score:
        return by_score
    if old.progress != new.progress:
        return 1 if new.progress > old.progress else -1
    return 0


def _compare_times(old: float | None, new: float | None) -> Order:
    """A stamped fixture is newer than one with no stamp at all (a pre-match fixture has no rows)."""
    if old == new:
        return 0
    if old is None:
        return 1
    if new is None:
        return -1
    return 1 if new > old else -1


def _compare_innings(old: Sequence[InningsMark], new: Sequence[InningsMark]) -> Order:
    before = {m.inning: m for m in old}
    after = {m.inning: m for m in new}
    if not before or not after:
        return 0  # one side shows no scores (a pre-match fixture, a partial answer): scores cannot tell
    if max(after) != max(before):
        return 1 if max(after) > max(before) else -1
    ups = downs = 0
    for inning, a in after.items():
        b = before.get(inning)
        if b is None:
            continue
        for was, now in ((b.legal_balls, a.legal_balls), (b.runs, a.runs), (b.wickets, a.wickets)):
            ups += now > was
            downs += now < was
    if ups and not downs:
        return 1
    if downs and not ups:
        return -1
    return 0


# ------------------------------------------------------------------------------------------------ raw fixtures


def instant(value: Any) -> float | None:
    """Epoch seconds, to the microsecond, of a SportMonks timestamp (``2026-10-09T13:01:13.000000Z``); None
    when unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def epoch(value: Any) -> int | None:
    """Epoch seconds (whole) of a SportMonks timestamp; None when unreadable."""
    at = instant(value)
    return None if at is None else int(at)


def newest_instant(values: Iterable[Any]) -> float | None:
    """The newest of SportMonks timestamps (unreadable ones skipped). They come in one format, so the
    greatest string is the newest; only that one is parsed (a fixture has hundreds of rows)."""
    for text in sorted((v for v in values if isinstance(v, str) and v), reverse=True):
        at = instant(text)
        if at is not None and at > 0:
            return at
    return None


def unwrap(value: Any) -> Any:
    """An include as SportMonks sends it, bare or wrapped in ``{"data": ...}``."""
    if isinstance(value, Mapping) and set(value) == {"data"}:
        return value["data"]
    return value


def _rows(raw: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = unwrap(raw.get(key))
    if not isinstance(value, list):
        return []
    return [row for row in value if isinstance(row, Mapping)]


def _newest_stamp(raw: Mapping[str, Any]) -> float | None:
    """The newest ``updated_at`` of the fixture and its rows."""
    texts = [raw.get("updated_at")]
    for key in _ROW_KEYS:
        texts += [row.get("updated_at") for row in _rows(raw, key)]
    return newest_instant(texts)


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _legal_balls(overs: Any) -> int:
    if isinstance(overs, bool) or not isinstance(overs, int | float | str):
        return 0
    try:
        text = f"{float(overs):.1f}"
    except ValueError:
        return 0
    whole, part = text.split(".")
    return int(whole) * 6 + int(part)


def stamp_of_fixture(raw: Mapping[str, Any]) -> Stamp:
    """The ``Stamp`` of a raw SportMonks fixture (what the feed compares, before any parsing)."""
    raw = unwrap(raw)
    ids = [i for i in (_int_or_none(b.get("id")) for b in _rows(raw, "balls")) if i is not None]
    newest = max(ids) if ids else None
    board = None
    if newest is not None:
        for ball in _rows(raw, "balls"):
            if _int_or_none(ball.get("id")) == newest:
                board = _board_number(str(ball.get("scoreboard") or ""))
                break
    marks = []
    for row in _rows(raw, "runs"):
        inning = _int_or_none(row.get("inning"))
        if inning is None:
            continue
        marks.append(
            InningsMark(
                inning,
                _legal_balls(row.get("overs") or 0),
                _int_or_none(row.get("score")) or 0,
                _int_or_none(row.get("wickets")) or 0,
            )
        )
    marks.sort(key=lambda m: m.inning)
    status = raw.get("status") if isinstance(raw.get("status"), str) else "NS"
    return Stamp(
        updated_at=_newest_stamp(raw),
        ball_id=newest,
        innings=tuple(marks),
        progress=progress_of(str(status), [m.inning for m in marks], board),
    )


def _board_number(board: str) -> int | None:
    digits = "".join(ch for ch in board if ch.isdigit())
    return int(digits) if digits else None


# What else a fixture shows that an answer equal in order can differ in (fixture fields the engine reads).
SHOWN_FIELDS = (
    "status",
    "note",
    "winner_team_id",
    "draw_noresult",
    "toss_won_team_id",
    "elected",
    "rpc_target",
    "rpc_overs",
    "total_overs_played",
)


@dataclass(frozen=True)
class Mark:
    """A raw fixture as the feed's gate sees it: its stamp and what it shows beyond the stamp."""

    stamp: Stamp
    shown: tuple[Any, ...]
    balls: int  # how many balls it lists (a deletion and a new ball in the same second keep the newest id)


def mark_of_fixture(raw: Mapping[str, Any]) -> Mark:
    raw = unwrap(raw)
    return Mark(
        stamp=stamp_of_fixture(raw),
        shown=tuple(_hashable(raw.get(k)) for k in SHOWN_FIELDS),
        balls=len(_rows(raw, "balls")),
    )


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


# ------------------------------------------------------------------------------------------------ the gate

Verdict = Literal["newer", "same", "confirmed", "behind", "unconfirmed"]


@dataclass(frozen=True)
class Gate:
    """One match's gate at the feed: the mark last delivered, and the last answer's (for confirmation)."""

    delivered: Mark | None = None
    last: Mark | None = None

    def admit(self, mark: Mark, *, trusted: bool = False) -> tuple[Verdict, Gate]:
        """Whether an answer showing ``mark`` goes to the match (``newer``, ``same``, ``confirmed``) or not
        (``behind``: older than what was delivered; ``unconfirmed``: equal in order but showing something
        else, waiting for a second answer to agree), and the gate after it. A ``trusted`` source (the
        fixture cache, which the leader's own gate fed) needs no second answer."""
        prev = self.delivered
        if prev is None:
            return "newer", Gate(mark, mark)
        order = _gate_order(prev.stamp, mark.stamp)
        if order < 0:
            return "behind", Gate(prev, mark)
        if order > 0:
            return "newer", Gate(mark, mark)
        if mark == prev:
            return "same", Gate(prev, mark)
        if trusted or mark == self.last:
            return "confirmed", Gate(mark, mark)
        return "unconfirmed", Gate(prev, mark)


def _gate_order(old: Stamp, new: Stamp) -> Order:
    """The gate orders by the stamp's time alone and leaves the rest to confirmation: a ball id or a score
    that moved at the same second is as likely a fault (a ball from the future that is gone in the next
    answer) as news, and taken as newer it would make the true answer after it look older."""
    if old.updated_at is None and new.updated_at is None:
        if old.ball_id is None and new.ball_id is None and not old.innings and not new.innings:
            # nothing played on either side: what differs is the status alone, which is confirmed (two
            # answers in a row), never ordered. A wrong "Finished" before the first ball taken as further on
            # would hold every true answer after it as behind until the first ball is stamped.
            return 0
        return compare(old, new)  # nothing stamped (a feed without times): the content rule as it stands
    return _compare_times(old.updated_at, new.updated_at)


# ------------------------------------------------------------------------------------------------ snapshots


def stamp_of_snapshot(snap: MatchSnapshot) -> Stamp:
    """The ``Stamp`` of a parsed snapshot (what the engine compares): the same reading as
    ``stamp_of_fixture`` of the fixture it was parsed from (a test holds the two equal)."""
    newest = max(snap.balls, key=lambda b: b.id) if snap.balls else None
    marks = tuple(InningsMark(i.inning, i.legal_balls, i.runs, i.wickets) for i in snap.innings)
    return Stamp(
        updated_at=snap.stamped_at,
        ball_id=newest.id if newest is not None else None,
        innings=marks,
        progress=progress_of(
            snap.status, [m.inning for m in marks], _board_number(newest.scoreboard) if newest else None
        ),
    )
