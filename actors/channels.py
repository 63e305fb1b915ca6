"""A match's iOS 18 broadcast channels (one per display perspective), and the sweep of leaked channels.

Owns: creating a match's channels (message-storage-policy 0) through the sender's management connection,
recording them on the fixture (``cricket-fixtures.broadcastChannels``: perspective -> channel id), reusing the
recorded ones after a restart or take-over, recreating one APNs no longer knows, deleting them after the
match's end; and ``ChannelSweeper``, which compares APNs's ``all-channels`` with the channels recorded on
the matches that should have them and deletes the rest, so the 10,000-channel limit is never reached.
Must not touch: pushes (the match actor builds broadcasts), the lease (the caller holds it).

Only the match's owner calls ``MatchChannels`` (the match actor, under its lease). Recording is a
compare-and-swap on the fixture's ``broadcastChannels``: an owner whose write finds the record changed (a
paused predecessor and its successor both creating) deletes what it just created and adopts what is
recorded, so whatever the timing at most one channel per perspective is in use, and a channel created but
never recorded (its creator died in between) is the sweep's to delete.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import trio

from daemon import metrics
from daemon.apns import broadcast
from daemon.apns.rules import Action
from daemon.logs import get_logger

log = get_logger("channels")

Request = Callable[[broadcast.Request], Awaitable[Any]]


class ChannelsUnavailable(Exception):
    """No channel can be had for now (limit reached, fixture missing): the match stays on per-token pushes."""


class MatchChannels:
    """The channels of one match; ``request`` is the sender's ``channels.request``."""

    def __init__(self, match_id: str, *, bundle: str, request: Request, fixtures: Any) -> None:
        self.match_id = match_id
        self.bundle = bundle
        self._request = request
        self._fixtures = fixtures
        self.channels: dict[str, str] = {}  # perspective -> channel id, as recorded
        self.created = 0
        self.deleted = 0
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

    async def ensure(self, perspectives: Iterable[str], *, replace: Mapping[str, str] | None = None) -> dict[str, str]:
        async with self._lock:
            return await self._ensure(perspectives, replace)

    async def _ensure(self, perspectives: Iterable[str], replace: Mapping[str, str] | None) -> dict[str, str]:
        """A recorded channel for each of ``perspectives``: the missing ones are created, and so are new ones
        for ``replace`` (perspective -> the channel id APNs no longer knows, unless the record has moved on
        already). Raises ``ChannelsUnavailable`` when none can be had (limit reached, no fixture)."""
        wanted = list(dict.fromkeys(perspectives))
        gone = dict(replace or {})
        for _ in range(5):
            recorded = await self._recorded()
            if recorded is None:
                raise ChannelsUnavailable(f"fixture {self.match_id} does not exist: channels cannot be recorded")
            # another owner may have replaced it already: only a perspective still recorded with the gone id
            stale = {p for p, channel in gone.items() if recorded.get(p) == channel}
            missing = [p for p in wanted if p not in recorded or p in stale]
            if not missing:
                self.channels = recorded
                self.loaded = True
                self._gauge()
                return dict(recorded)
            created: dict[str, str] = {}
            try:
                for perspective in missing:
                    created[perspective] = await self._request(broadcast.create_channel(self.bundle))
            except broadcast.ChannelError as exc:
                await self._delete_quietly(created.values())
                if exc.action is Action.CHANNEL_LIMIT:
                    raise ChannelsUnavailable(f"APNs channel limit reached ({exc.reason})") from exc
                raise
            if await self._fixtures.swap_broadcast_channels(self.match_id, recorded or None, {**recorded, **created}):
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


class ChannelSweeper:
    """Deletes channels APNs holds that no match records (leaked by an owner that died between creating and
    recording, or ended without deleting). A channel is deleted only when it was unrecorded at two sweeps in
    a row, ``interval_s`` apart: one being created and recorded right now is never taken for a leak."""

    def __init__(self, *, bundle: str, request: Request, fixtures: Any, active_matches: Callable[[], Awaitable[list[str]]],
                 interval_s: float = 300.0) -> None:
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
                    log.warning("broadcast_channel_sweep_delete_failed", channel=channel_id, reason=exc.reason)
        self.deleted += len(deleted)
        if deleted or unrecorded:
            log.info("broadcast_channels_swept", listed=len(listed), recorded=len(recorded), deleted=len(deleted),
                     suspects=len(self._suspects))
        return deleted

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Sweep every ``interval_s`` (run under the region's job lease: one instance sweeps)."""
        task_status.started()
        while True:
            try:
                await self.sweep_once()
            except Exception as exc:  # the next round tries again
                log.warning("broadcast_channel_sweep_failed", error=repr(exc))
            await trio.sleep(self.interval_s)
