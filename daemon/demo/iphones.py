"""The demo's simulated iPhones: app users that do everything through the app's HTTP API.

Each simulated user holds an access token from the demo's local issuer and, as the real app does: finds
the match in its league's schedule (``GET /matches?league=&from=&to=``, until the fixture sync has stored
it), registers its device with a push-to-start token (``POST /user/device``), follows the match supporting
one of its teams (``POST /user/follow/{matchId}``), and, when a push-to-start reaches the device (the APNs
server accepted it), starts the Live Activity and registers its session with the activity's update token
(``POST /user/activity/{matchId}``, or ``.../channel`` for one on a broadcast channel), as iOS hands the
app the activity's token. A share of the phones run
iOS 18 (``ios18_share``): a push-to-start naming a broadcast channel (``input-push-channel``) starts their
activity on that channel instead, so they subscribe to it (``subscribe``: the APNs server then fans the
channel's broadcasts out to them) and register the session with ``channelId``. Nothing here writes
DynamoDB: the engine sees these users only through what the API stored.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio

from daemon.logs import get_logger

log = get_logger("daemon.demo")


@dataclass
class SimulatedIphone:
    user_id: str
    team_id: str
    device_token: str = field(default_factory=lambda: secrets.token_hex(32))
    push_to_start_token: str = field(default_factory=lambda: secrets.token_hex(32))
    device_id: str = field(default_factory=lambda: f"iphone-{secrets.token_hex(4)}")
    activity_started: bool = False
    update_token: str = ""  # the running activity's update token (set when it starts on a token)
    # the update token iOS will hand the app when the activity starts on a token (drawn up front, so a test
    # can script the APNs server's answer to it before it exists)
    activity_token: str = field(default_factory=lambda: secrets.token_hex(32))
    os_version: str = "18.2"
    channel_id: str = ""  # the broadcast channel its activity listens on (iOS 18), else ""


def _ios18(k: int, share: float) -> bool:
    return int((k + 1) * share) > int(k * share)


class SimulatedIphones:
    """``count`` app users of one match, talking to the API at ``api_url`` with tokens from ``mint``; or the
    ``phones`` given (their users, teams, tokens and iOS versions as they are)."""

    def __init__(
        self,
        api_url: str,
        mint: Callable[[str], str],
        match_id: str,
        team_ids: Sequence[str],
        count: int,
        *,
        concurrency: int = 16,
        ios18_share: float = 1.0,
        subscribe: Callable[[str, str], None] | None = None,
        phones: Sequence[SimulatedIphone] | None = None,
    ) -> None:
        self.api_url = api_url
        self.mint = mint
        self.match_id = match_id
        self.phones = (
            list(phones)
            if phones is not None
            else [
                SimulatedIphone(
                    f"demo-user-{i:05d}",
                    str(team_ids[i % len(team_ids)]),
                    # spread evenly within each team: the k-th supporter of a team runs iOS 18 when the running
                    # share of them falls behind ios18_share
                    os_version="18.2" if _ios18(i // max(1, len(team_ids)), ios18_share) else "17.5",
                )
                for i in range(count)
            ]
        )
        self._subscribe = subscribe
        self._by_pts = {p.push_to_start_token: p for p in self.phones}
        self._tokens: dict[str, str] = {}
        self._limit = trio.CapacityLimiter(concurrency)
        self.errors: list[str] = []
        self.requests = 0

    def _auth(self, phone: SimulatedIphone) -> dict[str, str]:
        return self._bearer(phone.user_id)

    def _bearer(self, user_id: str) -> dict[str, str]:
        token = self._tokens.get(user_id)
        if token is None:
            token = self._tokens[user_id] = self.mint(user_id)
        return {"Authorization": f"Bearer {token}"}

    async def _call(
        self, http: httpx.AsyncClient, phone: SimulatedIphone, method: str, path: str, body: Any
    ) -> bool:
        async with self._limit:
            self.requests += 1
            for attempt in range(5):
                try:
                    resp = await http.request(method, path, json=body, headers=self._auth(phone))
                except httpx.HTTPError as exc:
                    error = f"{method} {path}: {exc!r}"
                else:
                    if resp.status_code < 300:
                        return True
                    error = f"{method} {path}: {resp.status_code} {resp.text[:200]}"
                    if resp.status_code not in (429, 503):
                        break
                await trio.sleep(0.2 * (attempt + 1))
            self.errors.append(error)
            log.warning("demo_iphone_request_failed", user=phone.user_id, error=error)
            return False

    async def find_match(
        self, league_code: str, start_from: str, to: str, *, timeout_s: float = 120.0, poll_s: float = 0.2
    ) -> dict[str, Any]:
        """The match as the league's schedule between ``start_from`` and ``to`` (ISO 8601) lists it, read as the
        first phone's user (any signed-in user may read it); asked again until it is listed (the fixture sync
        has not stored it yet) or ``timeout_s`` has passed (TimeoutError)."""
        headers = self._auth(self.phones[0]) if self.phones else self._bearer("schedule-reader")
        query = {"league": league_code, "from": start_from, "to": to}
        async with httpx.AsyncClient(base_url=self.api_url, timeout=10) as http:
            with trio.fail_after(timeout_s):
                while True:
                    self.requests += 1
                    try:
                        resp = await http.get("/matches", params=query, headers=headers)
                    except httpx.HTTPError as exc:
                        log.info("demo_schedule_unavailable", error=repr(exc))
                    else:
                        if resp.status_code not in (200, 429, 503):
                            raise RuntimeError(f"GET /matches {query}: {resp.status_code} {resp.text[:200]}")
                        listed = resp.json().get("matches", []) if resp.status_code == 200 else []
                        for match in listed:
                            if str(match.get("matchId")) == self.match_id:
                                return dict(match)
                    await trio.sleep(poll_s)

    async def sign_up(self) -> None:
        """Every phone registers its device and follows the match (concurrently, as a crowd does)."""
        async with httpx.AsyncClient(base_url=self.api_url, timeout=10) as http:

            async def one(phone: SimulatedIphone) -> None:
                await self._call(
                    http,
                    phone,
                    "POST",
                    "/user/device",
                    {
                        "deviceToken": phone.device_token,
                        "platform": "ios",
                        "osVersion": phone.os_version,
                        "appVersion": "demo",
                        "apnsToken": phone.device_token,
                        "pushToStartToken": phone.push_to_start_token,
                    },
                )
                await self._call(
                    http, phone, "POST", f"/user/follow/{self.match_id}", {"teamId": phone.team_id}
                )

            async with trio.open_nursery() as nursery:
                for phone in self.phones:
                    nursery.start_soon(one, phone)

    async def start_activities(
        self, records: Callable[[], list[dict[str, Any]]], *, poll_s: float = 0.1
    ) -> None:
        """Watch what APNs accepted; a push-to-start reaching a phone starts its Live Activity, which the app
        registers through the API. Runs until cancelled."""
        seen = 0
        async with (
            httpx.AsyncClient(base_url=self.api_url, timeout=10) as http,
            trio.open_nursery() as nursery,
        ):
            while True:
                batch = records()
                for record in batch[seen:]:
                    phone = self._by_pts.get(str(record.get("token")))
                    if phone is None or record.get("status") != 200:
                        continue
                    aps = (record.get("payload") or {}).get("aps") or {}
                    if aps.get("event") != "start":
                        continue
                    channel = str(aps.get("input-push-channel") or "")
                    if phone.activity_started and (not channel or channel == phone.channel_id):
                        continue  # a start on a running activity (a channel re-announced starts it again)
                    phone.activity_started = True
                    if channel and self._subscribe is not None:
                        phone.channel_id = channel
                        self._subscribe(phone.device_id, channel)
                        body = {"deviceId": phone.device_id, "channelId": channel}
                        path = f"/user/activity/{self.match_id}/channel"
                    else:
                        phone.update_token = phone.activity_token
                        body = {"deviceId": phone.device_id, "updateToken": phone.update_token}
                        path = f"/user/activity/{self.match_id}"
                    nursery.start_soon(self._call, http, phone, "POST", path, body)
                seen = len(batch)
                await trio.sleep(poll_s)
