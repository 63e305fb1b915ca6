from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.cricket import payloads
from daemon.cricket.detectors import KeyEvent
from daemon.cricket.engine import process_tick
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import snapshot_from_fixture


def event(
    type_: str = "wicket",
    *,
    alert: bool = True,
    text: str = "WICKET! L Udara 91 (55)",
    ball: str | None = "11917729",
    subject: str = "S1:21906",
) -> KeyEvent:
    return KeyEvent(
        type=type_,
        subject=subject,
        key=f"{type_}:{subject}",
        ball_id=ball,
        over="18.6",
        priority=5,
        alert_worthy=alert,
        title="WICKET! SL 172/7",
        body="L Udara c H Nawaz b N Shah 91",
        text=text,
        team_id="39",
    )


@pytest.fixture(scope="module")
def state(real_fixture_path: Path) -> dict[str, Any]:
    snap = snapshot_from_fixture(json.loads(real_fixture_path.read_text()))
    return dict(process_tick(None, snap, now=0, marquee=True, settings=EngineSettings()).display["neutral"])


def test_update_carries_the_headline_every_event_and_an_alert(state: dict[str, Any]) -> None:
    six = event("six", alert=False, text="SIX! D Shanaka", ball="11917594", subject="S1:178")
    wicket = event()
    body = json.loads(
        payloads.update_payload(
            state, timestamp=1791558696, event=wicket, events=(six, wicket), stale_date=1791560000
        )
    )
    aps = body["aps"]
    assert aps["event"] == "update" and aps["timestamp"] == 1791558696 and aps["stale-date"] == 1791560000
    assert aps["content-state"]["event"] == "WICKET! L Udara 91 (55)"
    assert [i["type"] for i in aps["content-state"]["events"]] == ["wicket", "six"]
    assert aps["alert"] == {
        "title": "WICKET! SL 172/7",
        "body": "L Udara c H Nawaz b N Shah 91",
        "sound": "default",
    }
    assert payloads.apns_priority(wicket) == 10 and payloads.apns_priority(six) == 5
    assert payloads.apns_priority(None) == 5
    assert (
        "event" not in state or state["event"] != "WICKET! L Udara 91 (55)"
    )  # the caller's dict is untouched


def test_routine_update_has_no_alert(state: dict[str, Any]) -> None:
    body = json.loads(payloads.update_payload(state, timestamp=5, event=None))
    assert "alert" not in body["aps"] and body["aps"]["content-state"]["events"] == []


def test_start_has_attributes_and_an_alert_even_when_none_is_given(state: dict[str, Any]) -> None:
    aps = json.loads(
        payloads.start_payload(
            state,
            attributes_type="LiveActivityAttributes",
            attributes={"matchId": "71344"},
            timestamp=7,
            alert=None,
        )
    )["aps"]
    assert aps["event"] == "start" and aps["attributes-type"] == "LiveActivityAttributes"
    assert aps["attributes"] == {"matchId": "71344"}
    assert aps["alert"]["title"] == "PAK v SL" and aps["alert"]["body"] == "PAK need 173 off 112"
    with pytest.raises(ValueError, match="attributes_type"):
        payloads.start_payload(state, attributes_type="", attributes={}, timestamp=7, alert=None)


def test_end_has_a_dismissal_date(state: dict[str, Any]) -> None:
    aps = json.loads(payloads.end_payload(state, timestamp=9, dismissal_date=100))["aps"]
    assert aps["event"] == "end" and aps["dismissal-date"] == 100 and aps["content-state"]["score"] == "10/0"


def test_end_carries_the_last_ticks_events_and_the_headlines_alert(state: dict[str, Any]) -> None:
    wicket = event()
    end = event("match_end", text="SL won by 4 wickets", ball=None, subject="match")
    aps = json.loads(
        payloads.end_payload(state, timestamp=9, dismissal_date=100, event=end, events=(wicket, end))
    )["aps"]
    assert [(i["type"], i["subject"]) for i in aps["content-state"]["events"]] == [
        ("match_end", "match"),
        ("wicket", "S1:21906"),
    ]
    assert aps["content-state"]["eventType"] == "match_end"
    assert aps["alert"]["title"] == "WICKET! SL 172/7"  # the headline's own title (the helper's fixed one)


def test_plain_alert_with_thread_and_custom_data() -> None:
    body = json.loads(
        payloads.alert_payload(
            "Match starting", "PAK v SL in 30 min", thread_id="71344", data={"matchId": "71344"}
        )
    )
    assert body == {
        "aps": {
            "alert": {"title": "Match starting", "body": "PAK v SL in 30 min"},
            "sound": "default",
            "thread-id": "71344",
        },
        "matchId": "71344",
    }
    with pytest.raises(ValueError, match="aps"):
        payloads.alert_payload("t", "b", data={"aps": 1})


