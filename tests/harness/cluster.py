"""A local cluster: several ``sightscreen run`` processes against one moto server, one replay server serving
several tapes and one APNs server — what the multi-instance tests and the soak benchmark drive.

The replay and APNs servers run in the caller's trio loop (so the caller reads the APNs server's answers as
they happen); moto is a child process; each daemon instance is a child process started from a TOML file
this module writes, exactly as an operator would run it. Each process generation signs its provider tokens
with its own key id, so every push the APNs server accepted says which process sent it.

Nothing here is imported by production code.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from daemon.store.local import die_with_parent
from tests.harness.dynamodb_iam import role_credentials
from tests.harness.records import aps, event_ids, record_kid, standing_wickets
from tests.harness.seed import SeededMatch, seed_match

TEAM_ID = "CLUSTER001"
TOPIC = "app.sightscreen.cluster"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def toml_dumps(data: dict[str, dict[str, Any]]) -> str:
    lines: list[str] = []
    for section, values in data.items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {_toml_value(val)}" for key, val in values.items() if val is not None)
        lines.append("")
    return "\n".join(lines)


@dataclass
class Instance:
    slot: int
    generation: int
    instance_id: str
    key_id: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    config_path: Path
    started_at: float = field(default_factory=time.time)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class Cluster:
    def __init__(
        self,
        workdir: Path,
        *,
        moto_url: str,
        tapes: list[Any],
        table_prefix: str = "cl-",
        speed: float = 200.0,
        followers_per_match: int = 5,
        lease_s: float = 3.0,
        cadence_s: float | None = 0.2,
        cycle_s: float = 1.0,
        innings_break_s: float = 1200.0,
        # The SportMonks plan: calls an hour per endpoint, stated to the daemons ([sportmonks].hourly_budget)
        # and enforced by the replay server (a 429 past it). None: no limit at either end. With ``cadence_s``
        # None the daemons derive their cadence from the plan.
        sportmonks_plan: int | None = None,
        # (endpoint, seconds): that live list answers with the fixtures as they were so long ago, all run
        endpoint_lag: tuple[str, float] | None = None,
        # The scheduled start, from the instances being healthy: the latest the first ball comes. Healthy is
        # not yet owning (the orchestrator's first cycle, the feed's first poll and the match actor's first
        # tick follow, and a tick that first sees a match mid-play takes what it shows as history), so a match
        # starts sooner only once its owner has persisted its first, pre-match tick (``start_once_taken``).
        start_delay_wall_s: float = 8.0,
        start_once_taken: bool = True,
        keep_records: int | None = None,
        extra_config: dict[str, dict[str, Any]] | None = None,
        apns_peer: tuple[str, str] | None = None,
        stagger_wall_s: float = 0.0,
        ios18_share: float = 0.0,
        prematch_settled: bool = False,
        nofile: int | None = None,
        dynamodb_role: str | None = "engine",
        slot_config: dict[int, dict[str, dict[str, Any]]] | None = None,
        apns_max_streams: int = 1000,
    ) -> None:
        self.workdir = workdir
        self.moto_url = moto_url
        self.tapes = tapes
        self.prefix = table_prefix
        self.speed = speed
        self.followers_per_match = followers_per_match
        self.lease_s = lease_s
        self.cadence_s = cadence_s
        self.sportmonks_plan = sportmonks_plan
        self.endpoint_lag = endpoint_lag
        self.cycle_s = cycle_s
        self.innings_break_s = innings_break_s
        # wall seconds from the instances being up (``start`` waits for that) to the first ball at the latest:
        # the owner's first tick must see the match before it starts (a match picked up mid-way does not replay
        # its history); with ``start_once_taken`` the first ball comes as soon as that tick is persisted
        self.start_delay_wall_s = start_delay_wall_s
        self.start_once_taken = start_once_taken
        self.keep_records = keep_records
        self.extra_config = extra_config or {}
        # per instance slot, config merged over the rest (e.g. one slot's DynamoDB through a fault proxy)
        self.slot_config = slot_config or {}
        # the streams the project's APNs server lets each connection have open at once: a low limit keeps an
        # engine's pushes waiting in its sender's queue, where its fence applies
        self.apns_max_streams = apns_max_streams
        # (url, CA file) of an APNs peer the caller runs (e.g. nginx for the soak); None: the project's
        # own validating APNs server, in this loop, whose ``records`` the caller reads. With iOS 18 phones
        # the project's server runs beside the peer for what the peer cannot do: channel management and
        # broadcasts (``[apns].broadcast_host``), which it fans out to the phones subscribed to the channel.
        self.apns_peer = apns_peer
        # match i starts i * stagger_wall_s after the first: real matches do not bowl in step
        self.stagger_wall_s = stagger_wall_s
        # this share of each match's followers (spread evenly over both teams) run iOS 18: seeded without a
        # session, they are started by the daemons' push-to-start on a broadcast channel (``start_phones``)
        self.ios18_share = ios18_share
        self.prematch_settled = prematch_settled  # followers seeded as notified by prematch already
        self.nofile = nofile  # each instance's RLIMIT_NOFILE (soft and hard), as LimitNOFILE sets it
        # the role the test DynamoDB records the instances' calls under (the AWS policy gate judges them by
        # its policy); None for instances that run several roles, whose calls no one policy answers for
        self.dynamodb_role = dynamodb_role
        self.channel_phones: dict[str, tuple[str, Any]] = {}  # push-to-start token -> (match id, follower)
        self.channel_started: dict[
            str, float
        ] = {}  # a channel phone's device key -> when its activity started
        # iOS 18 phones started on an update token (a push-to-start sent before the match had channels)
        self.token_started: dict[str, float] = {}
        # accepted push-to-starts per iOS 18 phone (more than one would start a second activity on a phone)
        self.start_pushes: dict[str, int] = defaultdict(int)
        self.management_port = 0
        self.broadcast_port = 0  # the project's server beside a peer: where broadcasts go
        self.apns_url = ""
        self.apns_ca_file = ""
        self.instances: dict[int, Instance] = {}
        self.retired: list[Instance] = []
        self.matches: dict[str, SeededMatch] = {}
        self._generation = 0
        self._keys: dict[str, Any] = {}
        self.apns: Any = None
        self.replay: Any = None
        self.repos: Any = None
        self.dynamo: Any = None

    # ------------------------------------------------------------------ start
    async def start(self, nursery: trio.Nursery, *, instances: int) -> None:
        from daemon.apns.certs import generate_signing_key, make_ca
        from daemon.apns.server import ApnsTestServer
        from daemon.replay.server import ReplayServer
        from daemon.store import Repositories
        from daemon.store.dynamo import Dynamo
        from daemon.store.settings import DynamoSettings
        from daemon.store.tables import create_tables

        self.workdir.mkdir(parents=True, exist_ok=True)
        # the harness's own client waits longer than the daemons': under a soak moto (one thread) is the
        # busiest process, and a slow answer to the harness must not end the run
        self.dynamo = Dynamo(
            DynamoSettings(
                endpoint_url=self.moto_url, table_prefix=self.prefix, read_timeout_s=60.0, max_attempts=10
            )
        )
        await create_tables(self.dynamo)
        self.repos = Repositories(self.dynamo)
        # one key per process generation, all trusted by the APNs server
        for n in range(1, 65):
            kid = f"GEN{n:07d}"
            self._keys[kid] = generate_signing_key(kid)
        if self.apns_peer is None or self.ios18_share > 0:
            self.apns = ApnsTestServer(
                team_id=TEAM_ID,
                keys={kid: pair.public_pem for kid, pair in self._keys.items()},
                topics=[TOPIC],
                ca=make_ca(),
                keep_records=self.keep_records,
                max_concurrent_streams=self.apns_max_streams,
            )
            await nursery.start(self.apns.serve)
            self.management_port = await nursery.start(self.apns.serve_management)
            self.apns_url, self.apns_ca_file = f"https://127.0.0.1:{self.apns.port}", self.apns.ca_file
        if self.apns_peer is not None:
            peer_url, peer_ca = self.apns_peer
            if self.apns is not None:  # both servers' CAs in one bundle, broadcasts to the project's server
                bundle = _ca_bundle(self.workdir / "apns-ca-bundle.pem", peer_ca, self.apns.ca_file)
                self.broadcast_port, peer_ca = self.apns.port, bundle
            self.apns_url, self.apns_ca_file = peer_url, peer_ca
        self.replay = ReplayServer(
            [],
            speed=self.speed,
            innings_break_s=self.innings_break_s,
            start_delay_s=self.start_delay_wall_s * self.speed,
            hourly_budget=self.sportmonks_plan,
        )
        self.replay_port = await nursery.start(self.replay.serve)
        if self.endpoint_lag is not None:
            endpoint, lag_s = self.endpoint_lag
            self.replay.inject("lag", endpoint=endpoint, lag_s=lag_s)
        await self.seed()
        for slot in range(instances):
            self.spawn(slot)
        # The matches' clocks start only once every instance is up (a loaded machine may take many seconds
        # to start a Python process), so the first balls are seen by a daemon that was there before them.
        await self.wait_healthy(timeout=120)
        for i, tape in enumerate(self.tapes):
            self.replay.add_tape(tape, start_delay_s=self._start_offset_s(i) * self.speed)
        if self.start_once_taken:
            for i, tape in enumerate(self.tapes):
                nursery.start_soon(self._start_once_taken, str(tape.fixture_id), i * self.stagger_wall_s)

    def _start_offset_s(self, i: int) -> float:
        """Wall seconds from now to the first ball of the i-th match at the latest (the fixture's startTime
        says the same)."""
        return self.start_delay_wall_s + i * self.stagger_wall_s

    async def _start_once_taken(self, match_id: str, not_before_s: float) -> None:
        """Bowl the match's first ball once its owner has persisted its first (pre-match) tick, the baseline
        its balls are diffed against, and not before ``not_before_s`` from now; unless it has started."""
        not_before = trio.current_time() + not_before_s
        while not self.replay.status()[match_id]["started"]:
            try:
                item = await self.repos.active_matches.get_active_match_state(match_id)
            except Exception:  # moto saturated: not known to be taken yet, look again
                item = None
            if item is not None and item.get("matchPhase") and trio.current_time() >= not_before:
                if not self.replay.status()[match_id]["started"]:
                    self.replay.seek(match_id, 0)
                return
            await trio.sleep(0.2)

    async def seed(self) -> None:
        """Each tape's match, starting at its offset, with ``followers_per_match`` running sessions."""
        # Seeded (tests/harness/seed.py): sessions running from the first ball, by the thousand for the soak,
        # which no product path makes quickly; a region filled through its own doors is region.py's.
        for i, tape in enumerate(self.tapes):
            starts_at = time.time() + self._start_offset_s(i)
            seeded = await seed_match(
                self.repos,
                tape,
                starts_at=starts_at,
                followers=self.followers_per_match,
                league_name="Cluster",
                league_code="CL",
                sessions=True,
                prematch_settled=self.prematch_settled,
            )
            self.matches[seeded.match_id] = seeded
            if self.ios18_share > 0:
                await self._seed_ios18(seeded, starts_at)

    async def _seed_ios18(self, seeded: SeededMatch, starts_at: float) -> None:
        """The iOS 18 share of a match's followers: their seeded session ended (so the daemons start them),
        their device on iOS 18 with a push-to-start token, and their follow naming that device (as the API
        writes it when a user with a registered device follows). Their update token stays their device key.
        Written with BatchWriteItem (25 a call): at the target load that is 160,000 phones.

        With ``prematch_settled`` they were started before play instead, as the prematch job does in the
        window before the start: the match's channels exist (created at the APNs server and recorded on the
        fixture, as a previous owner leaves them), each phone's session is on its perspective's channel and
        the phone listens to it; their follows carry the job's settled marker."""
        import secrets

        from daemon.store.codec import iso
        from tests.harness.seed import FOLLOW_TTL_S, prematch_marker

        channels: dict[str, str] = {}
        if self.prematch_settled:
            teams = sorted({f.team_id for f in seeded.followers if f.team_id is not None})
            for perspective in ("neutral", *teams):
                channels[perspective] = str(self.apns.channels.create(TOPIC, 0))
            await self.repos.fixtures.swap_broadcast_channels(seeded.match_id, None, channels)
        started: list[tuple[Any, ...]] = []
        now = time.time()
        stamp = iso(now, timespec="seconds")
        ended: list[dict[str, Any]] = []
        devices: list[dict[str, Any]] = []
        follows: list[dict[str, Any]] = []
        for k, follower in enumerate(seeded.followers):
            n = k // 2  # followers alternate teams: spread the share over each team
            if not int((n + 1) * self.ios18_share) > int(n * self.ios18_share):
                continue
            pts = secrets.token_hex(32)
            device_token = secrets.token_hex(32)
            if channels:  # started before play, on its perspective's channel
                channel = channels.get(follower.team_id or "") or channels["neutral"]
                started.append((seeded.match_id, follower.user_id, follower.device_id, None, None, channel))
                self.apns.subscribe(str(follower.update_token), channel)
                self.channel_started[str(follower.update_token)] = now
            else:
                ended.append(
                    {
                        "matchId": seeded.match_id,
                        "visitorKey": follower.visitor_key,
                        "userId": follower.user_id,
                        "deviceId": follower.device_id,
                        "updateToken": follower.update_token,
                        "status": "ended",
                        "sessionStartedAt": stamp,
                        "endedAt": stamp,
                        "endReason": "ios18-seed",
                    }
                )
            devices.append(
                {
                    "userId": follower.user_id,
                    "deviceToken": device_token,
                    "platform": "ios",
                    "osVersion": "18.2",
                    "appVersion": "local",
                    "pushToStartToken": pts,
                    "lastSeenAt": stamp,
                    "ttl": int(now + 90 * 24 * 3600),
                }
            )
            follow: dict[str, Any] = {
                "matchId": seeded.match_id,
                "userId": follower.user_id,
                "expiresAt": int(now + FOLLOW_TTL_S),
                "createdAt": stamp,
                "deviceToken": device_token,
            }
            if follower.team_id is not None:
                follow["teamId"] = follower.team_id
            if self.prematch_settled:
                follow.update(prematch_marker(starts_at))
            follows.append(follow)
            self.channel_phones[pts] = (seeded.match_id, follower)
        await self.repos.live_activities.import_items(ended)
        await self.repos.live_activities.register_la_sessions(started, now=now)
        await self.repos.devices.import_items(devices)
        await self.repos.follows.import_items(follows)

    async def start_phones(self, records: Iterable[dict[str, Any]]) -> None:
        """iOS 18 phones a push-to-start reached: their activity starts on the channel it named (they listen
        at once: subscribed at the APNs server) and the app registers the session with its channelId."""
        sessions: list[tuple[Any, ...]] = []
        for record in records:
            phone = self.channel_phones.get(str(record.get("token")))
            if phone is None or record.get("status") != 200:
                continue
            aps = (record.get("payload") or {}).get("aps") or {}
            channel = aps.get("input-push-channel")
            if aps.get("event") != "start":
                continue
            match_id, follower = phone
            key = str(follower.update_token)
            self.start_pushes[key] += 1
            if not channel:  # started on a token: the app registers the activity's update token
                if key not in self.token_started and key not in self.channel_started:
                    self.token_started[key] = float(record.get("time") or time.time())
                    sessions.append((match_id, follower.user_id, follower.device_id, key, None))
                continue
            if key in self.token_started:
                continue  # its activity runs on a token already
            self.apns.subscribe(key, str(channel))
            self.channel_started.setdefault(key, float(record.get("time") or time.time()))
            sessions.append((match_id, follower.user_id, follower.device_id, None, None, str(channel)))
        if sessions:
            await self.repos.live_activities.register_la_sessions(sessions)

    # ------------------------------------------------------------------ instances
    def _config(self, instance_id: str, kid: str, slot: int = 0) -> dict[str, dict[str, Any]]:
        key_path = self.workdir / f"AuthKey_{kid}.p8"
        key_path.write_text(self._keys[kid].private_pem)
        key_path.chmod(0o600)
        leagues = sorted({int(m.league_id) for m in self.matches.values()})
        data: dict[str, dict[str, Any]] = {
            "instance": {"id": instance_id, "shutdown_grace_s": 5.0},
            "dynamodb": {"endpoint_url": self.moto_url, "table_prefix": self.prefix},
            "sportmonks": {
                "base_url": f"http://127.0.0.1:{self.replay_port}",
                "api_token": "cluster",
                "hourly_budget": self.sportmonks_plan or 10_000_000,
                "timeout_s": 5.0,
                "breaker_cooldown_s": 1.0,
            },
            "feed": {
                # no cadence: the fastest the plan allows (the daemons derive it)
                **(
                    {"livescores_cadence_s": self.cadence_s, "marquee_cadence_s": self.cadence_s}
                    if self.cadence_s is not None
                    else {}
                ),
                "marquee_leagues": leagues,
            },
            "apns": {
                "url": self.apns_url,
                "ca_file": self.apns_ca_file,
                "team_id": TEAM_ID,
                "key_id": kid,
                "private_key_file": str(key_path),
                "topic": TOPIC,
                **(
                    {"management_host": "127.0.0.1", "management_port": self.management_port}
                    if self.management_port
                    else {}
                ),
                **({"broadcast_host": f"127.0.0.1:{self.broadcast_port}"} if self.broadcast_port else {}),
            },
            "orchestrator": {"cycle_s": self.cycle_s, "lease_s": self.lease_s, "clock_skew_bound_s": 0.5},
            # sessions are seeded before the daemons start: a slow refresh keeps moto (one thread) free
            "match": {"session_refresh_s": 10.0, "heal_every_s": 10.0},
            "admin": {"socket_path": str(self.workdir / f"{instance_id}.sock")},
            "logging": {"level": "info", "format": "json"},
        }
        for section, values in self.extra_config.items():
            data.setdefault(section, {}).update(values)
        for section, values in self.slot_config.get(slot, {}).items():
            data.setdefault(section, {}).update(values)
        return data

    def spawn(self, slot: int) -> Instance:
        self._generation += 1
        gen = self._generation
        kid = f"GEN{gen:07d}"
        instance_id = f"i{slot}-g{gen}"
        config_path = self.workdir / f"{instance_id}.toml"
        config_path.write_text(toml_dumps(self._config(instance_id, kid, slot)))
        log_path = self.workdir / f"{instance_id}.log"
        log = log_path.open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "daemon", "run", "--config", str(config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # the engine's own credentials: the test DynamoDB records what the role calls (tests/deploy)
            env=dict(
                os.environ,
                PYTHONUNBUFFERED="1",
                **(
                    role_credentials(self.dynamodb_role)
                    if self.dynamodb_role
                    else {"AWS_ACCESS_KEY_ID": "several-roles", "AWS_SECRET_ACCESS_KEY": "several-roles"}
                ),
            ),
            preexec_fn=functools.partial(_preexec, self.nofile),
        )
        log.close()
        inst = Instance(slot, gen, instance_id, kid, proc, log_path, config_path)
        self.instances[slot] = inst
        return inst

    async def wait_healthy(self, timeout: float) -> None:
        with trio.fail_after(timeout):
            for inst in list(self.instances.values()):
                while await admin_request(self.admin_socket(inst), "health") is None:
                    if not inst.alive:
                        raise RuntimeError(f"instance {inst.instance_id} exited: see {inst.log_path}")
                    await trio.sleep(0.2)

    def admin_socket(self, inst: Instance) -> str:
        return str(self.workdir / f"{inst.instance_id}.sock")

    def signal(self, slot: int, sig: int) -> Instance:
        inst = self.instances[slot]
        if inst.alive:
            inst.proc.send_signal(sig)
        return inst

    def slot_of(self, *, instance_id: str | None = None, key_id: str | None = None) -> int | None:
        """The slot of the running instance with this configured id (or signing key id), if any."""
        for slot, inst in self.instances.items():
            if inst.instance_id == instance_id or inst.key_id == key_id:
                return slot
        return None

    def kill(self, slot: int) -> Instance:
        inst = self.signal(slot, signal.SIGKILL)
        inst.proc.wait()
        self.retired.append(self.instances.pop(slot))
        return inst

    async def stop_all(self, timeout: float = 20.0) -> None:
        """SIGTERM every instance, SIGKILL what is still up after ``timeout``. Shielded: a test cancelled or
        timed out still stops its instances, rather than leaving them to load the machine for the next."""
        with trio.CancelScope(shield=True):
            for inst in list(self.instances.values()):
                if inst.alive:
                    inst.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for inst in list(self.instances.values()):
                while inst.alive and time.monotonic() < deadline:
                    await trio.sleep(0.05)
                if inst.alive:
                    inst.proc.kill()
                    inst.proc.wait()
                self.retired.append(inst)
            self.instances.clear()

    def all_instances(self) -> Iterable[Instance]:
        return [*self.retired, *self.instances.values()]

    # ------------------------------------------------------------------ observation
    async def active_records(self) -> list[dict[str, Any]]:
        return list(await self.repos.active_matches.get_all_active_matches())

    async def wait_all_ended(self, timeout: float) -> bool:
        with trio.move_on_after(timeout):
            while True:
                try:
                    items = await self.active_records()
                except Exception:  # moto saturated: not known to have ended yet, look again
                    await trio.sleep(0.5)
                    continue
                ended = {str(i["matchId"]) for i in items if i.get("status") == "ended"}
                if ended >= set(self.matches):
                    return True
                await trio.sleep(0.5)
        return False

    async def matches_report(self) -> str:
        """Where each match stands, for a failure message: its record's status, phase, owner and epoch, and
        which instances are up."""
        try:
            items = {str(i["matchId"]): i for i in await self.active_records()}
        except Exception as exc:
            return f"active-matches unreadable: {exc!r}"
        lines = []
        for match_id in self.matches:
            item = items.get(str(match_id))
            if item is None:
                lines.append(f"{match_id}: no record")
                continue
            lines.append(
                f"{match_id}: status={item.get('status')} phase={item.get('matchPhase')} "
                f"owner={item.get('instanceId')} epoch={item.get('ownerEpoch')}"
            )
        up = sorted(i.instance_id for i in self.instances.values() if i.alive)
        return "; ".join(lines) + f"; instances up: {', '.join(up) or 'none'} (logs in {self.workdir})"

    def deliveries(self) -> dict[str, list[dict[str, Any]]]:
        """Accepted Live Activity pushes per token, in arrival order."""
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for record in self.apns.records:
            if record.get("status") == 200:
                out[record["token"]].append(record)
        return out


