"""A fault rig: one in-process daemon on real local parts, with a fault proxy in front of each peer.

What the fault tests (``tests/faults``) drive. In the caller's trio loop it starts the project's APNs server,
the replay server (serving one tape), and three ``FaultProxy`` instances (``LazyFaultProxy`` for DynamoDB) (``dynamodb``, ``sportmonks``,
``apns``) forwarding to moto (a child process the caller owns), the replay server and the APNs server. The
daemon (``daemon.runtime.assembly.Daemon``, jobs off) is configured with the proxies' ports, so every byte it exchanges with
a peer crosses a proxy that a test can degrade; the rig's own ``repos`` talk to moto directly, so a test
observes DynamoDB even while the daemon's link to it is cut.

Seeding is the multi-instance cluster's: the tape's fixture (starting at most ``start_delay_wall_s`` from now,
so the orchestrator takes the match pre-match), its league, and ``followers`` users, each following the match
with an active Live Activity session and its own update token. The tape is served (not started: the fixture is
``NS``) from before the daemon starts, and its first ball is bowled as soon as the owner has persisted its first,
pre-match tick (``start_clock_once_taken``), or at the scheduled start if that comes first: the daemon sees
every ball, however long it took to start on a loaded machine, and no test waits a fixed time for it.

Observation: ``apns.records`` (every answered request), ``accepted_by_token()`` (accepted pushes per seeded
token), ``missing_wickets()`` (per token, the wickets standing at the end of the tape that no accepted push
carried), ``deliveries`` (the match actor's per-tick hand-offs).

Nothing here is imported by production code.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from tests.harness.dynamodb_iam import role_endpoint
from tests.harness.fault_proxy import FaultProxy
from tests.harness.lazy_proxy import LazyFaultProxy
from tests.harness.records import aps, event_ids, record_kid, standing_wickets
from tests.harness.seed import seed_match

TEAM_ID = "FAULTTEAM1"
KEY_ID = "FAULTKEY01"
# a second instance signs with its own key, so the APNs server's record says which instance pushed
SECOND_KEY_ID = "FAULTKEY02"
TOPIC = "app.sightscreen.faults"


@dataclass
class RigOptions:
    speed: float = 400.0
    followers: int = 3
    lease_s: float = 4.0
    cadence_s: float = 0.2
    cycle_s: float = 1.0
    innings_break_s: float = 600.0
    # the scheduled start: the fixture's start time and the latest the first ball comes; it comes sooner, as
    # soon as the owner's first (pre-match) tick is persisted (``FaultRig.start_clock_once_taken``)
    start_delay_wall_s: float = 15.0
    # the APNs server answers every push with this 5xx status from the start, before the daemon's first
    # push (0: no storm); lift it with ``rig.apns.reset()``
    apns_storm_at_start: int = 0
    # followers with a device that has a push-to-start token but no Live Activity session: the match's owner
    # sends them a push-to-start (``start_tokens``)
    start_followers: int = 0
    # per-section config overrides, merged over the rig's defaults (e.g. {"sportmonks": {"timeout_s": 1}})
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the service role the test DynamoDB records the daemon's calls under (the AWS policy gate judges them by
    # that role's policy); None for a daemon that runs several roles, whose calls no one policy answers for
    dynamodb_role: str | None = "engine"


class FaultRig:
    def __init__(
        self, workdir: Path, *, moto_url: str, tape: Any, table_prefix: str, options: RigOptions
    ) -> None:
        self.workdir = workdir
        self.moto_url = moto_url
        self.tape = tape
        self.match_id = str(tape.fixture_id)
        self.prefix = table_prefix
        self.options = options
        self.proxies: dict[str, FaultProxy] = {}
        self.tokens: dict[str, str] = {}  # update token -> visitor key
        self.start_tokens: dict[str, str] = {}  # push-to-start token -> user id
        self.deliveries: list[Any] = []
        self.apns: Any = None
        self.replay: Any = None
        self.repos: Any = None
        self.daemon: Any = None
        self._dynamo: Any = None
        self._keys: dict[str, Any] = {}

    # ------------------------------------------------------------------ start and stop
    async def start(self, nursery: trio.Nursery, *, add_tape: bool = True) -> None:
        """Start the peers, the proxies and the daemon; with ``add_tape`` the match clock starts too."""
        from urllib.parse import urlsplit

        from daemon.apns.certs import generate_signing_key, make_ca
        from daemon.apns.server import ApnsTestServer
        from daemon.replay.server import ReplayServer
        from daemon.store import Repositories
        from daemon.store.dynamo import Dynamo
        from daemon.store.settings import DynamoSettings
        from daemon.store.tables import create_tables

        opts = self.options
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._dynamo = Dynamo(DynamoSettings(endpoint_url=self.moto_url, table_prefix=self.prefix))
        await create_tables(self._dynamo)
        self.repos = Repositories(self._dynamo)
        self._keys = {kid: generate_signing_key(kid) for kid in (KEY_ID, SECOND_KEY_ID)}
        self.apns = ApnsTestServer(
            team_id=TEAM_ID,
            keys={kid: k.public_pem for kid, k in self._keys.items()},
            topics=[TOPIC],
            ca=make_ca(),
        )
        await nursery.start(self.apns.serve)
        if opts.apns_storm_at_start:
            self.apns.storm(opts.apns_storm_at_start)
        self.replay = ReplayServer(
            [],
            speed=opts.speed,
            innings_break_s=opts.innings_break_s,
            start_delay_s=opts.start_delay_wall_s * opts.speed,
        )
        replay_port = await nursery.start(self.replay.serve)
        moto = urlsplit(self.moto_url)
        targets = {
            "dynamodb": (moto.hostname or "127.0.0.1", int(moto.port or 80)),
            "sportmonks": ("127.0.0.1", int(replay_port)),
            "apns": ("127.0.0.1", int(self.apns.port)),
        }
        for name, (host, port) in targets.items():
            # moto is single-threaded: a connection held open in front of it would stall its other clients
            proxy = LazyFaultProxy(host, port) if name == "dynamodb" else FaultProxy(host, port)
            await nursery.start(proxy.serve)
            self.proxies[name] = proxy
        await self.seed()
        # The fixture exists at SportMonks before its match starts: the daemon's first look at it (taken
        # pre-match) sees the pre-match state, so the first balls are diffed against it. (With the tape added
        # later, that first /fixtures/{id} is a 404 and the next one comes 30 s later: whatever the first
        # /livescores shows is then taken as history, a first-ball wicket included.)
        if add_tape:
            self.start_match()
        self.daemon = self.new_daemon()
        await nursery.start(self.daemon.run)
        nursery.start_soon(self.start_clock_once_taken)

    def start_match(self) -> None:
        """Serve the tape: the fixture is ``NS`` until its scheduled start or ``start_clock_once_taken``."""
        self.replay.add_tape(self.tape)

    async def start_clock_once_taken(self) -> None:
        """Bowl the first ball as soon as an owner has persisted the match's first tick (taken pre-match, so it
        is the baseline the balls are diffed against), unless the match has started already."""
        while True:
            status = self.replay.status().get(self.match_id)
            if status is not None and status["started"]:
                return
            item = await self.match_item()
            if status is not None and item is not None and item.get("matchPhase"):
                self.replay.seek(self.match_id, 0)
                return
            await trio.sleep(0.1)

    def config(
        self,
        instance_id: str = "fault-i1",
        *,
        key_id: str = KEY_ID,
        dynamo_direct: bool = False,
        apns_direct: bool = False,
        admin_name: str | None = None,
    ) -> Any:
        """The daemon's configuration: every peer through its proxy (DynamoDB directly with ``dynamo_direct``,
        APNs with ``apns_direct``); the admin socket is named after ``admin_name`` (default: the instance id)."""
        from daemon.demo.world import demo_config

        opts = self.options
        extra: dict[str, dict[str, Any]] = {
            "apns": {"team_id": TEAM_ID, "key_id": key_id, "topic": TOPIC},
            "orchestrator": {"cycle_s": opts.cycle_s, "lease_s": opts.lease_s, "clock_skew_bound_s": 0.5},
            "match": {"session_refresh_s": 1.0, "heal_every_s": 5.0},
            "sportmonks": {"breaker_cooldown_s": 1.0},
        }
        for section, values in opts.extra.items():
            extra.setdefault(section, {}).update(values)
        # the endpoint names the daemon's role: the test DynamoDB records what it calls (the AWS policy gate)
        dynamo_url = self.moto_url if dynamo_direct else f"http://127.0.0.1:{self.proxies['dynamodb'].port}"
        if opts.dynamodb_role is not None:
            dynamo_url = role_endpoint(dynamo_url, opts.dynamodb_role)
        return demo_config(
            dynamo_url=dynamo_url,
            replay_url=f"http://127.0.0.1:{self.proxies['sportmonks'].port}",
            apns_url=self.apns.url if apns_direct else f"https://127.0.0.1:{self.proxies['apns'].port}",
            ca_file=self.apns.ca_file,
            private_key=self._keys[key_id].private_pem,
            league_id=str(self.tape.league_id),
            cadence_s=opts.cadence_s,
            admin_socket=str(self.workdir / f"{admin_name or instance_id}.sock"),
            instance_id=instance_id,
            table_prefix=self.prefix,
            lease_s=opts.lease_s,
            extra=extra,
        )

    def new_daemon(
        self,
        instance_id: str = "fault-i1",
        *,
        key_id: str = KEY_ID,
        dynamo_direct: bool = False,
        apns_direct: bool = False,
        admin_name: str | None = None,
        on_delivery: Callable[[Any], None] | None = None,
    ) -> Any:
        """A daemon on this rig's peers (not started: ``await nursery.start(daemon.run)``)."""
        from daemon.demo.controls import replay_controls
        from daemon.runtime.assembly import Daemon

        config = self.config(
            instance_id,
            key_id=key_id,
            dynamo_direct=dynamo_direct,
            apns_direct=apns_direct,
            admin_name=admin_name,
        )
        return Daemon(
            config,
            on_delivery=on_delivery or self.deliveries.append,
            with_jobs=False,
            extra_handlers=replay_controls(config.sportmonks.base_url),
        )

    def sever(self) -> None:
        """Cut whatever talks through the proxies off from DynamoDB and APNs at once, as ``kill -9`` would: the
        requests already delivered are answered into the void, nothing more leaves, nothing comes back. Call
        it from ``apns.on_answer`` to stop an owner at an exact request; its successor must then be a daemon
        with ``dynamo_direct`` and ``apns_direct``."""
        for name in ("dynamodb", "apns"):
            proxy = self.proxies[name]
            proxy.set(blackhole=True, refuse=True)
            proxy.reset()

    async def stop_daemon(self, daemon: Any | None = None, *, timeout: float = 20.0) -> None:
        daemon = daemon or self.daemon
        daemon.shutdown()
        with trio.move_on_after(timeout):
            await daemon.finished.wait()

    async def seed(self) -> None:
        """The match, starting after ``start_delay_wall_s``, with ``followers`` running sessions."""
        # Seeded (tests/harness/seed.py): a fault test's subject is the fault, on sessions running from the
        # first ball; a region filled through its own doors is region.py's.
        seeded = await seed_match(
            self.repos,
            self.tape,
            starts_at=time.time() + self.options.start_delay_wall_s,
            followers=self.options.followers,
            league_name="Faults",
            league_code="FLT",
            sessions=True,
        )
        self.tokens.update(seeded.tokens)
        await self._seed_start_followers()

    async def _seed_start_followers(self) -> None:
        """``start_followers`` followers with a push-to-start token and no session (``start_tokens``)."""
        import secrets

        match_id, team = self.match_id, str(self.tape.localteam.id)
        expires = int(time.time()) + 48 * 3600
        for i in range(self.options.start_followers):
            user = f"u{match_id}-s{i:04d}"
            token = secrets.token_hex(32)
            await self.repos.follows.follow_match(match_id, user, team, expires)
            await self.repos.devices.register_device(user, secrets.token_hex(32), push_to_start_token=token)
            self.start_tokens[token] = user

    def close(self) -> None:
        if self._dynamo is not None:
            self._dynamo.close()

    # ------------------------------------------------------------------ observation
    async def match_item(self) -> dict[str, Any] | None:
        return await self.repos.active_matches.get_active_match_state(self.match_id)

    async def is_ended(self) -> bool:
        item = await self.match_item()
        return item is not None and item.get("status") == "ended"

    async def wait_ended(self, timeout: float) -> bool:
        """True once ``active-matches`` says the match ended (the end sequence's last step but the lock)."""
        with trio.move_on_after(timeout):
            while True:
                if await self.is_ended():
                    return True
                await trio.sleep(0.25)
        return False

    async def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        with trio.move_on_after(timeout):
            while not predicate():
                await trio.sleep(0.05)
            return
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")

    def accepted_by_token(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for record in self.apns.records:
            if record.get("status") == 200 and record.get("token") in self.tokens:
                out[record["token"]].append(record)
        return out

    record_kid = staticmethod(record_kid)

    def accepted_updates(self) -> int:
        return sum(1 for r in self.apns.records if r.get("status") == 200 and aps(r).get("event") == "update")

    def served_wickets(self) -> set[str]:
        """Wickets the replay server has posted so far (standing ones, as of now)."""
        status = self.replay.status().get(self.match_id)
        if status is None:
            return set()
        fixture = self.replay.tape(self.match_id).fixture_at(status["cursor"])
        out: set[str] = set()
        for ball in fixture.get("balls") or []:
            if (ball.get("score") or {}).get("is_wicket") and ball.get("batsmanout_id"):
                out.add(f"{ball['scoreboard']}:{ball['batsmanout_id']}")
        return out

    def newest_wicket_ball(self) -> int:
        """The id of the newest wicket ball the replay server has posted."""
        status = self.replay.status()[self.match_id]
        fixture = self.replay.tape(self.match_id).fixture_at(status["cursor"])
        ids = [int(b["id"]) for b in fixture.get("balls") or [] if (b.get("score") or {}).get("is_wicket")]
        if not ids:
            raise LookupError("no wicket has been served yet")
        return max(ids)

    @staticmethod
    def dot_score_id() -> int:
        """The score-catalogue id of a dot ball ("No Run")."""
        from daemon.replay.tape import SCORES

        return next(s.id for s in SCORES.values() if s.name == "No Run")

    def missing_wickets_so_far(self) -> dict[str, set[str]]:
        """Per session: wickets served so far that no accepted push carried yet."""
        served = self.served_wickets()
        by_token = self.accepted_by_token()
        out: dict[str, set[str]] = {}
        for token, visitor in self.tokens.items():
            got = (
                set().union(*(event_ids(r) for r in by_token.get(token, [])))
                if by_token.get(token)
                else set()
            )
            missing = {w for w in served if ("wicket", w) not in got}
            if missing:
                out[visitor] = missing
        return out

    def missing_wickets(self, tokens: list[str] | None = None) -> dict[str, set[str]]:
        """Per token: standing wickets of the (possibly changed) tape that no accepted push carried."""
        wickets = standing_wickets(self.replay.tape(self.match_id))
        by_token = self.accepted_by_token()
        out: dict[str, set[str]] = {}
        for token in tokens if tokens is not None else list(self.tokens):
            got = (
                set().union(*(event_ids(r) for r in by_token.get(token, [])))
                if by_token.get(token)
                else set()
            )
            missing = {w for w in wickets if ("wicket", w) not in got}
            if missing:
                out[self.tokens[token]] = missing
        return out

    def ends_by_token(self) -> dict[str, int]:
        by_token = self.accepted_by_token()
        return {
            self.tokens[t]: sum(1 for r in by_token.get(t, []) if aps(r).get("event") == "end")
            for t in self.tokens
        }

    def timestamps_by_token(self) -> dict[str, list[int]]:
        by_token = self.accepted_by_token()
        return {
            self.tokens[t]: [
                int(aps(r)["timestamp"]) for r in by_token.get(t, []) if aps(r).get("event") == "update"
            ]
            for t in self.tokens
        }
