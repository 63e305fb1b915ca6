"""Test scaffolding for the prematch tests (tests only): seeding DynamoDB, a recording sender, and the device's
view of what arrived.

``FakeSender`` has the ``ApnsSender`` interface the notifier uses (``await send(push)``, one
``PushResult`` per push on ``push.reply_to``) and answers as APNs would for scripted tokens, for the fast
cycle tests. ``start_apns_world`` runs the real thing: the project's APNs test server and ``ApnsSender``;
``SendWatch`` wraps a sender to stop a notifier "between sending and recording".

``Device`` is what a phone shows: an alert with an ``apns-collapse-id`` replaces an earlier one with the
same id instead of adding a second; a push-to-start always starts another Live Activity.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import trio

from actors.jobs.convert import fixture_item
from daemon.apns.types import Push
from tests.harness import seed
from tests.jobs.sportmonks_data import make_fixture

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
MINUTE = 60.0
TOPIC = "com.sightscreen.ios"


def token(user: str, kind: str = "alert") -> str:
    """A 64-hex-digit token per user and kind, as APNs tokens look."""
    seed = f"{kind}:{user}".encode().hex()
    return (seed * 4)[:64]


async def seed_reference(repos: Any) -> None:
    await seed.seed_reference(
        repos,
        league_id="3",
        league_name="Twenty20 International",
        league_code="T20I",
        teams=[("1", "Pakistan", "PAK", None), ("39", "Sri Lanka", "SL", None)],
    )


async def put_fixture(repos: Any, match_id: int, start: float, **kwargs: Any) -> dict[str, Any]:
    item = fixture_item(make_fixture(match_id, start, **kwargs), league_codes={"3": "T20I", "5": "BBL"})
    await repos.fixtures.batch_write_fixtures([item])
    return item


async def follow(repos: Any, match_id: int, user: str, *, start: float, team_id: str | None = "1") -> None:
    await seed.seed_followers(
        repos, str(match_id), [seed.Follower(user, team_id, "d0")], expires_at=start + seed.FOLLOW_TTL_S
    )


async def register(repos: Any, user: str, *, push_to_start: bool = True) -> None:
    device = seed.Follower(
        user,
        None,
        "d0",
        device_token=token(user),
        push_to_start_token=token(user, "start") if push_to_start else None,
    )
    await seed.seed_devices(repos, [device])


@dataclass(frozen=True)
class Delivered:
    """One push as the device sees it (from a recording sender or the APNs test server's records)."""

    token: str
    push_type: str
    collapse_id: str | None


def alerts_shown(delivered: Iterable[Delivered], tok: str) -> int:
    """Notifications on the device: same collapse id = one notification (the later replaces the earlier)."""
    shown = 0
    ids: set[str] = set()
    for d in delivered:
        if d.token != tok or d.push_type != "alert":
            continue
        if d.collapse_id is None:
            shown += 1
        elif d.collapse_id not in ids:
            ids.add(d.collapse_id)
            shown += 1
    return shown


def activities_started(delivered: Iterable[Delivered], tok: str) -> int:
    return sum(1 for d in delivered if d.token == tok and d.push_type == "liveactivity")


# --- the project's APNs server + sender, as a device's view of the world -------------------------------

TEAM_ID = "TEAM000001"


@dataclass
class ApnsWorld:
    """One APNs (the project's test server) and the daemon's sender talking to it."""

    server: Any
    sender: Any

    def delivered(self) -> list[Delivered]:
        """What reached devices: every request APNs accepted."""
        return [
            Delivered(
                r["token"], r["headers"].get("apns-push-type", ""), r["headers"].get("apns-collapse-id")
            )
            for r in self.server.records
            if r["status"] == 200
        ]


async def start_apns_world(nursery: trio.Nursery, *, janitor: Any = None) -> ApnsWorld:
    from actors.sender import ApnsSender
    from daemon.apns.certs import generate_signing_key
    from daemon.apns.server import ApnsTestServer
    from daemon.apns.settings import ApnsSettings

    key = generate_signing_key("KEY0000001")
    server = ApnsTestServer(team_id=TEAM_ID, keys={key.key_id: key.public_pem}, topics=[TOPIC])
    await nursery.start(server.serve)
    settings = ApnsSettings(
        url=server.url,
        team_id=TEAM_ID,
        key_id=key.key_id,
        private_key=key.private_pem,
        topic=TOPIC,
        connections=1,
        request_timeout_s=5.0,
        max_retries=2,
        retry_backoff_s=0.01,
        retry_backoff_max_s=0.05,
        reconnect_backoff_s=0.01,
        reconnect_backoff_max_s=0.1,
        connect_timeout_s=5.0,
    )
    sender = ApnsSender(settings, janitor=janitor, ssl_context=server.ssl_context_for_clients())
    await nursery.start(sender.run)
    return ApnsWorld(server, sender)


class SendWatch:
    """Forwards pushes to a real sender and notes each one handed over; ``block`` makes ``send`` hang before
    forwarding (a process that dies before its push leaves)."""

    def __init__(self, sender: Any) -> None:
        self.sender = sender
        self.handed: list[Push] = []
        self.block = False
        self.blocked = trio.Event()

    async def send(self, push: Push) -> None:
        if self.block:
            self.blocked.set()
            await trio.sleep_forever()
        await self.sender.send(push)
        self.handed.append(push)

    def kinds(self) -> list[str]:
        return [p.kind for p in self.handed]