def _preexec(nofile: int | None) -> None:
    """In the child before exec: die with the parent; the descriptor limit, when one is given."""
    die_with_parent()
    if nofile is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))


def _ca_bundle(path: Path, *ca_files: str) -> str:
    """One CA file trusting every server named (the daemons take one ``[apns].ca_file``)."""
    path.write_text("".join(Path(f).read_text() for f in ca_files))
    return str(path)


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of exactly ``name`` in a Prometheus text (an admin ``metrics`` answer) whose
    labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or line.split("{", 1)[0].split(" ", 1)[0] != name:
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def admin_request(path: str, cmd: str, args: list[str] | None = None, *, timeout: float = 5.0) -> Any:
    """One admin-socket request; the result, or None when the daemon is not answering (yet) within
    ``timeout`` seconds."""
    try:
        with trio.fail_after(timeout):
            stream = await trio.open_unix_socket(path)
            async with stream:
                await stream.send_all(json.dumps({"cmd": cmd, "args": args or []}).encode() + b"\n")
                buf = b""
                while not buf.endswith(b"\n"):
                    chunk = await stream.receive_some(1 << 20)
                    if not chunk:
                        break
                    buf += chunk
        answer = json.loads(buf)
    except (OSError, trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError, ValueError):
        return None  # not answering, answering garbage, or gone mid-answer (killed)
    return answer.get("result") if answer.get("ok") else None


