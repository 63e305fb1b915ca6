"""The prematch job's push-to-start on iOS 18: it names the perspective's broadcast channel the match's owner
recorded on the fixture (``input-push-channel``); older devices, or a match without channels yet, get
``input-push-token``."""

from __future__ import annotations

import json
from typing import Any

from actors.jobs.prematch import PrematchNotifier
from actors.jobs.settings import PrematchSettings
from tests.doubles import Clock, FakeSender
from tests.jobs.prematch_world import (
    MINUTE,
    T0,
    TOPIC,
    follow,
    put_fixture,
    seed_reference,
    token,
)

START = T0 + 20 * MINUTE
CHANNELS = {"neutral": "bmV1dHJhbA==", "39": "dGVhbTM5"}


async def _device(repos: Any, user: str, os_version: str) -> None:
    await repos.devices.register_device(
        user,
        token(user),
        os_version=os_version,
        apns_token=token(user),
        push_to_start_token=token(user, "start"),
    )


async def test_ios18_followers_start_on_the_recorded_channel_older_ones_on_a_token(repos: Any) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    assert await repos.fixtures.swap_broadcast_channels("7", None, CHANNELS)
    await follow(repos, 7, "u1", start=START, team_id="39")
    await follow(repos, 7, "u2", start=START, team_id=None)
    await follow(repos, 7, "u3", start=START, team_id="39")
    await _device(repos, "u1", "18.1")
    await _device(repos, "u2", "18.0")
    await _device(repos, "u3", "17.6")
    sender = FakeSender()
    await PrematchNotifier(repos, sender, PrematchSettings(), topic=TOPIC, clock=Clock(T0)).run_cycle()
    aps = {u: json.loads(sender.to(token(u, "start"))[0].payload)["aps"] for u in ("u1", "u2", "u3")}
    assert aps["u1"]["input-push-channel"] == CHANNELS["39"]
    assert aps["u2"]["input-push-channel"] == CHANNELS["neutral"]
    assert aps["u3"]["input-push-token"] == 1 and "input-push-channel" not in aps["u3"]


async def test_without_recorded_channels_ios18_followers_wait_for_the_owner_unless_told_not_to(
    repos: Any,
) -> None:
    await seed_reference(repos)
    await put_fixture(repos, 7, START)
    await follow(repos, 7, "u1", start=START, team_id="39")
    await follow(repos, 7, "u2", start=START, team_id="39")
    await _device(repos, "u1", "18.1")
    await _device(repos, "u2", "17.6")
    sender = FakeSender()
    await PrematchNotifier(repos, sender, PrematchSettings(), topic=TOPIC, clock=Clock(T0)).run_cycle()
    assert sender.to(token("u1", "start")) == []  # the owner starts it on a channel when it takes the match
    assert sender.to(token("u1"), "alert")  # the prematch alert still goes
    assert json.loads(sender.to(token("u2", "start"))[0].payload)["aps"]["input-push-token"] == 1

    await seed_reference(repos)
    await put_fixture(repos, 8, START)
    await follow(repos, 8, "u3", start=START, team_id="39")
    await _device(repos, "u3", "18.1")
    eager = FakeSender()
    settings = PrematchSettings(ios18_waits_for_channels=False)
    await PrematchNotifier(repos, eager, settings, topic=TOPIC, clock=Clock(T0)).run_cycle()
    aps = json.loads(eager.to(token("u3", "start"))[0].payload)["aps"]
    assert aps["input-push-token"] == 1 and "input-push-channel" not in aps


async def test_the_job_and_the_matchs_owner_never_both_start_a_follower(repos: Any) -> None:
    """They take the same claim (``start:{match}:{user}``): a follower the owner already started gets the
    prematch alert only, and one the job started is not started again by the owner until the hold after
    the start has passed."""
    await seed_reference(repos)
    await put_fixture(repos, 9, START)
    await follow(repos, 9, "u1", start=START, team_id=None)
    await follow(repos, 9, "u2", start=START, team_id=None)
    await _device(repos, "u1", "17.6")
    await _device(repos, "u2", "17.6")
    assert await repos.locks.claim_push_to_starts("9", ["u2"], owner="owner", hold_s=600, now=T0) == ["u2"]
    sender = FakeSender()
    report = await PrematchNotifier(
        repos, sender, PrematchSettings(), topic=TOPIC, clock=Clock(T0)
    ).run_cycle()
    assert len(sender.to(token("u1", "start"))) == 1
    assert sender.to(token("u2", "start")) == []
    assert sender.to(token("u2"), "alert")  # the alert still goes
    assert (report.push_to_start, report.starts_held) == (1, 1)
    # u1 was started 20 minutes before the start: the owner leaves it alone until 10 minutes after it
    locks = repos.locks
    assert await locks.claim_push_to_starts("9", ["u1"], owner="owner", hold_s=600, now=START + 599) == []
    assert await locks.claim_push_to_starts("9", ["u1"], owner="owner", hold_s=600, now=START + 601) == ["u1"]
