"""What the season's nemesis found, kept as tests: each failing seed's fault, played on the region rig
(``tests/harness/region.py``: empty tables, the product's own doors, an engine process under its role's
key) in the moment the seed's schedule happened to hit, so the finding stays covered without replaying a
whole season.

- **Seed 7** (``python bench/season.py --matches 30 --concurrent 6 --instances 2 --nemesis 7``, before the
  feed gate's fix in ``daemon/cricket/order.py``): a ``sportmonks_wrong_status`` burst ("Finished") hit a
  match its owner had taken before its start; the true status after it was held as behind the wrong final
  one (nothing is stamped before the first ball), so the owner never saw the match go live, started no
  activity, and the season waited on it for good.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from tests.harness.region import Region, region_tapes

pytestmark = pytest.mark.slow


async def test_seed_7_a_wrong_finished_before_the_first_ball_does_not_keep_the_match_from_going_live(
    make_region: Callable[..., Region],
) -> None:
    # the match waits for the rig, as in the season: live once taken, bowled once started
    region = make_region(tapes=region_tapes(1, seed=71), engines=1, hold_s=3600.0)
    match_id = str(region.tapes[0].fixture_id)
    dead: list[str] = []

    async def play(nursery: trio.Nursery) -> None:
        nursery.start_soon(region.run_phones)
        await region.sign_up_match(match_id)
        await region.wait_taken(match_id)
        # the match goes live with nothing bowled, and the seed's burst meets it: every answer for it says
        # "Finished" for 3 s (six polls) before the owner has seen it live; then the true status again
        region.replay.inject("wrong_status", fixture_id=match_id, duration_s=3.0)
        region.go_live(match_id)
        await trio.sleep(3.5)
        with trio.fail_after(90):  # stuck in phase "pre" before the fix: the activities never start
            await region.wait_activities(match_id)
        region.play(match_id)
        await region.wait_all_ended(timeout=150)
        dead.extend(await region.dead_tokens_cleaned(timeout=30))

    codes = await region.run(play, within_s=280)  # under pytest-timeout's 300 s
    served = region.replay.status()[match_id]
    assert served["started"], "the match was bowled"
    assert region.missing_key_events() == {}, "every wicket and the end reached every live phone"
    assert region.alerts_shown_twice() == {}
    assert dead == []
    assert all(code == 0 for code in codes.values()), codes