def build_cluster(
    workdir: Path,
    moto_url: str,
    *,
    seed: int,
    prefix: str,
    speed: float,
    lease_s: float,
    matches: int = 1,
    followers: int = 3,
    fmt: str = "T20",
    overs: int | None = None,
) -> Cluster:
    """The end-to-end tests' cluster: ``matches`` synthesised matches (seeds ``seed``, ``seed + 1``, ...; the
    format shortened to ``overs`` an innings when given), ``followers`` sessions each, the feed polled every
    0.25 s, the orchestrator cycling every second and a 600-s innings break. Not started."""
    from daemon.replay.synth import synthesise

    tapes = [synthesise(fmt, seed=seed + i, overs=overs) for i in range(matches)]
    return Cluster(
        workdir,
        moto_url=moto_url,
        tapes=tapes,
        table_prefix=prefix,
        speed=speed,
        followers_per_match=followers,
        lease_s=lease_s,
        cadence_s=0.25,
        cycle_s=1.0,
        innings_break_s=600.0,
    )


def check_exclusive_ownership(cluster: Cluster) -> None:
    """Per match, the accepted pushes in arrival order come in one run per signing key (process): no two
    processes ever pushed one match in turns."""
    per_match: dict[str, list[tuple[float, str]]] = defaultdict(list)
    token_match = {tok: m.match_id for m in cluster.matches.values() for tok in m.tokens}
    for record in cluster.apns.records:
        match_id = token_match.get(record["token"])
        if match_id is not None and record.get("status") == 200:
            per_match[match_id].append((record["time"], record_kid(record) or "?"))
    for match_id, seq in per_match.items():
        seq.sort()
        runs: list[str] = []
        for _, kid in seq:
            if not runs or runs[-1] != kid:
                runs.append(kid)
        assert len(runs) == len(set(runs)), f"match {match_id} pushed by interleaved owners: {runs}"


