"""iOS 18 broadcast channels in the match actor: the real sender against the project's APNs server (its
management host, its broadcasts fanned out to simulated devices subscribed to channels) and the real
repositories on moto's server.

Covered: a match's channels created (policy 0) before its first push-to-start, recorded on the fixture and
reused after a restart; iOS 18 followers started with ``input-push-channel`` and older ones with
``input-push-token``; each tick one broadcast per perspective with channel sessions plus the per-token pushes,
every device on either path seeing every key event; channels deleted after the end; a channel APNs no longer
knows recreated, recorded and re-announced; the channel limit falling back to tokens; the sweep of leaks; two
owners racing to create never leaving two channels per perspective."""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from actors.channels import ChannelSweeper, MatchChannels
from actors.delivery import Delivery
from actors.match import MatchActor
from actors.sender import ApnsSender
from daemon.apns.certs import SigningKeyPair
from daemon.apns.server import ApnsTestServer
from daemon.cricket.detectors import KeyEvent
from daemon.cricket.engine import TickResult
from daemon.cricket.state import MatchState
from daemon.store.locks import match_lock_key
from tests.actors.match_helpers import live, make_match_actor, take_lease
from tests.actors.test_sender import sender_settings
from tests.apns.conftest import BUNDLE_ID

StartServer = Callable[..., Awaitable[ApnsTestServer]]
MATCH = "500"
DISPLAY = {
    "neutral": {"title": "A v B", "subtitle": "live", "score": "10/0", "overs": "1.0"},
    "7": {"title": "A v B", "subtitle": "A batting", "score": "10/0", "overs": "1.0"},
    "8": {"title": "A v B", "subtitle": "B bowling", "score": "10/0", "overs": "1.0"},
}
# user -> (team, iOS version)
FOLLOWERS = {"u1": ("7", "18.1"), "u2": ("8", "18.0"), "u3": ("7", "17.5"), "u4": ("8", "17.2")}


class Rig:
    """The APNs server (push + management), a sender, the repositories, and the simulated phones."""

    def __init__(self, server: ApnsTestServer, sender: ApnsSender, repos: Any) -> None:
        self.server = server
        self.sender = sender
        self.repos = repos
        self.update_tokens: dict[str, str] = {}  # user -> the update token of its token session
        self.started: dict[str, dict[str, Any]] = {}  # user -> the aps of its last start

    async def actor(
        self, epoch: int = 1, on_delivery: Callable[[Delivery], None] | None = None, **settings: Any
    ) -> MatchActor:
        """An owner of the match (a successor with a higher ``epoch`` takes the lock once the last let go)."""
        if epoch > 1:
            await self.repos.locks.release(match_lock_key(MATCH), "me")
        actor = make_match_actor(
            MATCH,
            self.repos,
            self.sender,
            epoch=epoch,
            channel_requests=self.sender.channels,
            topic=BUNDLE_ID,
            on_delivery=on_delivery,
            **{"push_to_start_min_interval_s": 600, **settings},
        )
        await take_lease(actor)
        live(actor, {k: dict(v) for k, v in DISPLAY.items()})
        return actor

    async def phones_start(self) -> None:
        """Each phone a push-to-start reached starts its activity and registers its session, as iOS and the
        app do: on the channel the start named, else with a fresh update token."""
        by_token = {f"{u:0<64}".replace("u", "a")[:64]: u for u in FOLLOWERS}
        for record in self.server.records:
            aps = (record.get("payload") or {}).get("aps") or {}
            user = by_token.get(record["token"])
            if aps.get("event") != "start" or user is None or record["status"] != 200:
                continue
            self.started[user] = aps
            channel = aps.get("input-push-channel")
            if channel:
                self.server.subscribe(user, channel)
                await self.repos.live_activities.register_la_session(
                    MATCH, user, "phone", None, channel_id=channel
                )
            else:
                token = self.update_tokens.setdefault(user, secrets.token_hex(32))
                await self.repos.live_activities.register_la_session(MATCH, user, "phone", token)

    def seen(self, user: str) -> list[dict[str, Any]]:
        """The Live Activity updates ``user``'s phone saw, on either path, in order."""
        if user in self.update_tokens:
            token = self.update_tokens[user]
            return [
                r["payload"]["aps"] for r in self.server.records if r["token"] == token and r["status"] == 200
            ]
        return self.server.seen_by(user)


def pts(user: str) -> str:
    return f"{user:0<64}".replace("u", "a")[:64]


