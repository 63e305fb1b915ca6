"""The feed's faults seen from the phones: an endpoint that lags, a 429, a wrong end the balls contradict, a
ball from the future, a match left out of /livescores.

One in-process daemon behind the fault rig's proxies, the replay server's fault modes doing the damage; each
test judges what the seeded tokens were sent, and what the fault must not have caused.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.faults.checks import SHORT_OVERS, assert_nothing_lost, first_updates
from tests.faults.test_owner_death import duplicate_alerts
from tests.harness.fault_rig import FaultRig, aps, event_ids
from tests.harness.records import ShownOrder

pytestmark = pytest.mark.slow

START_DELAY_S = 8.0  # the daemon's first look is pre-match even on a loaded machine


def ends(rig: FaultRig) -> list[Any]:
    return [d for d in rig.deliveries if d.kind == "end"]


def phase_flips(rig: FaultRig) -> set[str]:
    """The sessions whose token was shown a phase that went back (a status flip on the phone)."""
    order = ShownOrder()
    for token, records in rig.accepted_by_token().items():
        for r in records:
            state = aps(r).get("content-state")
            if state:
                order.see(token, int(aps(r).get("timestamp") or 0), state)
    return {rig.tokens[token] for token in order.flipped}


def wickets_sent(rig: FaultRig, records: list[dict[str, Any]]) -> set[str]:
    return {
        subject
        for r in records
        if r.get("status") == 200
        for kind, subject in event_ids(r)
        if kind == "wicket"
    }


async def test_an_endpoint_that_lags_withdraws_no_ball_repeats_no_wicket_and_flips_no_status(
    make_rig: Any,
) -> None:
    """/livescores answers what was true a second ago (400 match-seconds: several balls) for most of the
    match, /fixtures answers what is true now, the feed reading them in turn."""
    async with make_rig(seed=21, start_delay_wall_s=START_DELAY_S) as rig:
        await rig.wait_for(first_updates(rig, 9), 60, "the match under way")
        rig.replay.inject("lag", endpoint="livescores", lag_s=1.0, duration_s=60.0)
        await assert_nothing_lost(rig)
        assert duplicate_alerts(rig) == {}, "a wicket announced twice"
        assert phase_flips(rig) == set(), "a status flipped back on a phone"
        assert len(ends(rig)) == 1
        held = rig.daemon.feed.stats()["held"]
        assert held.get("behind", 0) > 0, (
            "the lagging endpoint never answered behind: the test proved nothing"
        )


async def test_a_429_on_one_endpoint_moves_the_polls_to_the_other_and_loses_nothing(make_rig: Any) -> None:
    async with make_rig(seed=22, overs=SHORT_OVERS, start_delay_wall_s=START_DELAY_S) as rig:
        await rig.wait_for(first_updates(rig, 9), 60, "the match under way")
        rig.replay.inject("429", endpoint="livescores", retry_after=2, duration_s=4.0)
        await trio.sleep(4.5)
        polls = rig.daemon.feed.stats()["endpoints"]
        assert polls["livescores"]["polls"].get("failover", 0) >= 1
        assert (
            polls["livescores"]["polls"].get("failed", 0) == 0
            and polls["fixtures"]["polls"].get("failed", 0) == 0
        )
        await assert_nothing_lost(rig)
        assert duplicate_alerts(rig) == {}


async def test_a_wrong_end_while_balls_keep_coming_never_ends_the_match(make_rig: Any) -> None:
    """SportMonks shows "Finished" for six seconds (sixteen times the confirmation, dozens of balls at this
    speed) while the balls go on in the same answers: the match must not end."""
    extra = {"engine": {"confirm_polls": 3, "confirm_s": 1.0}}  # without the balls' say, 1 s would end it
    async with make_rig(seed=23, extra=extra, start_delay_wall_s=START_DELAY_S) as rig:
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        cursor = rig.replay.status()[rig.match_id]["cursor"]
        rig.replay.inject("wrong_status", value="Finished", duration_s=6.0)
        await trio.sleep(6.5)
        assert rig.replay.status()[rig.match_id]["cursor"] > cursor + 10, "the balls did not go on meanwhile"
        assert ends(rig) == [], "a final status the balls contradicted ended the match"
        await assert_nothing_lost(rig)
        assert len(ends(rig)) == 1
        for token, records in rig.accepted_by_token().items():
            assert sum(aps(r).get("event") == "end" for r in records) == 1, token


async def test_a_ball_from_the_future_sends_no_false_wicket(make_rig: Any) -> None:
    """For half a second (several polls) every answer carries the newest ball copied three overs ahead, made a
    catch, with a new id: no phone is told of a wicket the match has not had."""
    async with make_rig(seed=24, overs=SHORT_OVERS, start_delay_wall_s=START_DELAY_S) as rig:
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        before = len(rig.apns.records)
        rig.replay.inject("future_ball", fixture_id=rig.match_id, duration_s=0.5)
        await trio.sleep(1.5)
        sent = wickets_sent(rig, rig.apns.records[before:])
        served = rig.served_wickets()
        assert sent <= served, f"wickets the match has not had: {sorted(sent - served)}"
        await assert_nothing_lost(rig)
        assert duplicate_alerts(rig) == {}


async def test_a_match_left_out_of_livescores_is_read_by_id_at_the_live_cadence(make_rig: Any) -> None:
    """With /livescores alone (the list it left), the match under way is read through /fixtures/{id} at the
    live cadence (0.2 s here), not every 30 s: its wickets are not held back until it is listed again. The
    match stays unlisted 7 s; the wickets served in its first 4 s must reach every phone before it is listed
    again (2.5 s later: a loaded machine's tick can take two), so only the reads by id can have brought them."""
    extra = {"feed": {"list_endpoints": ["livescores"]}}
    async with make_rig(seed=25, overs=SHORT_OVERS, extra=extra, start_delay_wall_s=START_DELAY_S) as rig:
        await rig.wait_for(first_updates(rig, 9), 60, "the match under way")  # three ticks to each token
        by_id = rig.replay.requests_served.get("fixture", 0)
        rig.replay.inject("unlisted", endpoint="livescores", fixture_id=rig.match_id, duration_s=7.0)
        await trio.sleep(4.0)
        reads = rig.replay.requests_served.get("fixture", 0) - by_id
        assert reads >= 8, f"{reads} reads by id in 4 s: not at the live cadence"
        served = rig.served_wickets()
        await trio.sleep(2.5)  # still unlisted
        missing = {v: w & served for v, w in rig.missing_wickets_so_far().items() if w & served}
        assert missing == {}, f"wickets served while unlisted and not delivered while unlisted: {missing}"
        await assert_nothing_lost(rig)
