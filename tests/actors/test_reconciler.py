"""LiveMatchReconciler against moto's server: fixtures that leave /livescores are archived."""

from __future__ import annotations

from typing import Any

import trio

from actors.reconciler import LiveMatchReconciler
from tests.doubles import LiveFeedDouble


async def _fixture(repos: Any, match_id: str) -> None:
    await repos.fixtures.batch_write_fixtures(
        [
            {
                "matchId": match_id,
                "leagueCode": "T",
                "startTime": "2026-12-02T10:00:00Z",
                "live": True,
                "liveUpdatedAt": "2026-12-02T10:30:00Z",
            }
        ]
    )


async def test_a_match_that_leaves_livescores_is_archived_once(repos: Any) -> None:
    await _fixture(repos, "1")
    await _fixture(repos, "2")
    feed = LiveFeedDouble()
    rec = LiveMatchReconciler(repos, feed)
    feed.live = [{"id": 1, "status": "2nd Innings"}, {"id": 2, "status": "1st Innings"}]
    assert await rec.cycle() == []
    feed.live = [{"id": 2, "status": "1st Innings"}]
    assert await rec.cycle() == ["1"]
    item = await repos.fixtures.get_fixture("1")
    assert item["archivedAt"] and "liveUpdatedAt" not in item and item["live"] is False
    assert "archivedAt" not in await repos.fixtures.get_fixture("2")
    assert await rec.cycle() == []  # not archived twice


async def test_a_failed_livescores_call_archives_nothing_and_forgets_nothing(repos: Any) -> None:
    await _fixture(repos, "7")
    feed = LiveFeedDouble()
    rec = LiveMatchReconciler(repos, feed)
    feed.live = [{"id": 7, "status": "1st Innings"}]
    await rec.cycle()
    feed.fail = True
    assert await rec.cycle() == []
    assert "archivedAt" not in await repos.fixtures.get_fixture("7")
    feed.fail = False
    feed.live = []
    assert await rec.cycle() == ["7"]


async def test_matches_active_before_a_restart_are_remembered(repos: Any) -> None:
    await _fixture(repos, "9")
    assert await repos.active_matches.register_active_match(
        "9", "old-instance", fields={"matchPhase": "live"}
    )
    feed = LiveFeedDouble()
    rec = LiveMatchReconciler(repos, feed, cycle_s=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(rec.run)
        nursery.cancel_scope.cancel()
    assert "9" in rec.seen_live
    assert await rec.cycle() == ["9"]


async def test_a_match_taken_before_its_first_ball_is_not_archived_for_being_unlisted(repos: Any) -> None:
    await _fixture(repos, "11")
    await _fixture(repos, "12")
    # taken before the start: registered with no tick yet, and with its pre-match tick saved
    assert await repos.active_matches.register_active_match("11", "owner")
    assert await repos.active_matches.register_active_match("12", "owner", fields={"matchPhase": "pre"})
    feed = LiveFeedDouble()
    rec = LiveMatchReconciler(repos, feed, cycle_s=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(rec.run)
        nursery.cancel_scope.cancel()
    assert rec.seen_live == set()
    assert await rec.cycle() == []  # /livescores does not list them yet
    assert "archivedAt" not in await repos.fixtures.get_fixture("11")
    feed.live = [{"id": 11, "status": "1st Innings"}, {"id": 12, "status": "1st Innings"}]
    assert await rec.cycle() == []
    feed.live = [{"id": 12, "status": "1st Innings"}]
    assert await rec.cycle() == ["11"]  # once seen live, leaving /livescores archives it