async def make_rig(
    start_apns_server: StartServer, nursery: trio.Nursery, key: SigningKeyPair, repos: Any, **server_kw: Any
) -> Rig:
    server = await start_apns_server(**server_kw)
    await nursery.start(server.serve_management)
    settings = sender_settings(
        server, key, management_host="127.0.0.1", management_port=server.management_port, max_retries=1
    )
    sender = ApnsSender(settings, ssl_context=server.ssl_context_for_clients())
    await nursery.start(sender.run)
    await repos.fixtures.batch_write_fixtures(
        [{"matchId": MATCH, "leagueCode": "T20", "startTime": "2026-12-03"}]
    )
    await repos.active_matches.register_active_match(MATCH, "me")
    for user, (team, version) in FOLLOWERS.items():
        await repos.follows.follow_match(MATCH, user, team, 4_000_000_000)
        await repos.devices.register_device(
            user, secrets.token_hex(32), os_version=version, push_to_start_token=pts(user)
        )
    return Rig(server, sender, repos)


def wicket(n: int) -> KeyEvent:
    return KeyEvent(
        type="wicket",
        subject=f"batter{n}",
        key=f"wicket:{n}",
        ball_id=str(n),
        over=f"{n}.1",
        priority=10,
        alert_worthy=True,
        title="Wicket!",
        body=f"Batter {n} out",
        text=f"W{n}",
        team_id="8",
    )


def tick(ts: int, *, event: KeyEvent | None = None, ended: bool = False) -> TickResult:
    display = {k: {**v, "score": f"{ts % 1000}/1"} for k, v in DISPLAY.items()}
    return TickResult(
        state=MatchState(),
        events=(event,) if event else (),
        best=event,
        display=display,
        display_changed=True,
        phase="completed" if ended else "live",
        ended=ended,
        timestamp=ts,
    )


async def recorded_channels(repos: Any) -> dict[str, str]:
    return dict((await repos.fixtures.get_fixture(MATCH) or {}).get("broadcastChannels") or {})


async def test_ios18_followers_start_on_channels_and_every_device_sees_every_key_event(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair, repos: Any
) -> None:
    rig = await make_rig(start_apns_server, nursery, signing_key, repos)
    deliveries: list[Any] = []
    actor = await rig.actor(on_delivery=deliveries.append)
    await actor.audience.refresh()
    assert await actor.starts.heal() == 4
    deliveries.clear()
    channels = await recorded_channels(repos)
    assert set(channels) == {"neutral", "7", "8"} and rig.server.channels.count() == 3
    assert {rig.server.channels.policy(BUNDLE_ID, c) for c in channels.values()} == {0}
    await rig.phones_start()
    assert rig.started["u1"]["input-push-channel"] == channels["7"]
    assert rig.started["u2"]["input-push-channel"] == channels["8"]
    assert rig.started["u3"].get("input-push-token") == 1 and "input-push-channel" not in rig.started["u3"]
    await actor.audience.refresh()
    assert (len(actor.audience.sessions), len(actor.audience.channel_sessions)) == (2, 2)
    before = len(rig.server.records)
    await actor.deliver(tick(1_800_000_001), kind="update")
    await actor.deliver(tick(1_800_000_002, event=wicket(1)), kind="update")
    await actor.deliver(tick(1_800_000_003, ended=True), kind="end")
    requests = rig.server.records[before:]
    casts = [r for r in requests if r.get("channel_id")]
    assert len(casts) == 3 * 2 and len(requests) - len(casts) == 3 * 2  # per tick: 2 broadcasts + 2 tokens
    assert {r["headers"]["apns-priority"] for r in casts[:2]} == {"5"}  # routine
    assert {r["headers"]["apns-priority"] for r in casts[2:]} == {"10"}  # key event, end
    assert all(r["headers"]["apns-expiration"] == "0" for r in casts)
    assert "dismissal-date" in casts[-1]["payload"]["aps"]
    assert [(d.broadcasts, d.tokens) for d in deliveries] == [(2, 2)] * 3
    for user in FOLLOWERS:  # every phone, on either path, saw every tick: the wicket among them
        seen = [aps["timestamp"] for aps in rig.seen(user)]
        assert seen[-3:] == [1_800_000_001, 1_800_000_002, 1_800_000_003], user
        assert rig.seen(user)[-2]["alert"]["title"] == "Wicket!"
    await actor.wind_up("completed")
    assert rig.server.channels.count() == 0 and await recorded_channels(repos) == {}
    assert rig.server.channels.deleted == 3


