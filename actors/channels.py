"""A match's iOS 18 broadcast channels (one per display perspective), and the sweep of leaked channels.

Owns: creating a match's channels (message-storage-policy 0) through the sender's management connection,
recording them on the fixture (``cricket-fixtures.broadcastChannels``: perspective -> channel id), reusing the
recorded ones after a restart or take-over, recreating one APNs no longer knows, deleting them after the
match's end; and ``ChannelSweeper``, which compares APNs's ``all-channels`` with the channels recorded on
the matches that should have them and deletes the rest, so the 10,000-channel limit is never reached.
Must not touch: pushes (the match actor builds broadcasts), the lease (the caller holds it).

Only the match's owner calls ``MatchChannels`` (the match actor, under its lease). Before it asks APNs for
a channel it writes a claim on the fixture (``broadcastChannelsClaim``: a random id and its epoch), and it
records what it created with a compare-and-swap on ``broadcastChannels`` that also requires its claim still
there and removes it. So:
- a claim found on the fixture by another owner means a creation may have happened at APNs that was never
  recorded (the creator died between the 201 and the record, or the 201 was lost): that owner lists
  ``all-channels`` at once and deletes every channel no active match records, unless another match has a
  creation in flight (a claim with its current owner epoch), whose channels cannot be told apart from leaks;
  those are left to the sweep. Unrecorded channels never had a follower (starts name recorded channels only),
  so deleting them loses nothing;
- an owner whose write finds the record or the claim changed (a paused predecessor and its successor both
  creating) deletes what it just created and adopts what is recorded, so whatever the timing at most one
  channel per perspective is in use.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from actors.errors import ActorError
from actors.jobs.lease import NoSchedule
from actors.lease import LeaseLost
from actors.ports import ChannelRecords
from daemon import metrics
from daemon.apns import broadcast
from daemon.apns.rules import Action
from daemon.apns.types import Fence, Push
from daemon.logs import get_logger

log = get_logger("channels")

Request = Callable[[broadcast.Request], Awaitable[Any]]
ActiveMatches = Callable[[], Awaitable[list[dict[str, Any]]]]


@dataclass(frozen=True, slots=True)
class ChannelRef:
    """What a broadcast carries back: the perspective and the channel it went to."""

    perspective: str
    channel_id: str


class ChannelsUnavailable(ActorError):
    """No channel can be had for now (limit reached, fixture missing): the match stays on per-token pushes."""


class MatchChannels:
    """The channels of one match; ``request`` is the sender's ``channels.request``."""

    def __init__(
        self,
        match_id: str,
        *,
        bundle: str,
        request: Request,
        fixtures: ChannelRecords,
        epoch: Callable[[], int] = lambda: 0,
        active_matches: ActiveMatches | None = None,
    ) -> None:
        """``epoch`` gives the owner's epoch (written in its claims); ``active_matches`` gives the
        active-matches items (``matchId``, ``ownerEpoch``) for deleting a dead creator's channels at once
        (None: they are left to the sweep)."""
        self.match_id = match_id
        self.bundle = bundle
        self._request = request
        self._fixtures = fixtures
        self._epoch = epoch
        self._active_matches = active_matches
        self._claim_id = secrets.token_hex(8)
        self.channels: dict[str, str] = {}  # perspective -> channel id, as recorded
        self.created = 0
        self.deleted = 0
        self.leaks_deleted = 0  # unrecorded channels deleted on finding a dead creator's claim
        self.loaded = False
        # one change at a time within this owner (its start-up preparation, a push-to-start, a recreation)
        self._lock = trio.Lock()

    def perspective_of(self, channel_id: str) -> str | None:
        for perspective, held in self.channels.items():
            if held == channel_id:
                return perspective
        return None

    async def _recorded(self) -> dict[str, str] | None:
        fixture = await self._fixtures.get_fixture(self.match_id)
        if fixture is None:
            return None
        recorded = fixture.get("broadcastChannels") or {}
        return {str(k): str(v) for k, v in recorded.items()}

    async def load(self) -> dict[str, str]:
        """The channels recorded on the fixture (a restarted or new owner reuses them)."""
        recorded = await self._recorded()
        self.channels = recorded or {}
        self.loaded = True
        self._gauge()
        return self.channels

    async def ensure(
        self, perspectives: Iterable[str], *, replace: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        async with self._lock:
            return await self._ensure(perspectives, replace)

    async def _ensure(self, perspectives: Iterable[str], replace: Mapping[str, str] | None) -> dict[str, str]:
        """A recorded channel for each of ``perspectives``: the missing ones are created, and so are new ones
        for ``replace`` (perspective -> the channel id APNs no longer knows, unless the record has moved on
        already). Raises ``ChannelsUnavailable`` when none can be had (limit reached, no fixture)."""
        wanted = list(dict.fromkeys(perspectives))
        gone = dict(replace or {})
        for _ in range(5):
            fixture = await self._fixtures.get_fixture(self.match_id)
            if fixture is None:
                raise ChannelsUnavailable(
                    f"fixture {self.match_id} does not exist: channels cannot be recorded"
                )
            recorded = {str(k): str(v) for k, v in (fixture.get("broadcastChannels") or {}).items()}
            found = fixture.get("broadcastChannelsClaim")
            if found and found.get("id") != self._claim_id:
                await self._delete_leaks(recorded, found)
            # another owner may have replaced it already: only a perspective still recorded with the gone id
            stale = {p for p, channel in gone.items() if recorded.get(p) == channel}
            missing = [p for p in wanted if p not in recorded or p in stale]
            if not missing:
                if found and not await self._fixtures.claim_broadcast_channels(
                    self.match_id, recorded or None, None
                ):
                    continue  # the record moved on: read it again
                self.channels = recorded
                self.loaded = True
                self._gauge()
                return dict(recorded)
            claim = {"id": self._claim_id, "epoch": int(self._epoch())}
            if not await self._fixtures.claim_broadcast_channels(self.match_id, recorded or None, claim):
                continue
            created: dict[str, str] = {}
            try:
                for perspective in missing:
                    created[perspective] = await self._request(broadcast.create_channel(self.bundle))
            except broadcast.ChannelError as exc:
                await self._delete_quietly(created.values())
                await self._fixtures.claim_broadcast_channels(self.match_id, recorded or None, None)
                if exc.action is Action.CHANNEL_LIMIT:
                    raise ChannelsUnavailable(f"APNs channel limit reached ({exc.reason})") from exc
                raise
            except BaseException:
                # no answer (a 201 may have been lost, or the wait was cancelled): the claim stays, and a fresh
                # claim id makes this owner's next attempt treat it like a dead creator's
                self._claim_id = secrets.token_hex(8)
                raise
            if await self._fixtures.swap_broadcast_channels(
                self.match_id, recorded or None, {**recorded, **created}, claim=claim
            ):
                old = [recorded[p] for p in created if p in recorded]
                self.created += len(created)
                self.channels = {**recorded, **created}
                self.loaded = True
                self._gauge()
                log.info("broadcast_channels_created", match_id=self.match_id, channels=created)
                await self._delete_quietly(old)  # the replaced ones, if APNs still had them
                return dict(self.channels)
            # the record changed under us: ours are not recorded, so nobody will use them
            log.warning("broadcast_channels_record_raced", match_id=self.match_id)
            await self._delete_quietly(created.values())
        raise ChannelsUnavailable(f"fixture {self.match_id}: broadcastChannels kept changing")

    async def _delete_leaks(self, recorded: Mapping[str, str], claim: Mapping[str, Any]) -> None:
        """Another owner's claim is on the fixture: it may have created channels it never recorded. Delete
        every channel APNs lists that no active match records, unless some other match has a creation in
        flight (its claim carries its current owner epoch): its new channels look the same, so the sweep
        is left to tell them apart. ``all-channels`` is listed before the records are read: a channel listed
        was created after its creator's claim, which goes only in the write that records it."""
        if self._active_matches is None:
            return
        try:
            listed = set(await self._request(broadcast.list_channels(self.bundle)))
        except broadcast.ChannelError as exc:
            log.warning("broadcast_channel_list_failed", match_id=self.match_id, reason=exc.reason)
            return
        items = await self._active_matches()
        epochs = {str(i["matchId"]): int(i.get("ownerEpoch", 0)) for i in items}
        others = [m for m in epochs if m != self.match_id]
        fixtures = await self._fixtures.batch_get_fixtures(others) if others else {}
        in_flight = [
            m
            for m, f in fixtures.items()
            if (c := f.get("broadcastChannelsClaim")) and int(c.get("epoch", -1)) >= epochs.get(m, 0)
        ]
        if in_flight:
            log.info("broadcast_channel_leaks_left_to_sweep", match_id=self.match_id, in_flight=in_flight)
            return
        held = {str(c) for f in fixtures.values() for c in (f.get("broadcastChannels") or {}).values()}
        held |= set(recorded.values())
        leaks = listed - held
        removed = await self._delete_quietly(sorted(leaks))
        self.leaks_deleted += removed
        log.info(
            "broadcast_channel_leaks_deleted",
            match_id=self.match_id,
            claim_epoch=claim.get("epoch"),
            deleted=removed,
        )

    async def delete_all(self) -> int:
        """Delete the match's channels at APNs and remove the record (after the end broadcast)."""
        async with self._lock:
            return await self._delete_all()

    async def _delete_all(self) -> int:
        recorded = await self._recorded()
        held = dict(recorded or {})
        held.update(self.channels)
        removed = await self._delete_quietly(set(held.values()))
        if recorded:
            await self._fixtures.swap_broadcast_channels(self.match_id, recorded, None)
        self.channels = {}
        self._gauge()
        log.info("broadcast_channels_deleted", match_id=self.match_id, deleted=removed)
        return removed

    async def _delete_quietly(self, channel_ids: Iterable[str]) -> int:
        removed = 0
        for channel_id in channel_ids:
            try:
                await self._request(broadcast.delete_channel(self.bundle, channel_id))
                removed += 1
            except broadcast.ChannelError as exc:
                if exc.action is not Action.RECREATE_CHANNEL:  # already gone is as good as deleted
                    log.warning("broadcast_channel_delete_failed", channel=channel_id, reason=exc.reason)
        self.deleted += removed
        return removed

    def _gauge(self) -> None:
        metrics.CHANNELS.labels(self.match_id).set(len(self.channels))


class MatchBroadcasts:
    """How a match's owner uses its channels: which a tick is broadcast on, which a push-to-start may name, and
    their recreation when APNs no longer knows one. The channels themselves (creation, record, deletion) are
    ``MatchChannels``'s; the caller holds the lease, which ``check`` asserts before any change."""

    def __init__(
        self,
        channels: MatchChannels,
        *,
        retry_s: float,
        check: Callable[[], None],
        perspectives: Callable[[], Iterable[str] | None],
    ) -> None:
        """``perspectives`` gives the perspectives of the latest display (None before the first)."""
        self.match = channels
        self._retry_s = retry_s
        self._check = check
        self._perspectives = perspectives
        self.announced: set[str] = set()  # channels named in a push-to-start this owner sent
        self.gone: dict[str, str] = {}  # perspective -> channel APNs no longer knows
        self._retry_at = -math.inf
        self.log = get_logger("match", match_id=channels.match_id)

    @property
    def channels(self) -> dict[str, str]:
        return self.match.channels

    async def load(self) -> None:
        """A restarted or new owner reuses the recorded channels."""
        try:
            await self.match.load()
        except Exception as exc:
            self.log.warning("broadcast_channels_load_failed", error=repr(exc))

    async def prepare(self, teams: list[str]) -> None:
        """The channels of neutral and ``teams`` created and recorded if they are not yet, so that push-to-starts
        sent before the first tick (the prematch job's) can name them too."""
        try:
            self._check()
            with trio.fail_after(self._retry_s):
                await self.match.ensure(["neutral", *teams])
        except LeaseLost:
            raise
        except Exception as exc:
            self._retry_at = trio.current_time() + self._retry_s
            self.log.warning("broadcast_channels_unavailable", error=repr(exc))

    async def for_start(self) -> dict[str, str]:
        """The match's channels for a push-to-start, created (under the lease) if some perspective has none;
        {} while they cannot be had (then iOS 18 followers are started on update tokens)."""
        perspectives = self._perspectives()
        if perspectives is None:
            return {}
        wanted = list(perspectives)
        if all(p in self.channels for p in wanted) or trio.current_time() < self._retry_at:
            return self.channels
        self._check()
        try:
            with trio.fail_after(self._retry_s):
                await self.match.ensure(wanted)
        except (ChannelsUnavailable, broadcast.ChannelError, trio.TooSlowError) as exc:
            self._retry_at = trio.current_time() + self._retry_s
            self.log.warning(
                "broadcast_channels_unavailable",
                error=str(exc) or type(exc).__name__,
                retry_in_s=self._retry_s,
            )
        return self.channels

    def announce(self, channel: str) -> None:
        self.announced.add(channel)

    def targets(self, listening: set[str]) -> list[tuple[str, str]]:
        """(perspective, channel) for each recorded channel that sessions listen on (``listening``) or that a
        push-to-start of ours announced: an activity listens from its start, before its session is
        registered and read back, and a broadcast costs one request whoever listens."""
        heard = listening | self.announced
        if not heard:
            return []
        return [(p, c) for p, c in self.channels.items() if c in heard]

    def note_gone(self, ref: ChannelRef) -> None:
        self.gone[ref.perspective] = ref.channel_id

    async def recover(self) -> set[str]:
        """Recreate and record the channels APNs no longer knows; the dead channel ids (their followers need a
        push-to-start on the new ones)."""
        gone, self.gone = self.gone, {}
        self.log.warning("broadcast_channels_gone", channels=gone)
        self._check()
        try:
            await self.match.ensure(list(self.channels) or list(gone), replace=gone)
        except (ChannelsUnavailable, broadcast.ChannelError) as exc:
            self._retry_at = trio.current_time() + self._retry_s
            self.log.warning("broadcast_channels_unavailable", error=str(exc))
        dead = set(gone.values())
        self.announced -= dead
        return dead

    async def delete_all(self) -> None:
        """After the end broadcast: the channels are of no more use (the sweep deletes what is left)."""
        try:
            await self.match.delete_all()
        except Exception as exc:
            self.log.warning("broadcast_channels_delete_failed", error=repr(exc))


class ChannelSweeper(NoSchedule):
    """Deletes channels APNs holds that no match records (leaked by an owner that died between creating and
    recording, or ended without deleting). A channel is deleted only when it was unrecorded at two sweeps in
    a row, ``interval_s`` apart: one being created and recorded right now is never taken for a leak."""

    def __init__(
        self,
        *,
        bundle: str,
        request: Request,
        fixtures: ChannelRecords,
        active_matches: Callable[[], Awaitable[list[str]]],
        interval_s: float = 300.0,
    ) -> None:
        self.bundle = bundle
        self._request = request
        self._fixtures = fixtures
        self._active_matches = active_matches
        self.interval_s = interval_s
        self._suspects: set[str] = set()
        self.deleted = 0

    async def sweep_once(self) -> list[str]:
        """One comparison; returns the channels deleted."""
        listed = set(await self._request(broadcast.list_channels(self.bundle)))
        match_ids = await self._active_matches()
        fixtures = await self._fixtures.batch_get_fixtures(match_ids) if match_ids else {}
        recorded = {str(c) for f in fixtures.values() for c in (f.get("broadcastChannels") or {}).values()}
        unrecorded = listed - recorded
        leaked = unrecorded & self._suspects
        self._suspects = unrecorded - leaked
        deleted: list[str] = []
        for channel_id in sorted(leaked):
            try:
                await self._request(broadcast.delete_channel(self.bundle, channel_id))
                deleted.append(channel_id)
            except broadcast.ChannelError as exc:
                if exc.action is not Action.RECREATE_CHANNEL:
                    log.warning(
                        "broadcast_channel_sweep_delete_failed", channel=channel_id, reason=exc.reason
                    )
        self.deleted += len(deleted)
        if deleted or unrecorded:
            log.info(
                "broadcast_channels_swept",
                listed=len(listed),
                recorded=len(recorded),
                deleted=len(deleted),
                suspects=len(self._suspects),
            )
        return deleted

    def stats(self) -> dict[str, Any]:
        return {"deleted": self.deleted, "suspects": len(self._suspects)}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sweep every ``interval_s`` (run under the region's job lease: one instance sweeps)."""
        task_status.started()
        while True:
            try:
                await self.sweep_once()
            except Exception as exc:  # the next round tries again
                log.warning("broadcast_channel_sweep_failed", error=repr(exc))
            await trio.sleep(self.interval_s)


def broadcast_pushes(
    casts: list[tuple[str, str]],
    bundle: str,
    payload_for: Callable[[str], bytes],
    priority: int,
    kind: str,
    reply_to: Any,
    fence: Fence,
    *,
    quiet: Callable[[str], bytes] | None = None,
) -> list[Push]:
    """One broadcast per (perspective, channel) of ``casts``: its perspective's payload, expiration 0 (the
    channels' storage policy 0), and, where ``quiet`` is given, the payload without its alert that a re-send
    of a request which may have been delivered carries."""
    return [
        Push(
            "",
            "liveactivity",
            bundle,
            payload_for(perspective),
            priority,
            kind,
            expiration=0,
            channel_id=channel,
            context=ChannelRef(perspective, channel),
            fence=fence,
            reply_to=reply_to,
            resend_payload=quiet(perspective) if quiet is not None else None,
        )
        for perspective, channel in casts
    ]
