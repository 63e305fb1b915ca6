"""Load on the app's API: a registration burst and display reads during a live match, against dynalite.

    python bench/api_load.py [--users 2000] [--display-s 10] [--clients 1] [--concurrency 64]
                             [--bare-s 5] [--rounds 3] [--dynamodb dynalite|moto]
    python bench/api_load.py --layers-only

``--layers-only`` measures the application's own share instead: the CPU of a cached display read through
the whole ASGI stack of ``build_app`` (access log, HTTP rules, gate, display fast path), called in a loop in
this process with no socket and no server, the best of five rounds of 2,000 reads (a third neutral, the rest
a team's).

What runs, all on loopback:

- dynalite (``tests/harness/dynalite.py``, as ``bench/soak.py --dynamodb dynalite`` starts it) with the
  tables created;
- the local issuer (``daemon.demo.issuer``), its JWKS over HTTP;
- the API as production runs it: ``python -m daemon run --config FILE`` with ``roles = ["api"]`` in its own
  process (hypercorn on trio, default settings: 1 s display cache, the per-user rate limit, access log
  lines at info level written to a file);
- ``--clients`` load processes (a minimal HTTP/1.1 client on one epoll loop, ``--concurrency`` keep-alive
  connections each, one request in flight per connection): it shares the cores with the API, so it is
  kept to a few tens of microseconds of CPU a request, and its CPU per request is printed.

Phases, each printed as requests/s, p50/p99 latency and errors (any non-2xx answer or transport error):

(a) registration burst: ``--users`` app users (each its own token) register a Live Activity session for one
    match at once (``POST /user/activity/{id}``), as when push-to-start reaches every follower; afterwards
    the match's sessions are counted in the table (no request lost);
(b) display reads during a live match: the same users poll ``GET /matches/{id}/display`` (neutral and
    both teams) for ``--display-s`` seconds while a writer in this process replaces the three display states
    every second, as the match engine does per tick.

Beside them, measured in the same run on the same peer: bare boto3 ``UpdateItem`` (the registration's write)
and ``GetItem`` (the display read) calls per second from one process, one call after another, each taken
right beside the phase it is compared with (the display phase in ``--rounds`` parts, each after its own
bare GetItem part), with the caller's and the peer's CPU per call. Targets: registrations >= 2/3 of the
bare UpdateItem rate; display reads >= 2x the bare GetItem rate; no request lost or answered 5xx. On a
shared machine the rates move with the other load; the CPU one answer costs moves much less, so the
verdict also gives the CPU of a bare GetItem (caller + peer) over the API's CPU per display read. The
script prints the verdicts; it never fails on them (figures, not a test).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.harness import procfs  # noqa: E402

MATCH = "777001"
TEAMS = ("7101", "7102")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used."""
    used = procfs.cpu_s(pid)
    if used is None:
        raise RuntimeError(f"process {pid} is gone: its CPU cannot be read")
    return used


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- load client process --------------------------------------------------------------------------------


