"""A season without a restart: many matches in a row on the same processes, and with ``--nemesis`` every fault
the suite knows at random while they play.

    python bench/season.py --matches N --concurrent K --instances I [--nemesis SEED] [--speed X]
                           [--seed S] [--apns nginx|python] [--dynamodb dynalite|moto] [--sample-s S]
                           [--idle-s S] [--keep-workdir]

It starts a region from empty tables as production starts (``tests/harness/region.py``): dynalite as
DynamoDB, the replay server as SportMonks, the recording nginx for the per-token pushes beside the project's
APNs server for channel management and broadcasts (``--apns python``: the project's server for everything),
the token issuer, one API process and I engines. The engines' reference and fixture syncs create the
leagues, teams and the season's N fixtures (T10 and T20 alternating, real ball timing compressed by the
speed factor X); each fixture is scheduled when the season expects a slot to be free, and the orchestrator
takes it ``prestart_s`` before. At most K matches are live at once: a match's crowd signs up through the API
(``season_crowd``: iOS 18 phones on broadcast channels, iOS 17 phones on tokens, device and push-to-start
tokens that APNs answers 410, a phone that rotates its tokens, one that unfollows, two that end their
activity mid-match), the match goes live once its owner has taken it, its first ball comes once the owner
knows every live phone's activity, and the next match takes its slot when it ends.

Sampled every ``--sample-s`` (10 s) per process (each engine slot and the API) through the admin socket's
``runtime`` command (what ``sightscreen ctl runtime`` prints): RSS, descriptors, threads, trio tasks, APNs
connections and channel backlogs; beside them the broadcast channels open at the APNs server and the items
of each table (live, expired by their TTL, and never expiring). Each sample is a line of
``samples.jsonl`` in the run directory.

The last line printed is one JSON object:

- ``rss_mb_after_match``: per engine slot, its RSS when each match ended (one entry per finished match);
  ``rss_growth_after_warmup``: per slot, the growth from its 5th entry to its last, within one process;
- ``tasks_idle``, ``fds_idle``, ``apns_connections_idle``: per slot, ``[at start, idle_s after the last
  match]`` (the start is read once every engine is ready, before the first match);
- ``channels_open_end``: broadcast channels open at the APNs server at the end;
- ``items_by_table_end``: per table, items, live and never expiring (a table with a TTL attribute);
- ``lost``: (phone, key event) pairs due and not shown: every wicket that stands and the end, to every phone
  that is live, follows and did not end its activity; ``duplicate_alerts``: phones shown an alert twice;
  ``token_problems``: what DynamoDB still holds of dead, rotated or unfollowed tokens;
- ``faults`` (``--nemesis``): each fault with its time, kind, engine, span, readiness during and after,
  exit code, the key events lost in its window, and its outcome;
- ``traced_grown`` (``--tracemalloc``: the engines started with ``PYTHONTRACEMALLOC=1``): per engine, the
  source lines whose traced memory grew most from the warm-up match to the end (``ctl runtime memory``
  subtracted), for telling which line holds what RSS gained;
- ``criteria``: each criterion of the season and whether it held; ``ok`` when every one did.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.settings import FanoutSettings  # noqa: E402
from daemon.replay.synth import synthesise  # noqa: E402
from daemon.store.local import MotoServer  # noqa: E402
from daemon.store.tables import TABLE_SPECS  # noqa: E402
from tests.harness.dynalite import DynaliteServer  # noqa: E402
from tests.harness.nemesis import CLOCK_SKEW_S, Nemesis, Outcome, plan, window_holding  # noqa: E402
from tests.harness.nginx_apns import NginxApns  # noqa: E402
from tests.harness.region import Region, season_crowd  # noqa: E402

# tables whose items are kept by configuration: a fixture expires only with [jobs.fixture_sync].retention_days
# set (0, the default, keeps the schedule); everything else with a TTL attribute must carry it
RETAINED = frozenset({"cricket-fixtures"})
WARMUP_MATCH = 5  # the RSS after the 5th finished match is the warm baseline
RSS_GROWTH_MAX = 0.10
OVERHEAD_S = 20.0  # a match's sign-up, take-over and activities before its first ball (scheduling guess)


def season_tapes(matches: int, seed: int) -> list[Any]:
    """T10 and T20 alternating, full length (real ball timing)."""
    return [synthesise("T10" if i % 2 == 0 else "T20", seed=seed + i) for i in range(matches)]


def tape_seconds(tape: Any) -> float:
    return sum(entry.gap_ms for entry in tape.entries) / 1000.0


def expected_starts(durations: list[float], concurrent: int) -> list[float]:
    """When each match should start if it takes its duration and at most ``concurrent`` run at once."""
    free = [0.0] * concurrent
    starts = []
    for duration in durations:
        slot = min(range(concurrent), key=lambda k: free[k])
        starts.append(free[slot])
        free[slot] += duration
    return starts


def wicket_ball(tape: Any, wicket: str) -> int | None:
    """The ball id of a wicket that stands, named as the engine names it ("S1:900401")."""
    for ball in tape.fixture_at(len(tape)).get("balls") or []:
        if f"{ball.get('scoreboard')}:{ball.get('batsmanout_id')}" == wicket and ball.get("id") is not None:
            return int(ball["id"])
    return None


def rss_growth(series: list[tuple[int, float]]) -> float | None:
    """Growth of RSS from the warm-up entry to the last, within the process that made the last entry (None
    when that process finished fewer than WARMUP_MATCH + 1 matches)."""
    if not series:
        return None
    pid = series[-1][0]
    own = [rss for p, rss in series if p == pid]
    if len(own) <= WARMUP_MATCH:
        return None
    warm = own[WARMUP_MATCH - 1]
    return round((own[-1] - warm) / warm, 4)


def tcp_peers(pid: int, names: dict[int, str], ss_output: str | None = None) -> dict[str, int]:
    """The TCP sockets of process ``pid`` by peer (named by its port) and state, from ``ss -tanpH``."""
    if ss_output is None:
        try:
            ss_output = subprocess.run(["ss", "-tanpH"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return {}
    counts: Counter[str] = Counter()
    for line in ss_output.splitlines():
        if f"pid={pid}," not in line:
            continue
        fields = line.split()
        state, local, peer = fields[0], fields[3], fields[4]
        if state == "LISTEN":
            counts[f"listen:{names.get(int(local.rsplit(':', 1)[1]), 'other')}"] += 1
            continue
        port = int(peer.rsplit(":", 1)[1]) if ":" in peer else 0
        counts[f"{names.get(port, 'other')}:{state}"] += 1
    return dict(sorted(counts.items()))


def idle_view(runtime: dict[str, Any] | None, peers: dict[str, int] | None = None) -> dict[str, Any]:
    if runtime is None:
        return {"tasks": None, "fds": None, "apns": None}
    apns = runtime.get("apns") or {}
    return {
        "objects": runtime.get("objects"),
        "objects_by_type": runtime.get("objects_by_type"),
        "tcp_peers": peers or {},
        "tasks": runtime.get("tasks"),
        "fds": (runtime.get("fds") or {}).get("total"),
        "apns": sum(int(v) for v in apns.values()),
        "tasks_by_name": runtime.get("tasks_by_name"),
        "fds_by_kind": runtime.get("fds"),
        "apns_pools": apns,
        "backlogs": runtime.get("backlogs"),
    }


# tasks that live as long as an APNs connection (one each per connection): they follow the pools' size
POOL_TASKS = ("daemon.apns.driver.ConnectionPool._reader", "daemon.apns.driver.ConnectionPool._watchdog")


def pool_bounds() -> dict[str, int]:
    """The most connections each bounded pool holds, by peer name, from the settings' defaults: DynamoDB's
    (botocore's pool: the call threads and the lease threads), each APNs pool's, SportMonks' (httpx)."""
    import httpx

    from daemon.apns.settings import ApnsSettings
    from daemon.store.settings import DynamoSettings

    dynamo = DynamoSettings.model_fields
    apns = int(ApnsSettings.model_fields["connections"].default)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=20)
    return {
        "dynamodb": int(dynamo["max_threads"].default) + int(dynamo["lease_threads"].default),
        "sportmonks": int(limits.max_keepalive_connections or 20),
        **{name: apns for name in ("apns", "apns_apns", "apns_nginx", "apns_broadcast", "apns_management")},
    }


