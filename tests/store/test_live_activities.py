"""live-activities: session lifecycle, per-match and per-user reads, pagination, TTL filtering."""

from __future__ import annotations

import pytest

from daemon.store import Repositories, split_visitor_key, visitor_key
from tests.store import faults

T0 = 1_800_000_000.0


def test_visitor_key_is_user_hash_device_and_refuses_ambiguous_user_ids():
    assert visitor_key("u-1", "dev-A") == "u-1#dev-A"
    assert split_visitor_key("u-1#dev#A") == ("u-1", "dev#A")
    with pytest.raises(ValueError, match="userId"):
        visitor_key("u#1", "d")
    with pytest.raises(ValueError, match="visitorKey"):
        split_visitor_key("nohash")


async def test_register_then_read_by_match_and_by_user(repos: Repositories):
    la = repos.live_activities
    await la.register_la_session("m1", "u1", "iphone", "tok-1", now=T0)
    await la.register_la_session("m1", "u1", "ipad", "tok-2", now=T0)
    await la.register_la_session("m2", "u1", "iphone", "tok-3", now=T0)
    await la.register_la_session("m1", "u2", "iphone", "tok-4", now=T0)
    sessions = await la.get_all_la_sessions_for_match("m1")
    assert sorted(s["visitorKey"] for s in sessions) == ["u1#ipad", "u1#iphone", "u2#iphone"]
    s = next(s for s in sessions if s["visitorKey"] == "u1#ipad")
    assert s == {
        "matchId": "m1",
        "visitorKey": "u1#ipad",
        "userId": "u1",
        "deviceId": "ipad",
        "updateToken": "tok-2",
        "status": "active",
        "sessionStartedAt": "2027-01-15T08:00:00.000Z",
    }
    mine = await la.get_user_la_sessions("u1")
    assert sorted((s["matchId"], s["deviceId"]) for s in mine) == [
        ("m1", "ipad"),
        ("m1", "iphone"),
        ("m2", "iphone"),
    ]


async def test_update_token_only_for_an_existing_session(repos: Repositories):
    la = repos.live_activities
    assert await la.update_token("m1", "u1", "iphone", "new") == "missing"
    await la.register_la_session("m1", "u1", "iphone", "old")
    assert await la.update_token("m1", "u1", "iphone", "new") == "updated"
    assert (await la.get_la_session("m1", "u1", "iphone"))["updateToken"] == "new"
    assert await la.get_all_la_sessions_for_match("m1") != []


async def test_suspend_only_an_active_session_and_register_reactivates(repos: Repositories):
    la = repos.live_activities
    vk = visitor_key("u1", "iphone")
    assert await la.suspend_la_session("m1", vk) is False  # no such session
    await la.register_la_session("m1", "u1", "iphone", "tok")
    assert await la.suspend_la_session("m1", vk, now=T0) is True
    assert await la.suspend_la_session("m1", vk, now=T0) is False  # already suspended
    s = await la.get_la_session("m1", "u1", "iphone")
    assert s["status"] == "suspended" and s["suspendedAt"] == "2027-01-15T08:00:00.000Z"
    assert [x["visitorKey"] for x in await la.get_all_la_sessions_for_match("m1", status="active")] == []
    await la.register_la_session("m1", "u1", "iphone", "tok-2")
    s = await la.get_la_session("m1", "u1", "iphone")
    assert s["status"] == "active" and "suspendedAt" not in s and s["updateToken"] == "tok-2"


async def test_end_session_sets_reason_and_ttl_then_expires_from_reads(repos: Repositories):
    la = repos.live_activities
    vk = visitor_key("u1", "iphone")
    assert await la.end_la_session("m1", vk, "match_end") is False
    await la.register_la_session("m1", "u1", "iphone", "tok")
    assert await la.end_la_session("m1", vk, "match_end", now=T0, ttl_s=3600) is True
    s = await la.get_la_session("m1", "u1", "iphone", now=T0 + 1)
    assert s["status"] == "ended" and s["endReason"] == "match_end" and s["ttl"] == int(T0 + 3600)
    assert await la.suspend_la_session("m1", vk) is False  # ended is not active
    assert len(await la.get_all_la_sessions_for_match("m1", now=T0 + 3599)) == 1
    assert await la.get_all_la_sessions_for_match("m1", now=T0 + 3601) == []
    assert await la.get_user_la_sessions("u1", now=T0 + 3601) == []
    assert await la.get_la_session("m1", "u1", "iphone", now=T0 + 3601) is None


async def test_reads_page_past_one_page_and_filter_expired_on_every_page(repos: Repositories):
    la = repos.live_activities
    for i in range(11):
        # every third session expired long ago (DynamoDB may still return it for two days)
        ttl = int(T0 - 10) if i % 3 == 0 else int(T0 + 3600)
        await la.register_la_session("m1", f"u{i:02d}", "d", f"tok-{i}", ttl=ttl)
    faults.page_size(la.dynamo.client, 2)
    got = await la.get_all_la_sessions_for_match("m1", now=T0)
    assert sorted(s["userId"] for s in got) == [f"u{i:02d}" for i in range(11) if i % 3 != 0]
    assert len(await la.get_user_la_sessions("u01", now=T0)) == 1
    assert await la.get_user_la_sessions("u03", now=T0) == []


async def test_ending_many_sessions_in_batches_skips_ended_ones_and_keeps_their_fields(repos: Repositories):
    for i in range(60):
        await repos.live_activities.register_la_session("m9", f"u{i}", "d", f"{i:064x}")
    await repos.live_activities.end_la_session("m9", "u0#d", "user_unfollowed")
    sessions = await repos.live_activities.get_all_la_sessions_for_match("m9")
    ended = await repos.live_activities.end_la_sessions("m9", sessions, "match_end", now=1000.0, ttl_s=3600)
    assert ended == 59  # the one already ended keeps its own reason
    after = {
        s["visitorKey"]: s
        for s in await repos.live_activities.get_all_la_sessions_for_match("m9", now=1000.0)
    }
    assert len(after) == 60 and all(s["status"] == "ended" for s in after.values())
    assert after["u0#d"]["endReason"] == "user_unfollowed"
    assert after["u7#d"]["endReason"] == "match_end" and after["u7#d"]["ttl"] == 4600
    assert after["u7#d"]["updateToken"] == f"{7:064x}" and after["u7#d"]["userId"] == "u7"
    assert await repos.live_activities.end_la_sessions("m9", list(after.values()), "match_end") == 0
