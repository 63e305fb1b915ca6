"""Session and follower refresh: what a match actor keeps in memory, and how often it re-reads it.

Against the real repositories on moto's server.
"""

from __future__ import annotations

from typing import Any

import trio

from actors.match import MatchActor
from tests.actors.match_helpers import make_match_actor


def _actor(repos: Any, **settings: Any) -> MatchActor:
    return make_match_actor("600", repos, **settings)


async def test_refresh_keeps_active_sessions_shares_user_ids_and_reuses_unchanged_sessions(
    repos: Any,
) -> None:
    for user, team in (("u1", "7"), ("u2", "8"), ("u3", "7")):
        await repos.follows.follow_match("600", user, team, 4_000_000_000)
    await repos.live_activities.register_la_session("600", "u1", "d1", "a" * 64)
    await repos.live_activities.register_la_session("600", "u2", "d2", "b" * 64)
    await repos.live_activities.register_la_session("600", "u3", "d3", "c" * 64)
    await repos.live_activities.suspend_la_session("600", "u3#d3")
    actor = _actor(repos)
    await actor.refresh_sessions()
    assert sorted(actor.sessions) == ["u1#d1", "u2#d2"]  # the suspended one is not pushed to
    assert actor.follower_team == {"u1": "7", "u2": "8", "u3": "7"}
    assert actor.sessions["u1#d1"].user_id is next(u for u in actor.follower_team if u == "u1")
    assert actor.follower_team["u1"] is actor.follower_team["u3"]  # one string per team

    first = actor.sessions["u1#d1"]
    await repos.live_activities.update_token("600", "u2", "d2", "d" * 64)  # rotated on the device
    await actor.refresh_sessions()
    assert actor.sessions["u1#d1"] is first  # unchanged: the same object
    assert actor.sessions["u2#d2"].token == "d" * 64


async def test_refresh_without_followers_leaves_the_follower_map_alone(repos: Any) -> None:
    await repos.follows.follow_match("600", "u1", "7", 4_000_000_000)
    actor = _actor(repos)
    await actor.refresh_sessions()
    await repos.follows.follow_match("600", "u2", "8", 4_000_000_000)
    await actor.refresh_sessions(followers=False)
    assert actor.follower_team == {"u1": "7"}
    await actor.refresh_sessions()
    assert actor.follower_team == {"u1": "7", "u2": "8"}


class _BigMatch:
    """A match's session read: 2,000 on update tokens, 7,000 on broadcast channels, 1,000 ended."""

    def __init__(self) -> None:
        self.live_activities = self
        self.follows = self

    async def get_all_la_sessions_for_match(self, match_id: str, **_: Any) -> list[dict[str, Any]]:
        token = [
            {"visitorKey": f"t{i}#d", "updateToken": f"{i:064x}", "status": "active"} for i in range(2000)
        ]
        channel = [
            {"visitorKey": f"c{i}#d", "channelId": "ch-neutral", "status": "active"} for i in range(7000)
        ]
        ended = [
            {"visitorKey": f"e{i}#d", "updateToken": f"{i:064x}", "status": "ended"} for i in range(1000)
        ]
        return [*token, *channel, *ended]

    async def get_followers_for_match(self, match_id: str, **_: Any) -> list[dict[str, Any]]:
        return []


async def test_a_big_match_refreshes_its_sessions_less_often_counting_every_item_its_read_returns() -> None:
    actor = _actor(_BigMatch(), session_refresh_s=15, session_refresh_items_per_s=250)
    assert actor.refresh_interval() == 15
    await actor.refresh_sessions()
    assert (len(actor.sessions), len(actor.channel_sessions)) == (2000, 7000)
    # 10,000 items read and decoded, whatever path each session is on: every 40 s, not every 15
    assert actor.refresh_interval() == 40


class _CountingRepos:
    """In-memory stand-ins (no I/O, so the autojump clock measures only the loop's own waits)."""

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.live_activities = self
        self.follows = self

    async def get_all_la_sessions_for_match(self, match_id: str, **_: Any) -> list[dict[str, Any]]:
        self.reads.append("sessions")
        return [{"visitorKey": "u1#d", "userId": "u1", "updateToken": "a" * 64, "status": "active"}]

    async def get_followers_for_match(self, match_id: str, **_: Any) -> list[dict[str, Any]]:
        self.reads.append("followers")
        return [{"userId": "u1", "teamId": "7"}]


async def test_the_refresh_loop_reads_followers_on_their_own_slower_cadence(autojump_clock: Any) -> None:
    repos = _CountingRepos()
    actor = _actor(repos, session_refresh_s=15, follower_refresh_s=60)
    with trio.move_on_after(100):  # refreshes at 0, 15, 30, 45, 60, 75, 90 (virtual time)
        await actor._refresh_loop()
    assert repos.reads.count("sessions") == 7
    assert repos.reads.count("followers") == 2  # at 0 and 60
