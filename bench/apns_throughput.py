"""APNs sender throughput: N Live Activity updates to any HTTP/2 server that answers 200.

    python bench/apns_throughput.py --url https://HOST:PORT [--ca-file F | --insecure] -n N [--connections C]
    python bench/apns_throughput.py --spawn-server -n 100000            # starts `sightscreen apns-server --fast`
    python bench/apns_throughput.py --spawn-server -n 20000 --connections 1 --client aioapns
    python bench/apns_throughput.py --spawn-server -n 20000 --compare     # both clients, same server

The last line printed is one JSON object: pushes, seconds, pushes_per_s, p50_ms, p99_ms, failed (plus the
client and connection count). ``--client sightscreen`` (default) drives ``actors.sender.ApnsSender``;
``--client aioapns`` sends the same pushes through aioapns 4.0 (an optional bench dependency), so both can be
compared in one run. Latency is from handing the push to the client to its answer. Timing starts after a
warm-up push per connection (APNs allows one stream per connection until a first push is accepted).

Provider tokens: by default a fresh signing key is made (a server that answers 200 does not check them);
against a validating server pass --key-file/--key-id/--team-id (``--spawn-server`` does it for you).
``--profile FILE`` runs the sightscreen client under cProfile and prints the top functions to stderr.

The current figures, with the commands that reproduce them, are in docs/performance.md. ``--profile``
shows where the client's time goes: the connection code (``daemon/apns/connection.py``: frame split, HPACK,
request frames), trio (scheduler, channels, TLS wrapper), h2's stream state machines, and the sender
(``actors/sender.py``: intake batching, write coalescing, buffered TLS records decrypted per read).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from actors.sender import ApnsSender  # noqa: E402
from daemon.apns.settings import ApnsSettings  # noqa: E402
from daemon.apns.token import generate_signing_key  # noqa: E402
from daemon.apns.types import Push, PushResult  # noqa: E402
from daemon.logs import configure  # noqa: E402
from tests.harness.nginx_apns import NginxApns  # noqa: E402


def live_activity_update(i: int) -> bytes:
    """A Live Activity update the size the match engine produces (~600 bytes): every string pre-formatted."""
    aps = {
        "timestamp": 1_760_000_000 + i,
        "event": "update",
        "relevance-score": 75,
        "stale-date": 1_760_000_900 + i,
        "content-state": {
            "matchId": 71344,
            "status": "2nd Innings",
            "battingTeam": "PAK",
            "bowlingTeam": "SL",
            "score": f"{150 + i % 50}/3",
            "overs": "17.2 ov",
            "runRate": "RR 8.91",
            "requiredRate": "RRR 10.50",
            "target": "Target 187",
            "equation": "PAK need 33 runs from 16 balls",
            "striker": "Babar Azam 72 (48)",
            "nonStriker": "Mohammad Rizwan 41 (30)",
            "bowler": "W Hasaranga 2/24 (3.2)",
            "lastBalls": ["1", "4", "0", "W", "6", "2"],
            "partnership": "P'ship 64 (39)",
            "keyEvent": {"type": "six", "text": "SIX! Babar Azam", "at": "17.2"},
            "updatedAt": "17:42",
        },
    }
    return json.dumps({"aps": aps}, separators=(",", ":")).encode()


def client_ssl_context(args: argparse.Namespace) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else ssl.create_default_context()
    if args.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["h2"])
    return ctx


def percentile(sorted_values: list[float], p: float) -> float | None:
    if not sorted_values:
        return None
    return round(sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))] * 1000, 3)


def summary(
    client: str, connections: int, n: int, seconds: float, latencies: list[float], failed: int
) -> dict[str, Any]:
    latencies.sort()
    return {
        "client": client,
        "connections": connections,
        "pushes": n,
        "seconds": round(seconds, 3),
        "pushes_per_s": round(n / seconds, 1) if seconds > 0 else None,
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "failed": failed,
    }


# -- sightscreen ----------------------------------------------------------------------------------------


async def run_sightscreen(args: argparse.Namespace, creds: dict[str, str]) -> dict[str, Any]:
    settings = ApnsSettings(
        url=args.url,
        team_id=creds["team_id"],
        key_id=creds["key_id"],
        private_key=creds["private_pem"],
        topic=args.topic,
        connections=args.connections,
        inbox_size=10_000,
        request_timeout_s=60.0,
        max_retries=3,
    )
    sender = ApnsSender(settings, ssl_context=client_ssl_context(args))
    n = args.n
    reply_send, reply_recv = trio.open_memory_channel[PushResult](n + args.connections)
    # One match event: every follower's Live Activity gets the same content state, so the payload is built
    # once (as the match engine does); pushes differ by token and are made as they are handed over.
    payload = live_activity_update(0)
    template = Push(
        token="f" * 160,
        push_type="liveactivity",
        topic=args.topic,
        payload=payload,
        priority=5,
        kind="update",
        reply_to=reply_send,
    )
    latencies: list[float] = []
    failed = 0
    async with trio.open_nursery() as nursery:
        await nursery.start(sender.run)
        with trio.fail_after(args.connect_timeout):
            for _ in range(args.connections):
                await sender.send_and_wait(template)

        def push(i: int) -> Push:
            return Push(f"{i:0160x}", "liveactivity", args.topic, payload, 5, "update", reply_to=reply_send)

        async def produce() -> None:
            if args.hand_over == "many":  # as the match engine's fan-out hands a tick over
                for first in range(0, n, _MANY):
                    await sender.send_many([push(i) for i in range(first, min(first + _MANY, n))])
                return
            for i in range(n):
                await sender.send(push(i))

        start = trio.current_time()
        cpu_start = time.process_time()
        nursery.start_soon(produce)
        for _ in range(n):
            if args.hand_over == "many":  # take what is buffered; wait only when nothing is
                try:
                    result = reply_recv.receive_nowait()
                except trio.WouldBlock:
                    result = await reply_recv.receive()
            else:
                result = await reply_recv.receive()
            latencies.append(result.latency_s)
            if result.outcome != "accepted":
                failed += 1
        seconds = trio.current_time() - start
        cpu = time.process_time() - cpu_start
        stats = sender.stats()
        nursery.cancel_scope.cancel()
    out = summary("sightscreen", args.connections, n, seconds, latencies, failed)
    out["client_cpu_s"] = round(cpu, 3)
    out["client_cpu_us_per_push"] = round(cpu / n * 1e6, 1)
    out["connects"] = stats["connects"]
    return out


# -- aioapns --------------------------------------------------------------------------------------------


async def run_aioapns(args: argparse.Namespace, creds: dict[str, str]) -> dict[str, Any]:
    try:
        from aioapns import APNs, NotificationRequest, PushType
        from aioapns.connection import APNsProductionClientProtocol
    except ImportError:
        raise SystemExit("--client aioapns needs aioapns 4.0: pip install aioapns==4.0") from None
    from urllib.parse import urlsplit

    parts = urlsplit(args.url)
    client = APNs(
        key=creds["private_pem"],
        key_id=creds["key_id"],
        team_id=creds["team_id"],
        topic=args.topic,
        max_connections=args.connections,
        ssl_context=client_ssl_context(args),
    )
    # aioapns dials Apple's hosts only; point its protocol class at the bench server instead.
    client.pool.protocol_class = type(
        "BenchProtocol",
        (APNsProductionClientProtocol,),
        {"APNS_SERVER": parts.hostname, "APNS_PORT": parts.port or 443},
    )
    topic = args.topic + ".push-type.liveactivity"
    message = json.loads(live_activity_update(0))  # the same event for every follower, as for sightscreen

    def request(i: int, token: str) -> Any:
        return NotificationRequest(
            device_token=token, message=message, priority=5, push_type=PushType.LIVEACTIVITY, apns_topic=topic
        )

    for _ in range(args.connections):
        await client.send_notification(request(0, "f" * 160))
    latencies: list[float] = []
    failed = 0

    async def one(i: int) -> None:
        nonlocal failed
        t0 = time.perf_counter()
        try:
            result = await client.send_notification(request(i, f"{i:0160x}"))
            ok = result.is_successful
        except Exception:  # aioapns raises MaxAttemptsExceeded and friends: count them as failed
            ok = False
        latencies.append(time.perf_counter() - t0)
        if not ok:
            failed += 1

    start = time.perf_counter()
    cpu_start = time.process_time()
    await asyncio.gather(*(one(i) for i in range(args.n)))
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    client.pool.close()
    out = summary("aioapns", args.connections, args.n, seconds, latencies, failed)
    out["client_cpu_s"] = round(cpu, 3)
    return out


_MANY = 1_000  # --hand-over many: pushes per send_many


# -- h2load ---------------------------------------------------------------------------------------------

H2LOAD_TOPIC_SUFFIX = ".push-type.liveactivity"
_H2LOAD_PER_CONNECTION = 10_000  # nginx's keepalive_requests (tests/harness/nginx_apns.py): then its GOAWAY


def run_h2load(
    url: str,
    *,
    ca_file: str | None,
    n: int,
    body: bytes,
    token: str,
    topic: str,
    priority: int,
    authorization: str,
    streams: int,
    connections: int = 1,
) -> dict[str, Any]:
    """h2load (nghttp2's C client) against ``url`` with the sender's request: POST /3/device/<token>, the same
    headers (a provider token of the same length), a body of the same size, one connection with ``streams``
    concurrent streams on each of ``connections``. h2load does not reconnect after a GOAWAY, so it runs once per
    10,000 requests a connection (nginx's ``keepalive_requests``), as the sender reconnects. Its CPU is its own (``wait4`` resource usage)."""
    import os
    import shutil

    h2load = shutil.which("h2load")
    if h2load is None:
        raise SystemExit("--h2load needs h2load (Debian: apt-get install nghttp2-client)")
    del ca_file  # h2load does not verify the server's certificate
    with tempfile.NamedTemporaryFile(prefix="h2load-body-", suffix=".json") as f:
        f.write(body)
        f.flush()
        cmd = [
            h2load,
            "-c",
            str(connections),
            "-m",
            str(streams),
            "-d",
            f.name,
            "-H",
            "apns-push-type: liveactivity",
            "-H",
            f"apns-topic: {topic}",
            "-H",
            f"apns-priority: {priority}",
            "-H",
            f"authorization: {authorization}",
        ]
        done = succeeded = 0
        seconds = cpu = 0.0
        while done < n:
            batch = min(_H2LOAD_PER_CONNECTION * connections, n - done)
            start = time.perf_counter()
            proc = subprocess.Popen(
                [*cmd, "-n", str(batch), f"{url}/3/device/{token}"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert proc.stdout is not None
            output = proc.stdout.read()
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            seconds += time.perf_counter() - start
            cpu += usage.ru_utime + usage.ru_stime
            for line in output.splitlines():
                if line.startswith("requests:"):
                    succeeded += int(line.split(" succeeded")[0].rsplit(" ", 1)[-1])
            done += batch
    return {
        "client": "h2load",
        "requests": n,
        "succeeded": succeeded,
        "body_bytes": len(body),
        "seconds": round(seconds, 3),
        "requests_per_s": round(n / seconds, 1) if seconds > 0 else None,
        "cpu_s": round(cpu, 3),
        "cpu_us_per_request": round(cpu / n * 1e6, 1) if n else None,
    }


# -- server and credentials -----------------------------------------------------------------------------


def spawn_server(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    if args.spawn_server == "nginx":
        return spawn_nginx()
    cmd = [
        sys.executable,
        "-m",
        "daemon",
        "apns-server",
        "--fast",
        "--keep-records",
        "100",
        "--topic",
        args.topic,
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise SystemExit("apns-server did not start")
    return proc, json.loads(line)["apns_server"]


def spawn_nginx() -> tuple[Any, dict[str, Any]]:
    """A C HTTP/2 server answering 200 to everything (Debian's nginx-light), with a throw-away trustme CA."""
    try:
        server = NginxApns().start()
    except RuntimeError as exc:
        raise SystemExit(f"--spawn-server nginx: {exc}") from None
    folder = Path(tempfile.mkdtemp(prefix="apns-bench-key-"))
    pair = generate_signing_key()
    (folder / "key.p8").write_text(pair[0])
    return server, {
        "url": server.url,
        "ca_file": server.ca_file,
        "private_key_file": str(folder / "key.p8"),
        "key_id": "KEY0000001",
        "team_id": "TEAM000001",
    }


def provider_authorization(creds: dict[str, str]) -> str:
    """The ``authorization`` header the sender's connections carry with these credentials."""
    from daemon.apns.token import ProviderTokenPolicy, ProviderTokens, load_signing_key

    tokens = ProviderTokens(
        load_signing_key(creds["private_pem"]),
        team_id=creds["team_id"],
        key_id=creds["key_id"],
        policy=ProviderTokenPolicy(),
    )
    return tokens.for_connection(None, None).token.authorization.decode("ascii")


def credentials(args: argparse.Namespace) -> dict[str, str]:
    if args.key_file:
        private_pem = Path(args.key_file).read_text()
    else:
        private_pem, _ = generate_signing_key()
    return {"private_pem": private_pem, "key_id": args.key_id, "team_id": args.team_id}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="https://HOST:PORT of an HTTP/2 server answering 200")
    trust = p.add_mutually_exclusive_group()
    trust.add_argument("--ca-file", help="CA certificate (PEM) to trust the server with")
    trust.add_argument("--insecure", action="store_true", help="do not verify the server's certificate")
    p.add_argument("-n", type=int, default=10_000, help="number of pushes (default 10000)")
    p.add_argument("--connections", type=int, default=1, help="HTTP/2 connections (default 1)")
    p.add_argument("--client", choices=["sightscreen", "aioapns"], default="sightscreen")
    p.add_argument(
        "--compare",
        action="store_true",
        help="after the sightscreen run, run aioapns on the same server and add vs_aioapns (ratio)",
    )
    p.add_argument(
        "--spawn-server",
        nargs="?",
        const="apns",
        choices=["apns", "nginx"],
        help="start a server for the run: the project's `apns-server --fast` (default) or nginx",
    )
    p.add_argument("--key-file", help="ES256 .p8 key the server accepts (default: a fresh key)")
    p.add_argument("--key-id", default="KEY0000001")
    p.add_argument("--team-id", default="TEAM000001")
    p.add_argument("--topic", default="com.sightscreen.app", help="bundle id")
    p.add_argument("--connect-timeout", type=float, default=30.0)
    p.add_argument("--profile", metavar="FILE", help="cProfile the sightscreen client into FILE")
    p.add_argument(
        "--hand-over",
        choices=["each", "many"],
        default="each",
        help="how the producer hands pushes to the sender: one await of send() and of the result each (default), "
        f"or as the match engine's fan-out does: send_many() of {_MANY:,} at a time, results taken as buffered",
    )
    p.add_argument(
        "--h2load",
        action="store_true",
        help="after the sightscreen run, run h2load (nghttp2) with the same request on the same server and add "
        "vs_h2load (pushes/s over h2load's requests/s) and its CPU per request",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure("warning")  # logs go to stderr; stdout's last line is the result
    proc = None
    try:
        if args.spawn_server:
            proc, info = spawn_server(args)
            args.url, args.ca_file = info["url"], info["ca_file"]
            args.key_file, args.key_id, args.team_id = (
                info["private_key_file"],
                info["key_id"],
                info["team_id"],
            )
        if not args.url:
            print("apns_throughput: give --url or --spawn-server", file=sys.stderr)
            return 2
        creds = credentials(args)
        if args.client == "aioapns":
            result = asyncio.run(run_aioapns(args, creds))
        elif args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            result = trio.run(run_sightscreen, args, creds)
            profiler.disable()
            profiler.dump_stats(args.profile)
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
        else:
            result = trio.run(run_sightscreen, args, creds)
        if args.compare:
            # Same server, same pushes, one after the other: the "4x aioapns in the same run".
            other = asyncio.run(run_aioapns(args, creds))
            print(json.dumps(other))
            if other["pushes_per_s"]:
                result["vs_aioapns"] = round(result["pushes_per_s"] / other["pushes_per_s"], 2)
        if args.h2load:
            h2 = run_h2load(
                args.url,
                ca_file=args.ca_file,
                n=args.n,
                body=live_activity_update(0),
                token="0" * 160,
                topic=args.topic + H2LOAD_TOPIC_SUFFIX,
                priority=5,
                authorization=provider_authorization(creds),
                streams=ApnsSettings().max_streams_per_connection,
                connections=args.connections,
            )
            print(json.dumps(h2))
            if h2["requests_per_s"]:
                result["vs_h2load"] = round(result["pushes_per_s"] / h2["requests_per_s"], 3)
            result["h2load_cpu_us_per_request"] = h2["cpu_us_per_request"]
    finally:
        if isinstance(proc, NginxApns):
            proc.stop()
        elif proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
    print(json.dumps(result))
    return 0 if result["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
