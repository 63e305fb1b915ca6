"""Reading the APNs server's record of a match: what a push carried, who signed it, which wickets a tape's
match must deliver. Shared by the fault rig, the cluster and the tests that judge them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def aps(record: dict[str, Any]) -> dict[str, Any]:
    """The ``aps`` dictionary of a recorded push (empty when it had none)."""
    return (record.get("payload") or {}).get("aps") or {}


def event_ids(record: dict[str, Any]) -> set[tuple[str, str]]:
    """(type, subject) of every key event an accepted push carried."""
    state = aps(record).get("content-state") or {}
    return {(str(ev.get("type")), str(ev.get("subject"))) for ev in state.get("events") or []}


def standing_wickets(tape: Any) -> set[str]:
    """The wickets that stand at the end of the tape (corrected or deleted ones excluded), named as the
    engine names them: innings and dismissed batter ("S1:900401")."""
    fixture = tape.fixture_at(len(tape))
    out: set[str] = set()
    for ball in fixture.get("balls") or []:
        score = ball.get("score") or {}
        if score.get("is_wicket") and ball.get("batsmanout_id"):
            out.add(f"{ball['scoreboard']}:{ball['batsmanout_id']}")
    return out


def record_kid(record: dict[str, Any]) -> str | None:
    """The key id of the provider token a request was signed with (which instance sent it)."""
    auth = (record.get("headers") or {}).get("authorization", "")
    if "kid=" not in auth:
        return None
    return str(auth.split("kid=", 1)[1].split()[0].rstrip(">"))


Alert = tuple[str, str, "str | None", Any]  # (type, subject, ball id, stamp) of an alert's headline event


def alerts_shown_twice(alerts: list[Alert]) -> list[tuple[str, str]]:
    """The (type, subject) of every alert one device was shown more than once.

    An alert is named by its headline event: type and subject, the ball when it has one, and a stamp that
    tells two showings apart (the push's timestamp, where a repeat with the same timestamp is one showing, or
    any unique mark where every accepted push counts). One (type, subject) may honestly alert once per ball:
    a catch overturned and the same batter's later real dismissal are two events on two balls. So an event is
    shown twice when its (type, subject) was shown more often than it has distinct balls; an alert without a
    ball (a wicket known from the innings' count before its ball) counts against the one with a ball."""
    shown: dict[tuple[str, str], set[tuple[str | None, Any]]] = {}
    for type_, subject, ball, stamp in alerts:
        shown.setdefault((type_, subject), set()).add((ball, stamp))
    out = []
    for name, showings in shown.items():
        balls = {ball for ball, _ in showings if ball is not None}
        if len(showings) > max(1, len(balls)):
            out.append(name)
    return sorted(out)


# ------------------------------------------------------------------ what a phone showed, in its order

# A phase's place in a match; an innings break steps on to the next innings' "live" (``ShownOrder``).
PHASE_RANK = {"pre": 0, "live": 1, "innings_break": 2, "completed": 3, "abandoned": 3}


def innings_balls(state: dict[str, Any]) -> dict[tuple[str, int], int]:
    """Legal balls of each (team id, innings number) a content-state shows, read from its teams' innings
    lines ("182/8 (19.4)")."""
    out: dict[tuple[str, int], int] = {}
    for team in state.get("teams") or []:
        for number, line in enumerate(team.get("innings") or []):
            text = str(line)
            if "(" not in text:
                continue
            overs = text.rsplit("(", 1)[1].rstrip(")").strip()
            whole, _, part = overs.partition(".")
            if whole.isdigit() and (part.isdigit() or not part):
                out[(str(team.get("id")), number)] = int(whole) * 6 + int(part or 0)
    return out


class ShownOrder:
    """What each phone (a token, or the phones on one broadcast channel) was shown, as iOS applies it: an
    update older than the last applied one (its ``timestamp``) is dropped by the phone, so it does not count. Counts, per phone, the times an innings' legal balls went down (a ball withdrawn) and whether its
    phases ever went back (a status flip). Memory per phone is its last state's figures, not its history."""

    def __init__(self) -> None:
        self.last_at: dict[str, int] = {}
        self.balls: dict[str, dict[tuple[str, int], int]] = {}
        self.step: dict[str, tuple[int, int, str]] = {}  # phone -> (innings, rank, phase) last shown
        self.withdrawn: dict[str, int] = {}
        self.flipped: set[str] = set()

    def see(self, phone: str, timestamp: int, state: dict[str, Any]) -> None:
        if timestamp < self.last_at.get(phone, -1):
            return  # older than what the phone shows: dropped
        self.last_at[phone] = timestamp
        shown = innings_balls(state)
        before = self.balls.get(phone, {})
        down = sum(1 for key, n in shown.items() if n < before.get(key, 0))
        if down:
            self.withdrawn[phone] = self.withdrawn.get(phone, 0) + down
        self.balls[phone] = {**before, **shown}
        phase = str(state.get("phase"))
        if phase in PHASE_RANK:
            innings, rank, previous = self.step.get(phone, (0, -1, ""))
            now = (
                innings + 1 if previous == "innings_break" and phase == "live" else innings,
                PHASE_RANK[phase],
            )
            if now < (innings, rank):  # "live, innings_break, live" goes on; "completed, live" goes back
                self.flipped.add(phone)
            self.step[phone] = (*now, phase)


# ------------------------------------------------------------------ what each token was answered, kept small


def alert_of(payload_aps: dict[str, Any]) -> Alert | None:
    """The alert an accepted update shows, named by its headline event (type, subject, ball, the push's
    ``timestamp``); None for an update without an alert, a start or an end."""
    if not payload_aps.get("alert") or payload_aps.get("event") != "update":
        return None
    state = payload_aps.get("content-state") or {}
    head = (state.get("events") or [{}])[0]
    ball = head.get("ballId")
    return (
        str(state.get("eventType")),
        str(head.get("subject")),
        None if ball is None else str(ball),
        int(payload_aps.get("timestamp", 0)),
    )


class Ledger:
    """What an APNs peer answered, per token, in the little a judge needs: the statuses, the key events and
    ends accepted, the alerts shown, when the last push was accepted, and the accepted push-to-starts.

    Records are eaten as they come (the project's server's ``records`` or nginx's record file) and then
    dropped, so a whole season's pushes cost the rig their summary, not their payloads. Broadcasts (records
    with a ``channel_id``) are left to the server's subscriptions (``seen_by``), which are per device."""

    def __init__(self) -> None:
        self.statuses: dict[str, dict[int, int]] = {}
        self.events: dict[str, set[tuple[str, str]]] = {}
        self.ended: set[str] = set()
        self.alerts: dict[str, list[Alert]] = {}
        self.last_accepted: dict[str, float] = {}
        self.starts: list[dict[str, Any]] = []

    def eat(self, records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Take ``records`` in; returns the accepted push-to-starts among them (``token``, ``time``,
        ``payload``), as the phones act on them."""
        starts: list[dict[str, Any]] = []
        for record in records:
            if record.get("channel_id"):
                continue
            token = str(record.get("token") or "")
            status = int(record.get("status") or 0)
            counts = self.statuses.setdefault(token, {})
            counts[status] = counts.get(status, 0) + 1
            if status != 200:
                continue
            self.last_accepted[token] = float(record.get("time") or 0.0)
            payload = aps(record)
            if payload.get("event") == "start":
                start = {
                    "token": token,
                    "status": status,
                    "time": record.get("time"),
                    "payload": record.get("payload"),
                }
                self.starts.append(start)
                starts.append(start)
                continue
            if payload.get("event") == "end":
                self.ended.add(token)
            got = event_ids(record)
            if got:
                self.events.setdefault(token, set()).update(got)
            alert = alert_of(payload)
            if alert is not None:
                self.alerts.setdefault(token, []).append(alert)
        return starts

    def answered(self, token: str) -> list[int]:
        """The statuses pushes to ``token`` were answered with (each once, in no order)."""
        return sorted(self.statuses.get(token, {}))
