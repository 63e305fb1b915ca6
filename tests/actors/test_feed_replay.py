"""The Feed against the project's replay server (an independent SportMonks peer) over real loopback HTTP:
every replayed tick validates, and the match's end is seen through /fixtures/{id} once it leaves /livescores."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from actors.feed import FeedActor, FeedUpdate
from daemon.sportmonks.client import SportMonksClient
from daemon.sportmonks.settings import FeedSettings, SportMonksSettings

replay_server = pytest.importorskip(
    "daemon.replay.server", reason="the replay server is not in this checkout"
)
replay_tape = pytest.importorskip("daemon.replay.tape", reason="the replay tapes are not in this checkout")

TAPE = Path(__file__).resolve().parents[2] / "daemon" / "replay" / "tapes" / "t20-demo.json"


@pytest.mark.skipif(not TAPE.is_file(), reason=f"demo tape {TAPE.name} not found")
async def test_feed_follows_a_replayed_match_to_its_end() -> None:
    tape = replay_tape.load_tape(TAPE)
    server = replay_server.ReplayServer([tape], ms_per_ball=15, innings_break_s=0.3, api_token="tok")
    updates: list[FeedUpdate] = []
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        client = SportMonksClient(
            SportMonksSettings(
                base_url=f"http://127.0.0.1:{port}/api/v2.0",
                api_token="tok",
                max_retries=1,
                hourly_budget=1_000_000,
            )
        )
        feed = FeedActor(
            client,
            FeedSettings(livescores_cadence_s=0.1, marquee_cadence_s=0.1, off_livescores_cadence_s=0.5),
        )
        await nursery.start(feed.run)
        channel = feed.subscribe(str(tape.fixture_id), marquee=True)
        with trio.fail_after(60):
            async for update in channel:
                updates.append(update)
                if not update.in_livescores and update.fixture and update.fixture["status"] == "Finished":
                    break
        nursery.cancel_scope.cancel()
    await client.aclose()  # after the feed stopped: it owns no client, so the test closes it
    assert all(u.error is None for u in updates), [u.error for u in updates if u.error][:3]
    live = [u for u in updates if u.in_livescores]
    assert live and all("balls" in u.fixture for u in live)  # type: ignore[operator]
    assert {u.source for u in live} == {"livescores", "fixtures"}  # both live lists, in turn
    ball_counts = [len(u.fixture["balls"]) for u in live]  # type: ignore[index]
    assert ball_counts[-1] > ball_counts[0]  # not monotonic: the tape deletes a few balls, as SportMonks does
    final = updates[-1]
    assert final.source == "fixture" and final.fixture is not None
    assert final.fixture["winner_team_id"] is not None and final.fixture["note"]
    assert len(final.fixture["balls"]) >= ball_counts[-1]  # the marquee include set, balls and all


@pytest.mark.skipif(not TAPE.is_file(), reason=f"demo tape {TAPE.name} not found")
async def test_a_fixture_that_answers_404_is_released_after_bounded_tries_with_backoff() -> None:
    tape = replay_tape.load_tape(TAPE)
    server = replay_server.ReplayServer([tape], ms_per_ball=1000, api_token="tok")
    updates: list[FeedUpdate] = []
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        client = SportMonksClient(
            SportMonksSettings(
                base_url=f"http://127.0.0.1:{port}/api/v2.0",
                api_token="tok",
                max_retries=1,
                hourly_budget=1_000_000,
            )
        )
        settings = FeedSettings(
            list_endpoints=["livescores"],
            livescores_cadence_s=0.05,
            off_livescores_cadence_s=0.05,
            not_found_max_tries=3,
            not_found_backoff_s=0.1,
            not_found_release_s=600,
        )
        feed = FeedActor(client, settings)
        await nursery.start(feed.run)
        channel = feed.subscribe(
            "123", marquee=False
        )  # /livescores lists it no more; SportMonks knows no 123
        with trio.fail_after(30):
            async for update in channel:
                updates.append(update)
                if update.released:
                    break
        await trio.sleep(1.0)  # 20 more livescores cadences: no more calls for it
        nursery.cancel_scope.cancel()
    await client.aclose()
    assert server.requests_served.get("fixture") == 3  # three tries in all, each counted once
    assert client.calls["fixtures"]["error"] == 3
    assert feed.is_released("123") and not feed.is_released(str(tape.fixture_id))
    assert updates[-1].fixture is None and "404 3 times" in (updates[-1].error or "")