def back_to_idle(
    start: dict[str, dict[str, Any]], end: dict[str, dict[str, Any]], bounds: dict[str, int]
) -> dict[str, list[str]]:
    """What did not come back to its idle figure after the season, by criterion (tasks, fds, apns): each
    process's and the fleet's figures at the end against the start, where only bounded pools may have grown
    (a pool opened lazily, or filled by the season's load, up to its size): APNs connections per pool up to
    its size, their reader and watchdog tasks with them, TCP sockets per peer up to its pool's bound. The
    engines' tasks are compared summed over the fleet (the leader's jobs move with its lease)."""
    problems: dict[str, list[str]] = {"tasks": [], "fds": [], "apns": []}
    engines = [n for n in start if n != "api"]
    apns_growth = 0
    for name in start:
        a, b = start[name], end.get(name) or {}
        for pool, n in (b.get("apns_pools") or {}).items():
            was = int((a.get("apns_pools") or {}).get(pool, 0))
            if n > max(was, bounds.get("apns", 0)):
                problems["apns"].append(f"{name}: {pool} pool {was} -> {n}")
            if name != "api":
                apns_growth += max(0, n - was)
        kinds_a, kinds_b = a.get("fds_by_kind") or {}, b.get("fds_by_kind") or {}
        for kind in set(kinds_a) | set(kinds_b):
            if kind in ("total", "socket"):
                continue
            if int(kinds_b.get(kind, 0)) > int(kinds_a.get(kind, 0)):
                problems["fds"].append(f"{name}: {kind} {kinds_a.get(kind, 0)} -> {kinds_b.get(kind, 0)}")
        peers_a, peers_b = _by_peer(a.get("tcp_peers") or {}), _by_peer(b.get("tcp_peers") or {})
        for peer, n in peers_b.items():
            was = peers_a.get(peer, 0)
            if n > was and n > bounds.get(peer, 0):
                problems["fds"].append(
                    f"{name}: sockets to {peer} {was} -> {n} (bound {bounds.get(peer, 0)})"
                )
        tcp_growth = sum(peers_b.values()) - sum(peers_a.values())
        socket_growth = int(kinds_b.get("socket", 0)) - int(kinds_a.get("socket", 0))
        if socket_growth > max(0, tcp_growth):
            problems["fds"].append(f"{name}: {socket_growth - max(0, tcp_growth)} sockets besides TCP peers")
    fleet_a: Counter[str] = Counter()
    fleet_b: Counter[str] = Counter()
    for name in engines:
        fleet_a.update(start[name].get("tasks_by_name") or {})
        fleet_b.update((end.get(name) or {}).get("tasks_by_name") or {})
    for task, n in fleet_b.items():
        grown = n - fleet_a.get(task, 0)
        if grown > 0 and not (task in POOL_TASKS and grown <= apns_growth):
            problems["tasks"].append(f"engines: {task} {fleet_a.get(task, 0)} -> {n}")
    api_a = Counter(start.get("api", {}).get("tasks_by_name") or {})
    api_b = Counter((end.get("api") or {}).get("tasks_by_name") or {})
    for task, n in api_b.items():
        if n > api_a.get(task, 0):
            problems["tasks"].append(f"api: {task} {api_a.get(task, 0)} -> {n}")
    return problems


