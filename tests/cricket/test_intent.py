"""The alert-intent decision core (``daemon.cricket.intent``), pure: which sessions get a tick's alert when an
owner completes an intent its predecessor left, whatever moment that predecessor (and its successors) died.

The model of a fan-out used here is the actor's: sessions in visitor-key order; the intent and the first
chunk's watermark are persisted before anything is pushed; each later chunk's watermark is persisted before
that chunk is handed over; an owner may die after any number of pushes, and every push it handed may or may
not have reached its device.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from daemon.cricket import payloads
from daemon.cricket.detectors import KeyEvent
from daemon.cricket.intent import (
    AlertIntent,
    Chunk,
    IntentError,
    alert_due,
    chunk_sizes,
    has_alert,
    plan,
    watermark_writes,
    without_alert,
)

WICKET = KeyEvent(
    type="wicket",
    subject="S1:914",
    key="wicket:S1:914",
    ball_id="77",
    over="4.2",
    priority=1,
    alert_worthy=True,
    title="WICKET!",
    body="CKG 29/2",
    text="Smith c Jones b Brown 12",
    team_id="7",
)


def _update(alert_event: KeyEvent | None = WICKET) -> bytes:
    return payloads.update_payload(
        {"score": "29/2", "overs": "4.2"},
        timestamp=1700,
        event=alert_event,
        events=[alert_event] if alert_event else [],
        stale_date=2600,
    )


def _intent(handed: str | None = None) -> AlertIntent:
    return AlertIntent(
        kind="update",
        timestamp=1700,
        priority=10,
        events=("wicket:S1:914",),
        payloads={"neutral": _update(), "7": _update()},
        collapse_id=WICKET.collapse_id("500"),
        handed=handed,
    )


def test_the_quiet_payload_is_the_same_update_without_its_alert() -> None:
    loud = _update()
    quiet = without_alert(loud)
    assert has_alert(loud) and not has_alert(quiet)
    a, b = json.loads(loud)["aps"], json.loads(quiet)["aps"]
    assert b["timestamp"] == a["timestamp"] and b["content-state"] == a["content-state"]
    assert b["stale-date"] == a["stale-date"] and b["event"] == "update"
    assert {"type": "wicket", "subject": "S1:914"}.items() <= b["content-state"]["events"][0].items()
    assert not has_alert(_update(None)), "a routine update has no alert, so it needs no intent"


def test_a_payload_that_is_not_an_apns_body_is_refused() -> None:
    with pytest.raises(IntentError, match="aps"):
        without_alert(b'{"x": 1}')


def test_chunks_double_from_the_first_up_to_the_cap_and_cover_every_session() -> None:
    assert chunk_sizes(200, first=16, most=2048) == [16, 32, 64, 88]
    assert chunk_sizes(10, first=16, most=2048) == [10]
    assert chunk_sizes(0, first=16, most=2048) == []
    sizes = chunk_sizes(10_000, first=16, most=2048)
    assert sum(sizes) == 10_000 and max(sizes) == 2048 and len(sizes) == 11
    with pytest.raises(ValueError):
        chunk_sizes(5, first=4, most=2)


def test_an_alerting_tick_costs_one_write_per_later_chunk_and_one_to_clear() -> None:
    assert watermark_writes(0, first=16, most=2048) == 1
    assert watermark_writes(16, first=16, most=2048) == 1
    assert watermark_writes(200, first=16, most=2048) == 4
    assert watermark_writes(10_000, first=16, most=2048) == 11


def test_a_fresh_plan_alerts_everyone_in_key_order() -> None:
    keys = [f"u{i:03d}#d" for i in range(40)]
    p = plan(list(reversed(keys)), None, first=8, most=16)
    assert p.quiet == ()
    assert [len(c.keys) for c in p.chunks] == [8, 16, 16]
    assert [k for c in p.chunks for k in c.keys] == keys
    assert p.chunks[0] == Chunk(tuple(keys[:8]), keys[7])


def test_on_completion_sessions_up_to_the_watermark_get_no_alert_and_the_rest_get_it() -> None:
    keys = [f"u{i:03d}#d" for i in range(40)]
    p = plan(keys, keys[9], first=8, most=16)
    assert p.quiet == tuple(keys[:10])
    assert [k for c in p.chunks for k in c.keys] == keys[10:]
    assert alert_due("u010#d", "u009#d") and not alert_due("u009#d", "u009#d") and alert_due("a", None)
    # a session that appeared after the watermark was written is placed by its key, like any other
    late = plan([*keys, "u005#new"], keys[9], first=8, most=16)
    assert "u005#new" in late.quiet


def _device_view(keys: list[str], deaths: list[int], first: int, most: int) -> tuple[Counter[str], set[str]]:
    """Run owner after owner over one intent; the n-th owner dies after handing ``deaths[n]`` pushes (every
    handed push is taken to have reached its device: the worst case for duplicates), the last one finishes.
    Returns the alerts each device showed and the devices the update reached."""
    alerts: Counter[str] = Counter()
    reached: set[str] = set()
    handed: str | None = None
    for death in [*deaths, None]:
        p = plan(keys, handed, first=first, most=most)
        order = [(k, False) for k in p.quiet] + [(k, True) for c in p.chunks for k in c.keys]
        # each chunk's watermark is persisted before the chunk is handed over (the first with the intent)
        marks = {
            len(p.quiet) + sum(len(c.keys) for c in p.chunks[:i]): c.watermark for i, c in enumerate(p.chunks)
        }
        for i, (key, alert) in enumerate(order):
            if i in marks:
                handed = marks[i]
            if death is not None and i >= death:
                break
            reached.add(key)
            alerts[key] += alert
        if death is None:
            break  # this owner finished and removed the intent
    return alerts, reached


@pytest.mark.parametrize("first,most", [(1, 1), (2, 4), (4, 64)])
def test_whenever_owners_die_no_device_shows_the_alert_twice_and_every_device_gets_the_event(
    first: int, most: int
) -> None:
    keys = [f"u{i:02d}#d" for i in range(23)]
    for a in range(0, 24):
        for b in (0, 1, 3, 7, 20):
            alerts, reached = _device_view(keys, [a, b], first, most)
            assert max(alerts.values(), default=0) <= 1, (a, b, alerts)
            assert reached == set(keys), (a, b)


def test_only_the_chunk_in_flight_loses_its_alert_when_the_owner_dies() -> None:
    keys = [f"u{i:03d}#d" for i in range(200)]
    # the owner dies after its first accepted push: only its first chunk is uncertain
    alerts, reached = _device_view(keys, [1], 16, 2048)
    assert reached == set(keys)
    assert sum(alerts.values()) == 1 + (200 - 16), (
        "the first chunk's 15 others get the event without the alert"
    )


def test_an_intent_round_trips_through_its_record_with_the_watermark() -> None:
    intent = _intent()
    record = {"alertIntent": intent.to_item(), "alertHanded": "u007#d"}
    back = AlertIntent.from_record(record)
    assert back is not None
    assert back.payloads == intent.payloads and back.timestamp == 1700 and back.priority == 10
    assert back.collapse_id == "500:wicket:S1:914" and back.handed == "u007#d" and back.kind == "update"
    assert back.payload_for("7", alert=False) == without_alert(intent.payloads["7"])
    assert AlertIntent.from_record({"matchPhase": "live"}) is None


def test_a_damaged_intent_is_named_not_guessed() -> None:
    with pytest.raises(IntentError, match="payloads"):
        AlertIntent.from_record({"alertIntent": {"kind": "update", "timestamp": 1, "priority": 10}})
    with pytest.raises(IntentError, match="kind"):
        AlertIntent.from_record(
            {
                "alertIntent": {
                    "kind": "start",
                    "timestamp": 1,
                    "priority": 10,
                    "payloads": {"neutral": _update().decode()},
                }
            }
        )
    with pytest.raises(IntentError):
        AlertIntent.from_record({"alertIntent": "not a map"})
