"""A match ended wrongly and taken again re-starts its followers at its first live heal, whatever the per-device
push-to-start interval (the wrong end closed their Live Activities). Real repositories on moto's server."""

from __future__ import annotations

import time
from typing import Any

import trio

from tests.actors.test_match_heal import _actor, _seed
from tests.doubles import FakeSender


async def test_the_first_live_heal_after_a_reopen_starts_every_follower_once_despite_the_interval(
    repos: Any,
) -> None:
    await _seed(repos)
    await repos.live_activities.end_la_sessions(
        "500", await repos.live_activities.get_all_la_sessions_for_match("500"), "match_end"
    )  # the wrong end ended u2's session too
    # both were started minutes ago: within the interval
    claimed = await repos.locks.claim_push_to_starts(
        "500", ["u1", "u2"], owner="me", hold_s=600, now=time.time() - 120
    )
    assert claimed == ["u1", "u2"]
    sender = FakeSender()
    actor = await _actor(repos, sender, push_to_start_min_interval_s=600, heal_every_s=0.05)
    await actor.audience.refresh()
    assert await actor.starts.heal() == 0  # an ordinary heal respects the interval
    actor.starts.restart_all()  # what the actor does on taking a match whose persisted phase is final
    actor.latest.phase = "completed"  # the persisted phase of the wrong end, before the first live tick
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.starts.loop)
        await trio.sleep(0.3)
        assert sender.pushes == []  # not while the match is not shown live
        actor.latest.phase = "live"
        await trio.sleep(0.3)
        assert sorted(p.token for p in sender.pushes) == ["b" * 64, "d" * 64]  # once each; u3 has no token
        await trio.sleep(0.3)
        nursery.cancel_scope.cancel()
    assert len(sender.pushes) == 2, "only the first live heal restarts them"