def _client(base: str, jobs: list[dict[str, Any]], concurrency: int, duration_s: float, out: Any) -> None:
    """Run ``jobs`` (once each, or round-robin for ``duration_s`` when > 0) over ``concurrency`` keep-alive
    HTTP/1.1 connections, one request in flight on each; put (latencies, statuses, seconds, CPU seconds).

    The load generator shares the machine's cores with the API it measures, so it is as cheap as a Python
    client can be: requests encoded up front, one ``epoll`` loop over blocking sockets (a socket is read only
    when ready; a request of a few hundred bytes is sent whole), answers framed by Content-Length. It costs a
    few tens of microseconds of CPU a request, a small fraction of what the API spends on one."""
    import select
    import socket

    host, port = base.removeprefix("http://").rsplit(":", 1)
    encoded = []
    for job in jobs:
        body = job.get("body") or b""
        head = [f"{job['method']} {job['path']} HTTP/1.1", f"Host: {host}:{port}"]
        head += [f"{k}: {v}" for k, v in job["headers"].items()]
        if body or job["method"] in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body)}")
        encoded.append(("\r\n".join(head) + "\r\n\r\n").encode() + body)

    latencies: list[float] = []
    statuses: dict[str, int] = {}
    next_job = 0
    started, cpu0 = time.perf_counter(), time.process_time()
    deadline = started + duration_s
    poller = select.epoll()
    conns: dict[int, tuple[socket.socket, bytearray]] = {}
    sent_at: dict[int, float] = {}

    def connect() -> tuple[socket.socket, bytearray]:
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns[sock.fileno()] = (sock, bytearray())
        poller.register(sock.fileno(), select.EPOLLIN)
        return conns[sock.fileno()]

    def close(fd: int) -> None:
        sock, _ = conns.pop(fd)
        poller.unregister(fd)
        sock.close()

    def send_next(fd: int) -> None:
        nonlocal next_job
        if duration_s > 0:
            request = encoded[next_job % len(encoded)] if time.perf_counter() < deadline else None
        else:
            request = encoded[next_job] if next_job < len(encoded) else None
        if request is None:
            close(fd)
            return
        next_job += 1
        sent_at[fd] = time.perf_counter()
        conns[fd][0].sendall(request)

    def record(fd: int, key: str) -> None:
        latencies.append(time.perf_counter() - sent_at[fd])
        statuses[key] = statuses.get(key, 0) + 1

    for _ in range(concurrency):
        sock, _ = connect()
        send_next(sock.fileno())
    while conns:
        for fd, _ in poller.poll():
            if fd not in conns:
                continue
            sock, buf = conns[fd]
            try:
                chunk = sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:  # the server closed the connection mid-answer: counted, then a new connection
                record(fd, "ConnectionError")
                close(fd)
                sock, _ = connect()
                send_next(sock.fileno())
                continue
            buf.extend(chunk)
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                continue
            answer_head = bytes(buf[:end]).lower()
            length = 0
            at = answer_head.find(b"\r\ncontent-length:")
            if at >= 0:
                stop = answer_head.find(b"\r\n", at + 2)
                length = int(answer_head[at + 17 : stop if stop >= 0 else len(answer_head)])
            if len(buf) < end + 4 + length:
                continue
            status = bytes(buf[9:12]).decode("latin-1")
            del buf[: end + 4 + length]
            record(fd, status)
            send_next(fd)
    poller.close()
    out.put((latencies, statuses, time.perf_counter() - started, time.process_time() - cpu0))


def run_load(
    base: str, jobs: list[dict[str, Any]], clients: int, concurrency: int, duration_s: float = 0.0
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    shares = (
        [jobs[i::clients] for i in range(clients)]
        if duration_s <= 0
        else [jobs[i::clients] or jobs for i in range(clients)]
    )
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
    for _, st, _took, _cpu in results:
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
        "client_cpu_ms": 1000 * sum(r[3] for r in results) / max(1, n),
    }


# --- bare boto3 from one process --------------------------------------------------------------------------


def bare_calls(
    endpoint: str, prefix: str, op: str, seconds: float, peer_pid: int | None = None
) -> tuple[int, float, float, float]:
    """``op`` ("update" or "get") called one after another for ``seconds``: (calls, seconds, CPU seconds of
    this process, CPU seconds of the DynamoDB peer when its pid is given)."""
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"mode": "standard", "max_attempts": 5}),
    )
    la_table, cache_table = f"{prefix}live-activities", f"{prefix}DisplayStateCache"
    client.describe_table(TableName=la_table)  # connection and endpoint set up outside the measurement
    p0 = cpu_s(peer_pid) if peer_pid else 0.0
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        if op == "update":
            client.update_item(
                TableName=la_table,
                Key={"matchId": {"S": "bare-match"}, "visitorKey": {"S": f"bare-user-{n}#dev"}},
                UpdateExpression="SET #u = :u, #d = :d, #t = :t, #s = :s, #st = :st REMOVE #sa, #ea, #er",
                ExpressionAttributeNames={
                    "#u": "userId",
                    "#d": "deviceId",
                    "#t": "updateToken",
                    "#s": "status",
                    "#st": "sessionStartedAt",
                    "#sa": "suspendedAt",
                    "#ea": "endedAt",
                    "#er": "endReason",
                },
                ExpressionAttributeValues={
                    ":u": {"S": f"bare-user-{n}"},
                    ":d": {"S": "dev"},
                    ":t": {"S": "ab" * 32},
                    ":s": {"S": "active"},
                    ":st": {"S": "2026-01-01T00:00:00.000Z"},
                },
            )
        else:
            client.get_item(TableName=cache_table, Key={"matchId": {"S": f"DISPLAY#{MATCH}#neutral"}})
        n += 1
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    return n, took, cpu, (cpu_s(peer_pid) - p0) if peer_pid else 0.0


