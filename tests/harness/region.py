"""An empty region, as on its first day: the tables exist and hold nothing; everything in them comes in
through production's own doors, each service role under its own access key.

In the caller's trio loop (so the caller reads the APNs server's record as it happens) it runs:

- the project's replay server as SportMonks: every tape's league, teams, season and fixture, each match
  scheduled ``lead_s`` ahead (the fixture's ``starting_at``, and the latest its first ball comes);
- the project's APNs server (pushes, channel management, broadcasts), scriptable per token;
- the local token issuer (the user pool) with its JWKS;

and as child processes, each started from a TOML file an operator could have written:

- the API (``sightscreen run``, ``roles = ["api"]``) with the API role's access key;
- ``engines`` engines (``roles = ["engine"]``) with the engine role's key: the reference and fixture syncs
  run at once at start-up and create the leagues, teams, team-seasons and fixtures from SportMonks (which
  leagues are active is configuration, ``[jobs.reference_sync].active_league_ids``); the prematch job runs
  every second; the orchestrator takes each match from the fixtures it finds;

and, per match, a crowd of app users (``daemon.demo.iphones``) who do everything through the API with
issuer tokens: find the match in its league's schedule (``GET /matches?league=&from=&to=``), register their
device, follow the match, and register their Live Activity when a push-to-start reaches them. Each phone is a
``PhoneSpec``: its iOS version and which of its tokens APNs answers 410 (scripted at the APNs server before
the phone signs up).

The rig writes nothing to DynamoDB but the tables themselves (what CloudFormation does in production); it
reads DynamoDB with its own key, and the engines' admin sockets, only to observe. The test DynamoDB records
each role's permissions as it goes (``tests/harness/aws_peer.py``), for the policy gate.

A match is started by the rig, not by a timer: once its owner has persisted the pre-match baseline and its
crowd has signed up, the match goes live with no ball bowled (its clock held at the first entry), and its
first ball comes once the owner knows every live phone's activity (started by the prematch job, or by the
owner's push-to-start as the match went live). So every wicket of the match is due to every live device, on
a loaded machine too. The steps are separate (``sign_up_match``, ``wait_taken``, ``go_live``,
``wait_activities``, ``play``), so a season (``bench/season.py``) can hold a match back until a slot is free.

A season's matches are scheduled apart (``starts_in_s``: each match's start after ``lead_s``), and the replay
server starts one on its own only ``hold_s`` after its scheduled start (the rig normally starts it sooner).
Besides the token kinds that die, a phone may rotate its tokens (it registers a device, then registers again
with new device and push-to-start tokens before following: nothing may go to the old ones), unfollow before
its match goes live, or end its activity mid-match through the API (``end_activities``).

What APNs answered is read as it comes into a ``Ledger`` (``tests/harness/records.py``), per token: the
project's server's records, or with ``apns_peer`` (nginx, ``tests/harness/nginx_apns.py``) that peer's
record file, nginx then taking every per-token push (its dead tokens set from the phones' specs) and the
project's server the broadcasts and channel management, as ``bench/soak.py`` pairs them.

For fault runs (``tests/harness/nemesis.py``): with ``links`` every engine reaches DynamoDB through a fault
proxy and a throttle proxy of its own, and APNs (push and broadcast hosts) through fault proxies of its own
(``proxies[slot]``); with ``clock_offsets`` every engine's wall clock (``time.time``) is offset by the seconds
in a file the rig writes (``set_clock_offset``; ``tests/harness/skewed_clock``), its monotonic clock
untouched. The rig's ``runtime``
reads an engine's or the API's ``ctl runtime`` (memory, descriptors, tasks, APNs connections, backlogs) and
``table_items`` counts each table's items, live and expired by its TTL attribute.

Nothing here is imported by production code.
"""

from __future__ import annotations

import functools
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from daemon.store.codec import iso
from daemon.store.local import die_with_parent
from tests.harness.cluster import Instance, admin_request, toml_dumps
from tests.harness.dynamodb_iam import role_credentials
from tests.harness.records import Ledger, alert_of, alerts_shown_twice, event_ids, standing_wickets

TEAM_ID = "REGION0001"
SKEWED_CLOCK = Path(__file__).resolve().parent / "skewed_clock"  # a sitecustomize offsetting time.time
TOPIC = "app.sightscreen.region"

# What APNs may answer 410 to, per phone: its device (alert) token, its push-to-start token, the update
# token of the activity it starts.
DEAD_DEVICE, DEAD_PUSH_TO_START, DEAD_ACTIVITY = "device", "push_to_start", "activity"
DEAD_KINDS = frozenset({DEAD_DEVICE, DEAD_PUSH_TO_START, DEAD_ACTIVITY})


