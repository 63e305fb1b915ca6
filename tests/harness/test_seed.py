"""``tests/harness/seed.py``: one seeding of a local world, read back through the daemon's own repositories."""

from __future__ import annotations

import time
from typing import Any

from daemon.replay.tape import builtin_tape_path, load_tape
from tests.harness.seed import Follower, seed_devices, seed_followers, seed_match


async def test_a_seeded_match_has_its_league_teams_fixture_follows_devices_and_sessions(repos: Any) -> None:
    tape = load_tape(builtin_tape_path())
    starts = time.time() + 60
    seeded = await seed_match(
        repos,
        tape,
        starts_at=starts,
        followers=4,
        league_name="Local",
        league_code="LOC",
        devices=True,
        sessions=True,
    )
    match_id = str(tape.fixture_id)
    assert seeded.match_id == match_id and len(seeded.followers) == 4
    assert (await repos.leagues.get_league(str(tape.league_id)))["code"] == "LOC"
    assert {t["teamId"] for t in await repos.teams.get_all_teams()} == {
        str(tape.localteam.id),
        str(tape.visitorteam.id),
    }
    fixture = await repos.fixtures.get_fixture(match_id)
    assert fixture["status"] == "NS" and fixture["live"] is False and fixture["leagueCode"] == "LOC"
    follows = await repos.follows.get_followers_for_match(match_id)
    # half the followers support each team
    assert sorted(f["teamId"] for f in follows) == sorted(
        [str(tape.localteam.id), str(tape.visitorteam.id)] * 2
    )
    sessions = await repos.live_activities.get_all_la_sessions_for_match(match_id)
    assert {s["updateToken"]: s["visitorKey"] for s in sessions} == seeded.tokens
    for follower in seeded.followers:
        device = await repos.devices.get_device_for_user(follower.user_id)
        assert device["pushToStartToken"] == follower.push_to_start_token
        assert device["apnsToken"] == follower.device_token
    # each follow names its device, as the API writes it: the owner reads them in one batch
    named = await repos.devices.get_devices((f["userId"], f["deviceToken"]) for f in follows)
    assert {u: d["pushToStartToken"] for u, d in named.items()} == {
        f.user_id: f.push_to_start_token for f in seeded.followers
    }


async def test_followers_without_devices_or_sessions_get_only_a_follow(repos: Any) -> None:
    alone = Follower("u1", None, "d0")
    await seed_followers(repos, "77", [alone], expires_at=time.time() + 3600)
    await seed_devices(repos, [alone])
    follows = await repos.follows.get_followers_for_match("77")
    assert [(f["userId"], f.get("teamId")) for f in follows] == [("u1", None)]
    assert await repos.live_activities.get_all_la_sessions_for_match("77") == []
    assert await repos.devices.get_device_for_user("u1") is None