# --- the application's layers alone ------------------------------------------------------------------------


def layers_cost() -> float:
    """CPU seconds of one cached display read through ``build_app``'s ASGI layers (no socket, no server)."""
    import logging
    import types

    import structlog
    import trio

    from daemon.api.app import build_app
    from daemon.api.auth import Authenticator, JwksKeys
    from daemon.api.settings import ApiSettings, AuthSettings
    from daemon.api.state import ApiState
    from daemon.demo.issuer import LocalIssuer

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    async def run() -> float:
        issuer = LocalIssuer().serve()
        try:
            auth = AuthSettings(issuer=issuer.issuer, jwks_url=issuer.jwks_url, client_ids=[issuer.client_id])
            keys = JwksKeys(auth.effective_jwks_url(), refresh_s=3600, refetch_cooldown_s=60)
            await keys.fetch("start")

            async def cached(match_id: str, team: str) -> dict[str, Any]:
                return {"score": "154/3", "perspective": team}

            async def unused(*args: Any, **kwargs: Any) -> list[str]:
                raise AssertionError("no registration in this measurement")

            repos: Any = types.SimpleNamespace(
                live_activities=types.SimpleNamespace(register_owned_sessions=unused),
                display_cache=types.SimpleNamespace(get_cached_display_state=cached),
            )
            settings = ApiSettings(display_cache_s=60, rate_per_s=10_000, rate_burst=100_000)
            app = build_app(
                ApiState(repos=repos, auth=Authenticator(keys, auth), keys=keys, settings=settings)
            )
            scopes = []
            for i in range(100):
                token = issuer.mint(f"layers-user-{i}")
                scopes.append(
                    {
                        "type": "http",
                        "method": "GET",
                        "path": f"/matches/{MATCH}/display",
                        "raw_path": f"/matches/{MATCH}/display".encode(),
                        "query_string": b"" if i % 3 == 0 else f"team={TEAMS[i % 2]}".encode(),
                        "headers": [(b"host", b"api"), (b"authorization", f"Bearer {token}".encode())],
                        "client": ("127.0.0.1", 50000),
                        "server": ("127.0.0.1", 8080),
                        "http_version": "1.1",
                        "scheme": "http",
                        "root_path": "",
                    }
                )

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message: Any) -> None:
                pass

            for scope in scopes:  # tokens verified and remembered, answers cached
                await app(dict(scope), receive, send)
            best = float("inf")
            for _ in range(5):
                t0 = time.process_time()
                for _ in range(20):
                    for scope in scopes:
                        await app(dict(scope), receive, send)
                best = min(best, (time.process_time() - t0) / (20 * len(scopes)))
            return best
        finally:
            issuer.stop()

    return trio.run(run)