def objects_grown(start: dict[str, Any], end: dict[str, Any], top: int = 10) -> dict[str, int]:
    """The types whose objects grew most from the idle start to the idle end (of the most common types)."""
    a, b = start.get("objects_by_type") or {}, end.get("objects_by_type") or {}
    grown = {kind: n - int(a.get(kind, 0)) for kind, n in b.items() if n > int(a.get(kind, 0))}
    return dict(sorted(grown.items(), key=lambda kv: -kv[1])[:top])


def traced_grown(warm: dict[str, Any], end: dict[str, Any], top: int = 15) -> dict[str, Any]:
    """The source lines whose traced memory grew most from the warm baseline to the end (``ctl runtime
    memory`` answers of one process), in KiB, with the traced totals; empty where either is missing."""
    a, b = warm.get("traced_by_line") or {}, end.get("traced_by_line") or {}
    if not a or not b:
        return {}
    grown = {line: round(kib - float(a.get(line, [0.0])[0]), 1) for line, (kib, _) in b.items()}
    lines = dict(sorted(((k, v) for k, v in grown.items() if v > 0), key=lambda kv: -kv[1])[:top])
    return {"traced_mb": [warm.get("traced_mb"), end.get("traced_mb")], "lines_kib": lines}


def _by_peer(peers: dict[str, int]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for key, n in peers.items():
        if not key.startswith("listen:"):
            out[key.split(":", 1)[0]] += n
    return dict(out)


class Season:
    def __init__(self, args: argparse.Namespace, workdir: Path, store_url: str, nginx: Any) -> None:
        self.args = args
        self.workdir = workdir
        tapes = season_tapes(args.matches, args.seed)
        self.tape_s = [tape_seconds(t) for t in tapes]
        durations = [(s + 2 * 600.0) / args.speed + OVERHEAD_S for s in self.tape_s]
        starts = expected_starts(durations, args.concurrent)
        # with the nemesis the fleet's clocks may disagree by its skew: the bound says so, and a shard's lease
        # must outlast its renewal period plus that bound (the config refuses less)
        skewed: dict[str, dict[str, Any]] = {"orchestrator": {}}
        if args.nemesis is not None:
            bound = CLOCK_SKEW_S + 1.0
            skewed = {
                "orchestrator": {"clock_skew_bound_s": bound},
                "fanout": {"shard_lease_s": FanoutSettings().shard_lease_s + bound},
            }
        self.region = Region(
            workdir / "region",
            moto_url=store_url,
            table_prefix="season-",
            tapes=tapes,
            crowd=[season_crowd() for _ in tapes],
            engines=args.instances,
            speed=args.speed,
            lead_s=args.lead_s,
            sock_dir=workdir,
            cadence_s=args.cadence,
            lease_s=args.lease,
            starts_in_s=starts,
            hold_s=3600.0 * 24,
            apns_peer=nginx,
            links=args.nemesis is not None,
            clock_offsets=args.nemesis is not None,
            engine_env={"PYTHONTRACEMALLOC": "1"} if args.tracemalloc else None,
            extra_config={
                **skewed,
                # a season compressed in time: taken shortly before the start, follows removed soon after
                "orchestrator": {
                    "prestart_s": args.prestart,
                    "follows_grace_s": args.follows_grace,
                    **skewed["orchestrator"],
                },
            },
        )
        self.match_ids = [str(t.fixture_id) for t in tapes]
        self.rss_after: dict[str, list[tuple[int, float]]] = {}
        self.objects_after: dict[str, list[int]] = {}  # per slot: the heap's objects after each match
        # with --tracemalloc, per slot: (pid, ``ctl runtime memory``) after the warm-up match and at the end
        self.traced: dict[str, dict[str, tuple[int, dict[str, Any]]]] = {"warm": {}, "end": {}}
        self.finished: list[str] = []
        self.samples_path = workdir / "samples.jsonl"
        self.idle_start: dict[str, dict[str, Any]] = {}
        self.idle_end: dict[str, dict[str, Any]] = {}
        self.peak: dict[str, dict[str, float]] = {}
        self.nemesis: Nemesis | None = None
        self.live: set[str] = set()
        self.last_match_at = 0.0
        self.t0 = time.monotonic()

    def slot_name(self, slot: int) -> str:
        return f"engine-{slot}"

    async def runtimes(self, *, objects: bool = False) -> dict[str, dict[str, Any] | None]:
        out: dict[str, dict[str, Any] | None] = {}
        for slot, engine in sorted(self.region.engines.items()):
            alive = engine.alive
            out[self.slot_name(slot)] = await self.region.runtime(engine, objects=objects) if alive else None
        out["api"] = await self.region.runtime(None, objects=objects)
        return out

    def peer_names(self) -> dict[int, str]:
        """The region's peers by port, for naming an engine's TCP sockets."""
        region = self.region
        names = {
            int(urlsplit(region.moto_url).port or 0): "dynamodb",
            int(region.replay_port): "sportmonks",
            int(region.apns.port): "apns",
            int(region.management_port): "apns_management",
        }
        if region.apns_peer is not None:
            names[int(region.apns_peer.port)] = "apns_nginx"
        for links in region.proxies.values():
            names[int(links["throttle"].port)] = "dynamodb"
            for name, proxy in links.items():
                if name != "throttle":
                    names[int(proxy.port)] = "dynamodb" if name == "dynamodb" else f"apns_{name}"
        return names

    async def idle(self) -> dict[str, dict[str, Any]]:
        names = self.peer_names()
        out = {}
        for name, runtime in (await self.runtimes(objects=True)).items():
            peers = tcp_peers(int(runtime["pid"]), names) if runtime is not None else None
            out[name] = idle_view(runtime, peers)
        return out

    async def sample(self) -> dict[str, Any]:
        at = round(time.monotonic() - self.t0, 1)
        processes = await self.runtimes()
        tables: dict[str, Any]
        try:
            tables = await self.region.table_items()
        except Exception as exc:  # noqa: BLE001 - a DynamoDB cut by the nemesis: the next sample reads them
            tables = {"error": str(exc)[:200]}
        stats = self.region.apns.stats()
        record = {
            "t": at,
            "processes": processes,
            "channels_open": stats["channels"]["open"],
            "channels_created": stats["channels"]["created"],
            "tables": tables,
            "live_matches": len(self.live),
            "finished": len(self.finished),
        }
        for name, runtime in processes.items():
            if runtime is None:
                continue
            peak = self.peak.setdefault(name, {"rss_mb": 0.0, "tasks": 0.0, "fds": 0.0, "threads": 0.0})
            peak["rss_mb"] = max(peak["rss_mb"], float(runtime.get("rss_mb") or 0))
            peak["tasks"] = max(peak["tasks"], float(runtime.get("tasks") or 0))
            peak["fds"] = max(peak["fds"], float((runtime.get("fds") or {}).get("total") or 0))
            peak["threads"] = max(peak["threads"], float(runtime.get("threads") or 0))
        with self.samples_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        return record

    async def sampler(self) -> None:
        while True:
            await self.sample()
            await trio.sleep(self.args.sample_s)

    async def play_match(self, match_id: str, slots: trio.Semaphore) -> None:
        """Play one match in a slot taken for it (released when it ends)."""
        region = self.region
        self.live.add(match_id)
        try:
            await region.sign_up_match(match_id)
            await region.wait_taken(match_id)
            region.go_live(match_id)
            await region.wait_activities(match_id)
            region.play(match_id)
            index = self.match_ids.index(match_id)
            await trio.sleep(self.tape_s[index] / self.args.speed / 2)
            await region.end_activities(match_id)
            while not await region.is_ended(match_id):
                await trio.sleep(1.0)
        finally:
            self.live.discard(match_id)
            slots.release()
        self.finished.append(match_id)
        for slot, engine in sorted(region.engines.items()):
            runtime = await region.runtime(engine, objects=True) if engine.alive else None
            if runtime is not None:
                name = self.slot_name(slot)
                self.rss_after.setdefault(name, []).append((int(runtime["pid"]), float(runtime["rss_mb"])))
                self.objects_after.setdefault(name, []).append(int(runtime["objects"]))
        if self.args.tracemalloc and len(self.finished) == WARMUP_MATCH:
            await self.trace("warm")

    async def trace(self, moment: str) -> None:
        for slot, engine in sorted(self.region.engines.items()):
            answer = await self.region.runtime(engine, memory=True) if engine.alive else None
            if answer is not None:
                self.traced[moment][self.slot_name(slot)] = (int(answer["pid"]), answer)

    async def run(self) -> dict[str, Any]:
        args = self.args
        region = self.region
        async with trio.open_nursery() as nursery:
            try:
                await region.start(nursery)
                nursery.start_soon(region.run_phones)
                self.t0 = time.monotonic()
                self.idle_start = await self.idle()
                nursery.start_soon(self.sampler)
                if args.nemesis is not None:
                    span = sum((s + 1200.0) / args.speed + OVERHEAD_S for s in self.tape_s) / args.concurrent
                    schedule = plan(args.nemesis, span_s=span, engines=args.instances)
                    self.nemesis = Nemesis(region, schedule)
                    nursery.start_soon(self.nemesis.run)
                slots = trio.Semaphore(args.concurrent)
                with trio.fail_after(args.timeout):
                    async with trio.open_nursery() as matches:
                        for match_id in self.match_ids:  # in their order: a slot, then the match
                            await slots.acquire()
                            matches.start_soon(self.play_match, match_id, slots)
                self.last_match_at = round(time.monotonic() - self.t0, 1)
                if self.nemesis is not None:  # the nemesis stops with the season's matches
                    await self.nemesis.stop()
                await trio.sleep(args.idle_s)
                self.idle_end = await self.idle()
                if args.tracemalloc:
                    await self.trace("end")
                final = await self.sample()
                lost = region.missing_key_events()
                twice = region.alerts_shown_twice()
                token_problems = await region.dead_tokens_cleaned(timeout=30)
            except BaseException:
                print(region.logs_tail(), file=sys.stderr)
                raise
            finally:
                codes = await region.stop()
                nursery.cancel_scope.cancel()
        return self.result(final, lost, twice, token_problems, codes)

    def result(
        self,
        final: dict[str, Any],
        lost: dict[str, list[str]],
        twice: dict[str, list[Any]],
        token_problems: list[str],
        codes: dict[str, int],
    ) -> dict[str, Any]:
        args = self.args
        engines = [self.slot_name(s) for s in range(args.instances)]
        rss_after = {name: [rss for _, rss in self.rss_after.get(name, [])] for name in engines}
        growth = {name: rss_growth(self.rss_after.get(name, [])) for name in engines}

        def pair(key: str) -> dict[str, list[Any]]:
            return {
                n: [self.idle_start.get(n, {}).get(key), self.idle_end.get(n, {}).get(key)] for n in engines
            }

        tasks_idle, fds_idle, apns_idle = pair("tasks"), pair("fds"), pair("apns")
        tables = final["tables"]
        never = {
            name: counts.get("never_expire", 0)
            for name, counts in tables.items()
            if isinstance(counts, dict)
            and TABLE_SPECS[name].ttl_attribute is not None
            and name not in RETAINED
        }
        lost_count = sum(len(v) for v in lost.values())
        faults: list[dict[str, Any]] = []
        if self.nemesis is not None:
            self.charge_losses(lost, self.nemesis.outcomes)
            faults = [o.as_dict() for o in self.nemesis.outcomes]

        idle = back_to_idle(self.idle_start, self.idle_end, pool_bounds())
        criteria = {
            "rss_growth_after_warmup_within_10pct": all(
                g is not None and g <= RSS_GROWTH_MAX for g in growth.values()
            ),
            "tasks_back_to_idle": not idle["tasks"],
            "fds_back_to_idle": not idle["fds"],
            "apns_connections_back_to_idle": not idle["apns"],
            "no_channel_open": final["channels_open"] == 0,
            "nothing_per_match_that_never_expires": not any(never.values()),
            "lost_zero": lost_count == 0,
            "duplicate_alerts_zero": not twice,
            "dead_and_changed_tokens_cleaned": not token_problems,
            "engines_exit_0": all(code == 0 for code in codes.values()),
        }
        if self.nemesis is not None:
            criteria["every_fault_ok"] = all(o.ok for o in self.nemesis.outcomes)
        return {
            "matches": args.matches,
            "finished": len(self.finished),
            "concurrent": args.concurrent,
            "instances": args.instances,
            "speed": args.speed,
            "nemesis": args.nemesis,
            "wall_s": round(time.monotonic() - self.t0, 1),
            "last_match_at_s": self.last_match_at,
            "rss_mb_after_match": rss_after,
            "rss_growth_after_warmup": growth,
            "tasks_idle": tasks_idle,
            "fds_idle": fds_idle,
            "apns_connections_idle": apns_idle,
            "peak": self.peak,
            "channels_open_end": final["channels_open"],
            "channels_created": final["channels_created"],
            "items_by_table_end": tables,
            "lost": lost_count,
            "lost_detail": dict(list(lost.items())[:10]),
            "duplicate_alerts": len(twice),
            "duplicate_detail": {k: [list(a) for a in v] for k, v in list(twice.items())[:10]},
            "token_problems": token_problems[:10],
            "exit_codes": codes,
            "faults": faults,
            "objects_after_match": self.objects_after,
            "objects_grown": {
                n: objects_grown(self.idle_start.get(n, {}), self.idle_end.get(n, {})) for n in engines
            },
            **({"traced_grown": self.traced_growth(engines)} if args.tracemalloc else {}),
            "not_back_to_idle": idle,
            "idle_detail": {"start": self.idle_start, "end": self.idle_end},
            "criteria": criteria,
            "ok": all(criteria.values()),
        }

    def traced_growth(self, engines: list[str]) -> dict[str, Any]:
        """Per slot, the lines whose traced memory grew from the warm-up to the end, within one process."""
        out: dict[str, Any] = {}
        for name in engines:
            warm, end = self.traced["warm"].get(name), self.traced["end"].get(name)
            if warm is not None and end is not None and warm[0] == end[0]:
                out[name] = traced_grown(warm[1], end[1])
        return out

    def charge_losses(self, lost: dict[str, list[str]], outcomes: list[Outcome]) -> None:
        """Charge each missing wicket to the fault whose window held its ball (served at the replay server);
        a missing end to the fault whose window held the match's end."""
        replay = self.region.replay
        for key, missing in lost.items():
            match_id = key.split("/", 1)[0]
            for what in missing:
                ball = wicket_ball(self.region.crowds[match_id].tape, what.removeprefix("wicket "))
                served = None if ball is None else replay.ball_id_served_at(match_id, ball)
                if served is None:
                    continue
                at_s = served - (time.time() - (time.monotonic() - self.t0))
                fault = window_holding(outcomes, at_s, self.region.lease_s)
                if fault is not None:
                    fault.lost += 1


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--matches", type=int, default=30)
    parser.add_argument("--concurrent", type=int, default=6)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--nemesis", type=int, default=None, metavar="SEED")
    parser.add_argument("--speed", type=float, default=250.0, help="real ball timing compressed by this")
    parser.add_argument("--seed", type=int, default=1000, help="the first tape's synthesis seed")
    parser.add_argument("--cadence", type=float, default=0.5, help="the feed's polling cadence, seconds")
    parser.add_argument("--lease", type=float, default=10.0, help="the match lease, seconds")
    parser.add_argument("--prestart", type=float, default=30.0, help="a fixture is taken this long before")
    parser.add_argument("--follows-grace", type=float, default=20.0, help="an ended match's follows go after")
    parser.add_argument("--lead-s", type=float, default=60.0, help="the first match's scheduled start")
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--idle-s", type=float, default=60.0, help="the wait after the last match")
    parser.add_argument("--timeout", type=float, default=1500.0, help="the matches' time limit")
    parser.add_argument("--apns", default="nginx", choices=["nginx", "python"])
    parser.add_argument("--dynamodb", default="dynalite", choices=["dynalite", "moto"])
    parser.add_argument("--keep-workdir", action="store_true")
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="start the engines tracing Python's allocations and report the lines whose memory grew after "
        "the warm-up (traced_grown); tracing slows them, so their figures are for a diagnosis only",
    )
    args = parser.parse_args()
    if args.matches < 1 or args.concurrent < 1 or args.instances < 1:
        parser.error("--matches, --concurrent and --instances: at least 1")
    workdir = Path(tempfile.mkdtemp(prefix="ss-season-"))
    store: Any = (
        DynaliteServer(log_path=workdir / "dynalite.log").start()
        if args.dynamodb == "dynalite"
        else MotoServer().start()
    )
    nginx = NginxApns(record_path=workdir / "apns-records.jsonl").start() if args.apns == "nginx" else None
    try:
        result = trio.run(Season(args, workdir, store.url, nginx).run)
        result["workdir"] = str(workdir) if args.keep_workdir else None
    finally:
        if nginx is not None:
            nginx.stop()
        store.stop()
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
