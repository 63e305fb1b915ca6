"""APNs payload builders: Live Activity start / update / end, and plain alerts. Every one fits in 4 KB.

Owns the JSON bodies (spec/apns.md §2.2) and their size discipline. Pure: returns compact UTF-8 JSON bytes;
it must not choose recipients, headers other than the priority rule, or send anything.

- ``update``: ``{"aps": {"timestamp", "event": "update", "content-state", ["stale-date"], ["alert"]}}``. The
  content-state carries ``event`` (the headline event's text) and ``events`` (every event of the tick as
  ``{type, text, ballId}``), so a burst that gave a wicket and a six loses neither. An alert-worthy headline
  adds ``alert: {title, body, sound}`` (and the sender uses priority 10, ``apns_priority``).
- ``start`` (push-to-start): adds ``attributes-type``, ``attributes`` and an ``alert`` (Apple requires one;
  when none is given it is built from the content-state's title and subtitle).
- ``end``: ``event: "end"``, the final content-state and ``dismissal-date`` (optionally an alert).
- ``alert_payload``: a plain notification, ``{"aps": {"alert", "sound", ["thread-id"]}, ...data}``.

Pruning, applied in this order only while the body is over ``MAX_PAYLOAD`` bytes (the schema never loses a
key, so the app's decoding never breaks; lists get shorter and strings get cut with "…"):
1. ``events`` keeps the headline event only; 2. ``thisOver`` keeps its last 3 deliveries; 3. every team's
``innings`` list keeps its last entry; 4. every string in the content-state is cut to 64 characters, then
5. to 24; 6. ``attributes`` (start only) keep string values only, cut to 24; 7. alert title and body are
cut to 64, then 24 characters. A body still too large after that (only possible with absurd input) raises
``PayloadTooLarge`` rather than being sent to be rejected.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from daemon.cricket.detectors import KeyEvent
from daemon.cricket.errors import EngineError

MAX_PAYLOAD = 4096


class PayloadTooLarge(EngineError):
    """A payload that no documented pruning step brings under 4096 bytes."""


def apns_priority(event: KeyEvent | None) -> int:
    """10 (immediate, budgeted) for an alert-worthy event, else 5 (opportunistic, unbudgeted)."""
    return 10 if event is not None and event.alert_worthy else 5


def start_collapse_id(match_id: str) -> str:
    """``apns-collapse-id`` of a match's push-to-start (its alert: "the match is live"), one per match."""
    return f"{match_id}:start"