async def test_recorded_channels_are_reused_after_a_restart_or_takeover(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair, repos: Any
) -> None:
    rig = await make_rig(start_apns_server, nursery, signing_key, repos)
    first = await rig.actor()
    await first.audience.refresh()
    await first.starts.heal()
    channels = await recorded_channels(repos)
    successor = await rig.actor(epoch=2)
    assert successor.broadcasts is not None
    await successor.broadcasts.load()
    assert successor.broadcasts.channels == channels
    await repos.follows.follow_match(MATCH, "u5", "7", 4_000_000_000)
    await repos.devices.register_device(
        "u5", secrets.token_hex(32), os_version="18.2", push_to_start_token="b" * 64
    )
    await successor.audience.refresh()
    await rig.phones_start()
    await successor.audience.refresh()
    assert await successor.starts.heal() == 1
    assert rig.server.channels.created == 3 and await recorded_channels(repos) == channels
    start = rig.server.records[-1]["payload"]["aps"]
    assert start["input-push-channel"] == channels["7"]


async def test_a_channel_apns_no_longer_knows_is_recreated_and_re_announced(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair, repos: Any
) -> None:
    rig = await make_rig(start_apns_server, nursery, signing_key, repos)
    actor = await rig.actor()
    await actor.audience.refresh()
    await actor.starts.heal()
    await rig.phones_start()
    await actor.audience.refresh()
    old = await recorded_channels(repos)
    rig.server.channels.delete(BUNDLE_ID, old["7"])  # gone behind our back (capability toggled, say)
    await actor.deliver(tick(1_800_000_010), kind="update")
    new = await recorded_channels(repos)
    assert new["7"] != old["7"] and new["8"] == old["8"] and new["neutral"] == old["neutral"]
    restart = rig.server.records[-1]["payload"]["aps"]
    assert restart["event"] == "start" and restart["input-push-channel"] == new["7"]
    assert rig.server.records[-1]["token"] == pts("u1")  # u1's activity was on it; nobody else is re-started
    await rig.phones_start()
    await actor.audience.refresh()
    await actor.deliver(tick(1_800_000_011), kind="update")
    assert rig.seen("u1")[-1]["timestamp"] == 1_800_000_011
    assert rig.server.channels.count() == 3


async def test_channel_limit_reached_falls_back_to_update_tokens_and_leaks_nothing(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair, repos: Any
) -> None:
    rig = await make_rig(start_apns_server, nursery, signing_key, repos, channel_limit=2)
    actor = await rig.actor()
    await actor.audience.refresh()
    assert await actor.starts.heal() == 4
    assert rig.server.channels.count() == 0 and await recorded_channels(repos) == {}
    await rig.phones_start()
    assert all(rig.started[u].get("input-push-token") == 1 for u in FOLLOWERS)


async def test_the_sweep_deletes_only_channels_unrecorded_at_two_sweeps(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair, repos: Any
) -> None:
    rig = await make_rig(start_apns_server, nursery, signing_key, repos)
    actor = await rig.actor()
    await actor.audience.refresh()
    await actor.starts.heal()
    from daemon.apns import broadcast

    leaked = await rig.sender.channels.request(broadcast.create_channel(BUNDLE_ID))
    sweeper = ChannelSweeper(
        bundle=BUNDLE_ID,
        request=rig.sender.channels.request,
        fixtures=repos.fixtures,
        active_matches=lambda: _matches(),
    )
    assert await sweeper.sweep_once() == []  # a suspect the first time: it may be being recorded right now
    assert await sweeper.sweep_once() == [leaked]
    assert rig.server.channels.count() == 3 and set(rig.server.channels.all(BUNDLE_ID)) == set(
        (await recorded_channels(repos)).values()
    )


async def _matches() -> list[str]:
    return [MATCH]


async def test_two_owners_racing_leave_one_channel_per_perspective(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair, repos: Any
) -> None:
    rig = await make_rig(start_apns_server, nursery, signing_key, repos)
    results: list[dict[str, str]] = []

    async def owner() -> None:
        channels = MatchChannels(
            MATCH, bundle=BUNDLE_ID, request=rig.sender.channels.request, fixtures=repos.fixtures
        )
        results.append(await channels.ensure(["neutral", "7", "8"]))

    async with trio.open_nursery() as race:
        race.start_soon(owner)
        race.start_soon(owner)
    recorded = await recorded_channels(repos)
    assert results == [recorded, recorded]
    assert sorted(rig.server.channels.all(BUNDLE_ID)) == sorted(recorded.values())


