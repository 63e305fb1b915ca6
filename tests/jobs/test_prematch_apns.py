"""PrematchNotifier end to end: moto's DynamoDB server, the project's ApnsSender, the project's APNs server,
and the token janitor, wired as the daemon wires them. (The crash and the other defects run through the same
parts in ``test_prematch_defects.py``.)

What the APNs server recorded is what a device received; the device view (``alerts_shown``) then counts
notifications the way iOS shows them (one per apns-collapse-id).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from actors.janitor import Janitor
from actors.jobs.prematch import PrematchNotifier
from actors.jobs.settings import PrematchSettings
from tests.doubles import Clock
from tests.jobs.prematch_world import (
    MINUTE,
    T0,
    TOPIC,
    ApnsWorld,
    alerts_shown,
    follow,
    put_fixture,
    register,
    seed_reference,
    token,
)

START = T0 + 20 * MINUTE


@pytest.fixture
async def apns(
    nursery: trio.Nursery, repos: Any, start_apns: Callable[..., Awaitable[ApnsWorld]]
) -> ApnsWorld:
    """APNs and the sender wired as in production: rejected tokens also go to the token janitor."""
    janitor = Janitor(repos)
    await nursery.start(janitor.run)
    return await start_apns(janitor=janitor.send_channel)


def notifier(repos: Any, sender: Any, clock: Clock, **settings: Any) -> PrematchNotifier:
    return PrematchNotifier(repos, sender, PrematchSettings(**settings), topic=TOPIC, clock=clock)


async def test_alerts_and_push_to_start_reach_apns_and_dead_tokens_are_cleaned(
    repos: Any, apns: ApnsWorld
) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    for user in ("u1", "u2", "u3"):
        await follow(repos, 7, user, start=START)
        await register(repos, user)
    apns.server.set_token_status(token("u2"), 410, "Unregistered")
    apns.server.set_token_status(token("u3", "start"), 400, "BadDeviceToken")

    report = await notifier(repos, apns.sender, Clock(T0)).run_cycle()

    assert (report.claimed, report.accepted, report.rejected, report.tokens_removed) == (3, 2, 1, 2)
    by_token = {(r["token"], r["headers"]["apns-push-type"]): r for r in apns.server.records}
    alert = by_token[(token("u1"), "alert")]
    assert alert["status"] == 200 and alert["headers"]["apns-topic"] == TOPIC
    assert alert["headers"]["apns-collapse-id"] == "prematch:7:2027-01-15T08:20:00Z"
    assert alert["headers"]["apns-priority"] == "10"
    assert alert["headers"]["apns-expiration"] == str(int(START + 600))
    assert alert["payload"]["aps"]["alert"]["title"] == "Pakistan v Sri Lanka"
    start = by_token[(token("u1", "start"), "liveactivity")]
    assert start["status"] == 200 and start["headers"]["apns-topic"] == TOPIC + ".push-type.liveactivity"
    assert start["payload"]["aps"]["event"] == "start"
    assert by_token[(token("u2"), "alert")]["status"] == 410
    assert by_token[(token("u3", "start"), "liveactivity")]["status"] == 400
    # Defect 1: the dead alert token's device record is gone; the dead push-to-start token alone is removed.
    assert await repos.devices.get_device_for_user("u2") is None
    u3 = await repos.devices.get_device_for_user("u3")
    assert u3 is not None and "pushToStartToken" not in u3
    follows = {f["userId"]: f for f in await repos.follows.get_followers_for_match("7")}
    assert {u: f["prematchResult"] for u, f in follows.items()} == {
        "u1": "accepted",
        "u2": "rejected",
        "u3": "accepted",
    }


async def test_late_follower_through_the_real_sender(repos: Any, apns: ApnsWorld) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    await follow(repos, 7, "u1", start=START)
    await register(repos, "u1", push_to_start=False)
    clock = Clock(T0)
    job = notifier(repos, apns.sender, clock)
    await job.run_cycle()
    await follow(repos, 7, "late", start=START)
    await register(repos, "late", push_to_start=False)
    clock.now += MINUTE
    await job.run_cycle()
    delivered = apns.delivered()
    assert alerts_shown(delivered, token("u1")) == 1 and alerts_shown(delivered, token("late")) == 1
    assert len(apns.server.records) == 2
    assert apns.server.records[1]["payload"]["aps"]["alert"]["body"] == "1st T20I starts in 19 min"
