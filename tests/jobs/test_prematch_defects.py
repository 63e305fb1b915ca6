"""The six defects of the legacy prematch flow (seed 003, "Areas of improvement"), each shown on the legacy
flow and shown fixed in ``PrematchNotifier``, on the same scenario, against moto's DynamoDB server.

``LegacyPrematchFlow`` reproduces the seed's flow as documented, defects included: fixtures with
``0 <= timeUntilStart <= window``; followers from ``cricket-match-follows`` ("skipping (will retry)" when
there are none); a dedup store keyed by ``matchId`` alone with a 48 h TTL (the removed
``cricket-prematch-notifications`` table, kept here as a dict that survives "restarts" as a table would);
``sendPushToStartBatch`` then ``sendAlertPushBatch`` without ``onInvalidToken`` and without a collapse id;
``markNotificationSent`` only after both batches.

In each test both flows run against the same DynamoDB world (moto's server), each with its own APNs (the
project's APNs test server) and the daemon's ``ApnsSender`` (no token janitor, so only the flow itself can
clean up): what each APNs server accepted is what that flow's devices received. The legacy flow runs first
where ours changes shared state (device records).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest
import trio

from actors.jobs.convert import iso_utc
from actors.jobs.prematch import Marker, PrematchNotifier
from actors.jobs.settings import PrematchSettings
from daemon.apns.types import Push, PushResult
from daemon.cricket.payloads import alert_payload, start_payload
from daemon.metrics import REGISTRY
from tests.doubles import Clock
from tests.jobs.prematch_world import (
    MINUTE,
    T0,
    TOPIC,
    ApnsWorld,
    SendWatch,
    activities_started,
    alerts_shown,
    follow,
    put_fixture,
    register,
    seed_reference,
    token,
)

StartApns = Callable[..., Awaitable[ApnsWorld]]

START = T0 + 20 * MINUTE  # 2027-01-15T08:20:00Z
HOUR = 3600.0


class LegacyPrematchFlow:
    """Seed 003's PrematchNotificationJob, as its documentation describes it (defects included)."""

    DEDUP_TTL_S = 48 * 3600  # prematchNotificationStore.ts

    def __init__(
        self,
        repos: Any,
        sender: Any,
        *,
        clock: Callable[[], float],
        store: dict[str, float] | None = None,
        league_codes: tuple[str, ...] = ("T20I",),
        window_s: float = 1800,
    ) -> None:
        self.repos, self.sender, self.clock = repos, sender, clock
        self.store = {} if store is None else store  # matchId -> ttl: the dedup table, keyed by match only
        self.league_codes, self.window_s = league_codes, window_s

    def notified(self, match_id: str, now: float) -> bool:
        return self.store.get(match_id, 0) > now

    async def tick(self) -> None:
        now = self.clock()
        for code in self.league_codes:
            # timeUntilStart >= 0 && timeUntilStart <= PREMATCH_WINDOW_MS
            fixtures = await self.repos.fixtures.get_matches_by_date_range(
                code, iso_utc(now), iso_utc(now + self.window_s)
            )
            for fx in fixtures:
                match_id = fx["matchId"]
                if self.notified(match_id, now):
                    continue
                followers = await self.repos.follows.get_followers_for_match(match_id)
                if not followers:
                    continue  # "skipping (will retry)": next tick queries again
                devices = [await self.repos.devices.get_device_for_user(f["userId"]) for f in followers]
                devices = [d for d in devices if d]
                start = start_payload(
                    {"matchId": match_id},
                    attributes_type="MatchAttributes",
                    attributes={"matchId": match_id},
                    timestamp=int(now),
                    alert=("Match starting soon", match_id),
                )
                await self._batch(
                    [
                        Push(d["pushToStartToken"], "liveactivity", TOPIC, start, kind="start")
                        for d in devices
                        if d.get("pushToStartToken")
                    ]
                )
                alert = alert_payload("Match starting soon", match_id)  # no collapse id
                await self._batch(
                    [Push(d["deviceToken"], "alert", TOPIC, alert, kind="alert") for d in devices]
                )
                self.store[match_id] = now + self.DEDUP_TTL_S  # markNotificationSent, after both batches

    async def _batch(self, pushes: list[Push]) -> list[PushResult]:
        """Send and wait for the results; no onInvalidToken, so rejections are simply dropped."""
        if not pushes:
            return []
        send, receive = trio.open_memory_channel[PushResult](len(pushes))
        for push in pushes:
            await self.sender.send(replace(push, reply_to=send))
        return [await receive.receive() for _ in pushes]