@dataclass(frozen=True)
class PhoneSpec:
    """One app user's phone: its iOS version, which of its tokens APNs answers 410 (Unregistered), and what
    its user does besides following: rotate its tokens before following, unfollow before the match goes
    live, end its activity mid-match."""

    os_version: str = "18.2"
    dead: frozenset[str] = frozenset()
    rotates: bool = False
    unfollows: bool = False
    ends_activity: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.dead) - DEAD_KINDS
        if unknown:
            raise ValueError(f"dead: {sorted(unknown)} are not token kinds ({sorted(DEAD_KINDS)})")
        if self.unfollows and self.ends_activity:
            raise ValueError("a phone that unfollows before the match has no activity to end")

    @property
    def on_channels(self) -> bool:
        """iOS 18 or later: its activity is started on a broadcast channel."""
        return int(self.os_version.split(".", 1)[0]) >= 18

    @property
    def starts(self) -> bool:
        """A push-to-start can reach it: its activity runs once the match is live."""
        return DEAD_PUSH_TO_START not in self.dead

    @property
    def live(self) -> bool:
        """Its activity runs and can be updated: every key event of the match is due to it."""
        return self.starts and not (DEAD_ACTIVITY in self.dead and not self.on_channels)

    @property
    def awaited(self) -> bool:
        """The match's first ball waits for its activity: it is live and still follows the match."""
        return self.live and not self.unfollows

    @property
    def judged(self) -> bool:
        """Every key event of its match must reach it: live, following, its activity never ended."""
        return self.awaited and not self.ends_activity


def mixed_crowd() -> list[PhoneSpec]:
    """A crowd with every path a region serves: an iOS 18 phone (started on a channel), an iOS 17 phone (on
    tokens), an iOS 18 phone whose push-to-start token is dead, an iOS 17 phone whose device token is dead
    (its prematch alert is refused) and one whose activity's update token is dead."""
    return [
        PhoneSpec("18.2"),
        PhoneSpec("17.5"),
        PhoneSpec("18.1", frozenset({DEAD_PUSH_TO_START})),
        PhoneSpec("17.4", frozenset({DEAD_DEVICE})),
        PhoneSpec("17.6", frozenset({DEAD_ACTIVITY})),
    ]


def season_crowd() -> list[PhoneSpec]:
    """The mixed crowd and the rest of what a season's users do: a phone that rotates its tokens before
    following (on iOS 17, so its push-to-start token is what names the rotation's), one that unfollows
    before the match, an iOS 18 and an iOS 17 phone that end their activities mid-match."""
    return [
        *mixed_crowd(),
        PhoneSpec("17.5", rotates=True),
        PhoneSpec("18.2", unfollows=True),
        PhoneSpec("18.2", ends_activity=True),
        PhoneSpec("17.5", ends_activity=True),
    ]


@dataclass
class Crowd:
    """A match's app users: what each phone is, and the simulated iPhones that carry it out."""

    match_id: str
    tape: Any
    specs: list[PhoneSpec]
    iphones: Any  # daemon.demo.iphones.SimulatedIphones
    listed: dict[str, Any] = field(default_factory=dict)  # the match as GET /matches listed it
    signed_up: trio.Event = field(default_factory=trio.Event)
    # a rotating phone's first tokens (user -> (device token, push-to-start token)): never to be pushed
    replaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    starts: list[dict[str, Any]] = field(default_factory=list)  # accepted push-to-starts to its phones
    ended_by_user: set[str] = field(default_factory=set)  # users whose activity was ended through the API

    def phones(self) -> list[tuple[PhoneSpec, Any]]:
        return list(zip(self.specs, self.iphones.phones, strict=True))


