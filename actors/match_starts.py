"""Self-healing push-to-start for one match: which followers are due one, the claims that keep a follower from
being started twice, their devices, and the start pushes.

A follower without an active Live Activity session gets a push-to-start while the match is live, at most once
per ``push_to_start_min_interval_s``: in this process by the time it was last tried, across owners and the
prematch job by the follower's claim in ``cricket-locks`` (taken for a lease before the send, held for the
interval once APNs accepted the push: an owner that dies before sending holds nobody up past a lease). An iOS
18 device is started on its perspective's broadcast channel, an older one on an update token. The match actor
hands in what this needs (its audience, the latest tick's display, a fan-out, its channels); this module must
not read or write the match's state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import trio

from actors.audience import MatchAudience
from actors.delivery import Delivery
from actors.fanout import FanOut
from actors.janitor import TokenRef
from actors.lease import LeaseLost
from actors.ports import DeviceStore, StartClaims
from actors.settings import MatchActorSettings
from daemon.apns.types import Push, PushResult
from daemon.cricket import payloads
from daemon.cricket.payloads import supports_channels
from daemon.logs import get_logger

HEAL_PHASES = frozenset({"live", "innings_break"})  # followers without an activity get a push-to-start


@dataclass
class Latest:
    """The match as its last tick left it, for the starts: written by the match actor, read here."""

    display: Mapping[str, Any] | None = None
    attributes: dict[str, Any] = field(
        default_factory=dict
    )  # the activity's (``payloads.activity_attributes``)
    phase: str | None = None
    shown: trio.Event = field(default_factory=trio.Event)  # set once a display exists


class StartChannels(Protocol):
    """The match's broadcast channels as a push-to-start names them."""

    async def for_start(self) -> dict[str, str]:
        """perspective -> channel, created under the lease where missing ({} while none can be had)."""
        ...

    def announce(self, channel: str) -> None:
        """A push-to-start named ``channel``: the activity listens on it from its start."""
        ...


class SharedStarts(Protocol):
    """A hot match's rounds of push-to-starts delivered by every engine of the region
    (``actors.share.SharedFanOut``)."""

    @property
    def shared(self) -> bool: ...

    async def starts(
        self,
        users: list[str],
        *,
        content: Mapping[str, Mapping[str, Any]],
        attributes: Mapping[str, Any],
        channels: Mapping[str, str],
    ) -> tuple[int, dict[str, int]]:
        """Publish a round of starts over ``users`` and see it delivered; the pushes sent and their counts."""
        ...


@dataclass(frozen=True)
class StartsContext:
    """Who sends the starts and with what: the match, its owner, the APNs topic, the clock."""

    match_id: str
    owner: str
    topic: str
    settings: MatchActorSettings
    pending_hold_s: float  # a claim's hold before its push is accepted: about a lease
    now: Callable[[], float]  # wall clock


