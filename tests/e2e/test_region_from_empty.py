"""Day one in a new region: empty tables, everything entering through production's own doors, each service
role under its own access key (``tests/harness/region.py``).

The engines' syncs create the league, teams, team-seasons and fixtures from the replay server; the app users
find their match in the league's schedule through the API, register their devices and follow it; the
orchestrator takes each match from the fixtures, iOS 18 phones are started on the match's broadcast channels,
older ones on tokens, and the tokens APNs answers 410 are cleaned. The test DynamoDB records every permission
each role used: the policy gate (``tests/harness/aws_policy_gate.py``) holds the template's role policies to
it, so every grant a fresh region needs is exercised here.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from tests.harness.region import Region, region_tapes

pytestmark = pytest.mark.slow


async def test_a_region_from_empty_tables_serves_every_live_device_through_its_own_doors(
    make_region: Callable[..., Region],
) -> None:
    region = make_region(tapes=region_tapes(2, seed=21), engines=2)
    dead: list[str] = []

    async def play(nursery: trio.Nursery) -> None:
        await region.sign_up()
        nursery.start_soon(region.run_phones)
        async with trio.open_nursery() as starts:
            for match_id in region.crowds:
                starts.start_soon(region.play_when_ready, match_id)
        await region.wait_all_ended(timeout=180)
        dead.extend(await region.dead_tokens_cleaned(timeout=30))

    # under pytest-timeout's 300 s: a run slowed past it fails in run(), cleanly, not by a signal
    codes = await region.run(play, within_s=280)

    # the league's schedule, read by league and date range through the API, listed every match
    for crowd in region.crowds.values():
        assert crowd.listed["leagueCode"] == crowd.tape.league.code
        assert crowd.listed["status"] == "NS"
    # iOS 18 phones were started on the match's broadcast channels, older ones on tokens
    paths = region.start_paths()
    for crowd in region.crowds.values():
        for spec, phone in crowd.phones():
            if spec.starts:
                assert paths.get(phone.user_id), f"{phone.user_id}: no push-to-start reached it"
                assert set(paths[phone.user_id]) == {"channel" if spec.on_channels else "token"}
            else:
                assert phone.user_id not in paths
    # every wicket that stands and the end reached every live device
    assert region.missing_key_events() == {}
    # the tokens APNs answered 410 are gone from DynamoDB (or their session suspended)
    assert dead == []
    assert all(code == 0 for code in codes.values()), codes