def check_deliveries(cluster: Cluster) -> None:
    """Every seeded token got every wicket that stands on its match's tape, updates, and one end with a
    dismissal date; no alert was shown twice on one device (a repeat carries the original's timestamp)."""
    deliveries = cluster.deliveries()
    by_id = {str(t.fixture_id): t for t in cluster.tapes}
    for match in cluster.matches.values():
        wickets = standing_wickets(by_id[match.match_id])
        assert wickets, "the synthesised match has wickets (otherwise this check proves nothing)"
        for token in match.tokens:
            records = deliveries.get(token, [])
            ends = [r for r in records if aps(r).get("event") == "end"]
            assert ends, f"token of {match.match_id} got no end"
            assert all("dismissal-date" in aps(r) for r in ends)
            got = set().union(*(event_ids(r) for r in records)) if records else set()
            missing = {b for b in wickets if ("wicket", b) not in got}
            assert not missing, f"{match.match_id}: wickets {sorted(missing)} never reached a token"
            stamps = [int(aps(r)["timestamp"]) for r in records if aps(r).get("event") == "update"]
            # arrival order may interleave a repeat, but the device keeps the newest: a repeat carries
            # the same timestamp as the original, so at most one timestamp per alerting event
            alerts: dict[tuple[str, str, str], set[int]] = defaultdict(set)
            for r in records:
                payload = aps(r)
                if payload.get("alert") and payload.get("event") == "update":
                    state = payload.get("content-state") or {}
                    head = (state.get("events") or [{}])[0]
                    # the same event is the same ball too: a catch overturned on review and the batter's
                    # real dismissal later are two alerts, not one shown twice
                    key = (str(state.get("eventType")), str(head.get("subject")), str(head.get("ballId")))
                    alerts[key].add(int(payload["timestamp"]))
            for key, ts in alerts.items():
                assert len(ts) == 1, f"alert {key} shown {len(ts)} times on one device"
            assert stamps, "updates were delivered"
