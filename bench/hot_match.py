"""One hot match shared by the fleet: a ball's fan-out with 1, 2 and 3 instances, sharing on and off.

    python bench/hot_match.py [--tokens 100000] [--instances 1,2,3] [--sharing off,on] [--duration 180]
                              [--drain 40] [--speed 1] [--cadence 2.5] [--lease 10] [--shard-size N]
                              [--share-above N] [--board-poll-s S] [--engine-cpu C] [--apns-workers N]
                              [--apns-connections N] [--shards-at-once N] [--seed 1] [--format T20]

One synthesised match with ``--tokens`` per-token followers (iOS 17: one push per device per ball) played at
``--speed`` (1: real speed) against dynalite (DynamoDB) and nginx (the recording APNs peer,
``tests/harness/nginx_apns.py``), once per configuration, back to back on the same machine: every instance
count of ``--instances`` with each ``--sharing`` setting (off: ``[fanout].share_above = 0``, the owner fans
out alone; on: ``share_above`` below the audience, so the match is hot and every engine delivers shards). Each
configuration starts from empty tables with the same tape and seed, runs ``--duration`` seconds of play, then
``--drain`` seconds for the last fan-out to finish.

``--engine-cpu C`` holds each instance to ``C`` CPUs once it is up (``bench/cpucap.py``: a cgroup's CFS
quota, as ECS gives a task its vCPUs): the engines then run within budgets of their own, as on separate tasks,
and the APNs and DynamoDB stand-ins on this machine keep the rest. Uncapped, every process shares the same
cores, and ``nginx_cpu_s`` shows when the APNs stand-in (one nginx worker: at most one core) is what sets the
pace rather than the engines; ``--apns-workers N`` gives it N workers. ``--apns-connections N`` sets each
engine's ``[apns].connections`` (the HTTP/2 connections its sender spreads its pushes over).

Figures per configuration (from nginx's record of every push: its time, token and the push's aps timestamp,
which names the tick; and from each instance's ``/proc`` and metrics):

- ``fanout_s``: per ball, the first to the last token's accepted push of the tick that carried it (p50 and
  max over the balls); a ball's tick is the first tick whose first push came after the ball was served;
- ``lag_p99_s``: from each ball's appearance at the replay server to each token's accepted push of its tick
  (the wait for the next poll, up to a cadence, included), p99 over every token of every ball;
- ``share``: each instance's part of the per-token pushes it sent during the run (its sender's accepted
  pushes, ``sightscreen_pushes_total``), and ``max_share``;
- ``cpu_us_per_push``: the instances' CPU (utime + stime, all of them: the share worker's polls and a helper's
  first read of the match's audience count) over the pushes accepted, from the instances being up to the end
  of the drain; ``dynalite_cpu_s`` and ``nginx_cpu_s``: the DynamoDB and APNs stand-ins' CPU over the same
  window (they share the machine);
- ``lost``: tokens a ball's tick did not reach; ``duplicates``: pushes of a tick to a token beyond its first;
- ``dynamodb``: the region's DynamoDB calls of the run (``sightscreen_dynamodb_calls_total``, all
  instances) per ball, and those to the lock table (``cricket-locks``: the leases, and with sharing the hot
  list, the boards and the shards) by operation per ball: sharing's cost is the difference on and off.

Then the ratios: each sharing run's median ball fan-out over that of the run just before it with as many
instances and one owner doing the whole fan-out (the same minutes of the shared machine; target: two
instances at most 0.6x), and over one instance alone; and the targets (no instance above 65% of the pushes
when shared, lost 0, duplicates 0). The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cpucap import CpuCap  # noqa: E402 - beside this script

from daemon.replay.synth import synthesise  # noqa: E402
from tests.harness import procfs  # noqa: E402
from tests.harness.cluster import Cluster, admin_request  # noqa: E402
from tests.harness.dynalite import DynaliteServer  # noqa: E402
from tests.harness.nginx_apns import NginxApns  # noqa: E402


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def _metric(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def _label(head: str, name: str) -> str:
    return head.split(f'{name}="', 1)[1].split('"', 1)[0] if f'{name}="' in head else "?"


def _dynamodb_calls(text: str) -> dict[str, float]:
    """DynamoDB calls by table and operation ("table:Operation"), from the daemon's call counter."""
    out: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        if line.startswith("sightscreen_dynamodb_calls_total{"):
            head, _, value = line.rpartition(" ")
            out[f"{_label(head, 'table')}:{_label(head, 'operation')}"] += float(value)
    return dict(out)


