"""PrematchNotifier: the pure decision core, then whole cycles against moto's DynamoDB server.

The legacy flow's six defects each have their own legacy-vs-ours test in ``test_prematch_defects.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from actors.janitor import TokenRef
from actors.jobs.prematch import (
    Decision,
    Marker,
    PrematchNotifier,
    UnfollowedMemo,
    collapse_id,
    decide,
    due_matches,
    prematch_text,
    settled_hold_s,
)
from actors.jobs.settings import PrematchSettings
from actors.livework import LiveWork
from daemon.apns.types import Push
from daemon.store.locks import prematch_lock_key
from daemon.store.tables import DEVICES, LOCKS, MATCH_FOLLOWS
from tests.actors.match_helpers import live, make_match_actor, take_lease
from tests.doubles import Clock, DyingClaims, FakeSender, WithLocks, sample
from tests.harness import seed
from tests.jobs.prematch_world import (
    MINUTE,
    T0,
    TOPIC,
    follow,
    put_fixture,
    register,
    seed_reference,
    token,
)

S = PrematchSettings()
START = T0 + 20 * MINUTE


def marker(**kw: Any) -> Marker:
    base: dict[str, Any] = {
        "start_iso": "2027-01-15T08:20:00Z",
        "start_epoch": START,
        "state": "sent",
        "claimed_ms": int((T0 - 60) * 1000),
        "expires_at": START + S.catch_up_s + S.marker_grace_s,
    }
    base.update(kw)
    return Marker(**base)


# --- pure core -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mark", "now", "expected"),
    [
        (None, T0, Decision.NOTIFY),
        (marker(), T0, Decision.DONE),
        (marker(start_epoch=START - S.restart_notify_threshold_s - 1), T0, Decision.NOTIFY),  # moved later
        (marker(start_epoch=START + 10 * MINUTE), T0, Decision.DONE),  # moved, but within the threshold
        (marker(expires_at=T0), T0, Decision.NOTIFY),  # an expired marker counts as absent
        (marker(state="claimed", claimed_ms=int(T0 * 1000)), T0 + 1, Decision.IN_FLIGHT),
        (marker(state="claimed", claimed_ms=int(T0 * 1000)), T0 + S.claim_lease_s, Decision.RESEND),
        (marker(start_epoch=None), T0, Decision.NOTIFY),  # a bare prematchFor (data layer's own mark)
    ],
)
def test_decide(mark: Marker | None, now: float, expected: Decision) -> None:
    assert decide(mark, start_epoch=START, now=now, settings=S) is expected


def test_marker_is_read_from_the_follow_item() -> None:
    follow_item = {
        "matchId": "7",
        "userId": "u1",
        "prematchFor": "2027-01-15T08:20:00Z",
        "prematchStart": int(START),
        "prematchState": "claimed",
        "prematchClaimedMs": 1_799_999_940_000,
        "prematchExpiresAt": int(START + 4200),
    }
    m = Marker.of(follow_item)
    assert m == Marker("2027-01-15T08:20:00Z", START, "claimed", 1_799_999_940_000, START + 4200)
    assert Marker.of({"matchId": "7", "userId": "u1"}) is None


def test_due_matches_window_catch_up_terminal_and_per_league_window() -> None:
    settings = PrematchSettings(window_s=1800, catch_up_s=600, window_s_by_league={"BBL": 3600})

    def fx(mid: str, minutes: float, status: str = "NS", code: str = "T20I") -> dict[str, Any]:
        from actors.jobs.convert import iso_utc

        return {
            "matchId": mid,
            "startTime": iso_utc(T0 + minutes * MINUTE),
            "status": status,
            "leagueCode": code,
        }

    fixtures = [
        fx("soon", 29),
        fx("later", 31),
        fx("bbl-later", 50, code="BBL"),
        fx("just-started", -9, status="1st Innings"),
        fx("long-started", -11, status="1st Innings"),
        fx("abandoned", 5, status="Aban."),
        fx("finished", -5, status="Finished"),
        {"matchId": "broken", "startTime": "not a time", "status": "NS"},
    ]
    due = due_matches(fixtures, now=T0, settings=settings)
    assert [d.match_id for d in due] == ["just-started", "soon", "bbl-later"]


def test_collapse_id_is_deterministic_and_fits_apns_limit() -> None:
    assert collapse_id("71344", "2027-01-15T08:20:00Z") == "prematch:71344:2027-01-15T08:20:00Z"
    long = collapse_id("9" * 80, "2027-01-15T08:20:00Z")
    assert len(long.encode()) <= 64 and long == collapse_id("9" * 80, "2027-01-15T08:20:00Z")


def test_prematch_text() -> None:
    fx = {"localteamId": "1", "visitorteamId": "39", "round": "1st T20I"}
    teams = {"1": {"name": "Pakistan"}, "39": {"name": "Sri Lanka"}}
    assert prematch_text(fx, teams, start_epoch=T0 + 1500, now=T0) == (
        "Pakistan v Sri Lanka",
        "1st T20I starts in 25 min",
    )
    assert prematch_text(fx, teams, start_epoch=T0 + 30, now=T0)[1] == "1st T20I is starting now"
    assert prematch_text(fx, teams, start_epoch=T0 - 300, now=T0)[1] == "1st T20I started 5 min ago"
    assert prematch_text(fx, {}, start_epoch=T0, now=T0)[0] == "Home v Away"


def test_unfollowed_memo_is_bounded_and_forgets_after_the_window() -> None:
    memo = UnfollowedMemo(max_size=2, first_delay_s=10)
    memo.remember("a", "s", now=0, window_end=100)
    memo.remember("b", "s", now=0, window_end=100)
    assert memo.remember("c", "s", now=0, window_end=100) == 10
    assert len(memo) == 2 and not memo.knows("a", "s", now=0)  # oldest evicted
    assert memo.knows("c", "s", now=9) and not memo.knows("c", "s", now=10)  # time to look again
    assert memo.remember("c", "s", now=10, window_end=100) == 30  # still nobody: the wait doubles
    assert memo.remember("c", "s", now=30, window_end=100) == 70
    assert memo.remember("c", "s", now=70, window_end=100) == 100  # never past the window
    assert not memo.knows("b", "other start", now=0)  # a rescheduled match is a new entry
    memo.prune(100)
    assert len(memo) == 0


# --- whole cycles against DynamoDB ------------------------------------------------------------------------


async def test_followers_get_one_alert_and_push_to_start_where_they_have_a_token(repos: Any) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    for user in ("u1", "u2", "u3"):
        await follow(repos, 7, user, start=START, team_id="39" if user == "u1" else None)
    await register(repos, "u1")
    await register(repos, "u2", push_to_start=False)  # u3 has no device at all
    sender = FakeSender()
    clock = Clock(T0)
    notifier = PrematchNotifier(repos, sender, PrematchSettings(), topic=TOPIC, clock=clock)

    report = await notifier.run_cycle()

    # u3 is settled as no_device in one write, without a claim to confirm
    assert (report.matches_due, report.claimed, report.accepted, report.no_device, report.push_to_start) == (
        1,
        2,
        2,
        1,
        1,
    )
    alert = sender.to(token("u1"), "alert")[0]
    assert alert.push_type == "alert" and alert.topic == TOPIC and alert.priority == 10
    assert alert.collapse_id == "prematch:7:2027-01-15T08:20:00Z"
    assert alert.expiration == int(START + 600)  # no later than the catch-up window
    assert alert.context == TokenRef("device", "7", user_id="u1", device_token=token("u1"))
    body = json.loads(alert.payload)
    assert body["aps"]["alert"] == {"title": "Pakistan v Sri Lanka", "body": "1st T20I starts in 20 min"}
    assert body["matchId"] == "7" and body["type"] == "prematch"
    start = sender.to(token("u1", "start"))[0]
    assert start.push_type == "liveactivity" and start.kind == "start"
    aps = json.loads(start.payload)["aps"]
    assert aps["event"] == "start" and aps["attributes"]["matchId"] == "7"
    assert aps["content-state"]["phase"] == "pre" and aps["content-state"]["perspective"] == "39"
    assert aps["content-state"]["title"] == "SL v PAK"  # the follower's team first
    assert sender.to(token("u2", "start")) == []
    follows = {f["userId"]: f for f in await repos.follows.get_followers_for_match("7")}
    assert {u: (f["prematchState"], f["prematchResult"]) for u, f in follows.items()} == {
        "u1": ("sent", "accepted"),
        "u2": ("sent", "accepted"),
        "u3": ("sent", "no_device"),
    }

    clock.now += MINUTE
    again = await notifier.run_cycle()
    # the next cycle finds every follower settled for this start: nothing read back, nothing sent
    assert (again.matches_settled, again.claimed, again.done, len(sender.pushes)) == (1, 0, 0, 3)


async def _match_7_followed_by(repos: Any, n: int) -> list[str]:
    """Match 7 starting at START, followed by users u0..u{n-1}, each with a registered device."""
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    users = [f"u{i}" for i in range(n)]
    for user in users:
        await follow(repos, 7, user, start=START)
        await register(repos, user)
    return users


async def test_two_instances_at_once_notify_each_follower_exactly_once(repos: Any) -> None:
    users = await _match_7_followed_by(repos, 12)
    sender = FakeSender()
    a = PrematchNotifier(repos, sender, PrematchSettings(), topic=TOPIC, clock=Clock(T0))
    b = PrematchNotifier(repos, sender, PrematchSettings(), topic=TOPIC, clock=Clock(T0))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.run_cycle)
        nursery.start_soon(b.run_cycle)
    for user in users:
        assert len(sender.to(token(user), "alert")) == 1
        assert len(sender.to(token(user, "start"))) == 1
    assert a.last_report is not None and b.last_report is not None
    assert a.last_report.claimed + b.last_report.claimed == 12
    # one worked through the match under its lock; the other skipped it (or found it done): no claim raced
    assert a.last_report.lost_claims + b.last_report.lost_claims == 0


async def test_a_match_whose_prematch_lock_another_instance_holds_is_skipped_until_it_is_released(
    repos: Any,
) -> None:
    await _match_7_followed_by(repos, 2)
    assert await repos.locks.acquire(prematch_lock_key("7"), "other-instance", 60.0)
    sender = FakeSender()
    notifier = PrematchNotifier(repos, sender, PrematchSettings(), topic=TOPIC, clock=Clock(T0), owner="me")
    report = await notifier.run_cycle()
    assert (report.matches_locked, report.follower_reads, report.claimed) == (1, 0, 0)
    assert sender.pushes == []
    assert await repos.locks.release(prematch_lock_key("7"), "other-instance")
    report = await notifier.run_cycle()
    assert (report.matches_locked, report.claimed) == (0, 2)
    assert await repos.locks.get(prematch_lock_key("7")) is None, "released once the match was done"


@pytest.mark.parametrize(
    ("now", "recheck_s", "expected"),
    [
        (START - 20 * MINUTE, 60.0, 60.0),
        (START - 40.0, 60.0, 20.0),  # before the start: at most half the time left
        (START + 5 * MINUTE, 60.0, 60.0),  # catch-up after the start
        (START - 20 * MINUTE, 0.0, 0.0),  # off: released, read every cycle
    ],
)
def test_settled_hold(now: float, recheck_s: float, expected: float) -> None:
    assert settled_hold_s(START, now, recheck_s) == pytest.approx(expected)


async def test_a_settled_match_is_read_once_for_the_fleet_until_its_hold_runs_out(repos: Any) -> None:
    await _match_7_followed_by(repos, 3)
    sender = FakeSender()
    settings = PrematchSettings(settled_recheck_s=0.5)  # START is 20 min away: the hold is the 0.5 s
    a = PrematchNotifier(repos, sender, settings, topic=TOPIC, clock=Clock(T0), owner="a")
    b = PrematchNotifier(repos, sender, settings, topic=TOPIC, clock=Clock(T0), owner="b")
    assert (await a.run_cycle()).claimed == 3
    assert await repos.locks.get(prematch_lock_key("7")) is None, "released: it had work to do"
    assert (await a.run_cycle()).matches_settled == 1
    held = await b.run_cycle()
    assert (held.matches_locked, held.follower_reads) == (1, 0), "b skips what a just found settled"
    again = await a.run_cycle()
    assert (again.follower_reads, again.matches_settled) == (1, 1), "the holder itself looks again"

    await follow(repos, 7, "late", start=START)
    await register(repos, "late")
    assert (await b.run_cycle()).matches_locked == 1
    assert sender.to(token("late"), "alert") == []
    await trio.sleep(0.6)
    found = await b.run_cycle()
    assert (found.matches_locked, found.claimed) == (0, 1)
    assert len(sender.to(token("late"), "alert")) == 1


async def test_without_a_hold_a_settled_match_is_released_for_the_next_instance(repos: Any) -> None:
    await _match_7_followed_by(repos, 2)
    settings = PrematchSettings(settled_recheck_s=0)
    a = PrematchNotifier(repos, FakeSender(), settings, topic=TOPIC, clock=Clock(T0), owner="a")
    b = PrematchNotifier(repos, FakeSender(), settings, topic=TOPIC, clock=Clock(T0), owner="b")
    await a.run_cycle()
    assert (await a.run_cycle()).matches_settled == 1
    report = await b.run_cycle()
    assert (report.matches_locked, report.follower_reads, report.matches_settled) == (0, 1, 1)


async def test_a_prematch_lock_taken_over_mid_match_stops_this_instance_after_its_batch(repos: Any) -> None:
    await _match_7_followed_by(repos, 6)
    lock = prematch_lock_key("7")

    class StealingSender(FakeSender):
        """Our lease runs out during the first batch and another instance takes the lock."""

        async def send(self, push: Any) -> None:
            if not self.pushes:
                assert await repos.locks.release(lock, "me")
                assert await repos.locks.acquire(lock, "other-instance", 60.0)
            await super().send(push)

    sender = StealingSender()
    settings = PrematchSettings(batch_size=2, send_concurrency=1)
    notifier = PrematchNotifier(repos, sender, settings, topic=TOPIC, clock=Clock(T0), owner="me")
    report = await notifier.run_cycle()
    assert report.claimed == 2 and report.matches_locked == 1, "one batch, then it let the match go"
    assert len({p.token for p in sender.pushes if p.kind == "alert"}) == 2
    assert (await repos.locks.get(lock) or {}).get("owner") == "other-instance", "not released from under it"


async def test_failed_alert_is_resent_after_the_lease_under_the_same_collapse_id_without_push_to_start(
    repos: Any,
) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    await follow(repos, 7, "u1", start=START)
    await register(repos, "u1")
    sender = FakeSender(failing={token("u1")})
    clock = Clock(T0)
    notifier = PrematchNotifier(repos, sender, PrematchSettings(claim_lease_s=120), topic=TOPIC, clock=clock)

    assert (await notifier.run_cycle()).failed == 1
    clock.now += MINUTE
    assert (await notifier.run_cycle()).in_flight == 1  # the lease still runs: nobody resends yet
    sender.failing.clear()
    clock.now += MINUTE
    report = await notifier.run_cycle()
    assert report.recovered == 1 and report.accepted == 1
    alerts = sender.to(token("u1"), "alert")
    assert len(alerts) == 2 and {a.collapse_id for a in alerts} == {"prematch:7:2027-01-15T08:20:00Z"}
    assert json.loads(alerts[1].payload)["aps"]["alert"]["body"] == "1st T20I starts in 18 min"
    assert len(sender.to(token("u1", "start"))) == 1  # push-to-start went once, with the first claim


async def test_small_start_time_moves_do_not_renotify_but_a_big_move_does(repos: Any) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    await follow(repos, 7, "u1", start=START)
    await register(repos, "u1", push_to_start=False)
    sender = FakeSender()
    clock = Clock(T0)
    notifier = PrematchNotifier(
        repos, sender, PrematchSettings(restart_notify_threshold_s=900), topic=TOPIC, clock=clock
    )
    await notifier.run_cycle()

    await put_fixture(repos, 7, START + 10 * MINUTE)  # a 10-minute delay: the same notification
    clock.now += MINUTE
    assert (await notifier.run_cycle()).matches_settled == 1

    await put_fixture(repos, 7, START + 2 * 3600)  # pushed back two hours
    clock.now = START + 2 * 3600 - 25 * MINUTE
    report = await notifier.run_cycle()
    assert report.claimed == 1
    alerts = sender.to(token("u1"), "alert")
    assert [a.collapse_id for a in alerts] == [
        "prematch:7:2027-01-15T08:20:00Z",
        "prematch:7:2027-01-15T10:20:00Z",
    ]


async def test_watches_only_the_configured_or_active_leagues(repos: Any) -> None:
    await seed_reference(repos)
    await repos.leagues.put_league(
        {"leagueId": "5", "name": "Big Bash League", "code": "BBL", "active": False}
    )
    await put_fixture(repos, 7, START)
    await put_fixture(repos, 8, START, league_id=5)
    for mid in (7, 8):
        await follow(repos, mid, "u1", start=START)
    await register(repos, "u1", push_to_start=False)
    sender = FakeSender()
    await PrematchNotifier(repos, sender, PrematchSettings(), topic=TOPIC, clock=Clock(T0)).run_cycle()
    assert [json.loads(p.payload)["matchId"] for p in sender.pushes] == ["7"]
    sender2 = FakeSender()
    await PrematchNotifier(
        repos, sender2, PrematchSettings(league_codes=["BBL"]), topic=TOPIC, clock=Clock(T0)
    ).run_cycle()
    assert [json.loads(p.payload)["matchId"] for p in sender2.pushes] == ["8"]


class FlakyFixtures:
    """The fixtures repository, failing its first ``n`` GSI queries (a DynamoDB outage)."""

    def __init__(self, real: Any, n: int) -> None:
        self._real, self.n = real, n

    async def get_matches_by_date_range(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        if self.n > 0:
            self.n -= 1
            raise RuntimeError("DynamoDB unavailable")
        return await self._real.get_matches_by_date_range(*args, **kwargs)


class ReposView:
    def __init__(self, repos: Any, **override: Any) -> None:
        self._repos, self._override = repos, override

    def __getattr__(self, name: str) -> Any:
        return self._override.get(name) or getattr(self._repos, name)


async def test_actor_survives_failing_cycles_and_notifies_once_they_pass(repos: Any) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    await follow(repos, 7, "u1", start=START)
    await register(repos, "u1", push_to_start=False)
    sender = FakeSender()
    flaky = ReposView(repos, fixtures=FlakyFixtures(repos.fixtures, 3))
    settings = PrematchSettings(interval_s=0.05, backoff_base_s=0.01, backoff_max_s=0.02)
    notifier = PrematchNotifier(flaky, sender, settings, topic=TOPIC, clock=Clock(T0))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(notifier.run)
            await sender.took.wait()
            while notifier.cycles < 2:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert len(sender.pushes) == 1 and notifier.failures == 0


async def test_a_sender_that_never_answers_stops_the_batch_with_every_claim_left_to_the_lease(
    repos: Any,
) -> None:
    users = await _match_7_followed_by(repos, 20)
    settings = PrematchSettings(send_concurrency=4, result_timeout_s=0.5)
    silent = FakeSender(unanswered=lambda push: True)
    clock = Clock(T0)
    with trio.fail_after(30):
        report = await PrematchNotifier(repos, silent, settings, topic=TOPIC, clock=clock).run_cycle()
    # four claims went out and got no answer; the other sixteen were never sent: none is confirmed, so none
    # is lost
    assert len([p for p in silent.pushes if p.kind == "alert"]) == 4
    assert (report.claimed, report.failed, report.confirmed) == (20, 4, 0)
    states = {f["userId"]: f.get("prematchState") for f in await repos.follows.get_followers_for_match("7")}
    assert set(states.values()) == {"claimed"}
    clock.now += settings.claim_lease_s + 1
    sender = FakeSender()
    report = await PrematchNotifier(repos, sender, settings, topic=TOPIC, clock=clock).run_cycle()
    assert report.recovered == 20 and all(len(sender.to(token(u), "alert")) == 1 for u in users)
    first = {p.token: p.collapse_id for p in silent.pushes}
    assert all(first[p.token] == p.collapse_id for p in sender.pushes if p.token in first)


def test_settings_refuse_a_lease_shorter_than_the_result_wait() -> None:
    with pytest.raises(ValueError, match="claim_lease_s"):
        PrematchSettings(claim_lease_s=10, result_timeout_s=30)


async def test_a_claim_without_a_stamp_is_taken_over_once(repos: Any) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    await follow(repos, 7, "u1", start=START)
    await register(repos, "u1", push_to_start=False)
    await repos.dynamo.call(
        "cricket-match-follows",
        "update_item",
        Key={"matchId": {"S": "7"}, "userId": {"S": "u1"}},
        UpdateExpression="SET prematchFor = :f, prematchStart = :s, prematchState = :c",
        ExpressionAttributeValues={
            ":f": {"S": "2027-01-15T08:20:00Z"},
            ":s": {"N": str(int(START))},
            ":c": {"S": "claimed"},
        },
    )
    sender = FakeSender()
    a = PrematchNotifier(repos, sender, PrematchSettings(), topic=TOPIC, clock=Clock(T0))
    b = PrematchNotifier(repos, sender, PrematchSettings(), topic=TOPIC, clock=Clock(T0))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.run_cycle)
        nursery.start_soon(b.run_cycle)
    assert len(sender.to(token("u1"), "alert")) == 1
    assert a.last_report is not None and b.last_report is not None
    assert a.last_report.recovered + b.last_report.recovered == 1


async def test_followers_wait_while_a_live_fan_out_is_in_progress_and_go_on_once_it_ends(repos: Any) -> None:
    users = await _match_7_followed_by(repos, 3)
    sender = FakeSender()
    live = LiveWork()
    notifier = PrematchNotifier(
        repos, sender, PrematchSettings(give_way_s=60.0), topic=TOPIC, clock=Clock(T0), live=live
    )
    finished = trio.Event()

    async def cycle() -> None:
        await notifier.run_cycle()
        finished.set()

    async with trio.open_nursery() as nursery:
        with live.fanout():  # a match actor's round of pushes, in progress
            nursery.start_soon(cycle)
            await trio.sleep(1.0)  # moto answers the cycle's reads in milliseconds
            assert not finished.is_set() and sender.pushes == []
            follows = await repos.follows.get_followers_for_match("7")
            assert not any(f.get("prematchState") for f in follows), "nothing claimed during the fan-out"
        with trio.fail_after(30):
            await finished.wait()
    report = notifier.last_report
    assert report is not None and report.claimed == 3 and report.gave_way_s > 0
    for user in users:
        assert len(sender.to(token(user), "alert")) == 1


async def test_under_continuous_live_load_followers_wait_at_most_give_way_s_each(repos: Any) -> None:
    await _match_7_followed_by(repos, 3)
    live = LiveWork()
    notifier = PrematchNotifier(
        repos, FakeSender(), PrematchSettings(give_way_s=0.2), topic=TOPIC, clock=Clock(T0), live=live
    )
    with live.fanout():  # never ends while the cycle runs
        report = await notifier.run_cycle()
    assert report.claimed == 3
    assert 3 * 0.2 <= report.gave_way_s < 3 * 5.0, "each follower waited its 0.2 s, then went on"


async def test_beside_live_matches_the_followers_are_paced_and_with_none_they_are_not(repos: Any) -> None:
    await _match_7_followed_by(repos, 20)
    matches_live = [1]
    live = LiveWork(matches=lambda: matches_live[0])
    settings = PrematchSettings(live_followers_per_s=20.0)
    started = trio.current_time()
    report = await PrematchNotifier(
        repos, FakeSender(), settings, topic=TOPIC, clock=Clock(T0), live=live
    ).run_cycle()
    assert report.claimed == 20 and report.paced_s > 0
    assert trio.current_time() - started >= 19 / 20, "20 claims at 20 a second span at least 0.95 s"

    await put_fixture(repos, 8, START)
    for user in ("v0", "v1", "v2"):
        await follow(repos, 8, user, start=START)
        await register(repos, user)
    matches_live[0] = 0  # nothing live on this instance: full speed
    report = await PrematchNotifier(
        repos, FakeSender(), settings, topic=TOPIC, clock=Clock(T0), live=live
    ).run_cycle()
    assert report.claimed == 3 and report.paced_s == 0.0


async def test_the_pending_read_returns_exactly_the_followers_decide_does_not_call_done(repos: Any) -> None:
    settings = PrematchSettings(restart_notify_threshold_s=900)
    now = T0
    iso = "2027-01-15T08:20:00Z"
    marked = {"prematchFor": iso, "prematchStart": int(START), "prematchExpiresAt": int(START + 7200)}
    markers: dict[str, dict[str, Any]] = {
        "none": {},
        "sent": {**marked, "prematchState": "sent"},
        "sent_no_state": marked,  # a marker without a state reads as sent
        "moved_within": {**marked, "prematchState": "sent", "prematchStart": int(START + 899)},
        "moved_at_threshold": {**marked, "prematchState": "sent", "prematchStart": int(START - 900)},
        "moved_early": {**marked, "prematchState": "sent", "prematchStart": int(START - 901)},
        "moved_late": {**marked, "prematchState": "sent", "prematchStart": int(START + 901)},
        "expired": {**marked, "prematchState": "sent", "prematchExpiresAt": int(now)},
        "claimed_fresh": {**marked, "prematchState": "claimed", "prematchClaimedMs": int(now * 1000)},
        "claimed_lapsed": {
            **marked,
            "prematchState": "claimed",
            "prematchClaimedMs": int((now - 600) * 1000),
        },
        "start_not_a_number": {**marked, "prematchState": "sent", "prematchStart": "soon"},
        "no_start": {"prematchFor": iso, "prematchState": "sent", "prematchExpiresAt": int(START + 7200)},
    }
    expires = int(START + seed.FOLLOW_TTL_S)
    await repos.follows.import_items(
        [{"matchId": "7", "userId": u, "expiresAt": expires, **m} for u, m in markers.items()]
    )
    pending = await repos.follows.get_prematch_pending(
        "7", start_epoch=START, threshold_s=settings.restart_notify_threshold_s, now=now
    )
    everyone = await repos.follows.get_followers_for_match("7", now=now)
    not_done = {
        f["userId"]
        for f in everyone
        if decide(Marker.of(f), start_epoch=START, now=now, settings=settings) is not Decision.DONE
    }
    assert {f["userId"] for f in pending} == not_done
    assert not_done == set(markers) - {"sent", "sent_no_state", "moved_within", "moved_at_threshold"}
    assert await repos.follows.has_followers("7") and not await repos.follows.has_followers("8")


def _calls(table: str, operation: str) -> float:
    return sample("sightscreen_dynamodb_calls_total", {"table": table, "operation": operation})


async def test_a_batch_reads_its_devices_and_takes_its_start_claims_in_a_few_calls(repos: Any) -> None:
    # 250 followers whose follows name their devices: two batches (200 + 50). The devices come from one
    # BatchGetItem per 100, the push-to-start claims from one read and one transaction per 100, so a
    # follower costs its claim and its confirmation, and a started one its start claim's hold. u0's named device was replaced since it
    # followed: it is found by the user's Query and gets the new one.
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    users = [f"u{i}" for i in range(250)]
    await seed.seed_followers(
        repos,
        "7",
        [seed.Follower(u, "1", "d0", device_token=token(u)) for u in users],
        expires_at=START + seed.FOLLOW_TTL_S,
    )
    for user in users[1:]:
        await register(repos, user)
    await seed.seed_devices(
        repos,
        [
            seed.Follower(
                "u0", None, "d0", device_token=token("u0-new"), push_to_start_token=token("u0", "start")
            )
        ],
    )
    ops = [(DEVICES, "BatchGetItem"), (DEVICES, "Query"), (DEVICES, "GetItem"), (LOCKS, "BatchGetItem")]
    ops += [(LOCKS, "TransactWriteItems"), (MATCH_FOLLOWS, "UpdateItem")]
    before = {op: _calls(*op) for op in ops}
    sender = FakeSender()
    report = await PrematchNotifier(
        repos, sender, PrematchSettings(), topic=TOPIC, clock=Clock(T0)
    ).run_cycle()
    calls = {op: _calls(*op) - before[op] for op in ops}
    assert (report.claimed, report.accepted, report.push_to_start, report.confirmed) == (250, 250, 250, 250)
    assert sender.to(token("u0-new"), "alert") and not sender.to(token("u0"), "alert")
    assert all(len(sender.to(token(u), "alert")) == 1 for u in users[1:])
    assert all(len(sender.to(token(u, "start"), "start")) == 1 for u in users)
    assert calls == {
        (DEVICES, "BatchGetItem"): 2 + 1,
        (DEVICES, "Query"): 1,  # u0's fallback
        (DEVICES, "GetItem"): 0,
        (LOCKS, "BatchGetItem"): 2 + 1,
        # the claims by the hundred, then each start's claim held once APNs accepted it (a claim whose push
        # never went runs out with its lease instead of holding the follower up)
        (LOCKS, "TransactWriteItems"): 2 + 1 + 250,
        (MATCH_FOLLOWS, "UpdateItem"): 2 * 250,  # claim + confirm each
    }


async def test_a_follower_nothing_can_reach_costs_a_look_up_and_one_write(repos: Any) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    for user in ("u1", "u2", "u3"):
        await follow(repos, 7, user, start=START)
    await register(repos, "u1")  # u2 and u3 have no device
    writes, lookups = _calls(MATCH_FOLLOWS, "UpdateItem"), _calls(DEVICES, "Query")
    report = await PrematchNotifier(
        repos, FakeSender(), PrematchSettings(), topic=TOPIC, clock=Clock(T0)
    ).run_cycle()
    assert (report.claimed, report.accepted, report.no_device) == (1, 1, 2)
    assert _calls(DEVICES, "Query") - lookups == 3, "one device look-up per follower"
    assert _calls(MATCH_FOLLOWS, "UpdateItem") - writes == 2 + 1 + 1, (
        "claim + confirm for u1, one write each else"
    )
    follows = {f["userId"]: f for f in await repos.follows.get_followers_for_match("7")}
    assert {u: (f["prematchState"], f.get("prematchResult")) for u, f in follows.items()} == {
        "u1": ("sent", "accepted"),
        "u2": ("sent", "no_device"),
        "u3": ("sent", "no_device"),
    }


async def _owner_heal(repos: Any, at: float) -> list[str]:
    """The match's owner heals at wall time ``at`` (the match live): the push-to-start tokens it starts."""
    sender = FakeSender()
    owner = make_match_actor("7", repos, sender, owner="owner", lease_s=10.0, wall_clock=lambda: at)
    await take_lease(owner)
    live(owner)
    await owner.audience.refresh()
    await owner.starts.heal()
    await owner.lease.release()
    return [p.token for p in sender.pushes]


