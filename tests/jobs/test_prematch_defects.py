"""The six defects of the legacy prematch flow (seed 003, "Areas of improvement"), each shown on the legacy
flow and shown fixed in ``PrematchNotifier``, on the same scenario, against moto's DynamoDB server.

``LegacyPrematchFlow`` reproduces the seed's flow as documented, defects included: fixtures with
``0 <= timeUntilStart <= window``; followers from ``cricket-match-follows`` ("skipping (will retry)" when
there are none); a dedup store keyed by ``matchId`` alone with a 48 h TTL (the removed
``cricket-prematch-notifications`` table, kept here as a dict that survives "restarts" as a table would);
``sendPushToStartBatch`` then ``sendAlertPushBatch`` without ``onInvalidToken`` and without a collapse id;
``markNotificationSent`` only after both batches.

In each test both flows run against the same DynamoDB world with their own sender (so each has its own
device view); the legacy flow runs first where ours changes shared state (device records).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import trio

from actors.jobs.convert import iso_utc
from actors.jobs.prematch import Marker, PrematchNotifier
from actors.jobs.settings import PrematchSettings
from daemon.apns.types import Push, PushResult
from daemon.metrics import REGISTRY
from tests.jobs.prematch_world import (
    MINUTE,
    T0,
    TOPIC,
    Clock,
    RecordingSender,
    activities_started,
    alerts_shown,
    delivered_from_pushes,
    follow,
    put_fixture,
    register,
    seed_reference,
    token,
)

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
                await self._batch(
                    [
                        Push(
                            d["pushToStartToken"],
                            "liveactivity",
                            TOPIC,
                            b'{"aps":{"event":"start"}}',
                            kind="start",
                        )
                        for d in devices
                        if d.get("pushToStartToken")
                    ]
                )
                body = {"aps": {"alert": {"title": "Match starting soon", "body": match_id}}}
                await self._batch(
                    [
                        Push(d["deviceToken"], "alert", TOPIC, json.dumps(body).encode(), kind="alert")
                        for d in devices
                    ]
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
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            while not condition():
                await trio.sleep(0.005)
            nursery.cancel_scope.cancel()


def follower_queries() -> float:
    value = REGISTRY.get_sample_value(
        "sightscreen_dynamodb_calls_total", {"table": "cricket-match-follows", "operation": "Query"}
    )
    return value or 0.0


# --- 1. tokens APNs rejects are cleaned up ----------------------------------------------------------------


async def test_defect1_rejected_tokens_are_cleaned_up(repos: Any) -> None:
    await one_follower_world(repos, users=("u1", "u2"))

    def apns() -> RecordingSender:
        return RecordingSender(
            rejected={token("u1"): (410, "Unregistered"), token("u2", "start"): (400, "BadDeviceToken")}
        )

    await LegacyPrematchFlow(repos, apns(), clock=Clock()).tick()
    assert await repos.devices.get_device_for_user("u1") is not None  # legacy: the dead token stays
    legacy_u2 = await repos.devices.get_device_for_user("u2")
    assert legacy_u2 is not None and legacy_u2.get("pushToStartToken") == token("u2", "start")

    report = await ours(repos, apns(), Clock()).run_cycle()

    assert report.rejected == 1 and report.tokens_removed == 2
    assert await repos.devices.get_device_for_user("u1") is None  # the device record, as the data model says
    u2 = await repos.devices.get_device_for_user("u2")
    assert (
        u2 is not None and "pushToStartToken" not in u2 and u2["deviceToken"] == token("u2")
    )  # alerts still reach u2


# --- 2. a crash between sending and recording: no second alert, none lost -----------------------------------


async def test_defect2_crash_after_sending_shows_one_alert_and_starts_one_activity(repos: Any) -> None:
    await one_follower_world(repos)
    legacy_store: dict[str, float] = {}
    legacy_apns, our_apns = RecordingSender(hold_kinds={"alert"}), RecordingSender(hold_kinds={"alert"})
    clock = Clock()

    # The process dies once the alert (the last push) is with APNs, before anything is recorded.
    legacy = LegacyPrematchFlow(repos, legacy_apns, clock=clock, store=legacy_store)
    await crash_when(legacy.tick, lambda: bool(legacy_apns.to(token("u1"), "alert")))
    await crash_when(ours(repos, our_apns, clock).run_cycle, lambda: bool(our_apns.to(token("u1"), "alert")))

    # Restarted three minutes later (past the 2-minute claim lease); APNs answers normally now.
    clock.now += 3 * MINUTE
    legacy_apns.hold_kinds.clear()
    our_apns.hold_kinds.clear()
    await LegacyPrematchFlow(repos, legacy_apns, clock=clock, store=legacy_store).tick()
    report = await ours(repos, our_apns, clock).run_cycle()

    legacy_device = delivered_from_pushes(legacy_apns.pushes)
    assert alerts_shown(legacy_device, token("u1")) == 2  # legacy: a second alert on the device
    assert activities_started(legacy_device, token("u1", "start")) == 2  # and a second Live Activity
    our_device = delivered_from_pushes(our_apns.pushes)
    assert report.recovered == 1
    assert len(our_apns.to(token("u1"), "alert")) == 2  # sent again (its fate was unknown) ...
    assert alerts_shown(our_device, token("u1")) == 1  # ... but it collapses onto the first
    assert activities_started(our_device, token("u1", "start")) == 1


async def test_defect2_crash_after_claiming_before_sending_loses_nothing(repos: Any) -> None:
    await one_follower_world(repos)
    apns = RecordingSender(accept_sends=False)
    clock = Clock()
    await crash_when(ours(repos, apns, clock).run_cycle, apns.blocked_event.is_set)
    assert apns.pushes == []
    follows = await repos.follows.get_followers_for_match("7")
    assert follows[0]["prematchState"] == "claimed"  # the claim outlived the crash

    apns.accept_sends = True
    clock.now += MINUTE
    assert (await ours(repos, apns, clock).run_cycle()).in_flight == 1  # within the lease: leave it be
    clock.now += 2 * MINUTE
    await ours(repos, apns, clock).run_cycle()
    assert alerts_shown(delivered_from_pushes(apns.pushes), token("u1")) == 1  # not lost


# --- 3. downtime during the window is caught up ---------------------------------------------------------


async def test_defect3_match_that_started_moments_ago_during_downtime_is_still_notified(repos: Any) -> None:
    await one_follower_world(repos)
    back_at = Clock(START + 2 * MINUTE)  # down for the whole window, back 2 minutes after the start
    legacy_apns, our_apns = RecordingSender(), RecordingSender()

    await LegacyPrematchFlow(repos, legacy_apns, clock=back_at).tick()
    await ours(repos, our_apns, back_at).run_cycle()

    assert legacy_apns.pushes == []  # legacy: timeUntilStart < 0, skipped for good
    alert = our_apns.to(token("u1"), "alert")
    assert len(alert) == 1
    assert json.loads(alert[0].payload)["aps"]["alert"]["body"] == "1st T20I started 2 min ago"
    # ... but a match long under way is not announced as "starting".
    late = Clock(START + 30 * MINUTE)
    await put_fixture(repos, 8, START)
    await follow(repos, 8, "u1", start=START)
    assert (await ours(repos, RecordingSender(), late).run_cycle()).matches_due == 0


# --- 4. dedup per user and match ---------------------------------------------------------------------------


async def test_defect4_a_late_follower_is_notified_on_the_next_cycle(repos: Any) -> None:
    await one_follower_world(repos)
    clock = Clock()
    legacy_apns, our_apns = RecordingSender(), RecordingSender()
    legacy = LegacyPrematchFlow(repos, legacy_apns, clock=clock)
    notifier = ours(repos, our_apns, clock)
    await legacy.tick()
    await notifier.run_cycle()

    await follow(repos, 7, "late", start=START)  # follows after the first send, before the start
    await register(repos, "late")
    clock.now += MINUTE
    await legacy.tick()
    await notifier.run_cycle()

    assert legacy_apns.to(token("late"), "alert") == []  # legacy: the match counts as notified for all
    assert len(our_apns.to(token("late"), "alert")) == 1
    assert len(our_apns.to(token("u1"), "alert")) == 1  # and the first follower is not told twice


# --- 5. a match nobody follows costs no repeated reads ------------------------------------------------------


async def test_defect5_a_match_nobody_follows_is_read_once_per_window(repos: Any) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, T0 + 29 * MINUTE)  # in the window for the next 29 cycles
    clock = Clock()

    async def queries_over_ten_cycles(tick: Callable[[], Awaitable[Any]]) -> float:
        clock.now = T0
        before = follower_queries()
        for _ in range(10):
            await tick()
            clock.now += MINUTE
        return follower_queries() - before

    legacy_reads = await queries_over_ten_cycles(
        LegacyPrematchFlow(repos, RecordingSender(), clock=clock).tick
    )
    notifier = ours(repos, RecordingSender(), clock)
    our_reads = await queries_over_ten_cycles(notifier.run_cycle)

    assert legacy_reads == 10  # legacy: "skipping (will retry)" every 60 s
    assert our_reads == 1
    assert notifier.last_report is not None and notifier.last_report.matches_skipped_unfollowed == 1


# --- 6. the sent marker expires soon after the window ---------------------------------------------------------


async def test_defect6_the_sent_marker_expires_soon_after_the_window(repos: Any) -> None:
    await one_follower_world(repos)
    clock = Clock()
    legacy = LegacyPrematchFlow(repos, RecordingSender(), clock=clock)
    await legacy.tick()
    await ours(repos, RecordingSender(), clock).run_cycle()

    three_hours_after = START + 3 * HOUR
    assert legacy.notified("7", three_hours_after)  # legacy: the record lives for 48 h
    assert legacy.store["7"] - START > 24 * HOUR
    follow_item = (await repos.follows.get_followers_for_match("7"))[0]
    mark = Marker.of(follow_item)
    assert mark is not None and mark.state == "sent" and mark.expires_at is not None
    assert mark.expires_at - START <= 2 * HOUR  # start + catch-up (10 min) + grace (1 h)
    assert not mark.expires_at > three_hours_after  # no longer in force


# --- and: a start time that moves notifies again ---------------------------------------------------------------


async def test_rescheduled_match_notifies_its_followers_again(repos: Any) -> None:
    await one_follower_world(repos)
    clock = Clock()
    legacy_apns, our_apns = RecordingSender(), RecordingSender()
    legacy = LegacyPrematchFlow(repos, legacy_apns, clock=clock)
    notifier = ours(repos, our_apns, clock)
    await legacy.tick()
    await notifier.run_cycle()

    await put_fixture(repos, 7, START + 2 * HOUR)  # rain: pushed back two hours
    clock.now = START + 2 * HOUR - 20 * MINUTE
    await legacy.tick()
    await notifier.run_cycle()

    assert len(legacy_apns.to(token("u1"), "alert")) == 1  # legacy: never told of the new time
    our_alerts = our_apns.to(token("u1"), "alert")
    assert len(our_alerts) == 2 and our_alerts[0].collapse_id != our_alerts[1].collapse_id