def ours(repos: Any, sender: Any, clock: Clock, **settings: Any) -> PrematchNotifier:
    return PrematchNotifier(repos, sender, PrematchSettings(**settings), topic=TOPIC, clock=clock)


async def one_follower_world(repos: Any, *, users: tuple[str, ...] = ("u1",)) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    for user in users:
        await follow(repos, 7, user, start=START)
        await register(repos, user)


async def crash_when(run: Callable[[], Awaitable[Any]], condition: Callable[[], bool]) -> None:
    """Run one cycle and kill it (cancel: no further code of the cycle runs) once ``condition`` holds."""
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            while not condition():
                await trio.sleep(0.005)
            nursery.cancel_scope.cancel()


def alerts_to(world: ApnsWorld, tok: str) -> list[dict[str, Any]]:
    return [
        r
        for r in world.server.records
        if r["token"] == tok and r["headers"].get("apns-push-type") == "alert" and r["status"] == 200
    ]


def follower_queries() -> float:
    value = REGISTRY.get_sample_value(
        "sightscreen_dynamodb_calls_total", {"table": "cricket-match-follows", "operation": "Query"}
    )
    return value or 0.0


@pytest.fixture
async def two_apns(start_apns: StartApns) -> tuple[ApnsWorld, ApnsWorld]:
    """(the legacy flow's APNs, ours): separate servers, so separate device views."""
    return await start_apns(), await start_apns()


# --- 1. tokens APNs rejects are cleaned up ----------------------------------------------------------------


async def test_defect1_rejected_tokens_are_cleaned_up(
    repos: Any, two_apns: tuple[ApnsWorld, ApnsWorld]
) -> None:
    await one_follower_world(repos, users=("u1", "u2"))
    for world in two_apns:
        world.server.set_token_status(token("u1"), 410, "Unregistered")
        world.server.set_token_status(token("u2", "start"), 400, "BadDeviceToken")
    legacy_apns, our_apns = two_apns

    await LegacyPrematchFlow(repos, legacy_apns.sender, clock=Clock(T0)).tick()
    assert await repos.devices.get_device_for_user("u1") is not None  # legacy: the dead token stays
    legacy_u2 = await repos.devices.get_device_for_user("u2")
    assert legacy_u2 is not None and legacy_u2.get("pushToStartToken") == token("u2", "start")

    report = await ours(repos, our_apns.sender, Clock(T0)).run_cycle()

    assert report.rejected == 1 and report.tokens_removed == 2
    assert await repos.devices.get_device_for_user("u1") is None  # the device record, as the data model says
    u2 = await repos.devices.get_device_for_user("u2")
    assert (
        u2 is not None and "pushToStartToken" not in u2 and u2["deviceToken"] == token("u2")
    )  # alerts still reach u2


# --- 2. a crash between sending and recording: no second alert, none lost -----------------------------------


async def test_defect2_crash_after_sending_shows_one_alert_and_starts_one_activity(
    repos: Any, two_apns: tuple[ApnsWorld, ApnsWorld]
) -> None:
    await one_follower_world(repos)
    legacy_apns, our_apns = two_apns
    legacy_store: dict[str, float] = {}
    clock = Clock(T0)
    for world in two_apns:
        world.server.delay(1.5, count=2)  # APNs answers slowly, so the process dies before it hears back

    # The process dies once the alert (the last push) is with the sender, before anything is recorded.
    legacy_watch, our_watch = SendWatch(legacy_apns.sender), SendWatch(our_apns.sender)
    legacy = LegacyPrematchFlow(repos, legacy_watch, clock=clock, store=legacy_store)
    await crash_when(legacy.tick, lambda: "alert" in legacy_watch.kinds())
    await crash_when(ours(repos, our_watch, clock).run_cycle, lambda: len(our_watch.handed) == 2)
    with trio.fail_after(15):
        for world in two_apns:
            await world.server.wait_for_records(2)  # the first copies reached the device anyway

    # Restarted three minutes later (past the 2-minute claim lease).
    clock.now += 3 * MINUTE
    await LegacyPrematchFlow(repos, legacy_apns.sender, clock=clock, store=legacy_store).tick()
    report = await ours(repos, our_apns.sender, clock).run_cycle()

    legacy_device = legacy_apns.delivered()
    assert alerts_shown(legacy_device, token("u1")) == 2  # legacy: a second alert on the device
    assert activities_started(legacy_device, token("u1", "start")) == 2  # and a second Live Activity
    our_device = our_apns.delivered()
    assert report.recovered == 1
    assert len(alerts_to(our_apns, token("u1"))) == 2  # sent again (its fate was unknown) ...
    assert alerts_shown(our_device, token("u1")) == 1  # ... but it collapses onto the first
    assert activities_started(our_device, token("u1", "start")) == 1


