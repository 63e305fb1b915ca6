"""What every fault test checks once the fault has cleared: the daemon stayed up, the match ran to its end,
its persisted state is whole, and every seeded token got every standing wicket and an end (late, not lost)."""

from __future__ import annotations

import json
from typing import Any

import trio

from tests.harness.fault_rig import FaultRig, aps, standing_wickets

SHORT_OVERS = 5
"""Overs an innings of the shortened T10 a fault test plays when its fault clears within a few seconds
(``make_rig(overs=SHORT_OVERS)``; see ``tests/faults/conftest.py``)."""


async def run_to_end(rig: FaultRig, timeout: float = 120.0) -> None:
    """Wait for the end of the match; it must come while the daemon is still running."""
    with trio.fail_after(timeout):
        assert await rig.wait_ended(timeout), "the match never ended"
    assert not rig.daemon.finished.is_set(), "the daemon stopped during the fault"
    assert rig.daemon.exit_code == 0


async def assert_nothing_lost(rig: FaultRig, *, tokens: list[str] | None = None) -> None:
    await run_to_end(rig)
    tape = rig.replay.tape(rig.match_id)
    assert standing_wickets(tape), "the tape has wickets (otherwise this check proves nothing)"
    missing = rig.missing_wickets(tokens)
    assert missing == {}, f"wickets never delivered: {missing}; deliveries: {_summary(rig)}"
    by_token = rig.accepted_by_token()
    for token in tokens if tokens is not None else list(rig.tokens):
        ends = [r for r in by_token.get(token, []) if aps(r).get("event") == "end"]
        assert ends, f"session {rig.tokens[token]} got no end"
        assert all("dismissal-date" in aps(r) for r in ends)
    await assert_state_whole(rig)


async def assert_state_whole(rig: FaultRig) -> None:
    """The persisted match record is the final one of the tape: phase completed, every innings' runs and
    wickets as the tape's last entry says, every standing wicket recorded as reported."""
    item = await rig.match_item()
    assert item is not None
    assert item["status"] == "ended"
    assert item["matchPhase"] == "completed"
    tape = rig.replay.tape(rig.match_id)
    final = tape.fixture_at(len(tape))
    expected = {
        (str(run["inning"]), int(run["score"]), int(run["wickets"])) for run in final.get("runs") or []
    }
    stored = {(str(row[0]), int(row[2]), int(row[3])) for row in item["previousScore"]["innings"]}
    assert stored == expected, f"persisted score {sorted(stored)} is not the tape's final {sorted(expected)}"
    reported = set(item.get("reportedWickets") or [])
    assert standing_wickets(tape) <= reported, f"reported {sorted(reported)}"


def _summary(rig: FaultRig) -> list[str]:
    return [
        f"{d.kind} {d.over} {d.score} {','.join(d.event_types)} {d.accepted}/{d.tokens}"
        for d in rig.deliveries
    ]


def first_updates(rig: FaultRig, n: int) -> Any:
    """A predicate: at least ``n`` updates accepted (the match is under way)."""
    return lambda: rig.accepted_updates() >= n


async def ask(socket_path: str, line: bytes) -> dict[str, Any]:
    """One request line over the daemon's admin socket; its answer."""
    with trio.fail_after(10):
        stream = await trio.open_unix_socket(socket_path)
        async with stream:
            await stream.send_all(line)
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = await stream.receive_some(1 << 16)
                assert chunk, "the admin socket closed without an answer"
                buf += chunk
    return json.loads(buf)