def _encode(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def _cut_strings(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return _cut(value, limit)
    if isinstance(value, list):
        return [_cut_strings(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: _cut_strings(v, limit) for k, v in value.items()}
    return value


def _prune_steps(aps: dict[str, Any]) -> list[Callable[[], None]]:
    state: dict[str, Any] = aps["content-state"]

    def events_head() -> None:
        if isinstance(state.get("events"), list):
            state["events"] = state["events"][:1]

    def over_tail() -> None:
        if isinstance(state.get("thisOver"), list):
            state["thisOver"] = state["thisOver"][-3:]

    def innings_tail() -> None:
        for team in state.get("teams") or []:
            if isinstance(team, dict) and isinstance(team.get("innings"), list):
                team["innings"] = team["innings"][-1:]

    def strings(limit: int) -> Callable[[], None]:
        def step() -> None:
            for key in list(state):
                state[key] = _cut_strings(state[key], limit)

        return step

    def attributes() -> None:
        if isinstance(aps.get("attributes"), dict):
            aps["attributes"] = {k: _cut(v, 24) for k, v in aps["attributes"].items() if isinstance(v, str)}

    def alert(limit: int) -> Callable[[], None]:
        def step() -> None:
            if isinstance(aps.get("alert"), dict):
                aps["alert"] = {
                    k: _cut(v, limit) if isinstance(v, str) else v for k, v in aps["alert"].items()
                }

        return step

    return [events_head, over_tail, innings_tail, strings(64), strings(24), attributes, alert(64), alert(24)]


def _fit(body: dict[str, Any]) -> bytes:
    data = _encode(body)
    if len(data) <= MAX_PAYLOAD:
        return data
    for step in _prune_steps(body["aps"]):
        step()
        data = _encode(body)
        if len(data) <= MAX_PAYLOAD:
            return data
    raise PayloadTooLarge(f"payload is {len(data)} bytes after every pruning step (limit {MAX_PAYLOAD})")


def _alert(title: str, body: str) -> dict[str, str]:
    return {"title": title, "body": body, "sound": "default"}


def _state_copy(content_state: Mapping[str, Any]) -> dict[str, Any]:
    # A deep copy through JSON: pruning must not touch the caller's (shared, cached) display state, and
    # anything that is not JSON fails here, loudly, rather than on the device.
    copied = json.loads(json.dumps(content_state))
    if not isinstance(copied, dict):
        raise TypeError("content_state must be a JSON object")
    return copied


def _attach_events(state: dict[str, Any], event: KeyEvent | None, events: Iterable[KeyEvent]) -> None:
    """``event``/``eventType`` = the headline, ``events`` = every event of the tick, headline first."""
    items = [e.short() for e in events]
    if event is not None:
        state["event"] = event.text
        state["eventType"] = event.type
        if not any(
            i["type"] == event.type and i["ballId"] == event.ball_id and i["text"] == event.text
            for i in items
        ):
            items.insert(0, event.short())
        else:  # the headline first, so pruning to one keeps it
            items.sort(key=lambda i: not (i["type"] == event.type and i["text"] == event.text))
    state["events"] = items


def update_payload(
    content_state: Mapping[str, Any],
    *,
    timestamp: int,
    event: KeyEvent | None,
    events: Iterable[KeyEvent] = (),
    stale_date: int | None = None,
) -> bytes:
    state = _state_copy(content_state)
    _attach_events(state, event, events)
    aps: dict[str, Any] = {"timestamp": int(timestamp), "event": "update", "content-state": state}
    if stale_date is not None:
        aps["stale-date"] = int(stale_date)
    if event is not None and event.alert_worthy:
        aps["alert"] = _alert(event.title, event.body)
    return _fit({"aps": aps})


def supports_channels(device: Mapping[str, Any] | None) -> bool:
    """A device on iOS 18 or later can start an activity on a broadcast channel (``osVersion`` "18.0"+)."""
    version = str((device or {}).get("osVersion") or "")
    head = version.split(".", 1)[0]
    return head.isdigit() and int(head) >= 18


@dataclass(frozen=True)
class TeamRef:
    """A team as a Live Activity's attributes name it."""

    id: str
    name: str
    code: str


def activity_attributes(
    match_id: str, localteam: TeamRef | None, visitorteam: TeamRef | None
) -> dict[str, Any]:
    """The Live Activity's static attributes, fixed for its life: the match and its two teams. Every
    push-to-start carries them, whoever sends it (the match's owner, the prematch job), so an activity looks
    the same however it was started."""
    attrs: dict[str, Any] = {"matchId": match_id}
    for side, team in (("localteam", localteam), ("visitorteam", visitorteam)):
        if team is not None and team.id:
            attrs[side] = {"id": team.id, "name": team.name, "code": team.code}
    return attrs


def start_payload(
    content_state: Mapping[str, Any],
    *,
    attributes_type: str,
    attributes: Mapping[str, Any],
    timestamp: int,
    alert: tuple[str, str] | None,
    input_push_channel: str | None = None,
    input_push_token: bool = False,
) -> bytes:
    """A push-to-start. ``input_push_channel`` (iOS 18+): the started activity listens on that broadcast
    channel; else ``input_push_token`` asks the device for the activity's update token (``input-push-token: 1``)."""
    if not attributes_type:
        raise ValueError("attributes_type: required for a push-to-start")
    state = _state_copy(content_state)
    state.setdefault("events", [])
    if alert is None:
        alert = (str(state.get("title") or "Match live"), str(state.get("subtitle") or ""))
    aps: dict[str, Any] = {
        "timestamp": int(timestamp),
        "event": "start",
        "content-state": state,
        "attributes-type": attributes_type,
        "attributes": json.loads(json.dumps(dict(attributes))),
        "alert": _alert(*alert),
    }
    if input_push_channel:
        aps["input-push-channel"] = input_push_channel
    elif input_push_token:
        aps["input-push-token"] = 1
    return _fit({"aps": aps})


def end_payload(
    content_state: Mapping[str, Any],
    *,
    timestamp: int,
    dismissal_date: int,
    alert: tuple[str, str] | None = None,
    event: KeyEvent | None = None,
    events: Iterable[KeyEvent] = (),
) -> bytes:
    """The last push of an activity. The final tick's events ride along (the wickets of a last burst and
    ``match_end``), so the end loses no event; an alert-worthy headline adds its alert unless one is given."""
    state = _state_copy(content_state)
    if event is not None or events:
        _attach_events(state, event, events)
    state.setdefault("events", [])
    if alert is None and event is not None and event.alert_worthy:
        alert = (event.title, event.body)
    aps: dict[str, Any] = {
        "timestamp": int(timestamp),
        "event": "end",
        "content-state": state,
        "dismissal-date": int(dismissal_date),
    }
    if alert is not None:
        aps["alert"] = _alert(*alert)
    return _fit({"aps": aps})


def tick_payloads(
    display: Mapping[str, Mapping[str, Any]],
    *,
    kind: str,
    timestamp: int,
    event: KeyEvent | None,
    events: Iterable[KeyEvent],
    dismissal_date: int,
    stale_date: int | None,
) -> dict[str, bytes]:
    """A tick's payload per display perspective: ``end`` payloads (with ``dismissal_date``) for the final
    tick, ``update`` payloads (with ``stale_date`` when given) otherwise."""
    events = tuple(events)
    if kind == "end":
        return {
            key: end_payload(
                content, timestamp=timestamp, dismissal_date=dismissal_date, event=event, events=events
            )
            for key, content in display.items()
        }
    return {
        key: update_payload(content, timestamp=timestamp, event=event, events=events, stale_date=stale_date)
        for key, content in display.items()
    }


def alert_payload(
    title: str, body: str, *, thread_id: str | None = None, data: Mapping[str, Any] | None = None
) -> bytes:
    """A plain alert; ``data`` becomes top-level custom keys (it may not use ``aps``).

    Too large: title, body and the strings in ``data`` are cut to 256, then 64, then 24 characters.
    """
    if data and "aps" in data:
        raise ValueError("data: the key 'aps' is reserved for Apple")
    extra: dict[str, Any] = json.loads(json.dumps(dict(data or {})))
    size = 0
    for limit in (100_000, 256, 64, 24):
        aps: dict[str, Any] = {
            "alert": {"title": _cut(title, limit), "body": _cut(body, limit)},
            "sound": "default",
        }
        if thread_id:
            aps["thread-id"] = thread_id
        encoded = _encode({"aps": aps, **_cut_strings(extra, limit)})
        size = len(encoded)
        if size <= MAX_PAYLOAD:
            return encoded
    raise PayloadTooLarge(f"alert payload is {size} bytes after pruning (limit {MAX_PAYLOAD})")
