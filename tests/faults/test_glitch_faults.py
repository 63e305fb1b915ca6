"""Valid but wrong data from SportMonks, served by the replay server while the real daemon follows a match.

A final status for a few seconds, a corrupted fixture id, implausible totals and an enormous body: each is
injected while the match is under way, and each test checks the whole outcome once it clears (the daemon
stayed up, the match ran to its real end, every seeded session got every standing wicket and one end), plus
what the fault must not have done. The admin socket's argument checks and the replay server's speed bound
are driven the same way, through the daemon's own admin socket.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest
import trio

from daemon.demo.controls import replay_controls
from daemon.runtime.admin.protocol import AdminError
from tests.faults.checks import ask, assert_nothing_lost, assert_state_whole, first_updates
from tests.harness.fault_rig import aps, event_ids

pytestmark = pytest.mark.slow

# Wall seconds before the first ball: the daemon's first look must be pre-match even on a loaded machine, or a
# first-over wicket is taken as history (what these tests check is the glitch, not the start-up race).
START_DELAY_S = 8.0


def ends(rig: Any) -> list[Any]:
    return [d for d in rig.deliveries if d.kind == "end"]


async def test_a_final_status_for_a_few_seconds_ends_nothing_and_costs_nothing(make_rig: Any) -> None:
    async with make_rig(seed=11, start_delay_wall_s=START_DELAY_S) as rig:
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        before = len(rig.deliveries)
        for status in ("Finished", "Aban."):
            rig.replay.inject("wrong_status", value=status, duration_s=2.0)
            await trio.sleep(2.5)
        assert ends(rig) == [], "a final status the fixture did not corroborate ended the match"
        assert len(rig.deliveries) > before, "the match went on while the feed said it was over"
        assert not await rig.is_ended()
        await assert_nothing_lost(rig)
        assert len(ends(rig)) == 1  # the real end, once
        for token, records in rig.accepted_by_token().items():
            assert sum(aps(r).get("event") == "end" for r in records) == 1, token


async def test_a_match_ended_wrongly_is_taken_again_while_the_feed_shows_it_live(make_rig: Any) -> None:
    # The doubt is confirmed quickly here (3 polls over 1 s) so that a 4-s glitch does end the match; the feed
    # stalls meanwhile, so no new ball contradicts the wrong status (new balls would keep the match on).
    extra = {"engine": {"confirm_polls": 3, "confirm_s": 1.0}}
    async with make_rig(seed=12, extra=extra, start_delay_wall_s=START_DELAY_S) as rig:
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        rig.replay.inject("stall", duration_s=4.0)
        rig.replay.inject("wrong_status", value="Finished", duration_s=4.0)
        await rig.wait_for(lambda: bool(ends(rig)), 30, "the glitch confirmed as an end")
        wrong_end = len(rig.deliveries)
        item = await rig.match_item()
        epoch = int(item["ownerEpoch"])
        await rig.wait_for(
            lambda: any(d.kind == "update" for d in rig.deliveries[wrong_end:]),
            60,
            "the match taken again and updated",
        )
        item = await rig.match_item()
        assert int(item["ownerEpoch"]) > epoch and item["status"] in ("active", "ended")
        assert await rig.wait_ended(120), "the real end never came"
        await assert_state_whole(rig)  # the final record is the tape's end, not the glitch's
        real_end = ends(rig)[-1]
        assert len(ends(rig)) == 2 and real_end.event_types and "match_end" in real_end.event_types


class App:
    """The app on the start followers' phones, as far as this test needs it: a push-to-start the APNs server
    accepted starts a Live Activity, whose fresh update token is registered as the session (what
    ``POST /user/activity/{matchId}`` stores)."""

    def __init__(self, rig: Any) -> None:
        self.rig = rig
        self.seen = 0
        self.starts: dict[str, list[float]] = {}  # user -> when each push-to-start was accepted (wall)
        self.sessions: dict[str, list[tuple[str, float]]] = {}  # user -> (update token, registered at)

    async def run(self) -> None:
        while True:
            records = self.rig.apns.records  # grows while this loop awaits: read up to its end each time
            while self.seen < len(records):
                record = records[self.seen]
                self.seen += 1
                user = self.rig.start_tokens.get(record.get("token"))
                if user is None or record.get("status") != 200 or aps(record).get("event") != "start":
                    continue
                self.starts.setdefault(user, []).append(time.time())
                token = secrets.token_hex(32)
                n = len(self.sessions.get(user, []))
                await self.rig.repos.live_activities.register_la_session(
                    self.rig.match_id, user, f"{user}-a{n}", token
                )
                self.rig.tokens[token] = f"{user}#{user}-a{n}"
                self.sessions.setdefault(user, []).append((token, time.time()))
            await trio.sleep(0.05)


async def test_followers_of_a_match_ended_wrongly_are_started_again_and_get_its_later_key_events(
    make_rig: Any,
) -> None:
    extra = {
        "engine": {"confirm_polls": 3, "confirm_s": 1.0},  # an 8-s glitch is taken as the end
        "match": {"heal_every_s": 0.5, "follower_refresh_s": 0.5, "session_refresh_s": 0.5},
        # longer than the glitch (8 s) and the retake, far shorter than the default's 30 min
        "orchestrator": {"follows_grace_s": 15.0},
    }
    async with make_rig(
        seed=12, speed=100.0, followers=0, start_followers=3, extra=extra, start_delay_wall_s=START_DELAY_S
    ) as rig:
        app = App(rig)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(app.run)
            users = set(rig.start_tokens.values())
            await rig.wait_for(lambda: set(app.sessions) == users, 60, "every follower's activity started")
            await rig.wait_for(first_updates(rig, 3), 60, "the match under way")
            rig.replay.inject("stall", duration_s=8.0)  # no new ball contradicts the wrong end meanwhile
            rig.replay.inject("wrong_status", value="Finished", duration_s=8.0)
            await rig.wait_for(lambda: bool(ends(rig)), 30, "the glitch confirmed as an end")
            wrong_end = time.time()
            follows = await rig.repos.follows.get_followers_for_match(rig.match_id)
            assert {f["userId"] for f in follows} == users, "the end removed the follows at once"
            await rig.wait_for(
                lambda: all(any(t > wrong_end for t in app.starts.get(u, [])) for u in users),
                60,
                "a push-to-start to every follower after the match was taken again",
            )
            assert await rig.wait_ended(180), "the real end never came"
            by_token = rig.accepted_by_token()
            final = rig.replay.tape(rig.match_id).fixture_at(len(rig.replay.tape(rig.match_id)))
            wickets = [
                (
                    f"{b['scoreboard']}:{b['batsmanout_id']}",
                    rig.replay.ball_id_served_at(rig.match_id, b["id"]),
                )
                for b in final.get("balls") or []
                if (b.get("score") or {}).get("is_wicket") and b.get("batsmanout_id")
            ]
            for user in users:
                token, registered = app.sessions[user][-1]
                assert registered > wrong_end
                got = set().union(*(event_ids(r) for r in by_token.get(token, [])))
                later = {w for w, at in wickets if at is not None and at > registered + 2.0}
                assert later, "no wicket after the restart: this check would prove nothing"
                assert {("wicket", w) for w in later} <= got, (user, sorted(later), sorted(got))
                assert any(aps(r).get("event") == "end" for r in by_token.get(token, [])), user
            # The real end's grace passes with the feed no longer showing the match: the follows go.
            with trio.fail_after(45):
                while not await _follows_removed(rig):
                    await trio.sleep(0.25)
            nursery.cancel_scope.cancel()


async def _follows_removed(rig: Any) -> bool:
    """The follows are gone and the ended record says so (the grace passed)."""
    item = await rig.match_item()
    follows = await rig.repos.follows.get_followers_for_match(rig.match_id)
    return not follows and bool(item and item.get("followsRemovedAt"))


async def test_a_corrupted_fixture_id_is_released_after_bounded_tries(make_rig: Any) -> None:
    extra = {"feed": {"not_found_max_tries": 3, "not_found_backoff_s": 0.2, "off_livescores_cadence_s": 0.2}}
    async with make_rig(seed=13, extra=extra, start_delay_wall_s=START_DELAY_S) as rig:
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        fixtures_before = rig.daemon.client.calls.get("fixtures", {}).get("error", 0)
        for endpoint in ("livescores", "fixtures"):  # both live lists show the corrupted id for a while
            rig.replay.inject("changed_id", value=123, endpoint=endpoint, duration_s=2.5)
        await rig.wait_for(lambda: rig.daemon.feed.is_released("123"), 30, "fixture 123 released")
        await rig.wait_for(lambda: "123" not in rig.daemon.orchestrator.owned, 10, "its actor gone")
        record = await rig.repos.active_matches.get_active_match_state("123")
        assert record is not None and record["status"] == "idle"
        await assert_nothing_lost(rig)  # the real match went on under its own id
        errors = rig.daemon.client.calls.get("fixtures", {}).get("error", 0) - fixtures_before
        assert errors == 3, f"/fixtures/123 was asked {errors} times"
        assert "123" not in rig.daemon.orchestrator.owned


async def test_a_fixture_listed_that_never_shows_play_is_released_after_bounded_backed_off_tries(
    make_rig: Any,
) -> None:
    # The rule's clock shortened: three looks over at least 3 s, the by-id period doubling from 0.2 s to 1 s.
    extra = {
        "feed": {
            "ghost_max_tries": 3,
            "ghost_min_s": 3.0,
            "ghost_backoff_max_s": 1.0,
            "off_livescores_cadence_s": 0.2,
        }
    }
    async with make_rig(seed=17, extra=extra, start_delay_wall_s=START_DELAY_S) as rig:
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        by_id_before = rig.replay.requests_served.get("fixture", 0)
        # Listed in both live lists for 2.5 s: time for a loaded orchestrator's full cycle to see it, and
        # shorter than the rule's 3 s, so its release comes from a look by id after the listing ended.
        rig.replay.inject("ghost", fixture_id="4242", duration_s=2.5)
        await rig.wait_for(lambda: "4242" in rig.daemon.orchestrator.owned, 10, "the ghost taken")
        await rig.wait_for(lambda: rig.daemon.feed.is_released("4242"), 30, "fixture 4242 released")
        await rig.wait_for(lambda: "4242" not in rig.daemon.orchestrator.owned, 10, "its actor gone")
        record = await rig.repos.active_matches.get_active_match_state("4242")
        assert record is not None and record["status"] == "idle"  # let go, nothing ended
        calls = rig.replay.requests_served.get("fixture", 0) - by_id_before
        await trio.sleep(3.0)
        assert rig.replay.requests_served.get("fixture", 0) - by_id_before == calls, (
            "polled after its release"
        )
        # Listed looks count too; by id the period doubles from 0.2 s to 1 s until 3 s have passed: at most 6.
        assert 1 <= calls <= 6, f"/fixtures/4242 was asked {calls} times"
        await assert_nothing_lost(rig)  # the real match went on untouched
        assert "4242" not in rig.daemon.orchestrator.owned


@pytest.mark.parametrize(
    ("field", "value"),
    [("runs.score", -5), ("runs.score", 10**40), ("runs.overs", 1e300), ("runs.wickets", 11)],
    ids=["negative-score", "score-10e40", "overs-1e300", "eleven-wickets"],
)
async def test_implausible_totals_are_skipped_and_never_shown(make_rig: Any, field: str, value: Any) -> None:
    async with make_rig(seed=14, start_delay_wall_s=START_DELAY_S) as rig:
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        rig.replay.inject("implausible", field=field, value=value, duration_s=1.5)
        await trio.sleep(2.0)
        await assert_nothing_lost(rig)
        shown = {d.score for d in rig.deliveries}
        assert not any(s.startswith("-") or len(s) > 9 for s in shown), sorted(shown)
        for records in rig.accepted_by_token().values():
            for record in records:
                state = aps(record).get("content-state") or {}
                assert "-" not in str(state.get("score", "")) and "e+" not in str(state.get("overs", ""))


async def test_an_enormous_body_is_cut_off_and_nothing_is_lost(make_rig: Any) -> None:
    extra = {"sportmonks": {"max_body_bytes": 4 * 1024 * 1024, "breaker_failure_threshold": 50}}
    async with make_rig(seed=15, extra=extra, start_delay_wall_s=START_DELAY_S) as rig:
        await rig.wait_for(first_updates(rig, 6), 60, "the match under way")
        rig.replay.inject("huge_body", size_bytes=16 * 1024 * 1024, endpoint="livescores", count=3)
        await rig.wait_for(
            lambda: rig.daemon.client.calls["livescores"].get("error", 0) >= 3,
            30,
            "the three huge bodies cut off",
        )
        assert not rig.replay.faults()
        await assert_nothing_lost(rig)


async def test_admin_commands_refuse_wrong_arguments_and_the_replay_refuses_an_overflowing_speed(
    make_rig: Any,
) -> None:
    async with make_rig(seed=16, start_delay_wall_s=START_DELAY_S) as rig:
        await rig.wait_for(first_updates(rig, 3), 60, "the match under way")
        socket_path = rig.daemon.config.admin.socket_path
        for line, error in [
            (b"drain now\n", "usage: drain"),
            (b'{"cmd": "match", "args": [""]}\n', "expected a numeric SportMonks fixture id"),
            (b"match 1 2\n", "usage: match MATCH_ID"),
            (b"status extra\n", "usage: status"),
            (b"replay stop now\n", "usage: replay stop"),
            (b"replay speed 1e308\n", "at most"),
        ]:
            answer = await ask(socket_path, line)
            assert answer["ok"] is False and error in answer["error"], (line, answer)
        assert not rig.daemon.stopping, "a drain with arguments drained the instance"
        with pytest.raises(AdminError, match="replay server answered 400"):
            await replay_controls(rig.daemon.config.sportmonks.base_url)["replay"](["speed", "inf"])
        await assert_nothing_lost(rig)  # the replay clock still runs: the match reaches its end
