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
