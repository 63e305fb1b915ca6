"""Load on the app's API: a registration burst and display reads during a live match, against dynalite.

    python bench/api_load.py [--users 2000] [--display-s 10] [--clients 2] [--concurrency 32]
                             [--bare-s 5] [--dynamodb dynalite|moto]

What runs, all on loopback:

- dynalite (``tests/harness/dynalite.py``, as ``bench/soak.py --dynamodb dynalite`` starts it) with the
  tables created;
- the local issuer (``daemon.api.issuer``), its JWKS over HTTP;
- the API as production runs it: ``python -m daemon run --config FILE`` with ``roles = ["api"]`` in its own
  process (hypercorn on trio, default settings: 1 s display cache, the per-user rate limit, access log
  lines at info level written to /dev/null);
- ``--clients`` load processes (httpx on trio, ``--concurrency`` requests in flight each).

Phases, each printed as requests/s, p50/p99 latency and errors (any non-2xx answer or transport error):

(a) registration burst: ``--users`` app users (each its own token) register a Live Activity session for one
    match at once (``POST /user/activity/{id}``), as when push-to-start reaches every follower; afterwards
    the match's sessions are counted in the table (no request lost);
(b) display reads during a live match: the same users poll ``GET /matches/{id}/display`` (neutral and
    both teams) for ``--display-s`` seconds while a writer in this process replaces the three display states
    every second, as the match engine does per tick.

Beside them, measured in the same run on the same peer: bare boto3 ``UpdateItem`` (the registration's write)
and ``GetItem`` (the display read) calls per second from one process, one call after another. Targets:
registrations >= 2/3 of the bare UpdateItem rate; display reads >= 2x the bare GetItem rate; no request
lost or answered 5xx. The script prints the verdicts; it never fails on them (figures, not a test).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MATCH = "777001"
TEAMS = ("7101", "7102")


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- load client process --------------------------------------------------------------------------------


def _client(base: str, jobs: list[dict[str, Any]], concurrency: int, duration_s: float, out: Any) -> None:
    """Run ``jobs`` (once each, or round-robin for ``duration_s`` when > 0); put (latencies, statuses)."""
    import httpx
    import trio

    async def main() -> None:
        latencies: list[float] = []
        statuses: dict[str, int] = {}
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as http:
            next_job = 0
            deadline = trio.current_time() + duration_s

            async def worker() -> None:
                nonlocal next_job
                while True:
                    if duration_s > 0:
                        if trio.current_time() >= deadline:
                            return
                        job = jobs[next_job % len(jobs)]
                    else:
                        if next_job >= len(jobs):
                            return
                        job = jobs[next_job]
                    next_job += 1
                    t0 = time.perf_counter()
                    try:
                        resp = await http.request(job["method"], job["path"], headers=job["headers"],
                                                  content=job.get("body"))
                        key = str(resp.status_code)
                    except httpx.HTTPError as exc:
                        key = type(exc).__name__
                    latencies.append(time.perf_counter() - t0)
                    statuses[key] = statuses.get(key, 0) + 1

            started = time.perf_counter()
            async with trio.open_nursery() as n:
                for _ in range(concurrency):
                    n.start_soon(worker)
            took = time.perf_counter() - started
        out.put((latencies, statuses, took))

    trio.run(main)


def run_load(base: str, jobs: list[dict[str, Any]], clients: int, concurrency: int, duration_s: float = 0.0) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    shares = [jobs[i::clients] for i in range(clients)] if duration_s <= 0 else [jobs[i::clients] or jobs for i in range(clients)]
    procs = [ctx.Process(target=_client, args=(base, share, concurrency, duration_s, q)) for share in shares]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    lat = [x for r in results for x in r[0]]
    statuses: dict[str, int] = {}
    for _, st, _took in results:
        for k, v in st.items():
            statuses[k] = statuses.get(k, 0) + v
    n = len(lat)
    ok = sum(v for k, v in statuses.items() if k.startswith("2"))
    # the wall time includes starting the client processes: the rate is over the clients' own load time
    busy = max((r[2] for r in results), default=wall)
    return {
        "requests": n,
        "rps": n / busy if n and busy > 0 else 0.0,
        "p50_ms": _pct(lat, 0.50) * 1000,
        "p99_ms": _pct(lat, 0.99) * 1000,
        "errors": n - ok,
        "statuses": statuses,
    }


# --- bare boto3 from one process --------------------------------------------------------------------------


def bare_calls(endpoint: str, prefix: str, seconds: float) -> dict[str, float]:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "dynamodb", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x",
        config=Config(retries={"mode": "standard", "max_attempts": 5}),
    )
    la_table, cache_table = f"{prefix}live-activities", f"{prefix}DisplayStateCache"
    out: dict[str, float] = {}
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        client.update_item(
            TableName=la_table,
            Key={"matchId": {"S": "bare-match"}, "visitorKey": {"S": f"bare-user-{n}#dev"}},
            UpdateExpression="SET #u = :u, #d = :d, #t = :t, #s = :s, #st = :st REMOVE #sa, #ea, #er",
            ExpressionAttributeNames={"#u": "userId", "#d": "deviceId", "#t": "updateToken", "#s": "status",
                                      "#st": "sessionStartedAt", "#sa": "suspendedAt", "#ea": "endedAt", "#er": "endReason"},
            ExpressionAttributeValues={":u": {"S": f"bare-user-{n}"}, ":d": {"S": "dev"}, ":t": {"S": "ab" * 32},
                                       ":s": {"S": "active"}, ":st": {"S": "2026-01-01T00:00:00.000Z"}},
        )
        n += 1
    out["update_item_per_s"] = n / (time.perf_counter() - t0)
    out["update_item_cpu_ms"] = 1000 * (time.process_time() - c0) / max(1, n)
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        client.get_item(TableName=cache_table, Key={"matchId": {"S": f"DISPLAY#{MATCH}#neutral"}})
        n += 1
    out["get_item_per_s"] = n / (time.perf_counter() - t0)
    out["get_item_cpu_ms"] = 1000 * (time.process_time() - c0) / max(1, n)
    return out


# --- the run ----------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=2000, help="app users in the registration burst")
    parser.add_argument("--display-s", type=float, default=10.0, help="seconds of display polling")
    parser.add_argument("--bare-s", type=float, default=5.0, help="seconds of each bare boto3 measurement")
    parser.add_argument("--clients", type=int, default=2, help="load-generating processes")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight per load process")
    parser.add_argument("--dynamodb", choices=["dynalite", "moto"], default="dynalite")
    args = parser.parse_args()

    import trio

    from daemon.api.issuer import LocalIssuer
    from daemon.store import Dynamo, DynamoSettings, Repositories, create_tables
    from daemon.store.local import MotoServer, free_port, stop_child
    from tests.harness.dynalite import DynaliteServer

    workdir = Path(tempfile.mkdtemp(prefix="sightscreen-api-load-"))
    store: Any = DynaliteServer(log_path=workdir / "dynalite.log") if args.dynamodb == "dynalite" else MotoServer()
    store.start()
    issuer = LocalIssuer().serve()
    prefix = "apiload-"
    api_proc = None
    try:
        settings = DynamoSettings(endpoint_url=store.url, table_prefix=prefix)

        async def setup() -> None:
            dynamo = Dynamo(settings)
            await create_tables(dynamo)
            repos = Repositories(dynamo)
            await repos.fixtures.batch_write_fixtures([{"matchId": MATCH, "leagueCode": "LOAD", "live": True,
                                                        "localteamId": TEAMS[0], "visitorteamId": TEAMS[1]}])
            for team in ("neutral", *TEAMS):
                await repos.display_cache.set_cached_display_state(MATCH, team, {"score": "0/0", "team": team}, ttl_s=3600)
            dynamo.close()

        trio.run(setup)
        port = free_port()
        config = workdir / "api.toml"
        config.write_text(
            "\n".join(
                [
                    "[instance]", 'id = "api-load-1"', 'roles = ["api"]',
                    "[dynamodb]", f'endpoint_url = "{store.url}"', f'table_prefix = "{prefix}"', "max_threads = 16",
                    "[admin]", 'socket_path = ""',
                    "[api]", f'listen = "127.0.0.1:{port}"',
                    "[auth]", f'issuer = "{issuer.issuer}"', f'jwks_url = "{issuer.jwks_url}"',
                    f'client_ids = ["{issuer.client_id}"]',
                ]
            )
            + "\n"
        )
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
               "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
        api_proc = subprocess.Popen([sys.executable, "-m", "daemon", "run", "--config", str(config)],
                                    stdout=subprocess.DEVNULL, stderr=open(workdir / "api.err", "wb"), env=env)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/readyz", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or api_proc.poll() is not None:
                raise RuntimeError(f"the API did not become ready; see {workdir / 'api.err'}")
            time.sleep(0.2)

        print(f"api_load: {args.users} users, {args.clients} clients x {args.concurrency} in flight, "
              f"DynamoDB peer {args.dynamodb}, API {base}", flush=True)
        tokens = [issuer.mint(f"load-user-{i:06d}") for i in range(args.users)]

        bare = bare_calls(store.url, prefix, args.bare_s)

        body = lambda i: json.dumps({"deviceId": "iphone", "updateToken": f"{i:064x}"}).encode()  # noqa: E731
        reg_jobs = [
            {"method": "POST", "path": f"/user/activity/{MATCH}", "body": body(i),
             "headers": {"Authorization": f"Bearer {tokens[i]}", "Content-Type": "application/json"}}
            for i in range(args.users)
        ]
        c0 = cpu_s(api_proc.pid)
        registration = run_load(base, reg_jobs, args.clients, args.concurrency)
        registration["api_cpu_ms"] = 1000 * (cpu_s(api_proc.pid) - c0) / max(1, registration["requests"])

        async def count_sessions() -> int:
            dynamo = Dynamo(settings)
            try:
                return len(await Repositories(dynamo).live_activities.get_all_la_sessions_for_match(MATCH, fields=("visitorKey",)))
            finally:
                dynamo.close()

        stored = trio.run(count_sessions)

        disp_jobs = [
            {"method": "GET", "path": f"/matches/{MATCH}/display" + ("" if i % 3 == 0 else f"?team={TEAMS[i % 2]}"),
             "headers": {"Authorization": f"Bearer {tokens[i]}"}}
            for i in range(args.users)
        ]

        async def live_writer(stop_after: float) -> int:
            dynamo = Dynamo(settings)
            repos = Repositories(dynamo)
            ticks = 0
            with trio.move_on_after(stop_after):
                while True:
                    ticks += 1
                    for team in ("neutral", *TEAMS):
                        await repos.display_cache.set_cached_display_state(
                            MATCH, team, {"score": f"{ticks}/0", "team": team}, ttl_s=3600)
                    await trio.sleep(1.0)
            dynamo.close()
            return ticks

        import threading

        ticks: list[int] = []
        writer = threading.Thread(target=lambda: ticks.append(trio.run(live_writer, args.display_s + 5)))
        writer.start()
        c0 = cpu_s(api_proc.pid)
        display = run_load(base, disp_jobs, args.clients, args.concurrency, duration_s=args.display_s)
        display["api_cpu_ms"] = 1000 * (cpu_s(api_proc.pid) - c0) / max(1, display["requests"])
        writer.join()

        def row(name: str, r: dict[str, Any]) -> None:
            print(f"{name:<34} {r['requests']:>7} req  {r['rps']:>8.0f} req/s  p50 {r['p50_ms']:>6.1f} ms  "
                  f"p99 {r['p99_ms']:>7.1f} ms  API CPU {r['api_cpu_ms']:.2f} ms/req  errors {r['errors']}  "
                  f"{r['statuses']}")

        print()
        row("POST /user/activity/{id} (burst)", registration)
        row("GET /matches/{id}/display (live)", display)
        print(f"{'bare boto3 UpdateItem (1 process)':<34} {bare['update_item_per_s']:>22.0f} calls/s  "
              f"client CPU {bare['update_item_cpu_ms']:.2f} ms/call")
        print(f"{'bare boto3 GetItem (1 process)':<34} {bare['get_item_per_s']:>22.0f} calls/s  "
              f"client CPU {bare['get_item_cpu_ms']:.2f} ms/call")
        print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"sessions stored after the burst: {stored} of {args.users}; display writer ticks: {ticks[0] if ticks else 0}")
        five_xx = sum(v for k, v in {**registration['statuses']}.items() if k.startswith("5")) + sum(
            v for k, v in display["statuses"].items() if k.startswith("5"))
        reg_ratio = registration["rps"] / bare["update_item_per_s"]
        disp_ratio = display["rps"] / bare["get_item_per_s"]
        verdict = {
            "registrations_vs_bare_update": round(reg_ratio, 2),
            "registrations_target_met": reg_ratio >= 2 / 3,
            "display_vs_bare_get": round(disp_ratio, 2),
            "display_target_met": disp_ratio >= 2,
            "lost": args.users - stored,
            "answered_5xx": five_xx,
        }
        print(json.dumps({"verdict": verdict}))
        return 0
    finally:
        if api_proc is not None:
            stop_child(api_proc)
        issuer.stop()
        store.stop()


if __name__ == "__main__":
    sys.exit(main())
