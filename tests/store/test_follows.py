"""cricket-match-follows: follow/unfollow, followers (paginated, expiry-filtered), bulk removal, prematch claim."""

from __future__ import annotations

from daemon.store import Repositories
from tests.store import faults

T0 = 1_800_000_000.0


async def test_follow_upserts_and_keeps_created_at(repos: Repositories):
    f = repos.follows
    await f.follow_match("m1", "u1", "team-7", T0 + 48 * 3600, now=T0)
    await f.follow_match("m1", "u1", "team-8", T0 + 50 * 3600, now=T0 + 60)
    got = await f.check_if_user_follows_match("m1", "u1", now=T0)
    assert got == {
        "matchId": "m1",
        "userId": "u1",
        "teamId": "team-8",
        "expiresAt": int(T0 + 50 * 3600),
        "createdAt": "2027-01-15T08:00:00.000Z",
    }
    assert await f.check_if_user_follows_match("m1", "u2", now=T0) is None


async def test_update_team_only_for_an_existing_follow_and_unfollow_returns_old(repos: Repositories):
    f = repos.follows
    assert await f.update_follow_team("m1", "u1", "t2") is False
    await f.follow_match("m1", "u1", "t1", T0 + 100, now=T0)
    assert await f.update_follow_team("m1", "u1", "t2") is True
    old = await f.unfollow_match("m1", "u1")
    assert old["teamId"] == "t2"
    assert await f.unfollow_match("m1", "u1") is None


async def test_followers_page_past_one_page_and_skip_expired(repos: Repositories):
    f = repos.follows
    for i in range(13):
        await f.follow_match("m1", f"u{i:02d}", None, T0 - 1 if i % 4 == 0 else T0 + 100, now=T0 - 50)
    await f.follow_match("m2", "u99", None, T0 + 100)
    faults.page_size(f.dynamo.client, 3)
    got = await f.get_followers_for_match("m1", now=T0)
    assert sorted(x["userId"] for x in got) == [f"u{i:02d}" for i in range(13) if i % 4 != 0]
    assert await f.check_if_user_follows_match("m1", "u00", now=T0) is None


async def test_remove_all_follows_deletes_in_batches_including_expired(repos: Repositories):
    f = repos.follows
    for i in range(60):
        await f.follow_match("m1", f"u{i:02d}", None, T0 - 1 if i < 5 else T0 + 100)
    await f.follow_match("m2", "keep", None, T0 + 100)
    hook = faults.unprocessed_batches(f.dynamo.client, calls=0)  # observe batch sizes
    assert await f.remove_all_follows_for_match("m1") == 60
    assert hook.sizes == [25, 25, 10]
    assert await f.get_followers_for_match("m1", now=0) == []
    assert [x["userId"] for x in await f.get_followers_for_match("m2", now=T0)] == ["keep"]
    assert await f.remove_all_follows_for_match("m1") == 0


async def test_prematch_mark_is_a_claim_once_per_start_time(repos: Repositories):
    f = repos.follows
    assert await f.mark_prematch_notified("m1", "u1", "2027-01-15T10:00:00Z") is False  # no follow
    await f.follow_match("m1", "u1", "t1", T0 + 100)
    assert await f.mark_prematch_notified("m1", "u1", "2027-01-15T10:00:00Z", now=T0) is True
    assert await f.mark_prematch_notified("m1", "u1", "2027-01-15T10:00:00Z", now=T0) is False
    # rescheduled: a new start time is a new claim
    assert await f.mark_prematch_notified("m1", "u1", "2027-01-15T12:00:00Z", now=T0) is True
    # the send failed: hand back only our own claim
    assert await f.clear_prematch_mark("m1", "u1", start_time="2027-01-15T10:00:00Z") is False
    assert await f.clear_prematch_mark("m1", "u1", start_time="2027-01-15T12:00:00Z") is True
    assert await f.mark_prematch_notified("m1", "u1", "2027-01-15T12:00:00Z", now=T0) is True
    got = await f.check_if_user_follows_match("m1", "u1", now=T0)
    assert got["prematchFor"] == "2027-01-15T12:00:00Z" and got["teamId"] == "t1"