def test_start_payload_names_the_channel_or_asks_for_a_token() -> None:
    from daemon.cricket import payloads

    on_channel = json.loads(
        payloads.start_payload(
            DISPLAY["7"],
            attributes_type="A",
            attributes={},
            timestamp=1,
            alert=None,
            input_push_channel="Y2hhbm5lbA==",
        )
    )["aps"]
    on_token = json.loads(
        payloads.start_payload(
            DISPLAY["7"], attributes_type="A", attributes={}, timestamp=1, alert=None, input_push_token=True
        )
    )["aps"]
    assert on_channel["input-push-channel"] == "Y2hhbm5lbA==" and "input-push-token" not in on_channel
    assert on_token["input-push-token"] == 1 and "input-push-channel" not in on_token


class _Killed(BaseException):
    """The process ends here (nothing catches it, as nothing outlives a kill -9)."""


class _DiesBeforeRecording:
    """The fixtures repository of an owner killed after APNs answered its creates and before it recorded them."""

    def __init__(self, fixtures: Any) -> None:
        self._fixtures = fixtures

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fixtures, name)

    async def swap_broadcast_channels(self, *args: Any, **kwargs: Any) -> bool:
        raise _Killed  # kill -9: nothing after the creates runs


async def test_an_owner_killed_between_creating_and_recording_leaves_one_recorded_set_and_no_leak(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair, repos: Any
) -> None:
    rig = await make_rig(start_apns_server, nursery, signing_key, repos)
    request = rig.sender.channels.request
    active = repos.active_matches.get_all_active_matches
    dead = MatchChannels(
        MATCH,
        bundle=BUNDLE_ID,
        request=request,
        fixtures=_DiesBeforeRecording(repos.fixtures),
        epoch=lambda: 1,
        active_matches=active,
    )
    try:
        await dead.ensure(["neutral", "7", "8"])
    except _Killed:
        pass
    assert (
        rig.server.channels.count() == 3 and await recorded_channels(repos) == {}
    )  # created, never recorded
    assert await repos.active_matches.claim_active_match(MATCH, "successor") == 2
    successor = MatchChannels(
        MATCH,
        bundle=BUNDLE_ID,
        request=request,
        fixtures=repos.fixtures,
        epoch=lambda: 2,
        active_matches=active,
    )
    recorded = await successor.ensure(["neutral", "7", "8"])
    assert set(recorded) == {"neutral", "7", "8"} and await recorded_channels(repos) == recorded
    assert sorted(rig.server.channels.all(BUNDLE_ID)) == sorted(
        recorded.values()
    )  # the dead owner's are gone
    assert successor.leaks_deleted == 3
    assert "broadcastChannelsClaim" not in (await repos.fixtures.get_fixture(MATCH) or {})


async def test_a_creation_in_flight_for_another_match_is_not_taken_for_a_leak(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair, repos: Any
) -> None:
    rig = await make_rig(start_apns_server, nursery, signing_key, repos)
    request = rig.sender.channels.request
    active = repos.active_matches.get_all_active_matches
    await repos.fixtures.batch_write_fixtures(
        [{"matchId": "501", "leagueCode": "T20", "startTime": "2026-12-03"}]
    )
    await repos.active_matches.register_active_match("501", "other")
    assert await repos.fixtures.claim_broadcast_channels("501", None, {"id": "x", "epoch": 1})
    from daemon.apns import broadcast

    theirs = await request(broadcast.create_channel(BUNDLE_ID))  # 501's owner is between create and record
    dead = MatchChannels(
        MATCH,
        bundle=BUNDLE_ID,
        request=request,
        fixtures=_DiesBeforeRecording(repos.fixtures),
        epoch=lambda: 1,
        active_matches=active,
    )
    try:
        await dead.ensure(["neutral"])
    except _Killed:
        pass
    successor = MatchChannels(
        MATCH,
        bundle=BUNDLE_ID,
        request=request,
        fixtures=repos.fixtures,
        epoch=lambda: 2,
        active_matches=active,
    )
    await repos.active_matches.claim_active_match(MATCH, "successor")
    recorded = await successor.ensure(["neutral"])
    assert successor.leaks_deleted == 0 and theirs in rig.server.channels.all(BUNDLE_ID)
    assert rig.server.channels.count() == 3  # theirs, the dead owner's (the sweep's), the recorded one
    assert recorded["neutral"] in rig.server.channels.all(BUNDLE_ID)