class FollowerStarts:
    """The match's push-to-starts; keeps when each follower was last tried (``sent``, monotonic seconds)."""

    def __init__(
        self,
        ctx: StartsContext,
        *,
        audience: MatchAudience,
        latest: Latest,
        devices: DeviceStore,
        claims: StartClaims,
        fanout: FanOut,
        channels: StartChannels | None,
        report: Callable[[Delivery], None] | None = None,
        shared: SharedStarts | None = None,
    ) -> None:
        self.ctx = ctx
        self.audience = audience
        self.latest = latest
        self.round = StartRound(ctx, devices=devices, claims=claims, fanout=fanout)
        self._channels = channels
        self._report = report
        self._shared = shared
        self.sent: dict[str, float] = {}
        self.log = get_logger("match", match_id=ctx.match_id)
        self._wake = trio.Event()
        self._restart_all = False

    def wake(self) -> None:
        """Heal now (the match went live: its followers' activities start with it, not a period later)."""
        self._wake.set()

    def restart_all(self) -> None:
        """At the first live heal, start every follower without a session whatever its claim: the match was
        ended wrongly and taken again, and its sessions were all ended."""
        self._restart_all = True

    def forget(self, users: set[str]) -> None:
        """Start ``users`` again at the next heal (their channel was recreated)."""
        for user_id in users:
            self.sent.pop(user_id, None)

    async def loop(self) -> None:
        """``heal`` every ``heal_every_s``, and at once when woken."""
        await self.latest.shown.wait()
        while True:
            try:
                again = None
                if self._restart_all and self.latest.phase in HEAL_PHASES:
                    again = set(self.audience.follower_team)
                await self.heal(again=again)
                if again is not None:
                    self._restart_all = False
                    self.log.warning("followers_restarted_after_wrong_end", followers=len(again))
            except LeaseLost:
                raise
            except Exception as exc:
                self.log.warning("heal_failed", error=repr(exc))
            with trio.move_on_after(self.ctx.settings.heal_every_s):
                await self._wake.wait()
            self._wake = trio.Event()

    async def heal(self, *, again: set[str] | None = None) -> int:
        """Push-to-start to followers without an active session; returns how many were sent.

        Followers go in chunks of ``heal_chunk``: the chunk's devices are read by the ``deviceToken`` their
        follows name (BatchGetItem, 100 a call; one Query each, ``heal_concurrency`` at once, only for those
        whose follow names no device or one since replaced), the followers with a push-to-start token are
        claimed together (a hold per follower, read and written by the hundred, so none is ever started twice,
        by this owner, a successor or the prematch job), then the chunk's pushes are sent and waited for, and
        the claims of those APNs accepted are held for ``push_to_start_min_interval_s``, before the next chunk
        is claimed. ``again``: followers started again on purpose (their channel was recreated), whatever
        their claim says."""
        latest = self.latest
        if latest.display is None or latest.phase not in HEAL_PHASES:
            return 0  # push-to-start when the match goes live (pre-match is the prematch job's)
        with_session = self.audience.users_with_session()
        now = trio.current_time()
        interval = self.ctx.settings.push_to_start_min_interval_s
        due: list[str] = []
        for user_id in list(self.audience.follower_team):
            if user_id in with_session:
                continue
            last = self.sent.get(user_id)
            recent = last is not None and now - last < interval
            if recent and user_id not in (again or ()):
                continue
            due.append(user_id)
        if due and not again and self._shared is not None and self._shared.shared:
            return await self._heal_shared(due, now)
        sent = 0
        step = self.ctx.settings.heal_chunk
        for i in range(0, len(due), step):
            claimed = await self._claim(due[i : i + step], now, again or set())
            pushes = [await self._start_push(user_id, device) for user_id, device in claimed]
            if pushes:
                sent += await self._send(pushes)
        return sent

    async def _heal_shared(self, due: list[str], now: float) -> int:
        """A hot match's round: published for the fleet with what every start carries (the display of each
        perspective, the activity's attributes, the channel of each perspective, created here where missing
        and announced, since any engine may start a follower on it), then delivered shard by shard."""
        assert self._shared is not None and self.latest.display is not None
        channels: dict[str, str] = {}
        if self._channels is not None:
            channels = dict(await self._channels.for_start())
            for channel in channels.values():
                self._channels.announce(channel)
        for user_id in due:
            self.sent[user_id] = now
        total, counts = await self._shared.starts(
            due,
            content={k: dict(v) for k, v in self.latest.display.items()},
            attributes=self.latest.attributes or {"matchId": self.ctx.match_id},
            channels=channels,
        )
        self.log.info("push_to_start_sent", tokens=total, shared=True, **counts)
        self._reported(counts, total)
        return total

    async def _claim(
        self, users: list[str], now: float, again: set[str]
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """The followers of ``users`` with a push-to-start token whose claim this owner took, with their device,
        in ``users``' order."""
        devices = await self.round.devices_of(users, self.audience.follower_device)
        for user_id in users:  # also rate-limits the look-up of devices without a token
            self.sent[user_id] = now
        return await self.round.claim(users, devices, force=again)

    async def _start_push(self, user_id: str, device: Mapping[str, Any]) -> Push:
        display = self.latest.display or {}
        perspective = self.audience.perspective(user_id, display)
        channel = None
        if supports_channels(device) and self._channels is not None:
            channel = (await self._channels.for_start()).get(perspective)
            if channel:
                self._channels.announce(channel)
        return start_push(
            self.ctx,
            user_id,
            device,
            content=display[perspective],
            channel=channel,
            attributes=self.latest.attributes,
            timestamp=int(self.ctx.now()),
        )

    async def _send(self, pushes: list[Push]) -> int:
        counts = await self.round.send(pushes)
        self.log.info("push_to_start_sent", tokens=len(pushes), **counts)
        self._reported(counts, len(pushes))
        return len(pushes)

    def _reported(self, counts: dict[str, int], tokens: int) -> None:
        """A round of starts handed to the delivery report (the demo's and ``describe``'s), when there is one."""
        if self._report is not None:
            self._report(
                Delivery.of(
                    self.ctx.match_id,
                    "start",
                    self.latest.display,
                    counts,
                    event=None,
                    event_types=(),
                    priority=10,
                    tokens=tokens,
                )
            )


def start_push(
    ctx: StartsContext,
    user_id: str,
    device: Mapping[str, Any],
    *,
    content: Mapping[str, Any],
    channel: str | None,
    attributes: Mapping[str, Any] | None,
    timestamp: int,
) -> Push:
    """One follower's push-to-start: the perspective's ``content``, on ``channel`` (an iOS 18 device) or asking
    for the activity's update token, under the match's start collapse id."""
    content = dict(content)
    payload = payloads.start_payload(
        content,
        attributes_type=ctx.settings.attributes_type,
        attributes=attributes or {"matchId": ctx.match_id},
        timestamp=timestamp,
        alert=(content.get("title") or "Match live", content.get("subtitle") or "Follow it live"),
        input_push_channel=channel,
        input_push_token=channel is None,
    )
    return Push(
        token=str(device["pushToStartToken"]),
        push_type="liveactivity",
        topic=ctx.topic,
        payload=payload,
        priority=10,
        kind="start",
        collapse_id=payloads.start_collapse_id(ctx.match_id),
        context=TokenRef(
            "push_to_start", ctx.match_id, user_id=user_id, device_token=str(device["deviceToken"])
        ),
    )


class StartRound:
    """Push-to-starts of a chunk of followers, whoever sends them (a match's owner, or an engine delivering a
    shard of a hot match's round of starts): their devices read, their claims taken, the pushes sent and
    waited for, and the claims held for the interval (or given up for a start APNs rejected)."""

    def __init__(
        self, ctx: StartsContext, *, devices: DeviceStore, claims: StartClaims, fanout: FanOut
    ) -> None:
        self.ctx = ctx
        self._devices = devices
        self._claims = claims
        self._fanout = fanout

    async def devices_of(self, users: list[str], named: Mapping[str, str]) -> dict[str, Mapping[str, Any]]:
        """The devices of ``users`` by the device each follow names (``named``: user -> device token)."""
        return dict(
            await self._devices.get_devices_of_users(
                users, named, concurrency=self.ctx.settings.heal_concurrency
            )
        )

    async def claim(
        self, users: list[str], devices: Mapping[str, Mapping[str, Any]], *, force: set[str]
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """The followers of ``users`` with a push-to-start token whose claim this sender took, with their
        device, in ``users``' order; ``force``: started again on purpose, whatever their claim says."""
        with_token = [u for u in users if (devices.get(u) or {}).get("pushToStartToken")]
        if not with_token:
            return []
        won = await self._claims.claim_push_to_starts(
            self.ctx.match_id,
            with_token,
            owner=self.ctx.owner,
            hold_s=self.ctx.pending_hold_s,
            now=self.ctx.now(),
            force=force,
        )
        return [(u, devices[u]) for u in won]

    async def send(self, pushes: list[Push]) -> dict[str, int]:
        """Hold the chunk's claims for the whole interval, then send: from here on a start may reach the
        device whatever happens to this sender, so nobody may start it again (a sender that dies before this
        write holds its claims for a lease only). Claims of starts APNs rejected are given up; one that went
        unanswered keeps its hold, since it may have reached the device. The outcome counts."""
        users = [ref.user_id for p in pushes if isinstance(ref := p.context, TokenRef) and ref.user_id]
        await self._claims.confirm_push_to_starts(
            self.ctx.match_id,
            users,
            owner=self.ctx.owner,
            hold_s=self.ctx.settings.push_to_start_min_interval_s,
            now=self.ctx.now(),
        )
        refused: list[str] = []

        def note(result: PushResult) -> None:
            ref = result.push.context
            if result.outcome == "rejected" and isinstance(ref, TokenRef) and ref.user_id:
                refused.append(ref.user_id)

        _, counts = await self._fanout.push_all(
            lambda reply_to, fence: [replace(p, reply_to=reply_to, fence=fence) for p in pushes],
            on_result=note,
        )
        if refused:  # never started: any owner may start them once their device has a new token
            await self._claims.release_push_to_starts(self.ctx.match_id, refused, owner=self.ctx.owner)
        return counts
