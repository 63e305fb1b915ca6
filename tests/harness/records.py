"""Reading the APNs server's record of a match: what a push carried, who signed it, which wickets a tape's
match must deliver. Shared by the fault rig, the cluster and the tests that judge them."""

from __future__ import annotations

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
