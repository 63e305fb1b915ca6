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
a loaded machine too.

Nothing here is imported by production code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from daemon.store.codec import iso
from daemon.store.local import die_with_parent
from tests.harness.cluster import Instance, admin_request, toml_dumps
from tests.harness.dynamodb_iam import role_credentials
from tests.harness.records import aps, event_ids, standing_wickets

TEAM_ID = "REGION0001"
TOPIC = "app.sightscreen.region"

# What APNs may answer 410 to, per phone: its device (alert) token, its push-to-start token, the update
# token of the activity it starts.
DEAD_DEVICE, DEAD_PUSH_TO_START, DEAD_ACTIVITY = "device", "push_to_start", "activity"
DEAD_KINDS = frozenset({DEAD_DEVICE, DEAD_PUSH_TO_START, DEAD_ACTIVITY})


@dataclass(frozen=True)
class PhoneSpec:
    """One app user's phone: its iOS version, and which of its tokens APNs answers 410 (Unregistered)."""

    os_version: str = "18.2"
    dead: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = set(self.dead) - DEAD_KINDS
        if unknown:
            raise ValueError(f"dead: {sorted(unknown)} are not token kinds ({sorted(DEAD_KINDS)})")

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


@dataclass
class Crowd:
    """A match's app users: what each phone is, and the simulated iPhones that carry it out."""

    match_id: str
    tape: Any
    specs: list[PhoneSpec]
    iphones: Any  # daemon.demo.iphones.SimulatedIphones
    listed: dict[str, Any] = field(default_factory=dict)  # the match as GET /matches listed it
    signed_up: trio.Event = field(default_factory=trio.Event)

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
    ) -> None:
        """``crowd``: the phones of every match, or one list per match."""
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
        self.starts_at = time.time() + lead_s
        from daemon.demo.world import scheduled

        self.tapes = [scheduled(tape, self.starts_at) for tape in tapes]
        per_match = crowds_per_match(crowd, len(self.tapes))
        if len(per_match) != len(self.tapes):
            raise ValueError(f"crowd: {len(per_match)} lists for {len(self.tapes)} matches")
        self._specs = per_match
        self.crowds: dict[str, Crowd] = {}
        self.engines: dict[int, Instance] = {}
        self.api: Any = None
        self.apns: Any = None
        self.replay: Any = None
        self.issuer: Any = None
        self.repos: Any = None
        self._dynamo: Any = None
        self._keys: dict[str, Any] = {}
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
        self.replay = ReplayServer(
            self.tapes,
            speed=self.speed,
            innings_break_s=self.innings_break_s,
            start_delay_s=self.lead_s * self.speed,  # the latest the first ball comes (see the module doc)
        )
        self.replay_port = await nursery.start(self.replay.serve)
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

    def _make_crowds(self) -> None:
        from daemon.demo.iphones import SimulatedIphone, SimulatedIphones

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
                        self.apns.set_token_status(token, 410, "Unregistered")
            iphones = SimulatedIphones(
                self.api.url,
                self.issuer.mint,
                match_id,
                teams,
                len(phones),
                subscribe=self.apns.subscribe,
                phones=phones,
            )
            self.crowds[match_id] = Crowd(match_id, tape, specs, iphones)

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
            "dynamodb": {"endpoint_url": self.moto_url, "table_prefix": self.prefix},
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
                "url": self.apns.url,
                "ca_file": self.apns.ca_file,
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

    def spawn(self, slot: int) -> Instance:
        """Start the engine of ``slot`` (a fresh process) with the engine role's access key."""
        config = self.engine_config(slot)
        instance_id = str(config["instance"]["id"])
        config_path = self.workdir / f"{instance_id}.toml"
        config_path.write_text(toml_dumps(config))
        log_path = self.workdir / f"{instance_id}.log"
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "daemon", "run", "--config", str(config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONUNBUFFERED="1", **role_credentials("engine")),
                preexec_fn=die_with_parent,
            )
        engine = Instance(slot, 1, instance_id, str(config["apns"]["key_id"]), proc, log_path, config_path)
        self.engines[slot] = engine
        return engine

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
        import signal

        codes: dict[str, int] = {}
        with trio.CancelScope(shield=True):
            procs = {e.instance_id: e.proc for e in self.engines.values()}
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

    def logs_tail(self, chars: int = 3000) -> str:
        parts = [f"--- {e.instance_id}\n{e.log_path.read_text()[-chars:]}" for e in self.engines.values()]
        if self.api is not None:
            parts.append(f"--- api\n{self.api.log_tail()}")
        return "\n".join(parts)

    # ------------------------------------------------------------------ the app users
    async def sign_up(self) -> None:
        """Every crowd finds its match in the league's schedule through the API (once the fixture sync has
        stored it), registers its devices and follows it; then watches APNs for its push-to-starts."""

        async def one(crowd: Crowd) -> None:
            league = crowd.tape.league
            code = str(league.code if league is not None else crowd.tape.league_id)
            day = 86400.0
            window = (
                iso(self.starts_at - day, timespec="seconds"),
                iso(self.starts_at + day, timespec="seconds"),
            )
            crowd.listed = await crowd.iphones.find_match(code, *window)
            await crowd.iphones.sign_up()
            crowd.signed_up.set()

        async with trio.open_nursery() as nursery:
            for crowd in self.crowds.values():
                nursery.start_soon(one, crowd)

    async def run_phones(self) -> None:
        """The phones start their activities as push-to-starts reach them (until cancelled)."""
        async with trio.open_nursery() as nursery:
            for crowd in self.crowds.values():
                nursery.start_soon(crowd.iphones.start_activities, lambda: list(self.apns.records))

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
        crowd = self.crowds[match_id]
        await crowd.signed_up.wait()
        while True:  # taken, and the pre-match baseline persisted
            item = await self._match_item(match_id)
            if item is not None and item.get("matchPhase"):
                break
            await trio.sleep(0.5)
        if not self.replay.status()[match_id]["started"]:
            self.replay.pause(match_id)
            self.replay.seek(match_id, 0)  # live: the owner starts its followers' activities
        # the live phones only: a session on a dead token leaves the owner's count at its first push's 410
        live = [spec for spec in crowd.specs if spec.live]
        want_channels = sum(1 for spec in live if spec.on_channels)
        want_tokens = len(live) - want_channels
        while True:
            view = await self.owner_view(match_id)
            if (
                view is not None
                and view.get("phase") == "live"
                and int(view.get("channel_sessions") or 0) >= want_channels
                and int(view.get("tokens") or 0) >= want_tokens
            ):
                break
            await trio.sleep(0.5)
        self.replay.play(match_id)

    async def _match_item(self, match_id: str) -> dict[str, Any] | None:
        try:
            item: dict[str, Any] | None = await self.repos.active_matches.get_active_match_state(match_id)
        except Exception:  # moto saturated: not known yet, look again
            return None
        return item

    async def wait_all_ended(self, timeout: float) -> None:
        with trio.fail_after(timeout):
            while True:
                ended = 0
                for match_id in self.crowds:
                    item = await self._match_item(match_id)
                    ended += item is not None and item.get("status") == "ended"
                if ended == len(self.crowds):
                    return
                for engine in self.engines.values():
                    if not engine.alive:
                        raise RuntimeError(f"{engine.instance_id} exited: see {engine.log_path}")
                await trio.sleep(0.5)

    # ------------------------------------------------------------------ judging
    def shown(self, phone: Any) -> list[dict[str, Any]]:
        """The ``aps`` of every update and end a phone's activity was shown: its channel's broadcasts, or the
        accepted pushes to its update token."""
        if phone.channel_id:
            return self.apns.seen_by(phone.device_id)
        return [
            aps(r)
            for r in self.apns.records
            if r.get("status") == 200 and phone.update_token and r.get("token") == phone.update_token
        ]

    def answered(self, token: str) -> list[int]:
        """The statuses APNs answered pushes to ``token`` with."""
        return [int(r["status"]) for r in self.apns.records if r.get("token") == token and "status" in r]

    def missing_key_events(self) -> dict[str, list[str]]:
        """Per live phone (``match id/user``), the wickets that stand on its match's tape and the end that
        its activity was not shown; {} when every live device got every one."""
        out: dict[str, list[str]] = {}
        for crowd in self.crowds.values():
            wickets = standing_wickets(crowd.tape)
            if not wickets:
                raise AssertionError(
                    f"the tape of {crowd.match_id} has no wicket: the check would prove nothing"
                )
            for spec, phone in crowd.phones():
                if not spec.live:
                    continue
                shown = self.shown(phone)
                got: set[tuple[str, str]] = set()
                for a in shown:
                    got |= event_ids({"payload": {"aps": a}})
                missing = [f"wicket {w}" for w in sorted(wickets) if ("wicket", w) not in got]
                if not any(a.get("event") == "end" for a in shown):
                    missing.append("end")
                if not phone.activity_started:
                    missing.insert(0, "no activity")
                if missing:
                    out[f"{crowd.match_id}/{phone.user_id}"] = missing
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

    async def dead_token_problems(self) -> list[str]:
        """What DynamoDB still holds of the tokens APNs answered 410: a dead device token's record must be
        gone, a dead push-to-start token removed from its device, a dead activity's session suspended."""
        problems: list[str] = []
        for crowd in self.crowds.values():
            for spec, phone in crowd.phones():
                user = phone.user_id
                devices = await self.repos.devices.get_devices_for_user(user)
                if DEAD_DEVICE in spec.dead:
                    if 410 not in self.answered(phone.device_token):
                        problems.append(f"{user}: nothing was pushed to its dead device token")
                    if devices:
                        problems.append(f"{user}: the record of its dead device token is still there")
                if DEAD_PUSH_TO_START in spec.dead:
                    if 410 not in self.answered(phone.push_to_start_token):
                        problems.append(f"{user}: no push-to-start went to its dead token")
                    if any(d.get("pushToStartToken") for d in devices):
                        problems.append(f"{user}: its dead push-to-start token is still stored")
                if DEAD_ACTIVITY in spec.dead and not spec.on_channels:
                    if 410 not in self.answered(phone.activity_token):
                        problems.append(f"{user}: nothing was pushed to its dead activity token")
                    session = await self.repos.live_activities.get_la_session(
                        crowd.match_id, user, phone.device_id
                    )
                    if session is None or not session.get("suspendedAt"):
                        problems.append(f"{user}: the session of its dead activity was not suspended")
        return problems

    def start_paths(self) -> dict[str, list[str]]:
        """Per match, how each phone's accepted push-to-start named its activity's path: "channel" or
        "token" (one entry per accepted start)."""
        out: dict[str, list[str]] = {}
        for crowd in self.crowds.values():
            by_pts = {phone.push_to_start_token: phone.user_id for phone in crowd.iphones.phones}
            for r in self.apns.records:
                user = by_pts.get(str(r.get("token")))
                if user is None or r.get("status") != 200 or aps(r).get("event") != "start":
                    continue
                path = "channel" if aps(r).get("input-push-channel") else "token"
                out.setdefault(user, []).append(path)
        return out


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
