"""The hot-match benchmark's per-ball figures from nginx's records (pure): each served ball paired with the
first tick pushed after it, its fan-out from first to last accepted push, the tokens it missed and reached
twice, and whether it carried an alert."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from hot_match import tick_figures  # noqa: E402


def _record(t: float, token: str, stamp: int, *, alert: bool = False, status: int = 200) -> dict[str, Any]:
    aps: dict[str, Any] = {"timestamp": stamp, "content-state": {}}
    if alert:
        aps["alert"] = {"title": "Wicket"}
    return {"time": t, "status": status, "token": token, "stamp": stamp, "payload": {"aps": aps}}


def test_each_ball_takes_the_first_tick_after_it_and_says_whether_it_alerted() -> None:
    tokens = {"a", "b", "c"}
    records = [
        _record(10.0, "a", 1),  # before the first ball: no ball's tick
        _record(20.5, "a", 2, alert=True),
        _record(21.0, "b", 2, alert=True),
        _record(23.0, "c", 2),  # the alert's quiet resend: the same tick
        _record(30.2, "a", 3),
        _record(30.4, "b", 3),
        _record(30.6, "b", 3),  # a duplicate
        _record(30.9, "c", 3, status=410),  # not accepted: not counted
        {
            "time": 31.0,
            "status": 200,
            "token": "c",
            "stamp": 3,
            "payload": None,
        },  # accepted later (its body not logged: no alert seen)
    ]
    figures = tick_figures(records, tokens, served=[20.0, 30.0])
    assert figures["balls"] == 2
    first, second = figures["per_ball"]
    assert first == {"served_to_first_s": 0.5, "fanout_s": 2.5, "reached": 3, "alerting": True}
    assert second == {"served_to_first_s": 0.2, "fanout_s": 0.8, "reached": 3, "alerting": False}
    assert figures["lost"] == 0 and figures["duplicates"] == 1
    assert figures["fanout_s"]["max"] == 2.5
