"""Self-healing push-to-start for one match: which followers are due, the claims that keep a follower from
being started twice, their devices, and the start pushes (``FollowerStarts``, part of ``MatchActor``).

A follower without an active Live Activity session gets a push-to-start while the match is live, at most once
per ``push_to_start_min_interval_s``: in this process by the time it was last tried, across owners by a claim
in ``cricket-locks`` taken before the send. An iOS 18 device is started on its perspective's broadcast channel
(``input-push-channel``), an older one on an update token (``input-push-token``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import trio

from actors.janitor import TokenRef
from actors.match_types import Delivery, LeaseLost
from daemon.apns.types import Push
from daemon.cricket import payloads
from daemon.cricket.payloads import supports_channels

if TYPE_CHECKING:
    from actors.match import MatchActor

HEAL_PHASES = frozenset({"live", "innings_break"})  # followers without an activity get a push-to-start


class FollowerStarts:
    """The match actor's push-to-starts. Reads the actor's followers, sessions, display and settings; keeps
    when each follower was last tried (``sent``, monotonic seconds)."""

    def __init__(self, actor: MatchActor) -> None:
        self.actor = actor
        self.sent: dict[str, float] = {}

    async def loop(self) -> None:
        """``heal`` every ``heal_every_s``, and at once when the match goes live (its followers' activities
        start with the match, not up to ``heal_every_s`` later)."""
        a = self.actor
        await a._first_display.wait()
        while True:
            try:
                again = None
                if a._restart_followers and a.phase in HEAL_PHASES:
                    again = set(a.follower_team)
                await self.heal(again=again)
                if again is not None:
                    a._restart_followers = False
                    a.log.warning("followers_restarted_after_wrong_end", followers=len(again))
            except LeaseLost:
                raise
            except Exception as exc:
                a.log.warning("heal_failed", error=repr(exc))
            with trio.move_on_after(a._settings.heal_every_s):
                await a._heal_wake.wait()
            a._heal_wake = trio.Event()

    async def heal(self, *, again: set[str] | None = None) -> int:
        """Push-to-start to followers without an active session; returns how many were sent.

        Followers go in chunks of ``heal_chunk``: the chunk's devices are read by the ``deviceToken`` their
        follows name (BatchGetItem, 100 a call; one Query each, ``heal_concurrency`` at once, only for those
        whose follow names no device or one since replaced), the followers with a push-to-start token are
        claimed together (``LockRepository.claim_push_to_starts``: a hold per follower, read and written by
        the hundred, so none is ever started twice, by this owner, a successor or the prematch job), then
        the chunk's pushes are sent and waited for before the next chunk is claimed: an owner that dies
        leaves at most one chunk claimed and perhaps unsent (sent again after
        ``push_to_start_min_interval_s``). ``again``: followers started again on purpose (their channel was
        recreated), whatever their claim says."""
        a = self.actor
        if a._last_display is None or a.phase not in HEAL_PHASES:
            return 0  # push-to-start when the match goes live (pre-match is the prematch job's)
        with_session = {s.user_id for s in a.sessions.values()}
        with_session.update(s.user_id for s in a.channel_sessions.values())
        now = trio.current_time()
        due: list[str] = []
        for user_id in list(a.follower_team):
            if user_id in with_session:
                continue
            last = self.sent.get(user_id)
            recent = last is not None and now - last < a._settings.push_to_start_min_interval_s
            if recent and user_id not in (again or ()):
                continue
            due.append(user_id)
        sent = 0
        step = a._settings.heal_chunk
        for i in range(0, len(due), step):
            claimed = await self._claim(due[i : i + step], now, again or set())
            pushes = [await self._start_push(user_id, device) for user_id, device in claimed]
            if pushes:
                sent += await self._send(pushes)
        return sent

    async def _claim(
        self, users: list[str], now: float, again: set[str]
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """The followers of ``users`` with a push-to-start token whose claim this owner took, with their
        device, in ``users``' order."""
        a = self.actor
        devices = await self._devices_of(users)
        for user_id in users:  # also rate-limits the look-up of devices without a token
            self.sent[user_id] = now
        with_token = [u for u in users if (devices.get(u) or {}).get("pushToStartToken")]
        if not with_token:
            return []
        # The durable twin of the rate limit above, taken before the send: a successor owner does not start
        # (and alert) a follower this owner may already have reached.
        won = await a._repos.locks.claim_push_to_starts(
            a.match_id,
            with_token,
            owner=a.instance_id,
            hold_s=a._settings.push_to_start_min_interval_s,
            now=a._now(),
            force=again,
        )
        return [(u, devices[u]) for u in won]

    async def _devices_of(self, users: list[str]) -> dict[str, Mapping[str, Any]]:
        """The registered device of each of ``users`` that has one: by the device their follow names
        (BatchGetItem), else by a Query per follower (at most ``heal_concurrency`` in flight)."""
        a = self.actor
        return await a._repos.devices.get_devices_of_users(
            users, a.follower_device, concurrency=a._settings.heal_concurrency
        )

    async def _start_push(self, user_id: str, device: Mapping[str, Any]) -> Push:
        a = self.actor
        content = a._content_for(a._last_display or {}, user_id)
        channel = None
        if supports_channels(device):
            channel = (await a._start_channels()).get(a._perspective(user_id, a._last_display or {}))
            if channel:
                a._announced.add(channel)
        payload = payloads.start_payload(
            content,
            attributes_type=a._settings.attributes_type,
            attributes=self._attributes(),
            timestamp=int(a._now()),
            alert=(content.get("title") or "Match live", content.get("subtitle") or "Follow it live"),
            input_push_channel=channel,
            input_push_token=channel is None,
        )
        return Push(
            token=str(device["pushToStartToken"]),
            push_type="liveactivity",
            topic=a._topic,
            payload=payload,
            priority=10,
            kind="start",
            collapse_id=payloads.start_collapse_id(a.match_id),
            context=TokenRef(
                "push_to_start", a.match_id, user_id=user_id, device_token=str(device["deviceToken"])
            ),
        )

    async def _send(self, pushes: list[Push]) -> int:
        a = self.actor
        _, counts = await a._push_all(
            lambda reply_to, fence: [replace(p, reply_to=reply_to, fence=fence) for p in pushes]
        )
        a.log.info("push_to_start_sent", tokens=len(pushes), **counts)
        if a._on_delivery is not None:
            a._on_delivery(
                Delivery.of(
                    a.match_id,
                    "start",
                    a._last_display,
                    counts,
                    event=None,
                    event_types=(),
                    priority=10,
                    tokens=len(pushes),
                )
            )
        return len(pushes)

    def _attributes(self) -> dict[str, Any]:
        """The activity's attributes (fixed for its life): the match and its two teams."""
        snap = self.actor._last_snapshot
        attrs: dict[str, Any] = {"matchId": self.actor.match_id}
        if snap is not None:
            for side in ("localteam", "visitorteam"):
                team = getattr(snap, side, None)
                if team is not None:
                    attrs[side] = {
                        "id": str(getattr(team, "id", "")),
                        "name": getattr(team, "name", ""),
                        "code": getattr(team, "code", ""),
                    }
        return attrs
