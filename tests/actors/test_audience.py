"""A match's audience: what its actor keeps in memory of its sessions and followers, and how often it re-reads
them. Against the real repositories on moto's server, and in memory (``AudienceRecords``) where the re-read
cadence is measured on the autojump clock."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from actors.audience import MatchAudience, refresh_pause
from actors.settings import MatchActorSettings
from tests.doubles import AudienceRecords


def _audience(repos: Any, **settings: Any) -> MatchAudience:
    return MatchAudience("600", repos, MatchActorSettings(**settings))


async def test_refresh_keeps_active_sessions_shares_user_ids_and_reuses_unchanged_sessions(
    repos: Any,
) -> None:
    for user, team in (("u1", "7"), ("u2", "8"), ("u3", "7")):
        await repos.follows.follow_match("600", user, team, 4_000_000_000)
    await repos.live_activities.register_la_session("600", "u1", "d1", "a" * 64)
    await repos.live_activities.register_la_session("600", "u2", "d2", "b" * 64)
    await repos.live_activities.register_la_session("600", "u3", "d3", "c" * 64)
    await repos.live_activities.suspend_la_session("600", "u3#d3")
    audience = _audience(repos)
    await audience.refresh()
    assert sorted(audience.sessions) == ["u1#d1", "u2#d2"]  # the suspended one is not pushed to
    assert audience.follower_team == {"u1": "7", "u2": "8", "u3": "7"}
    assert audience.sessions["u1#d1"].user_id is next(u for u in audience.follower_team if u == "u1")
    assert audience.follower_team["u1"] is audience.follower_team["u3"]  # one string per team

    first = audience.sessions["u1#d1"]
    await repos.live_activities.update_token("600", "u2", "d2", "d" * 64)  # rotated on the device
    await audience.refresh()
    assert audience.sessions["u1#d1"] is first  # unchanged: the same object
    assert audience.sessions["u2#d2"].token == "d" * 64


async def test_refresh_without_followers_leaves_the_follower_map_alone(repos: Any) -> None:
    await repos.follows.follow_match("600", "u1", "7", 4_000_000_000)
    audience = _audience(repos)
    await audience.refresh()
    await repos.follows.follow_match("600", "u2", "8", 4_000_000_000)
    await audience.refresh(followers=False)
    assert audience.follower_team == {"u1": "7"}
    await audience.refresh()
    assert audience.follower_team == {"u1": "7", "u2": "8"}


async def test_the_sessions_keys_are_sorted_once_per_read_and_follow_the_next_read() -> None:
    records = _big_match()
    audience = MatchAudience("600", records, MatchActorSettings())
    await audience.refresh()
    ordered = audience.sorted_keys()
    assert ordered == sorted(audience.sessions) and len(ordered) == 2000
    assert audience.sorted_keys() is ordered, "sorted once, not at each shard"
    audience.drop_session("t5#d")  # a token APNs rejected: still listed until the next read
    assert audience.sorted_keys() is ordered
    records.sessions.append({"visitorKey": "a0#d", "updateToken": "f" * 64, "status": "active"})
    await audience.refresh()
    assert audience.sorted_keys()[0] == "a0#d" and "t5#d" in audience.sorted_keys()  # read again: active
    assert audience.sorted_keys() == sorted(audience.sessions)


def _big_match() -> AudienceRecords:
    """A match's session read: 2,000 on update tokens, 7,000 on broadcast channels, 1,000 ended."""
    token = [{"visitorKey": f"t{i}#d", "updateToken": f"{i:064x}", "status": "active"} for i in range(2000)]
    channel = [{"visitorKey": f"c{i}#d", "channelId": "ch-neutral", "status": "active"} for i in range(7000)]
    ended = [{"visitorKey": f"e{i}#d", "updateToken": f"{i:064x}", "status": "ended"} for i in range(1000)]
    return AudienceRecords([*token, *channel, *ended])


async def test_a_big_match_refreshes_its_sessions_less_often_counting_every_item_its_read_returns() -> None:
    audience = _audience(_big_match(), session_refresh_s=15, session_refresh_items_per_s=250)
    assert audience.refresh_interval() == 15
    await audience.refresh()
    assert (len(audience.sessions), len(audience.channel_sessions)) == (2000, 7000)
    # 10,000 items read and decoded, whatever path each session is on: every 40 s, not every 15
    assert audience.refresh_interval() == 40


def _counting() -> AudienceRecords:
    return AudienceRecords(
        [{"visitorKey": "u1#d", "userId": "u1", "updateToken": "a" * 64, "status": "active"}],
        [{"userId": "u1", "teamId": "7"}],
    )


async def test_the_refresh_loop_reads_followers_on_their_own_slower_cadence(autojump_clock: Any) -> None:
    repos = _counting()
    audience = _audience(repos, session_refresh_s=15, follower_refresh_s=60)
    start = trio.current_time()
    with trio.move_on_after(100):
        await audience.keep_fresh()
    sessions = [t - start for t in repos.at("sessions")]
    gaps = [b - a for a, b in zip(sessions, sessions[1:], strict=False)]
    # every 15 s, spread: the first re-read in the second half of the interval, the others within 15%
    assert sessions[0] == 0 and 7.5 <= gaps[0] < 15
    assert all(12.75 <= gap <= 17.25 for gap in gaps[1:]) and 6 <= len(sessions) <= 9
    # followers at the load and then with the first session re-read at least 60 s later, not before
    followers = [t - start for t in repos.at("followers")]
    assert followers[0] == 0 and len(followers) == 2
    assert followers[1] == min(t for t in sessions if t >= 60)


async def test_matches_taken_together_re_read_their_sessions_at_different_moments(
    autojump_clock: Any,
) -> None:
    repos_of = [_counting() for _ in range(20)]
    async with trio.open_nursery() as nursery:
        for repos in repos_of:
            nursery.start_soon(_audience(repos, session_refresh_s=40).keep_fresh)
        # past the latest first re-read (just under 40 s), before any second one (at least 20 + 34 s)
        await trio.sleep(41)
        nursery.cancel_scope.cancel()
    # all loaded at once; their first re-reads fall apart over the interval's second half
    firsts = sorted(repos.at("sessions")[1] for repos in repos_of)
    start = repos_of[0].at("sessions")[0]
    assert all(20 <= t - start < 40 for t in firsts)
    assert firsts[-1] - firsts[0] > 4  # 20 uniform draws within 4 s of each other: odds of about 1e-12


def test_the_pause_before_a_re_read_is_spread_around_the_interval() -> None:
    assert refresh_pause(40.0, first=True, u=0.0) == 20.0
    assert refresh_pause(40.0, first=True, u=0.5) == 30.0
    assert refresh_pause(40.0, first=False, u=0.0) == pytest.approx(34.0)
    assert refresh_pause(40.0, first=False, u=0.5) == pytest.approx(40.0)
    assert refresh_pause(40.0, first=False, u=1.0) == pytest.approx(46.0)