async def test_push_to_start_reads_a_chunks_devices_and_claims_by_the_hundred_and_never_starts_a_follower_twice(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair, repos: Any
) -> None:
    rig = await make_rig(start_apns_server, nursery, signing_key, repos)
    devices, follows = [], []
    for n in range(236):  # 240 followers with the rig's four, half of them on iOS 18
        user, device = f"v{n:03d}", secrets.token_hex(32)
        devices.append(
            {
                "userId": user,
                "deviceToken": device,
                "osVersion": "18.0" if n % 2 else "17.4",
                "pushToStartToken": f"{n:03d}".ljust(64, "c"),
            }
        )
        follow = {
            "matchId": MATCH,
            "userId": user,
            "teamId": "7" if n % 2 else "8",
            "expiresAt": 4_000_000_000,
        }
        if n % 10:  # most follows name the device (the API writes it); every tenth does not
            follow["deviceToken"] = device
        follows.append(follow)
    await repos.devices.import_items(devices)
    await repos.follows.import_items(follows)
    calls: dict[str, int] = {"queries": 0, "batch_gets": 0, "claims": 0, "in_flight": 0, "most": 0}

    def counted(kind: str, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[kind] += 1
            calls["in_flight"] += 1
            calls["most"] = max(calls["most"], calls["in_flight"])
            try:
                return await call(*args, **kwargs)
            finally:
                calls["in_flight"] -= 1

        return wrapper

    repos.devices.get_device_for_user = counted("queries", repos.devices.get_device_for_user)
    repos.devices.get_devices = counted("batch_gets", repos.devices.get_devices)
    repos.locks.claim_push_to_starts = counted("claims", repos.locks.claim_push_to_starts)
    starts: list[int] = []
    actor = await rig.actor(on_delivery=lambda d: starts.append(d.tokens), heal_chunk=100, heal_concurrency=4)
    await actor.audience.refresh()
    assert await actor.starts.heal() == 240
    assert starts == [100, 100, 40]  # one send per chunk, each after its claims
    # per chunk one batch read of the devices the follows name and one claim of the chunk; a Query only for
    # the followers whose follow names no device (the rig's four and every tenth), at most 4 at once
    assert (calls["batch_gets"], calls["claims"], calls["queries"]) == (3, 3, 4 + 24)
    assert calls["most"] <= 4
    started = [
        r for r in rig.server.records if (r.get("payload") or {}).get("aps", {}).get("event") == "start"
    ]
    assert len(started) == len({r["token"] for r in started}) == 240
    assert sum(1 for r in started if r["payload"]["aps"].get("input-push-channel")) == 118 + 2
    successor = await rig.actor(epoch=2)  # the claims hold for a successor too: nobody is started twice
    await successor.audience.refresh()
    assert await successor.starts.heal() == 0 and calls["claims"] == 6
    assert (
        len(
            [r for r in rig.server.records if (r.get("payload") or {}).get("aps", {}).get("event") == "start"]
        )
        == 240
    )


async def test_a_create_whose_answer_was_lost_leaves_no_channel_open_when_the_owner_tries_again(
    start_apns_server: StartServer, nursery: trio.Nursery, signing_key: SigningKeyPair, repos: Any
) -> None:
    rig = await make_rig(start_apns_server, nursery, signing_key, repos)
    creates = 0

    async def request(req: Any) -> Any:
        nonlocal creates
        answer = await rig.sender.channels.request(req)
        if req.method == "POST":
            creates += 1
            if creates == 2:  # APNs created it; the 201 never came back
                raise OSError("connection reset")
        return answer

    owner = MatchChannels(
        MATCH,
        bundle=BUNDLE_ID,
        request=request,
        fixtures=repos.fixtures,
        epoch=lambda: 1,
        active_matches=repos.active_matches.get_all_active_matches,
    )
    try:
        await owner.ensure(["neutral", "7", "8"])
    except OSError:
        pass
    assert rig.server.channels.count() == 2 and await recorded_channels(repos) == {}
    recorded = await owner.ensure(["neutral", "7", "8"])
    assert sorted(rig.server.channels.all(BUNDLE_ID)) == sorted(recorded.values()) and len(recorded) == 3
    assert owner.leaks_deleted == 2