async def test_defect2_crash_after_claiming_before_sending_loses_nothing(
    repos: Any, start_apns: StartApns
) -> None:
    await one_follower_world(repos)
    apns = await start_apns()
    watch = SendWatch(apns.sender)
    watch.block = True
    clock = Clock(T0)
    await crash_when(ours(repos, watch, clock).run_cycle, watch.blocked.is_set)
    assert apns.server.records == []
    follows = await repos.follows.get_followers_for_match("7")
    assert follows[0]["prematchState"] == "claimed"  # the claim outlived the crash

    clock.now += MINUTE
    assert (await ours(repos, apns.sender, clock).run_cycle()).in_flight == 1  # within the lease: leave it be
    clock.now += 2 * MINUTE
    await ours(repos, apns.sender, clock).run_cycle()
    assert alerts_shown(apns.delivered(), token("u1")) == 1  # not lost


# --- 3. downtime during the window is caught up ---------------------------------------------------------


async def test_defect3_match_that_started_moments_ago_during_downtime_is_still_notified(
    repos: Any, two_apns: tuple[ApnsWorld, ApnsWorld]
) -> None:
    await one_follower_world(repos)
    legacy_apns, our_apns = two_apns
    back_at = Clock(START + 2 * MINUTE)  # down for the whole window, back 2 minutes after the start

    await LegacyPrematchFlow(repos, legacy_apns.sender, clock=back_at).tick()
    await ours(repos, our_apns.sender, back_at).run_cycle()

    assert legacy_apns.server.records == []  # legacy: timeUntilStart < 0, skipped for good
    alerts = alerts_to(our_apns, token("u1"))
    assert len(alerts) == 1
    assert alerts[0]["payload"]["aps"]["alert"]["body"] == "1st T20I started 2 min ago"
    # ... but a match long under way is not announced as "starting".
    await put_fixture(repos, 8, START)
    await follow(repos, 8, "u1", start=START)
    assert (await ours(repos, our_apns.sender, Clock(START + 30 * MINUTE)).run_cycle()).matches_due == 0


# --- 4. dedup per user and match ---------------------------------------------------------------------------


async def test_defect4_a_late_follower_is_notified_on_the_next_cycle(
    repos: Any, two_apns: tuple[ApnsWorld, ApnsWorld]
) -> None:
    await one_follower_world(repos)
    legacy_apns, our_apns = two_apns
    clock = Clock(T0)
    legacy = LegacyPrematchFlow(repos, legacy_apns.sender, clock=clock)
    notifier = ours(repos, our_apns.sender, clock)
    await legacy.tick()
    await notifier.run_cycle()

    await follow(repos, 7, "late", start=START)  # follows after the first send, before the start
    await register(repos, "late")
    clock.now += MINUTE
    await legacy.tick()
    await notifier.run_cycle()

    assert alerts_to(legacy_apns, token("late")) == []  # legacy: the match counts as notified for all
    assert len(alerts_to(our_apns, token("late"))) == 1
    assert len(alerts_to(our_apns, token("u1"))) == 1  # and the first follower is not told twice


# --- 5. a match nobody follows costs no repeated reads ------------------------------------------------------