async def test_a_start_claim_the_prematch_job_took_and_never_sent_runs_out_with_its_lease(repos: Any) -> None:
    """The prematch job dies between its start claim and its send: the owner starts the follower once the
    claim's lease has run out, not at the match's start plus the hold."""
    await _match_7_followed_by(repos, 1)
    died = trio.CancelScope()
    clock = Clock(T0)
    settings = PrematchSettings(claim_lease_s=120.0)
    sender = FakeSender()
    dying = WithLocks(repos, DyingClaims(repos.locks, died))
    with died:
        await PrematchNotifier(dying, sender, settings, topic=TOPIC, clock=clock).run_cycle()
    assert died.cancelled_caught and sender.to(token("u0", "start")) == [], "died before its start went"
    assert await _owner_heal(repos, clock.now + 60) == [], "within the claim's lease nobody starts it"
    assert await _owner_heal(repos, clock.now + 121) == [token("u0", "start")], "a lease later the owner does"


async def test_a_start_the_prematch_job_delivered_is_not_repeated_by_the_owner(repos: Any) -> None:
    await _match_7_followed_by(repos, 1)
    clock = Clock(T0)
    sender = FakeSender()
    report = await PrematchNotifier(repos, sender, PrematchSettings(), topic=TOPIC, clock=clock).run_cycle()
    assert report.push_to_start == 1
    assert await _owner_heal(repos, START + 60) == [], "one claim per follower and match: held past the start"


async def test_a_start_the_prematch_job_handed_over_before_dying_is_not_repeated_by_the_owner(
    repos: Any,
) -> None:
    await _match_7_followed_by(repos, 1)
    died = trio.CancelScope()

    class DyingSender(FakeSender):
        async def send(self, push: Push) -> None:
            if push.kind == "start":
                await super().send(push)  # it went out...
                died.cancel()  # ...and the job died before its answer was read
                await trio.sleep_forever()
            await super().send(push)

    clock = Clock(T0)
    with died:
        await PrematchNotifier(repos, DyingSender(), PrematchSettings(), topic=TOPIC, clock=clock).run_cycle()
    assert died.cancelled_caught
    assert await _owner_heal(repos, START + 60) == [], "its claim was held before the start went"
