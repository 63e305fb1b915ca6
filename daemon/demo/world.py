"""``sightscreen demo``: the whole daemon, end to end, on embedded local parts.

On loopback and free ports it starts:

1. moto's DynamoDB server (a single-threaded child process) and creates every table of the data model;
2. the project's SportMonks-compatible replay server, serving a synthesised T20 tape shipped in the package
   (or ``--tape FILE``) at ``--speed`` times real time;
3. the project's APNs server (HTTP/2 over TLS with ``h2``, checking path, headers, topic and the ES256
   provider token's signature), with a CA and a signing key made for this run;
4. a local token issuer standing in for Cognito (its own RSA key, its JWKS over HTTP on loopback);
5. the daemon itself with both roles (supervisor, orchestrator, feed, match actor, APNs sender, janitor,
   admin socket, and the app's HTTP API verifying the local issuer's tokens), configured to talk to those
   parts exactly as it would to AWS, SportMonks, Apple and Cognito.

The tables start empty, as a new region's do. The daemon's own syncs create the league, the teams and the
fixture from the replay server at start-up (the league active because the demo's configuration names it in
``[jobs.reference_sync].active_league_ids``), and the orchestrator takes the match from the fixture it
finds, pre-match. ``--followers`` simulated iPhones (``daemon.demo.iphones``) do everything else through the
API with their own tokens: find the match in the league's schedule, register a device with a push-to-start
token, follow the match, and, when a push-to-start reaches them, register their Live Activity session, so
the rest of the lifecycle (updates, end) runs on sessions the API stored. The match is scheduled
``DEMO_START_DELAY_S`` ahead; its first ball comes once the owner has its pre-match baseline and the phones
follow it (at the latest ``DEMO_LATEST_START_S`` after the start). The issuer's key
is written to ``--state-dir`` so ``sightscreen api-token --sub USER`` can mint tokens for curl while the
demo runs. One line is printed per delivery; with
``--exit-at-end`` the demo exits 0 once the ``end`` push is delivered, its last line a JSON summary.
Ctrl-C or SIGTERM stops everything cleanly at any moment.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import trio

DEMO_TEAM_ID = "DEMO7TEAM1"
DEMO_KEY_ID = "DEMOKEY001"
DEMO_TOPIC = "app.sightscreen.demo"
# The match's scheduled start, in wall seconds from the demo's start (the fixture's starting_at).
DEMO_START_DELAY_S = 5.0
# The latest its first ball comes: sooner, once the owner has taken it pre-match and the phones follow it.
DEMO_LATEST_START_S = 120.0


class DemoRun:
    """Everything one demo run owns; ``run`` is cancel-safe at any point."""

    def __init__(self, args: argparse.Namespace, out: Any = None) -> None:
        self.args = args
        self.out = out or sys.stdout
        self.deliveries: list[Any] = []
        self.key_events: Counter[str] = Counter()
        self.errors: list[str] = []
        self.ended = trio.Event()
        self.match_id: str | None = None
        self.daemon: Any = None
        self.apns: Any = None
        self.iphones: Any = None
        self.api_url = ""

    # ------------------------------------------------------------------ output
    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def on_delivery(self, d: Any) -> None:
        self.deliveries.append(d)
        for t in d.event_types:
            self.key_events[t] += 1
        if d.failed or d.rejected:
            self.errors.append(f"{d.kind} at {d.over}: {d.rejected} rejected, {d.failed} failed")
        if d.kind == "end":
            self.ended.set()
        if self.args.quiet:
            return
        if self.args.json_lines:
            self._print(
                json.dumps(
                    {
                        "delivery": {
                            "kind": d.kind,
                            "over": d.over,
                            "score": d.score,
                            "event": d.event,
                            "events": list(d.event_types),
                            "priority": d.priority,
                            "tokens": d.tokens,
                            "accepted": d.accepted,
                            "broadcasts": getattr(d, "broadcasts", 0),
                            "channel_devices": getattr(d, "channel_sessions", 0),
                        }
                    }
                )
            )
            return
        event = f"  {d.event}" if d.event else ""
        over = f"{d.over} ov" if d.over else "-"
        casts = getattr(d, "broadcasts", 0)
        channel = f", {casts} broadcasts for {d.channel_sessions} devices" if casts else ""
        self._print(
            f"{d.kind:<6} {over:>9}  {d.score:<8}{event}  "
            f"[prio {d.priority}, {d.accepted - casts}/{d.tokens} tokens{channel}]"
        )

    # ------------------------------------------------------------------ the run
    async def run(self) -> int:
        with tempfile.TemporaryDirectory(prefix="sightscreen-demo-") as tmp:
            workdir = Path(tmp)
            moto = await trio.to_thread.run_sync(self._start_moto)
            try:
                return await self._run_with(moto, workdir)
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(moto.stop)

    def _start_moto(self) -> Any:
        from daemon.store.local import MotoServer

        return MotoServer().start()

    async def _run_with(self, moto: Any, workdir: Path) -> int:
        from daemon.apns.certs import generate_signing_key, make_ca
        from daemon.apns.server import ApnsTestServer
        from daemon.demo.controls import replay_controls
        from daemon.replay.server import ReplayServer
        from daemon.replay.tape import builtin_tape_path, load_tape
        from daemon.runtime.assembly import Daemon
        from daemon.store import Repositories
        from daemon.store.codec import iso
        from daemon.store.dynamo import Dynamo
        from daemon.store.settings import DynamoSettings
        from daemon.store.tables import create_tables

        speed = self.args.speed
        tape = scheduled(load_tape(self.args.tape or builtin_tape_path()), time.time() + DEMO_START_DELAY_S)
        league_code = tape.league.code if tape.league is not None else None
        if not league_code:
            raise ValueError(
                f"tape {self.args.tape}: it names no league code, and the demo's syncs create the league "
                "and place the fixture in its schedule by code"
            )
        self.match_id = str(tape.fixture_id)
        key = generate_signing_key(DEMO_KEY_ID)
        ca = make_ca()

        dynamo = Dynamo(DynamoSettings(endpoint_url=moto.url, table_prefix="demo-"))
        await create_tables(dynamo)
        repos = Repositories(dynamo)

        async with trio.open_nursery() as nursery:
            self.apns = apns = ApnsTestServer(
                team_id=DEMO_TEAM_ID, keys={DEMO_KEY_ID: key.public_pem}, topics=[DEMO_TOPIC], ca=ca
            )
            apns_port = await nursery.start(apns.serve)
            management_port = await nursery.start(apns.serve_management)
            replay = ReplayServer(
                [tape], speed=speed, innings_break_s=1200.0, start_delay_s=DEMO_LATEST_START_S * speed
            )
            replay_port = await nursery.start(replay.serve)
            from daemon.demo.issuer import LocalIssuer, default_state_dir

            issuer = LocalIssuer()
            await trio.to_thread.run_sync(issuer.serve)
            nursery.start_soon(_stop_issuer_on_exit, issuer)

            cadence = min(2.5, max(0.05, 75.0 / speed))
            metrics_listen = getattr(self.args, "metrics_listen", "")
            config = demo_config(
                dynamo_url=moto.url,
                replay_url=f"http://127.0.0.1:{replay_port}",
                apns_url=f"https://127.0.0.1:{apns_port}",
                ca_file=apns.ca_file,
                private_key=key.private_pem,
                league_id=str(tape.league_id),
                cadence_s=cadence,
                admin_socket=self.args.admin_socket or str(workdir / "admin.sock"),
                extra={
                    "instance": {"roles": ["engine", "api"]},
                    # the phones sign up through the API once it runs, after the actor's first read of the
                    # followers: re-read them often, at the demo's compressed time
                    "match": {"follower_refresh_s": 1.0},
                    "apns": {"management_host": "127.0.0.1", "management_port": management_port},
                    "api": {"listen": getattr(self.args, "api_listen", "127.0.0.1:0")},
                    "auth": {
                        "issuer": issuer.issuer,
                        "jwks_url": issuer.jwks_url,
                        "client_ids": [issuer.client_id],
                    },
                    **({"metrics": {"listen": metrics_listen}} if metrics_listen else {}),
                },
            )
            self.daemon = daemon = Daemon(
                config,
                on_delivery=self.on_delivery,
                extra_handlers=replay_controls(config.sportmonks.base_url),
            )
            if not self.args.quiet:
                self._print(
                    f"sightscreen demo: match {self.match_id} at {speed:g}x, {self.args.followers} followers; "
                    f"DynamoDB {moto.url}, SportMonks replay :{replay_port}, APNs :{apns_port}, "
                    f"admin {config.admin.socket_path}"
                )
            await nursery.start(daemon.run)
            assert daemon.api is not None  # the demo's daemon runs the API
            self.api_url = daemon.api.url
            saved = ""
            if hasattr(self.args, "state_dir"):  # the command line's demo; a programmatic run leaves none
                state_dir = self.args.state_dir or default_state_dir()
                try:
                    issuer.save(state_dir, api_url=self.api_url)
                    saved = f"; tokens: sightscreen api-token --sub USER --state-dir {state_dir}"
                except OSError as exc:
                    saved = f"; issuer state not saved ({exc.strerror})"
            if not self.args.quiet:
                self._print(f"sightscreen demo: app API {self.api_url}{saved}")
            from daemon.demo.iphones import SimulatedIphones

            self.iphones = SimulatedIphones(
                self.api_url,
                issuer.mint,
                self.match_id,
                [str(tape.localteam.id), str(tape.visitorteam.id)],
                self.args.followers,
                ios18_share=getattr(self.args, "ios18_share", 0.0),
                subscribe=apns.subscribe,
            )
            day = 86400.0
            await self.iphones.find_match(
                league_code,
                iso(tape.starting_at.timestamp() - day, timespec="seconds"),
                iso(tape.starting_at.timestamp() + day, timespec="seconds"),
            )
            await self.iphones.sign_up()
            nursery.start_soon(self.iphones.start_activities, lambda: list(apns.records))
            nursery.start_soon(_start_once_taken, replay, repos, self.match_id)
            if self.args.exit_at_end:
                await self.ended.wait()
                await self._wound_up()
            else:
                await daemon.finished.wait()
            daemon.shutdown()
            await daemon.finished.wait()
            nursery.cancel_scope.cancel()
        self._print(json.dumps({"summary": self.summary()}))
        return 0

    async def _wound_up(self) -> None:
        """After the end's delivery, the match actor's wind-up (channels deleted, sessions ended, the match
        deactivated, the lock released) runs on; the actor leaves the orchestrator's owned set when it is done.
        Bounded, so a wind-up stuck on a dead part cannot hold the demo open."""
        with trio.move_on_after(30):
            while self.daemon.orchestrator is not None and self.match_id in self.daemon.orchestrator.owned:
                await trio.sleep(0.05)
        await trio.sleep(0.2)  # the janitor's last writes

    def summary(self) -> dict[str, Any]:
        accepted: Counter[str] = Counter()
        rejected = 0
        for record in list(self.apns.records) if self.apns else []:
            if record.get("status") != 200:
                rejected += 1
                continue
            headers = record.get("headers") or {}
            payload = record.get("payload") or {}
            if headers.get("apns-push-type") == "liveactivity":
                accepted[str((payload.get("aps") or {}).get("event", "unknown"))] += 1
            else:
                accepted["alert"] += 1
        return {
            "match_id": self.match_id,
            "followers": self.args.followers,
            "speed": self.args.speed,
            "pushes_accepted": {k: accepted.get(k, 0) for k in ("start", "update", "end")}
            | {k: v for k, v in accepted.items() if k not in ("start", "update", "end")},
            "deliveries": len(self.deliveries),
            "key_events": dict(sorted(self.key_events.items())),
            "api_requests": self.iphones.requests if self.iphones else 0,
            "api_errors": len(self.iphones.errors) if self.iphones else 0,
            "errors": len(self.errors) + rejected + (len(self.iphones.errors) if self.iphones else 0),
            "error_details": self.errors[:20],
            "ended": self.ended.is_set(),
            **self.channel_summary(),
        }

    def channel_summary(self) -> dict[str, Any]:
        """Broadcasts and per-token pushes apart, the channels' lifecycle, the devices each kind reached, and
        whether every simulated device, on either path, saw every key event sent while its activity ran."""
        records = [r for r in (list(self.apns.records) if self.apns else []) if r.get("status") == 200]
        broadcasts: Counter[str] = Counter()
        reached: dict[str, Counter[str]] = {}
        key_events: dict[int, set[tuple[str, str]]] = {}  # push timestamp -> the key events it carried
        by_token: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            aps = (record.get("payload") or {}).get("aps") or {}
            kind = str(aps.get("event", "alert"))
            if record.get("channel_id"):
                broadcasts[kind] += 1
                reached.setdefault(kind, Counter())["channel"] += int(record.get("devices") or 0)
            else:
                reached.setdefault(kind, Counter())["token"] += 1
                by_token.setdefault(str(record.get("token")), []).append(aps)
                if kind == "start" and aps.get("input-push-channel"):
                    broadcasts["start"] += 1  # a channel announced to a device: channels cannot start one
            events = _key_events(aps)
            if events and kind != "start":
                key_events.setdefault(int(aps.get("timestamp", 0)), set()).update(events)
        phones = self.iphones.phones if self.iphones else []
        missing: dict[str, int] = {}
        for phone in phones:
            if not phone.activity_started:
                continue
            seen = self.apns.seen_by(phone.device_id) + by_token.get(phone.update_token, [])
            updates = [a for a in seen if a.get("event") in ("update", "end")]
            if not updates:
                continue
            first = min(int(a.get("timestamp", 0)) for a in updates)
            got: set[tuple[str, str]] = set()
            for aps in updates:
                got.update(_key_events(aps))
            due = set().union(*(e for t, e in key_events.items() if t >= first)) if key_events else set()
            if due - got:
                missing[phone.device_id] = len(due - got)
        stats = self.apns.channels if self.apns else None
        return {
            "broadcasts": {k: broadcasts.get(k, 0) for k in ("start", "update", "end")},
            "channels": {"created": stats.created if stats else 0, "deleted": stats.deleted if stats else 0},
            "devices_reached": {
                k: {"token": v.get("token", 0), "channel": v.get("channel", 0)}
                for k, v in sorted(reached.items())
            },
            "devices": {
                "ios18": sum(1 for p in phones if p.os_version.startswith("18")),
                "on_channels": sum(1 for p in phones if p.channel_id),
                "on_tokens": sum(1 for p in phones if p.activity_started and not p.channel_id),
            },
            "devices_missing_key_events": len(missing),
            "every_device_saw_every_key_event": not missing,
        }


def _key_events(aps: dict[str, Any]) -> set[tuple[str, str]]:
    state = aps.get("content-state") or {}
    return {
        (str(e.get("type")), str(e.get("ballId"))) for e in state.get("events") or [] if isinstance(e, dict)
    }


def scheduled(tape: Any, starts_at: float) -> Any:
    """The tape as SportMonks lists a match starting at ``starts_at`` (epoch seconds): the fixture the syncs
    store is the one the orchestrator takes pre-match, and the one a schedule read around now lists."""
    from datetime import UTC, datetime

    return tape.model_copy(update={"starting_at": datetime.fromtimestamp(starts_at, UTC)})


async def _start_once_taken(replay: Any, repos: Any, match_id: str) -> None:
    """Bowl the first ball once the match's owner has persisted its first, pre-match tick (the baseline the
    balls are diffed against), unless the match has started already."""
    while not replay.status()[match_id]["started"]:
        item = await repos.active_matches.get_active_match_state(match_id)
        if item is not None and item.get("matchPhase"):
            if not replay.status()[match_id]["started"]:
                replay.seek(match_id, 0)
            return
        await trio.sleep(0.1)


async def _stop_issuer_on_exit(issuer: Any) -> None:
    try:
        await trio.sleep_forever()
    finally:
        issuer.stop()


def demo_config(
    *,
    dynamo_url: str,
    replay_url: str,
    apns_url: str,
    ca_file: str,
    private_key: str,
    league_id: str,
    cadence_s: float,
    admin_socket: str,
    instance_id: str | None = None,
    table_prefix: str = "demo-",
    lease_s: float = 10.0,
    extra: dict[str, Any] | None = None,
) -> Any:
    """The configuration the demo (and the fault rig) run the daemon with: the local parts' addresses, a
    match compressed in time, and the league ``league_id`` active (the reference sync creates it so)."""
    from daemon.config import Config, register_secrets

    data: dict[str, Any] = {
        "instance": {"id": instance_id or f"demo-{os.getpid()}", "shutdown_grace_s": 5.0},
        "dynamodb": {"endpoint_url": dynamo_url, "table_prefix": table_prefix},
        "sportmonks": {
            "base_url": replay_url,
            "api_token": "demo-token",
            "hourly_budget": 10_000_000,
            "timeout_s": 5.0,
            "breaker_cooldown_s": 2.0,
        },
        "feed": {
            "livescores_cadence_s": cadence_s,
            "marquee_cadence_s": cadence_s,
            "marquee_leagues": [int(league_id)],
        },
        "apns": {
            "url": apns_url,
            "ca_file": ca_file,
            "team_id": DEMO_TEAM_ID,
            "key_id": DEMO_KEY_ID,
            "private_key": private_key,
            "topic": DEMO_TOPIC,
        },
        "orchestrator": {"cycle_s": 1.0, "lease_s": lease_s},
        "match": {"session_refresh_s": 0.5, "heal_every_s": 1.0, "push_to_start_min_interval_s": 30.0},
        # the syncs create the league (active: it is named here), its teams and the fixture at start-up
        "jobs": {
            "reference_sync": {"active_league_ids": [int(league_id)]},
            # the owner starts the followers as the match goes live; the phones follow seconds before the
            # start, when the prematch job would only tell them it starts soon
            "prematch": {"enabled": False},
        },
        "admin": {"socket_path": admin_socket},
    }
    for section, values in (extra or {}).items():
        data.setdefault(section, {}).update(values)
    config = Config.model_validate(data)
    register_secrets(config)  # scrubbed from every log line, as load_config does for files
    return config