# --- the run ----------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=2000, help="app users in the registration burst")
    parser.add_argument("--display-s", type=float, default=10.0, help="seconds of display polling")
    parser.add_argument("--bare-s", type=float, default=5.0, help="seconds of each bare boto3 measurement")
    parser.add_argument("--clients", type=int, default=1, help="load-generating processes")
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight per load process")
    parser.add_argument("--dynamodb", choices=["dynalite", "moto"], default="dynalite")
    parser.add_argument(
        "--rounds", type=int, default=3, help="display phases, each beside its own bare GetItem measurement"
    )
    parser.add_argument(
        "--layers-only", action="store_true", help="only the ASGI layers' CPU per cached display read"
    )
    args = parser.parse_args()
    if args.layers_only:
        print(json.dumps({"asgi_layers_us_per_display_read": round(layers_cost() * 1e6, 1)}))
        return 0

    import trio

    from daemon.demo.issuer import LocalIssuer
    from daemon.store import Dynamo, DynamoSettings, Repositories, create_tables
    from daemon.store.local import MotoServer, free_port, stop_child
    from tests.harness.dynalite import DynaliteServer

    workdir = Path(tempfile.mkdtemp(prefix="sightscreen-api-load-"))
    store: Any = (
        DynaliteServer(log_path=workdir / "dynalite.log") if args.dynamodb == "dynalite" else MotoServer()
    )
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
            await repos.fixtures.batch_write_fixtures(
                [
                    {
                        "matchId": MATCH,
                        "leagueCode": "LOAD",
                        "live": True,
                        "localteamId": TEAMS[0],
                        "visitorteamId": TEAMS[1],
                    }
                ]
            )
            for team in ("neutral", *TEAMS):
                await repos.display_cache.set_cached_display_state(
                    MATCH, team, {"score": "0/0", "team": team}, ttl_s=3600
                )
            dynamo.close()

        trio.run(setup)
        port = free_port()
        config = workdir / "api.toml"
        config.write_text(
            "\n".join(
                [
                    "[instance]",
                    'id = "api-load-1"',
                    'roles = ["api"]',
                    "[dynamodb]",
                    f'endpoint_url = "{store.url}"',
                    f'table_prefix = "{prefix}"',
                    "max_threads = 16",
                    "[admin]",
                    'socket_path = ""',
                    "[api]",
                    f'listen = "127.0.0.1:{port}"',
                    "[auth]",
                    f'issuer = "{issuer.issuer}"',
                    f'jwks_url = "{issuer.jwks_url}"',
                    f'client_ids = ["{issuer.client_id}"]',
                ]
            )
            + "\n"
        )
        env = {
            **os.environ,
            "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
            "AWS_ACCESS_KEY_ID": "x",
            "AWS_SECRET_ACCESS_KEY": "x",
        }
        api_proc = subprocess.Popen(
            [sys.executable, "-m", "daemon", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=open(workdir / "api.err", "wb"),
            env=env,
        )
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

        print(
            f"api_load: {args.users} users, {args.clients} clients x {args.concurrency} in flight, "
            f"DynamoDB peer {args.dynamodb}, API {base}",
            flush=True,
        )
        tokens = [issuer.mint(f"load-user-{i:06d}") for i in range(args.users)]

        body = lambda i: json.dumps({"deviceId": "iphone", "updateToken": f"{i:064x}"}).encode()  # noqa: E731
        reg_jobs = [
            {
                "method": "POST",
                "path": f"/user/activity/{MATCH}",
                "body": body(i),
                "headers": {"Authorization": f"Bearer {tokens[i]}", "Content-Type": "application/json"},
            }
            for i in range(args.users)
        ]
        # the machine's other load moves both figures: each bare measurement is taken right beside the API
        # phase it is compared with (before and after it), and their totals are compared
        peer_pid = store.proc.pid if getattr(store, "proc", None) is not None else None
        bare_update = [bare_calls(store.url, prefix, "update", args.bare_s / 2, peer_pid)]
        c0 = cpu_s(api_proc.pid)
        registration = run_load(base, reg_jobs, args.clients, args.concurrency)
        registration["api_cpu_ms"] = 1000 * (cpu_s(api_proc.pid) - c0) / max(1, registration["requests"])
        bare_update.append(bare_calls(store.url, prefix, "update", args.bare_s / 2, peer_pid))

        async def count_sessions() -> int:
            dynamo = Dynamo(settings)
            try:
                return len(
                    await Repositories(dynamo).live_activities.get_all_la_sessions_for_match(
                        MATCH, fields=("visitorKey",)
                    )
                )
            finally:
                dynamo.close()

        stored = trio.run(count_sessions)

        disp_jobs = [
            {
                "method": "GET",
                "path": f"/matches/{MATCH}/display" + ("" if i % 3 == 0 else f"?team={TEAMS[i % 2]}"),
                "headers": {"Authorization": f"Bearer {tokens[i]}"},
            }
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
                            MATCH, team, {"score": f"{ticks}/0", "team": team}, ttl_s=3600
                        )
                    await trio.sleep(1.0)
            dynamo.close()
            return ticks

        import threading

        ticks: list[int] = []
        writer = threading.Thread(target=lambda: ticks.append(trio.run(live_writer, args.display_s + 5)))
        writer.start()
        rounds = args.rounds
        bare_get = []
        parts = []
        api_cpu = 0.0
        for _ in range(rounds):
            bare_get.append(bare_calls(store.url, prefix, "get", args.bare_s / rounds, peer_pid))
            c0 = cpu_s(api_proc.pid)
            parts.append(
                run_load(base, disp_jobs, args.clients, args.concurrency, duration_s=args.display_s / rounds)
            )
            api_cpu += cpu_s(api_proc.pid) - c0
        writer.join()
        display = {
            "requests": sum(p["requests"] for p in parts),
            "rps": sum(p["requests"] for p in parts)
            / sum(p["requests"] / p["rps"] for p in parts if p["rps"]),
            "p50_ms": statistics.median([p["p50_ms"] for p in parts]),
            "p99_ms": max(p["p99_ms"] for p in parts),
            "errors": sum(p["errors"] for p in parts),
            "client_cpu_ms": sum(p["client_cpu_ms"] * p["requests"] for p in parts)
            / max(1, sum(p["requests"] for p in parts)),
            "statuses": {
                k: sum(p["statuses"].get(k, 0) for p in parts)
                for k in {k for p in parts for k in p["statuses"]}
            },
        }
        display["api_cpu_ms"] = 1000 * api_cpu / max(1, display["requests"])

        def rate(samples: list[tuple[int, float, float, float]]) -> tuple[float, float, float]:
            n = sum(x[0] for x in samples)
            per_call = 1000 / max(1, n)
            return (
                n / sum(x[1] for x in samples),
                per_call * sum(x[2] for x in samples),
                per_call * sum(x[3] for x in samples),
            )

        bare = {}
        bare["update_item_per_s"], bare["update_item_cpu_ms"], bare["update_item_peer_ms"] = rate(bare_update)
        bare["get_item_per_s"], bare["get_item_cpu_ms"], bare["get_item_peer_ms"] = rate(bare_get)

        def row(name: str, r: dict[str, Any]) -> None:
            print(
                f"{name:<34} {r['requests']:>7} req  {r['rps']:>8.0f} req/s  p50 {r['p50_ms']:>6.1f} ms  "
                f"p99 {r['p99_ms']:>7.1f} ms  API CPU {r['api_cpu_ms']:.2f} ms/req  "
                f"load client CPU {r['client_cpu_ms']:.2f} ms/req  errors {r['errors']}  {r['statuses']}"
            )

        print()
        row("POST /user/activity/{id} (burst)", registration)
        row("GET /matches/{id}/display (live)", display)
        print(
            f"{'bare boto3 UpdateItem (1 process)':<34} {bare['update_item_per_s']:>22.0f} calls/s  "
            f"client CPU {bare['update_item_cpu_ms']:.2f} ms/call  peer CPU {bare['update_item_peer_ms']:.2f} ms/call"
        )
        print(
            f"{'bare boto3 GetItem (1 process)':<34} {bare['get_item_per_s']:>22.0f} calls/s  "
            f"client CPU {bare['get_item_cpu_ms']:.2f} ms/call  peer CPU {bare['get_item_peer_ms']:.2f} ms/call"
        )
        print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(
            f"sessions stored after the burst: {stored} of {args.users}; display writer ticks: {ticks[0] if ticks else 0}"
        )
        five_xx = sum(v for k, v in {**registration["statuses"]}.items() if k.startswith("5")) + sum(
            v for k, v in display["statuses"].items() if k.startswith("5")
        )
        reg_ratio = registration["rps"] / bare["update_item_per_s"]
        disp_ratio = display["rps"] / bare["get_item_per_s"]
        # what the rates hide on a shared machine: the CPU one answer costs. A bare GetItem costs its caller's
        # CPU and the peer's; a cached display read costs the API's CPU and nothing of the peer's
        bare_get_cpu = bare["get_item_cpu_ms"] + bare["get_item_peer_ms"]
        verdict = {
            "registrations_vs_bare_update": round(reg_ratio, 2),
            "registrations_target_met": reg_ratio >= 2 / 3,
            "display_vs_bare_get": round(disp_ratio, 2),
            "display_target_met": disp_ratio >= 2,
            "cpu_per_bare_get_vs_display_read": round(bare_get_cpu / max(1e-9, display["api_cpu_ms"]), 2),
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