def test_an_oversized_update_is_pruned_without_losing_a_key(state: dict[str, Any]) -> None:
    big = dict(state)
    big["thisOver"] = ["1wd"] * 40
    big["subtitle"] = "x" * 4000
    events = [event("four", alert=False, text="FOUR! " + "y" * 200, ball=str(i)) for i in range(30)]
    data = payloads.update_payload(big, timestamp=1, event=event(), events=events)
    assert len(data) <= payloads.MAX_PAYLOAD
    cs = json.loads(data)["aps"]["content-state"]
    assert set(cs) == set(big) | {"events"}
    assert cs["events"][0]["type"] == "wicket"  # the headline survives pruning
    assert cs["subtitle"].endswith("…")


def test_collapse_id_is_deterministic_and_at_most_64_bytes() -> None:
    e = event()
    assert e.collapse_id("71344") == "71344:wicket:S1:21906" == event().collapse_id("71344")
    long_id = e.collapse_id("replay-" + "m" * 80)
    assert len(long_id.encode()) <= 64 and long_id == event().collapse_id("replay-" + "m" * 80)
    assert long_id != event(subject="S1:1").collapse_id("replay-" + "m" * 80)


text = st.text(min_size=0, max_size=400)


@settings(max_examples=60, deadline=None)
@given(
    title=text,
    body=text,
    texts=st.lists(text, max_size=25),
    names=st.lists(text, min_size=2, max_size=2),
    subtitle=st.text(max_size=5000),
    over=st.lists(st.text(max_size=8), max_size=60),
)
def test_every_payload_is_valid_json_within_4kb(
    state: dict[str, Any],
    title: str,
    body: str,
    texts: list[str],
    names: list[str],
    subtitle: str,
    over: list[str],
) -> None:
    cs = dict(state)
    cs["subtitle"] = subtitle
    cs["thisOver"] = over
    cs["batters"] = [{"name": n, "line": "1 (1)", "onStrike": False} for n in names]
    evs = [
        KeyEvent(
            type="four",
            subject=f"S1:{i}",
            key=f"four:S1:{i}",
            ball_id=str(i),
            over="1.1",
            priority=13,
            alert_worthy=False,
            title=title,
            body=body,
            text=t,
            team_id="1",
        )
        for i, t in enumerate(texts)
    ]
    headline = KeyEvent(
        type="wicket",
        subject="S1:9",
        key="wicket:S1:9",
        ball_id="9",
        over="1.2",
        priority=5,
        alert_worthy=True,
        title=title,
        body=body,
        text=title,
        team_id="1",
    )
    for data in (
        payloads.update_payload(cs, timestamp=1, event=headline, events=evs, stale_date=2),
        payloads.start_payload(
            cs,
            attributes_type="LiveActivityAttributes",
            attributes={"matchId": title},
            timestamp=1,
            alert=(title, body),
        ),
        payloads.end_payload(cs, timestamp=1, dismissal_date=2, alert=(title, body)),
        payloads.alert_payload(title * 20, body * 20, thread_id="71344", data={"note": body * 20}),
    ):
        assert len(data) <= payloads.MAX_PAYLOAD
        decoded = json.loads(data)
        assert "aps" in decoded


def test_a_ticks_payloads_are_one_per_perspective_update_or_end() -> None:
    display = {"neutral": {"score": "10/0"}, "7": {"score": "10/0", "team": "7"}}
    updates = payloads.tick_payloads(
        display, kind="update", timestamp=100, event=None, events=(), dismissal_date=500, stale_date=160
    )
    assert set(updates) == {"neutral", "7"}
    aps = json.loads(updates["7"])["aps"]
    assert aps["event"] == "update" and aps["stale-date"] == 160 and "dismissal-date" not in aps
    assert aps["content-state"]["team"] == "7"
    plain = payloads.tick_payloads(
        display, kind="update", timestamp=100, event=None, events=(), dismissal_date=500, stale_date=None
    )
    assert "stale-date" not in json.loads(plain["neutral"])["aps"]
    ends = payloads.tick_payloads(
        display, kind="end", timestamp=100, event=None, events=(), dismissal_date=500, stale_date=160
    )
    aps = json.loads(ends["neutral"])["aps"]
    assert aps["event"] == "end" and aps["dismissal-date"] == 500 and "stale-date" not in aps
    assert display["neutral"] == {"score": "10/0"}  # the caller's display state is not touched