def ball_ticks(served: list[float], ticks: dict[int, dict[str, Any]]) -> list[tuple[float, int]]:
    """Each served ball (its time) with the tick that carried it (its stamp): the first tick whose first push
    came after the ball was served; a ball whose tick never came is left out (the run ended first)."""
    order = sorted(ticks, key=lambda s: ticks[s]["first"])
    out: list[tuple[float, int]] = []
    used: set[int] = set()
    for at in sorted(served):
        stamp = next((s for s in order if ticks[s]["first"] >= at and s not in used), None)
        if stamp is not None:
            used.add(stamp)
            out.append((at, stamp))
    return out


def tick_figures(records: list[dict[str, Any]], tokens: set[str], served: list[float]) -> dict[str, Any]:
    """Per-ball fan-out, lag, lost and duplicates from nginx's accepted per-token pushes."""
    ticks: dict[int, dict[str, Any]] = {}
    for r in records:
        if r["status"] != 200 or r["token"] not in tokens or r.get("stamp") is None:
            continue
        t = ticks.setdefault(
            r["stamp"], {"first": r["time"], "last": r["time"], "times": {}, "pushes": 0, "alert": False}
        )
        t["alert"] = t["alert"] or "alert" in ((r.get("payload") or {}).get("aps") or {})
        t["first"] = min(t["first"], r["time"])
        t["last"] = max(t["last"], r["time"])
        t["pushes"] += 1
        t["times"].setdefault(r["token"], r["time"])
    balls = ball_ticks(served, ticks)
    fanouts: list[float] = []
    lags: list[float] = []
    lost = duplicates = 0
    per_ball = []
    for at, stamp in balls:
        t = ticks[stamp]
        fanouts.append(t["last"] - t["first"])
        lags.extend(time_ - at for time_ in t["times"].values())
        lost += len(tokens) - len(t["times"])
        duplicates += t["pushes"] - len(t["times"])
        per_ball.append(
            {
                "served_to_first_s": round(t["first"] - at, 2),
                "fanout_s": round(t["last"] - t["first"], 2),
                "reached": len(t["times"]),
                "alerting": t["alert"],
            }
        )
    return {
        "balls": len(balls),
        "per_ball": per_ball,
        "fanout_s": {"p50": _round(_pct(fanouts, 0.5)), "max": _round(max(fanouts) if fanouts else None)},
        "lag_p99_s": _round(_pct(lags, 0.99)),
        "lag_p50_s": _round(_pct(lags, 0.5)),
        "lost": lost,
        "duplicates": duplicates,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


async def run_one(
    args: argparse.Namespace, store: DynaliteServer, instances: int, sharing: bool
) -> dict[str, Any]:
    label = f"{instances}-{'on' if sharing else 'off'}"
    workdir = Path(tempfile.mkdtemp(prefix=f"sightscreen-hot-{label}-"))
    nginx = NginxApns(record_path=workdir / "apns-records.jsonl", workers=args.apns_workers).start()
    share_above = (args.share_above or max(1, args.tokens // 2)) if sharing else 0
    fanout: dict[str, Any] = {"share_above": share_above}
    if args.shard_size:
        fanout["shard_size"] = args.shard_size
    if args.board_poll_s:
        fanout["board_poll_s"] = args.board_poll_s
    if args.shards_at_once:
        fanout["shards_at_once"] = args.shards_at_once
    apns: dict[str, Any] = {"connections": args.apns_connections} if args.apns_connections else {}
    tape = synthesise(args.format, seed=args.seed)
    match_id = str(tape.fixture_id)
    cluster = Cluster(
        workdir,
        moto_url=store.url,
        tapes=[tape],
        table_prefix=f"hot{label}-{int(time.time())}-",
        speed=args.speed,
        followers_per_match=args.tokens,
        lease_s=args.lease,
        cadence_s=args.cadence,
        cycle_s=min(5.0, args.lease),
        innings_break_s=1200.0,
        start_delay_wall_s=args.start_delay,
        apns_peer=(nginx.url, nginx.ca_file),
        extra_config={"match": {"session_refresh_s": 600.0}, "fanout": fanout, "apns": apns},
        prematch_settled=True,
    )
    started = time.time()
    caps: list[CpuCap] = []
    cpu0: dict[int, float] = {}
    metrics0: dict[int, str] = {}
    metrics1: dict[int, str] = {}
    cpu1: dict[int, float] = {}
    try:
        async with trio.open_nursery() as nursery:
            try:
                await cluster.start(nursery, instances=instances)
                up = time.time()
                print(
                    f"hot_match {label}: {args.tokens} tokens, up after {up - started:.0f} s", file=sys.stderr
                )
                for slot, inst in cluster.instances.items():
                    if args.engine_cpu:  # after the start: the registrations of the audience run uncapped
                        cap = CpuCap(args.engine_cpu, f"sightscreen-bench-{label}-i{slot}-{os.getpid()}")
                        caps.append(cap)
                        cap.add(inst.proc.pid)
                store_cpu0 = procfs.cpu_s(store.proc.pid) if store.proc else None
                nginx_cpu0 = nginx.cpu_s()
                for slot, inst in cluster.instances.items():
                    cpu0[slot] = procfs.cpu_s(inst.proc.pid) or 0.0
                    text = await admin_request(cluster.admin_socket(inst), "metrics")
                    metrics0[slot] = text if isinstance(text, str) else ""
                await trio.sleep(args.duration)
                cluster.replay.pause(match_id)
                await trio.sleep(args.drain)
                store_cpu1 = procfs.cpu_s(store.proc.pid) if store.proc else None
                nginx_cpu1 = nginx.cpu_s()
                for slot, inst in cluster.instances.items():
                    cpu1[slot] = procfs.cpu_s(inst.proc.pid) or 0.0
                    text = await admin_request(cluster.admin_socket(inst), "metrics")
                    metrics1[slot] = text if isinstance(text, str) else ""
                served = [
                    at
                    for idx in range(len(tape))
                    if (at := cluster.replay.ball_served_at(match_id, idx)) is not None and at >= up
                ]
            finally:
                with trio.CancelScope(shield=True):
                    await cluster.stop_all()
                nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(nginx.stop)
        for cap in caps:
            cap.remove()
    tokens = set(cluster.matches[match_id].tokens)
    records = list(nginx.records())
    figures = tick_figures(records, tokens, served)
    pushes = {
        slot: _metric(metrics1[slot], "sightscreen_pushes_total", outcome="accepted")
        - _metric(metrics0[slot], "sightscreen_pushes_total", outcome="accepted")
        for slot in metrics1
    }
    total = sum(pushes.values()) or 1.0
    cpu = {slot: cpu1[slot] - cpu0[slot] for slot in cpu1}
    calls: dict[str, float] = defaultdict(float)
    for slot in metrics1:
        after, before = _dynamodb_calls(metrics1[slot]), _dynamodb_calls(metrics0[slot])
        for op, n in after.items():
            calls[op] += n - before.get(op, 0.0)
    balls = max(1, figures["balls"])
    result = {
        "config": label,
        "instances": instances,
        "sharing": sharing,
        "share_above": share_above,
        "tokens": args.tokens,
        **figures,
        "pushes": int(sum(pushes.values())),
        "share": {f"i{slot}": round(n / total, 3) for slot, n in sorted(pushes.items())},
        "max_share": round(max(pushes.values()) / total, 3) if pushes else None,
        "cpu_s": {f"i{slot}": round(c, 1) for slot, c in sorted(cpu.items())},
        "cpu_us_per_push": round(sum(cpu.values()) / total * 1e6, 1),
        "dynalite_cpu_s": None
        if store_cpu0 is None or store_cpu1 is None
        else round(store_cpu1 - store_cpu0, 1),
        "nginx_cpu_s": None
        if nginx_cpu0 is None or nginx_cpu1 is None
        else round(nginx_cpu1 - nginx_cpu0, 1),
        "engine_cpu_cap": args.engine_cpu or None,
        "dynamodb": {
            "calls": int(sum(calls.values())),
            "per_ball": round(sum(calls.values()) / balls, 1),
            "locks_per_ball": {
                k.split(":", 1)[1]: round(v / balls, 1) for k, v in sorted(calls.items()) if "locks" in k
            },
        },
    }
    if args.keep_workdir:
        print(f"hot_match {label}: logs and records kept in {workdir}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result), file=sys.stderr)
    return result


def ratios(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each sharing run's median ball fan-out over the one-owner run with as many instances, run just before
    it (the same machine minutes), and over one instance's alone; and the targets."""

    def p50(r: dict[str, Any] | None) -> float | None:
        return None if r is None else r["fanout_s"]["p50"]

    off = {r["instances"]: r for r in results if not r["sharing"]}
    vs_own: dict[str, float] = {}
    vs_one: dict[str, float] = {}
    for r in results:
        mine, own, one = p50(r), p50(off.get(r["instances"])), p50(off.get(1))
        if r["sharing"] and mine is not None and own:
            vs_own[r["config"]] = round(mine / own, 2)
        if mine is not None and one:
            vs_one[r["config"]] = round(mine / one, 2)
    targets = {
        "two_instances_fanout_at_most_0.6x_of_one_owner": None
        if "2-on" not in vs_own
        else vs_own["2-on"] <= 0.6,
        "no_instance_above_65pct_when_shared": all(
            (r["max_share"] or 0) <= 0.65 for r in results if r["sharing"] and r["instances"] > 1
        ),
        "lost_0": all(r["lost"] == 0 for r in results),
        "duplicates_0": all(r["duplicates"] == 0 for r in results),
    }
    return {
        "fanout_vs_one_owner_same_instances": vs_own,
        "fanout_vs_one_instance_alone": vs_one,
        "targets": targets,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="sightscreen-hot-store-"))
    store = DynaliteServer(log_path=workdir / "dynalite.log").start()
    results: list[dict[str, Any]] = []
    try:
        for n in args.instances:
            for sharing in args.sharing:
                results.append(await run_one(args, store, n, sharing))
    finally:
        await trio.to_thread.run_sync(store.stop)
        shutil.rmtree(workdir, ignore_errors=True)
    return {"command": " ".join(sys.argv), "runs": results, **ratios(results)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=100_000, help="per-token followers of the match")
    parser.add_argument(
        "--instances", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3], help="e.g. 1,2,3"
    )
    parser.add_argument(
        "--sharing",
        type=lambda s: [{"on": True, "off": False}[x] for x in s.split(",")],
        default=[False, True],
        help="off,on",
    )
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of play per configuration")
    parser.add_argument("--drain", type=float, default=40.0, help="seconds after play for the last fan-out")
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--cadence", type=float, default=2.5)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--start-delay", type=float, default=10.0, help="wall seconds before the first ball")
    parser.add_argument(
        "--apns-connections", type=int, default=0, help="each engine's [apns].connections (0: the default)"
    )
    parser.add_argument("--shard-size", type=int, default=0, help="[fanout].shard_size (0: the default)")
    parser.add_argument(
        "--shards-at-once", type=int, default=0, help="[fanout].shards_at_once (0: the default)"
    )
    parser.add_argument(
        "--board-poll-s", type=float, default=0.0, help="[fanout].board_poll_s (0: the default)"
    )
    parser.add_argument(
        "--engine-cpu",
        type=float,
        default=0.0,
        help="hold each instance to this many CPUs (a cgroup CFS quota, as a task's vCPUs; 0: uncapped)",
    )
    parser.add_argument(
        "--apns-workers", type=int, default=1, help="nginx workers of the APNs stand-in (one: at most a core)"
    )
    parser.add_argument("--share-above", type=int, default=0, help="when on (0: half the tokens)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--format", default="T20")
    parser.add_argument("--keep-workdir", action="store_true")
    args = parser.parse_args(argv)
    result = trio.run(main_async, args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