async def test_defect5_a_match_nobody_follows_is_read_with_backoff_not_every_cycle(
    repos: Any, two_apns: tuple[ApnsWorld, ApnsWorld]
) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, T0 + 29 * MINUTE)  # in the window for the next 29 cycles
    legacy_apns, our_apns = two_apns
    clock = Clock(T0)

    async def queries_over(cycles: int, tick: Callable[[], Awaitable[Any]]) -> float:
        clock.now = T0
        before = follower_queries()
        for _ in range(cycles):
            await tick()
            clock.now += MINUTE
        return follower_queries() - before

    legacy_reads = await queries_over(20, LegacyPrematchFlow(repos, legacy_apns.sender, clock=clock).tick)
    notifier = ours(repos, our_apns.sender, clock, unfollowed_recheck_s=300)
    our_reads = await queries_over(20, notifier.run_cycle)

    assert legacy_reads == 20  # legacy: "skipping (will retry)" every 60 s
    # ours: looks at 0, 5 and 15 minutes (the wait doubles), each a read of the followers not yet notified
    # and, finding none, a one-item read of whether anyone follows
    assert our_reads == 3 * 2
    assert notifier.last_report is not None and notifier.last_report.matches_skipped_unfollowed == 1


async def test_defect5_fix_still_notifies_a_follower_of_a_match_nobody_followed_at_first(
    repos: Any, two_apns: tuple[ApnsWorld, ApnsWorld]
) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    _, our_apns = two_apns
    clock = Clock(T0)
    notifier = ours(repos, our_apns.sender, clock, unfollowed_recheck_s=300)
    await notifier.run_cycle()  # nobody follows it yet
    await follow(repos, 7, "late", start=START)
    await register(repos, "late")
    for _ in range(4):  # within the backoff: not looked at again
        clock.now += MINUTE
        await notifier.run_cycle()
    assert alerts_to(our_apns, token("late")) == []
    clock.now += MINUTE  # 5 minutes after the first look
    await notifier.run_cycle()
    assert len(alerts_to(our_apns, token("late"))) == 1


# --- 6. the sent marker expires soon after the window ---------------------------------------------------------


async def test_defect6_the_sent_marker_expires_soon_after_the_window(
    repos: Any, two_apns: tuple[ApnsWorld, ApnsWorld]
) -> None:
    await one_follower_world(repos)
    legacy_apns, our_apns = two_apns
    clock = Clock(T0)
    legacy = LegacyPrematchFlow(repos, legacy_apns.sender, clock=clock)
    await legacy.tick()
    await ours(repos, our_apns.sender, clock).run_cycle()

    three_hours_after = START + 3 * HOUR
    assert legacy.notified("7", three_hours_after)  # legacy: the record lives for 48 h
    assert legacy.store["7"] - START > 24 * HOUR
    follow_item = (await repos.follows.get_followers_for_match("7"))[0]
    mark = Marker.of(follow_item)
    assert mark is not None and mark.state == "sent" and mark.expires_at is not None
    assert mark.expires_at - START <= 2 * HOUR  # start + catch-up (10 min) + grace (1 h)
    assert not mark.expires_at > three_hours_after  # no longer in force


# --- and: a start time that moves notifies again ---------------------------------------------------------------


async def test_rescheduled_match_notifies_its_followers_again(
    repos: Any, two_apns: tuple[ApnsWorld, ApnsWorld]
) -> None:
    await one_follower_world(repos)
    legacy_apns, our_apns = two_apns
    clock = Clock(T0)
    legacy = LegacyPrematchFlow(repos, legacy_apns.sender, clock=clock)
    notifier = ours(repos, our_apns.sender, clock)
    await legacy.tick()
    await notifier.run_cycle()

    await put_fixture(repos, 7, START + 2 * HOUR)  # rain: pushed back two hours
    clock.now = START + 2 * HOUR - 20 * MINUTE
    await legacy.tick()
    await notifier.run_cycle()

    assert len(alerts_to(legacy_apns, token("u1"))) == 1  # legacy: never told of the new time
    our_alerts = alerts_to(our_apns, token("u1"))
    assert [a["headers"]["apns-collapse-id"] for a in our_alerts] == [
        "prematch:7:2027-01-15T08:20:00Z",
        "prematch:7:2027-01-15T10:20:00Z",
    ]