class Region:
    def __init__(
        self,
        workdir: Path,
        *,
        moto_url: str,
        table_prefix: str,
        tapes: Sequence[Any],
        crowd: Sequence[PhoneSpec] | Sequence[Sequence[PhoneSpec]] = (),
        engines: int = 1,
        speed: float = 200.0,
        lead_s: float = 600.0,
        sock_dir: Path | None = None,
        cadence_s: float = 0.25,
        lease_s: float = 10.0,
        innings_break_s: float = 600.0,
        extra_config: dict[str, dict[str, Any]] | None = None,
        starts_in_s: Sequence[float] | None = None,
        hold_s: float = 0.0,
        apns_peer: Any = None,
        links: bool = False,
        clock_offsets: bool = False,
        engine_env: dict[str, str] | None = None,
    ) -> None:
        """``crowd``: the phones of every match, or one list per match. ``moto_url``: the DynamoDB endpoint
        (moto's server, or dynalite). ``starts_in_s``: each match's scheduled start after ``lead_s`` (default:
        all at ``lead_s``); the replay server starts a match on its own ``hold_s`` after it. ``apns_peer``: a
        started ``NginxApns`` for the per-token pushes (see the module doc). ``engine_env``: variables every
        engine is started with beside the rig's own (``PYTHONTRACEMALLOC`` for a diagnosis)."""
        self.workdir = workdir
        self.sock_dir = sock_dir or workdir
        self.moto_url = moto_url
        self.prefix = table_prefix
        self.speed = speed
        self.lead_s = lead_s
        self.cadence_s = cadence_s
        self.lease_s = lease_s
        self.innings_break_s = innings_break_s
        self.engine_count = engines
        self.extra_config = extra_config or {}
        self.hold_s = hold_s
        self.apns_peer = apns_peer
        self.links = links
        self.clock_offsets = clock_offsets
        self.engine_env = dict(engine_env or {})
        offsets = list(starts_in_s) if starts_in_s is not None else [0.0] * len(tapes)
        if len(offsets) != len(tapes):
            raise ValueError(f"starts_in_s: {len(offsets)} starts for {len(tapes)} matches")
        self.started_at = time.time()
        self.starts_at = self.started_at + lead_s  # the first match's scheduled start
        from daemon.demo.world import scheduled

        self.tapes = [
            scheduled(tape, self.starts_at + offset) for tape, offset in zip(tapes, offsets, strict=True)
        ]
        self.scheduled_at = {
            str(t.fixture_id): self.starts_at + o for t, o in zip(tapes, offsets, strict=True)
        }
        per_match = crowds_per_match(crowd, len(self.tapes))
        if len(per_match) != len(self.tapes):
            raise ValueError(f"crowd: {len(per_match)} lists for {len(self.tapes)} matches")
        self._specs = per_match
        self.crowds: dict[str, Crowd] = {}
        self.engines: dict[int, Instance] = {}
        self.retired: list[Instance] = []  # engines stopped or killed and replaced
        self.api: Any = None
        self.apns: Any = None
        self.replay: Any = None
        self.issuer: Any = None
        self.repos: Any = None
        self.ledger = Ledger()
        self.proxies: dict[int, dict[str, Any]] = {}  # slot -> dynamodb, throttle, apns, broadcast
        self._start_crowds: dict[str, Crowd] = {}  # push-to-start token -> the crowd of its phone
        self._dynamo: Any = None
        self._keys: dict[str, Any] = {}
        self._peer_offset = 0  # how far the peer's record file has been read
        self.management_port = 0

    # ------------------------------------------------------------------ start and stop
    async def start(self, nursery: trio.Nursery) -> None:
        """Empty tables, the peers, the API and the engines (healthy); the app users are not signed up yet."""
        from daemon.apns.certs import generate_signing_key, make_ca
        from daemon.apns.server import ApnsTestServer
        from daemon.demo.issuer import LocalIssuer
        from daemon.replay.server import ReplayServer
        from daemon.store import Dynamo, DynamoSettings, Repositories, create_tables
        from tests.harness.api_process import ApiProcess

        self.workdir.mkdir(parents=True, exist_ok=True)
        # the tables, as CloudFormation makes them: empty
        self._dynamo = Dynamo(
            DynamoSettings(
                endpoint_url=self.moto_url, table_prefix=self.prefix, read_timeout_s=60.0, max_attempts=10
            )
        )
        await create_tables(self._dynamo)
        self.repos = Repositories(self._dynamo)  # the rig's own reads; it writes nothing
        self._keys = {
            f"REGION{n:04d}": generate_signing_key(f"REGION{n:04d}") for n in range(self.engine_count)
        }
        self.apns = ApnsTestServer(
            team_id=TEAM_ID,
            keys={kid: key.public_pem for kid, key in self._keys.items()},
            topics=[TOPIC],
            ca=make_ca(),
        )
        await nursery.start(self.apns.serve)
        self.management_port = await nursery.start(self.apns.serve_management)
        self.replay = ReplayServer([], speed=self.speed, innings_break_s=self.innings_break_s)
        now = time.time()
        for tape in self.tapes:  # the latest the first ball comes (see the module doc)
            latest = self.scheduled_at[str(tape.fixture_id)] + self.hold_s - now
            self.replay.add_tape(tape, start_delay_s=max(0.0, latest) * self.speed)
        self.replay_port = await nursery.start(self.replay.serve)
        if self.links:
            await self._start_links(nursery)
        self.issuer = LocalIssuer().serve()
        self.api = ApiProcess(
            self.workdir,
            dynamodb_url=self.moto_url,
            table_prefix=self.prefix,
            issuer=self.issuer,
            sock_dir=self.sock_dir,
        ).start()
        for slot in range(self.engine_count):
            self.spawn(slot)
        import httpx

        async with httpx.AsyncClient(timeout=30) as http:
            await self.api.wait_ready(http)
        await self.wait_healthy(timeout=120)
        self._make_crowds()

    async def _start_links(self, nursery: trio.Nursery) -> None:
        """Per engine slot: DynamoDB through a fault proxy and then a throttle proxy, the APNs push host (and
        the broadcast host, when the peer takes the per-token pushes) through fault proxies."""
        from urllib.parse import urlsplit

        from tests.harness.fault_proxy import FaultProxy
        from tests.harness.throttle_proxy import ThrottleProxy

        store = urlsplit(self.moto_url)
        push = urlsplit(self.apns_peer.url if self.apns_peer is not None else self.apns.url)
        for slot in range(self.engine_count):
            throttle = ThrottleProxy(store.hostname or "127.0.0.1", int(store.port or 80), seed=slot)
            await nursery.start(throttle.serve)
            links: dict[str, Any] = {"throttle": throttle}
            targets = {"dynamodb": ("127.0.0.1", throttle.port), "apns": (push.hostname, push.port)}
            if self.apns_peer is not None:
                targets["broadcast"] = ("127.0.0.1", self.apns.port)
            for name, (host, port) in targets.items():
                proxy = FaultProxy(str(host), int(port or 443))
                await nursery.start(proxy.serve)
                links[name] = proxy
            self.proxies[slot] = links

    def _make_crowds(self) -> None:
        from daemon.demo.iphones import SimulatedIphone, SimulatedIphones

        dead: set[str] = set()
        for tape, specs in zip(self.tapes, self._specs, strict=True):
            match_id = str(tape.fixture_id)
            teams = [str(tape.localteam.id), str(tape.visitorteam.id)]
            phones = [
                SimulatedIphone(f"fan-{match_id}-{k:04d}", teams[k % 2], os_version=spec.os_version)
                for k, spec in enumerate(specs)
            ]
            for spec, phone in zip(specs, phones, strict=True):
                for kind, token in (
                    (DEAD_DEVICE, phone.device_token),
                    (DEAD_PUSH_TO_START, phone.push_to_start_token),
                    (DEAD_ACTIVITY, phone.activity_token),
                ):
                    if kind in spec.dead:
                        dead.add(token)
            iphones = SimulatedIphones(
                self.api.url,
                self.issuer.mint,
                match_id,
                teams,
                len(phones),
                subscribe=self.apns.subscribe,
                phones=phones,
            )
            crowd = Crowd(match_id, tape, specs, iphones)
            for spec, phone in zip(specs, phones, strict=True):
                if spec.rotates:
                    crowd.replaced[phone.user_id] = (secrets.token_hex(32), secrets.token_hex(32))
            self.crowds[match_id] = crowd
            self._start_crowds.update({phone.push_to_start_token: crowd for phone in phones})
        # APNs answers the dead tokens 410 from the start (the phones sign up later)
        for token in dead:
            self.apns.set_token_status(token, 410, "Unregistered")
        if self.apns_peer is not None:
            self.apns_peer.set_dead(dead)

    def engine_config(self, slot: int) -> dict[str, dict[str, Any]]:
        """An engine's configuration: production's defaults but for the local peers' addresses and a region
        compressed in time (the syncs at once, the prematch job every second, short leases and refreshes)."""
        kid = f"REGION{slot:04d}"
        key_path = self.workdir / f"AuthKey_{kid}.p8"
        key_path.write_text(self._keys[kid].private_pem)
        key_path.chmod(0o600)
        leagues = sorted({int(t.league_id) for t in self.tapes})
        data: dict[str, dict[str, Any]] = {
            "instance": {"id": f"engine-{slot}", "roles": ["engine"], "shutdown_grace_s": 5.0},
            "dynamodb": {"endpoint_url": self._dynamodb_url(slot), "table_prefix": self.prefix},
            "sportmonks": {
                "base_url": f"http://127.0.0.1:{self.replay_port}",
                "api_token": "region",
                "hourly_budget": 10_000_000,
                "timeout_s": 5.0,
                "breaker_cooldown_s": 1.0,
            },
            "feed": {
                "livescores_cadence_s": self.cadence_s,
                "marquee_cadence_s": self.cadence_s,
                "marquee_leagues": leagues,
            },
            "apns": {
                **self._apns_hosts(slot),
                "team_id": TEAM_ID,
                "key_id": kid,
                "private_key_file": str(key_path),
                "topic": TOPIC,
                "management_host": "127.0.0.1",
                "management_port": self.management_port,
            },
            "orchestrator": {"cycle_s": 1.0, "lease_s": self.lease_s, "clock_skew_bound_s": 0.5},
            "match": {"session_refresh_s": 1.0, "follower_refresh_s": 1.0, "heal_every_s": 1.0},
            # which leagues are active is configuration: the reference sync creates them active
            "jobs.reference_sync": {"active_league_ids": leagues},
            # the prematch job in a region compressed in time: every second, nothing cached for long (a first
            # cycle before the reference sync made the leagues would otherwise see none for ten minutes)
            "jobs.prematch": {
                "interval_s": 1.0,
                "active_leagues_cache_s": 1.0,
                "unfollowed_recheck_s": 1.0,
                "settled_recheck_s": 0.0,
            },
            "admin": {"socket_path": str(self.sock_dir / f"engine-{slot}.sock")},
            "logging": {"level": "info", "format": "json"},
        }
        for section, values in self.extra_config.items():
            data.setdefault(section, {}).update(values)
        return data

    def _dynamodb_url(self, slot: int) -> str:
        if slot in self.proxies:
            return f"http://127.0.0.1:{self.proxies[slot]['dynamodb'].port}"
        return self.moto_url

    def _apns_hosts(self, slot: int) -> dict[str, str]:
        """The engine's ``[apns]`` url, CA file and broadcast host: the project's server, or the peer for the
        per-token pushes and the project's server for broadcasts (both CAs trusted); through the slot's
        proxies when the rig has them."""
        links = self.proxies.get(slot, {})
        if self.apns_peer is None:
            url = f"https://127.0.0.1:{links['apns'].port}" if links else self.apns.url
            return {"url": url, "ca_file": self.apns.ca_file}
        bundle = self.workdir / "apns-ca-bundle.pem"
        if not bundle.exists():
            bundle.write_text(Path(self.apns_peer.ca_file).read_text() + Path(self.apns.ca_file).read_text())
        url = f"https://127.0.0.1:{links['apns'].port}" if links else self.apns_peer.url
        broadcast = links["broadcast"].port if links else self.apns.port
        return {"url": url, "ca_file": str(bundle), "broadcast_host": f"127.0.0.1:{broadcast}"}

    def clock_file(self, slot: int) -> Path:
        return self.workdir / f"clock-{slot}"

    def set_clock_offset(self, slot: int, seconds: float) -> None:
        """The wall clock of the engine of ``slot`` runs ``seconds`` ahead (or behind, negative) from within
        a second (the engine reads the file at most once a second); 0 puts it right again."""
        if not self.clock_offsets:
            raise RuntimeError("the region was started without clock_offsets")
        path = self.clock_file(slot)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{seconds:+.3f}s\n")
        tmp.replace(path)

    def spawn(self, slot: int) -> Instance:
        """Start the engine of ``slot`` (a fresh process) with the engine role's access key; an engine the
        slot had before (stopped or killed) is retired."""
        config = self.engine_config(slot)
        instance_id = str(config["instance"]["id"])
        config_path = self.workdir / f"{instance_id}.toml"
        config_path.write_text(toml_dumps(config))
        log_path = self.workdir / f"{instance_id}.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.engine_env, **role_credentials("engine"))
        if self.clock_offsets:
            if not self.clock_file(slot).exists():
                self.set_clock_offset(slot, 0.0)
            path = os.environ.get("PYTHONPATH")
            env.update(
                PYTHONPATH=os.pathsep.join(p for p in (str(SKEWED_CLOCK), path) if p),
                SIGHTSCREEN_CLOCK_OFFSET_FILE=str(self.clock_file(slot)),
            )
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "daemon", "run", "--config", str(config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=die_with_parent,
            )
        previous = self.engines.get(slot)
        generation = 1 if previous is None else previous.generation + 1
        if previous is not None:
            self.retired.append(previous)
        engine = Instance(
            slot, generation, instance_id, str(config["apns"]["key_id"]), proc, log_path, config_path
        )
        self.engines[slot] = engine
        return engine

    def signal(self, slot: int, sig: int) -> Instance:
        """Send ``sig`` to the engine of ``slot`` (if it runs)."""
        engine = self.engines[slot]
        if engine.alive:
            engine.proc.send_signal(sig)
        return engine

    async def wait_exit(self, slot: int, timeout: float) -> int | None:
        """The exit code of the engine of ``slot`` once it exits, or None after ``timeout``."""
        engine = self.engines[slot]
        with trio.move_on_after(timeout):
            while engine.alive:
                await trio.sleep(0.05)
        return engine.proc.poll()

    async def runtime(
        self, engine: Instance | None = None, *, objects: bool = False, memory: bool = False
    ) -> dict[str, Any] | None:
        """An engine's ``ctl runtime`` (the API's without one; ``objects``: with the heap's objects by type;
        ``memory``: with its traced allocations by line); None while it does not answer."""
        path = str(self.sock_dir / "api.sock") if engine is None else self.admin_socket(engine)
        args = ["objects"] if objects else ["memory"] if memory else []
        # a traced snapshot of a daemon's heap takes seconds, more on a loaded machine
        answer = await admin_request(path, "runtime", args, timeout=60.0 if memory else 5.0)
        return answer if isinstance(answer, dict) else None

    async def ready(self, engine: Instance) -> dict[str, Any] | None:
        """An engine's ``ctl ready`` (``ready`` and its ``checks``); None while it does not answer."""
        answer = await admin_request(self.admin_socket(engine), "ready")
        return answer if isinstance(answer, dict) else None

    def admin_socket(self, engine: Instance) -> str:
        return str(self.sock_dir / f"{engine.instance_id}.sock")

    async def wait_healthy(self, timeout: float) -> None:
        with trio.fail_after(timeout):
            for engine in self.engines.values():
                while await admin_request(self.admin_socket(engine), "health") is None:
                    if not engine.alive:
                        raise RuntimeError(f"{engine.instance_id} exited: see {engine.log_path}")
                    await trio.sleep(0.2)

    async def stop(self, timeout: float = 30.0) -> dict[str, int]:
        """SIGTERM the engines and the API, SIGKILL what outlives ``timeout``; their exit codes. Shielded, so
        a test that failed or timed out still leaves nothing running."""
        codes: dict[str, int] = {}
        with trio.CancelScope(shield=True):
            procs = {e.instance_id: e.proc for e in self.engines.values()}
            for engine in self.engines.values():  # a paused engine cannot hear its SIGTERM
                if engine.alive:
                    engine.proc.send_signal(signal.SIGCONT)
            if self.api is not None and self.api.proc is not None:
                procs["api"] = self.api.proc
            for proc in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for name, proc in procs.items():
                while proc.poll() is None and time.monotonic() < deadline:
                    await trio.sleep(0.05)
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                codes[name] = int(proc.returncode)
            if self.issuer is not None:
                self.issuer.stop()
            if self._dynamo is not None:
                self._dynamo.close()
        return codes

    async def run(
        self, play: Callable[[trio.Nursery], Awaitable[None]], *, within_s: float
    ) -> dict[str, int]:
        """Start the region, run ``play`` (given the nursery the region's parts run in) within ``within_s``
        seconds, then stop everything; the processes' exit codes. On any failure the logs' tails are
        printed first, so a test's report says what the processes saw."""
        async with trio.open_nursery() as nursery:
            try:
                with trio.fail_after(within_s):
                    await self.start(nursery)
                    await play(nursery)
            except BaseException:
                print(self.logs_tail())
                raise
            finally:
                codes = await self.stop()
                nursery.cancel_scope.cancel()
        return codes

    def logs_tail(self, chars: int = 3000) -> str:
        parts = [f"--- {e.instance_id}\n{e.log_path.read_text()[-chars:]}" for e in self.engines.values()]
        if self.api is not None:
            parts.append(f"--- api\n{self.api.log_tail()}")
        return "\n".join(parts)

    # ------------------------------------------------------------------ the app users
    async def sign_up(self) -> None:
        """Every crowd signs up (``sign_up_match``), all at once."""
        async with trio.open_nursery() as nursery:
            for match_id in self.crowds:
                nursery.start_soon(self.sign_up_match, match_id)

    async def sign_up_match(self, match_id: str) -> None:
        """The crowd finds its match in the league's schedule through the API (once the fixture sync has stored
        it); a rotating phone registers its first tokens; every phone registers its device and follows the
        match; the phones that unfollow do so."""
        crowd = self.crowds[match_id]
        league = crowd.tape.league
        code = str(league.code if league is not None else crowd.tape.league_id)
        day = 86400.0
        at = self.scheduled_at[match_id]
        window = (iso(at - day, timespec="seconds"), iso(at + day, timespec="seconds"))
        crowd.listed = await crowd.iphones.find_match(code, *window)
        import httpx

        async with httpx.AsyncClient(base_url=self.api.url, timeout=10) as http:
            for spec, phone in crowd.phones():
                if spec.rotates:  # the first registration, whose tokens iOS then replaces
                    old_device, old_start = crowd.replaced[phone.user_id]
                    await self._api(
                        http,
                        phone.user_id,
                        "POST",
                        "/user/device",
                        {
                            "deviceToken": old_device,
                            "platform": "ios",
                            "osVersion": phone.os_version,
                            "appVersion": "region",
                            "apnsToken": old_device,
                            "pushToStartToken": old_start,
                        },
                    )
            await crowd.iphones.sign_up()
            for spec, phone in crowd.phones():
                if spec.unfollows:
                    await self._api(http, phone.user_id, "DELETE", f"/user/follow/{match_id}")
        crowd.signed_up.set()

    async def end_activities(self, match_id: str) -> list[str]:
        """The phones that end their activity mid-match do so through the API (those whose activity runs);
        the users whose activity was ended."""
        crowd = self.crowds[match_id]
        import httpx

        ended: list[str] = []
        async with httpx.AsyncClient(base_url=self.api.url, timeout=10) as http:
            for spec, phone in crowd.phones():
                if spec.ends_activity and phone.activity_started and phone.user_id not in crowd.ended_by_user:
                    await self._api(
                        http,
                        phone.user_id,
                        "DELETE",
                        f"/user/activity/{match_id}",
                        params={"deviceId": phone.device_id},
                    )
                    crowd.ended_by_user.add(phone.user_id)
                    ended.append(phone.user_id)
        return ended

    async def _api(
        self,
        http: Any,
        user: str,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
    ) -> None:
        """One request as ``user`` (an issuer token), asked again on 429/503; an error otherwise."""
        headers = {"Authorization": f"Bearer {self.issuer.mint(user)}"}
        for attempt in range(5):
            resp = await http.request(method, path, json=body, params=params, headers=headers)
            if resp.status_code < 300:
                return
            if resp.status_code not in (429, 503):
                break
            await trio.sleep(0.2 * (attempt + 1))
        raise RuntimeError(f"{method} {path} as {user}: {resp.status_code} {resp.text[:200]}")

    async def run_phones(self) -> None:
        """Read what APNs answered as it comes (``collect``), and let the phones start their activities as
        push-to-starts reach them (until cancelled)."""
        async with trio.open_nursery() as nursery:
            for crowd in self.crowds.values():
                nursery.start_soon(crowd.iphones.start_activities, functools.partial(_starts_of, crowd))
            while True:
                self.collect()
                await trio.sleep(0.1)

    def collect(self) -> None:
        """Take what the APNs peers answered since the last look into the ledger; hand each accepted
        push-to-start to the crowd of its phone."""
        records: Iterable[dict[str, Any]]
        if self.apns_peer is not None:
            records, self._peer_offset = self.apns_peer.records_since(self._peer_offset)
            self.apns.records = []  # broadcasts and channel management: read through the subscriptions
        else:
            records, self.apns.records = self.apns.records, []
        for start in self.ledger.eat(records):
            crowd = self._crowd_of_start(start["token"])
            if crowd is not None:
                crowd.starts.append(start)

    def _crowd_of_start(self, token: str) -> Crowd | None:
        return self._start_crowds.get(token)

    # ------------------------------------------------------------------ the matches
    async def owner_view(self, match_id: str) -> dict[str, Any] | None:
        """The owning engine's ``match`` answer (phase, tokens, channel sessions, followers), or None while no
        engine runs the match. Both answers come from the engines' memory (``status`` names the matches an
        engine owns): asking costs the region's DynamoDB nothing."""
        for engine in list(self.engines.values()):
            if not engine.alive:
                continue
            status = await admin_request(self.admin_socket(engine), "status")
            if not isinstance(status, dict) or match_id not in (status.get("owned_matches") or []):
                continue
            answer = await admin_request(self.admin_socket(engine), "match", [match_id])
            if isinstance(answer, dict) and "tokens" in answer:
                return answer
        return None

    async def play_when_ready(self, match_id: str) -> None:
        """Start the match as the module doc says: live once taken and signed up, its first ball once the
        owner knows every live phone's activity."""
        await self.wait_taken(match_id)
        self.go_live(match_id)
        await self.wait_activities(match_id)
        self.play(match_id)

    async def wait_taken(self, match_id: str) -> None:
        """Until the crowd has signed up and the match's owner has persisted its pre-match baseline."""
        await self.crowds[match_id].signed_up.wait()
        while True:
            item = await self._match_item(match_id)
            if item is not None and item.get("matchPhase"):
                return
            await trio.sleep(0.5)

    def go_live(self, match_id: str) -> None:
        """The match goes live with no ball bowled (its clock held at the first entry): the owner starts its
        followers' activities."""
        if not self.replay.status()[match_id]["started"]:
            self.replay.pause(match_id)
            self.replay.seek(match_id, 0)

    async def wait_activities(self, match_id: str) -> None:
        """Until the match's owner knows the activity of every live phone that follows it (a session on a dead
        token leaves the owner's count at its first push's 410)."""
        awaited = [spec for spec in self.crowds[match_id].specs if spec.awaited]
        want_channels = sum(1 for spec in awaited if spec.on_channels)
        want_tokens = len(awaited) - want_channels
        while True:
            view = await self.owner_view(match_id)
            if (
                view is not None
                and view.get("phase") == "live"
                and int(view.get("channel_sessions") or 0) >= want_channels
                and int(view.get("tokens") or 0) >= want_tokens
            ):
                return
            await trio.sleep(0.5)

    def play(self, match_id: str) -> None:
        """Bowl: the match's clock runs from its first entry."""
        self.replay.play(match_id)

    async def _match_item(self, match_id: str) -> dict[str, Any] | None:
        try:
            item: dict[str, Any] | None = await self.repos.active_matches.get_active_match_state(match_id)
        except Exception:  # moto saturated: not known yet, look again
            return None
        return item

    async def is_ended(self, match_id: str) -> bool:
        item = await self._match_item(match_id)
        return item is not None and item.get("status") == "ended"

    async def wait_all_ended(self, timeout: float) -> None:
        with trio.fail_after(timeout):
            while True:
                ended = 0
                for match_id in self.crowds:
                    ended += await self.is_ended(match_id)
                if ended == len(self.crowds):
                    return
                for engine in self.engines.values():
                    if not engine.alive:
                        raise RuntimeError(f"{engine.instance_id} exited: see {engine.log_path}")
                await trio.sleep(0.5)

    # ------------------------------------------------------------------ judging
    def shown(self, phone: Any) -> list[dict[str, Any]]:
        """The ``aps`` of every broadcast a phone's activity on a channel was shown (the server's record of
        the channel's fan-out to it); empty for a phone on tokens, judged through the ledger."""
        return self.apns.seen_by(phone.device_id) if phone.channel_id else []

    def key_events_shown(self, phone: Any) -> tuple[set[tuple[str, str]], bool]:
        """The key events a phone's activity was shown, and whether it was shown the end."""
        if phone.channel_id:
            got: set[tuple[str, str]] = set()
            shown = self.shown(phone)
            for a in shown:
                got |= event_ids({"payload": {"aps": a}})
            return got, any(a.get("event") == "end" for a in shown)
        token = phone.update_token
        return set(self.ledger.events.get(token, ())), bool(token) and token in self.ledger.ended

    def answered(self, token: str) -> list[int]:
        """The statuses APNs answered pushes to ``token`` with."""
        self.collect()
        return self.ledger.answered(token)

    def missing_key_events(self) -> dict[str, list[str]]:
        """Per judged phone (``match id/user``: live, following, its activity not ended by its user), the
        wickets that stand on its match's tape and the end that its activity was not shown; {} when every
        one got every one."""
        self.collect()
        out: dict[str, list[str]] = {}
        for crowd in self.crowds.values():
            wickets = standing_wickets(crowd.tape)
            if not wickets:
                raise AssertionError(
                    f"the tape of {crowd.match_id} has no wicket: the check would prove nothing"
                )
            for spec, phone in crowd.phones():
                if not spec.judged:
                    continue
                got, ended = self.key_events_shown(phone)
                missing = [f"wicket {w}" for w in sorted(wickets) if ("wicket", w) not in got]
                if not ended:
                    missing.append("end")
                if not phone.activity_started:
                    missing.insert(0, "no activity")
                if missing:
                    out[f"{crowd.match_id}/{phone.user_id}"] = missing
        return out

    def alerts_shown_twice(self) -> dict[str, list[tuple[str, str]]]:
        """Per phone that was shown an alert more than once (``match id/user``), the alerts: on its channel's
        broadcasts or its activity's token (``tests.harness.records.alerts_shown_twice``)."""
        self.collect()
        out: dict[str, list[tuple[str, str]]] = {}
        for crowd in self.crowds.values():
            for _, phone in crowd.phones():
                if phone.channel_id:
                    alerts = [a for a in (alert_of(x) for x in self.shown(phone)) if a is not None]
                else:
                    alerts = self.ledger.alerts.get(phone.update_token, []) if phone.update_token else []
                twice = alerts_shown_twice(alerts)
                if twice:
                    out[f"{crowd.match_id}/{phone.user_id}"] = twice
        return out

    async def dead_tokens_cleaned(self, timeout: float) -> list[str]:
        """``dead_token_problems`` once it is empty, or as it stands after ``timeout`` (a cleanup follows its
        410 by one janitor's or prematch cycle's write)."""
        problems = await self.dead_token_problems()
        with trio.move_on_after(timeout):
            while problems:
                await trio.sleep(0.5)
                problems = await self.dead_token_problems()
        return problems

    async def dead_token_problems(self, match_ids: Iterable[str] | None = None) -> list[str]:
        """What DynamoDB still holds of the tokens APNs answered 410: a dead device token's record must be
        gone, a dead push-to-start token removed from its device, a dead activity's session suspended; and of
        what the users changed: a rotated phone holds only its new device, nothing went to its old tokens; an
        unfollower's follow is gone; an activity its user ended is ended (of ``match_ids``, default all)."""
        self.collect()
        problems: list[str] = []
        for match_id in self.crowds if match_ids is None else match_ids:
            crowd = self.crowds[match_id]
            for spec, phone in crowd.phones():
                user = phone.user_id
                devices = await self.repos.devices.get_devices_for_user(user)
                if DEAD_DEVICE in spec.dead:
                    if 410 not in self.ledger.answered(phone.device_token):
                        problems.append(f"{user}: nothing was pushed to its dead device token")
                    if devices:
                        problems.append(f"{user}: the record of its dead device token is still there")
                if DEAD_PUSH_TO_START in spec.dead:
                    if 410 not in self.ledger.answered(phone.push_to_start_token):
                        problems.append(f"{user}: no push-to-start went to its dead token")
                    if any(d.get("pushToStartToken") for d in devices):
                        problems.append(f"{user}: its dead push-to-start token is still stored")
                if DEAD_ACTIVITY in spec.dead and not spec.on_channels:
                    if 410 not in self.ledger.answered(phone.activity_token):
                        problems.append(f"{user}: nothing was pushed to its dead activity token")
                    session = await self.repos.live_activities.get_la_session(
                        crowd.match_id, user, phone.device_id
                    )
                    if session is None or not session.get("suspendedAt"):
                        problems.append(f"{user}: the session of its dead activity was not suspended")
                problems.extend(await self._user_change_problems(crowd, spec, phone, devices))
        return problems

    async def _user_change_problems(
        self, crowd: Crowd, spec: PhoneSpec, phone: Any, devices: list[dict[str, Any]]
    ) -> list[str]:
        user = phone.user_id
        problems: list[str] = []
        if spec.rotates:
            old_device, old_start = crowd.replaced[user]
            if any(self.ledger.answered(token) for token in (old_device, old_start)):
                problems.append(f"{user}: a push went to a token it had rotated away")
            if {str(d.get("deviceToken")) for d in devices} - {phone.device_token}:
                problems.append(f"{user}: a device record of its rotated tokens is still there")
        if spec.unfollows and await self.repos.follows.check_if_user_follows_match(crowd.match_id, user):
            problems.append(f"{user}: it unfollowed, and its follow is still there")
        if user in crowd.ended_by_user:
            session = await self.repos.live_activities.get_la_session(crowd.match_id, user, phone.device_id)
            if session is None or session.get("status") != "ended":
                problems.append(f"{user}: it ended its activity, and its session is not ended")
        return problems

    def start_paths(self) -> dict[str, list[str]]:
        """Per phone that a push-to-start reached, how each accepted one named its activity's path: "channel"
        or "token" (one entry per accepted start)."""
        self.collect()
        out: dict[str, list[str]] = {}
        for crowd in self.crowds.values():
            by_pts = {phone.push_to_start_token: phone.user_id for phone in crowd.iphones.phones}
            for start in crowd.starts:
                user = by_pts.get(str(start["token"]))
                if user is None:
                    continue
                start_aps = (start.get("payload") or {}).get("aps") or {}
                out.setdefault(user, []).append("channel" if start_aps.get("input-push-channel") else "token")
        return out

    # ------------------------------------------------------------------ the tables
    async def table_items(self, now: float | None = None) -> dict[str, dict[str, int]]:
        """Per table (logical name): its items, those ``live`` (no TTL attribute, or one in the future: what
        DynamoDB keeps; dynalite deletes nothing, so expired items are still there and counted apart), and
        those with no TTL attribute in a table that has one (``never_expire``)."""
        from daemon.store.tables import TABLE_SPECS

        at = int(now if now is not None else time.time())
        out: dict[str, dict[str, int]] = {}
        for logical, spec in TABLE_SPECS.items():
            counts = {"items": 0, "live": 0, "never_expire": 0}
            kwargs: dict[str, Any] = {"ProjectionExpression": "#k"}
            names = {"#k": spec.key.hash_key}
            if spec.ttl_attribute is not None:
                names["#t"] = spec.ttl_attribute
                kwargs["ProjectionExpression"] = "#k, #t"
            kwargs["ExpressionAttributeNames"] = names
            while True:
                page = await self._dynamo.call(logical, "scan", **kwargs)
                for item in page.get("Items", []):
                    counts["items"] += 1
                    ttl = item.get(spec.ttl_attribute or "", {}).get("N")
                    if spec.ttl_attribute is not None and ttl is None:
                        counts["never_expire"] += 1
                    if ttl is None or int(float(ttl)) > at:
                        counts["live"] += 1
                if "LastEvaluatedKey" not in page:
                    break
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
            out[logical] = counts
        return out


def _starts_of(crowd: Crowd) -> list[dict[str, Any]]:
    """The accepted push-to-starts to a crowd's phones so far (what its phones watch)."""
    return crowd.starts


def crowds_per_match(
    crowd: Sequence[PhoneSpec] | Sequence[Sequence[PhoneSpec]], matches: int
) -> list[list[PhoneSpec]]:
    """One list of phones per match: ``crowd`` as it is when it holds lists, else ``crowd`` for each."""
    if all(isinstance(spec, PhoneSpec) for spec in crowd):
        return [[spec for spec in crowd if isinstance(spec, PhoneSpec)] for _ in range(matches)]
    return [
        [spec for spec in phones if isinstance(spec, PhoneSpec)]
        for phones in crowd
        if not isinstance(phones, PhoneSpec)
    ]


def region_tapes(matches: int, *, seed: int, fmt: str = "T10", overs: int | None = 3) -> list[Any]:
    """``matches`` synthesised matches (seeds ``seed``, ``seed + 1``...), shortened to ``overs`` an innings."""
    from daemon.replay.synth import synthesise

    return [synthesise(fmt, seed=seed + i, overs=overs) for i in range(matches)]
