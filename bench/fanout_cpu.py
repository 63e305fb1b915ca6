"""CPU per push of one match's fan-out, end to end in the engine process, with a breakdown by stage.

    python bench/fanout_cpu.py [--tokens 100000] [--balls 6] [--connections 2] [--profile]
    python bench/fanout_cpu.py --tokens 100000 --balls 6 --h2load        # and h2load on the same nginx
    python bench/fanout_cpu.py --tokens 100000 --balls 6 --shared        # the match hot: through its shards

One match's balls go through a real ``MatchActor`` as its owner handles them (``MatchActor.handle``: the
fixture's snapshot, the pure engine's tick, the payload per perspective, an alerting ball's intent with its
fenced watermark writes, ``FanOut.push_all`` building the ``Push``es, the shared ``ApnsSender`` and its HTTP/2
connections over TLS to nginx, every result back to the fan-out and the actor's ``on_result``, the metrics and
the logs), with the daemon's own settings (``[apns]``, ``[match]``, the lease renewed every few seconds, the
garbage collector tuned and the start-up heap frozen as ``sightscreen run`` does). The balls are a synthesised
T20's, from a few before its first wicket, so routine updates (priority 5) and an alert (priority 10, chunked
behind its watermarks) both run. DynamoDB is moto's server on loopback (the state, intent and watermark
writes, the lease); APNs is nginx (``tests/harness/nginx_apns.py``) answering each request as APNs does, with
one HEADERS frame ending the stream; every push of every ball must come back accepted. ``--record`` runs nginx
as the soak does instead: it reads every body and records every push (the run then checks that every token got
one accepted push per ball), and answers each with three frames (a stream WINDOW_UPDATE, HEADERS, an empty
DATA frame ending the stream), which costs the client more per push than APNs's answer.

Seeded directly (no product path makes it cheaply at this size): the match actor's in-memory audience, the
``--tokens`` sessions and their followers' teams (half each side), as ``MatchAudience.refresh`` leaves them.
Re-reading them (``[match].session_refresh_s``) is a DynamoDB read on its own cadence, not part of a ball.

Figures: per ball, its pushes, the engine process's CPU (``time.process_time``: every thread, so botocore's
too; robust to other load on the machine, unlike wall-clock figures), CPU µs per push, wall seconds and
pushes/s (wall clock: noisy on a shared machine). ``--profile`` runs the measured balls under cProfile (the
event loop's thread; the time it waits in epoll is left out) and prints the share of each stage: where a helper (h2's
state machines, a dataclass ``__init__``, a builtin) is called from several stages its time goes to its
callers'. cProfile's own overhead inflates cheap Python calls against C calls: read the shares, not the
sum, and the µs per push from a run without ``--profile``. ``--h2load`` then runs h2load (nghttp2) against the
same nginx with the same request (POST, the same headers, the same body size, one connection, the same
number of concurrent streams) and prints its CPU per request beside ours.

``--shared`` makes the match hot (``[fanout].share_above`` 1): each ball's fan-out is published on the
match's board and cut into shards, which this owner, alone in the region, claims, delivers and settles itself
(``actors.share.SharedFanOut``, ``actors.shard.ShardRunner``: the shard leases, the board and shard record
reads, each shard's pushes built from the published payloads); run with and without it, the difference is
what the shared path costs an engine per push, apart from the helpers' own polls.

The last line printed is one JSON object with those figures.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from apns_throughput import H2LOAD_TOPIC_SUFFIX, provider_authorization, run_h2load  # noqa: E402

from actors.audience import Session  # noqa: E402
from actors.delivery import Delivery  # noqa: E402
from actors.feed import FeedUpdate  # noqa: E402
from actors.janitor import TokenRef  # noqa: E402
from actors.livework import LiveWork  # noqa: E402
from actors.match import MatchActor  # noqa: E402
from actors.sender import ApnsSender  # noqa: E402
from actors.settings import FanoutSettings, MatchActorSettings, OrchestratorSettings  # noqa: E402
from actors.share import Sharing  # noqa: E402
from daemon.apns.driver import ssl_context_for  # noqa: E402
from daemon.apns.settings import ApnsSettings  # noqa: E402
from daemon.apns.token import generate_signing_key  # noqa: E402
from daemon.config import InstanceSettings  # noqa: E402
from daemon.cricket.settings import EngineSettings  # noqa: E402
from daemon.logs import configure  # noqa: E402
from daemon.replay.synth import synthesise  # noqa: E402
from daemon.runtime import gctune  # noqa: E402
from daemon.store import Dynamo, DynamoSettings, Repositories, create_tables  # noqa: E402
from daemon.store.local import MotoServer  # noqa: E402
from tests.harness.nginx_apns import NginxApns  # noqa: E402
from tests.harness.seed import make_followers  # noqa: E402

TOPIC = "com.sightscreen.app"
OWNER = "bench#1"


class _NoFeed:
    """The actor's feed: unused, the bench hands it each ball (``MatchActor.handle``)."""

    def subscribe(self, match_id: str, *, marquee: bool) -> trio.MemoryReceiveChannel[FeedUpdate]:
        raise NotImplementedError

    def unsubscribe(self, match_id: str) -> None:
        pass


def ball_entries(tape: Any, balls: int) -> list[int]:
    """Tape entries for a warm-up ball and ``balls`` measured ones, the first wicket among the last two."""
    for entry in range(len(tape)):
        if any((b.get("score") or {}).get("is_wicket") for b in tape.fixture_at(entry).get("balls") or []):
            first = max(entry - balls + 1, 1)
            return list(range(first - 1, first + balls))
    raise SystemExit("the synthesised tape has no wicket")


# -- the stage breakdown (cProfile) ----------------------------------------------------------------------

# (stage, substrings of a function's file, function names or () for any): the first that matches is the
# function's stage. h2/hpack/hyperframe internals, dataclass __init__s and builtins are shared helpers: their
# time goes to their callers' stages.
_APNS = ("daemon/apns/connection.py", "daemon/apns/internals.py", "daemon/apns/wire.py")
_STAGES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("payload per perspective", ("daemon/cricket/payloads.py",), ()),
    ("intent bookkeeping", ("daemon/cricket/intent.py",), ()),
    ("tick: snapshot and the pure engine", ("daemon/cricket/",), ()),
    ("match actor: audience, perspectives, Push construction", ("actors/match.py", "actors/audience.py"), ()),
    ("fan-out: hand-off and collecting results", ("actors/fanout.py", "actors/livework.py"), ()),
    (
        "sender: results (settle, deliver)",
        ("actors/sender.py",),
        ("_settle", "_deliver", "_handle", "_handle_error", "_mark_dead"),
    ),
    ("sender: intake, lanes, fill", ("actors/sender.py", "daemon/apns/rules.py"), ()),
    (
        "HPACK and request framing",
        _APNS,
        (
            "send",
            "header_block",
            "encode_block",
            "_path_head",
            "generation",
            "owes_size_update",
            "steady",
            "send_reset",
            "_constant",
            "encode_constant",
            "start_block",
            "send_request",
            "send_body",
            "frame_header",
            "hpack_int",
            "hpack_str",
            "_literal_not_indexed",
            "can_send",
            "_pump_blocked",
            "data_to_send",
        ),
    ),
    (
        "response parsing (frames, HPACK, h2 state)",
        _APNS,
        (
            "receive_data",
            "_receive",
            "receive_frames",
            "_slow",
            "_stream_frame",
            "_on_headers",
            "_on_data",
            "_on_closed_stream",
            "_answer",
            "_settle",
            "_note_reset",
            "data_received",
            "stream_closed",
            "is_open",
            "_fast_headers",
            "_fast_data",
            "_fast_window_update",
            "_answered",
            "decode",
            "forget_stream",
            "_closed_by_us",
            "_connection_input",
            "read_hpack_int",
            "_maybe_closed",
        ),
    ),
    ("TLS (ssl reads and writes)", ("trio/_ssl.py", "/ssl.py", "_ssl._SSLSocket"), ()),
    ("TLS (ssl reads and writes)", ("daemon/apns/internals.py",), ("drain_decrypted",)),
    ("driver loops, deadlines, liveness", ("daemon/apns/",), ()),
    ("socket syscalls", ("trio/_socket.py", "trio/_highlevel_socket.py", "_socket.socket"), ()),
    ("trio: scheduling, channels, timeouts", ("trio/", "select.epoll", "outcome/", "sniffio/"), ()),
    ("metrics (prometheus)", ("prometheus_client/",), ()),
    ("logging", ("structlog/", "daemon/logs.py", "logging/"), ()),
    ("DynamoDB (the event loop's side)", ("botocore/", "boto3/", "daemon/store/", "urllib3/", "http/"), ()),
)
_SHARED = ("h2/", "hpack/", "hyperframe/", "<string>", "dataclasses.py", "enum.py", "<built-in", "<method")
_NOT_SHARED = ("_ssl._SSLSocket", "_socket.socket", "select.epoll")


_IDLE = "<method 'poll' of 'select.epoll' objects>"


def _place(func: tuple[str, int, str]) -> str | None:
    """The stage of a function by where it lives; None for a shared helper (charged to its callers)."""
    filename, _, name = func
    where = filename if filename != "~" else name
    if any(m in where for m in _SHARED) and not any(m in where for m in _NOT_SHARED):
        return None
    for stage, files, names in _STAGES:
        if any(f in where for f in files) and (not names or name in names):
            return stage
    return "other"


def stage_breakdown(stats: pstats.Stats) -> dict[str, float]:
    """Seconds of own time per stage; a shared helper's own time split over its callers by what each spent."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    totals: defaultdict[str, float] = defaultdict(float)

    def charge(func: Any, seconds: float, depth: int) -> None:
        stage = _place(func)
        if stage is not None:
            totals[stage] += seconds
            return
        callers = raw.get(func, (0, 0, 0, 0, {}))[4]
        spent = sum(c[2] for c in callers.values()) if callers else 0.0
        if depth > 6 or not callers or spent <= 0:
            totals["other"] += seconds
            return
        for caller, c in callers.items():
            charge(caller, seconds * c[2] / spent, depth + 1)

    for func, (_, _, own, _, _) in raw.items():
        if func[2] == _IDLE:
            continue  # waiting for the network (wall time under cProfile's clock), not CPU
        charge(func, own, 0)
    return dict(totals)


# -- the run -----------------------------------------------------------------------------------------------


async def fan_out(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    records = workdir / "apns.jsonl" if args.record else None
    nginx = NginxApns(record_path=records, workdir=workdir / "nginx").start()
    moto = MotoServer().start()
    tape = synthesise("T20", seed=args.seed)
    match_id = str(tape.fixture_id)
    entries = ball_entries(tape, args.balls)
    fixtures = [tape.fixture_at(entry) for entry in entries]  # built before the clock starts
    private_pem, _ = generate_signing_key()
    apns = ApnsSettings(
        url=nginx.url,
        ca_file=nginx.ca_file,
        team_id="TEAM000001",
        key_id="KEY0000001",
        private_key=private_pem,
        topic=TOPIC,
        connections=args.connections,
    )
    dynamo = Dynamo(DynamoSettings(endpoint_url=moto.url, table_prefix="bench-", region="us-east-1"))
    await create_tables(dynamo)
    repos = Repositories(dynamo)
    assert await repos.active_matches.register_active_match(match_id, OWNER)
    deliveries: list[Delivery] = []
    sender = ApnsSender(apns, ssl_context=ssl_context_for(apns))
    actor = MatchActor(
        match_id,
        instance_id=OWNER,
        epoch=1,
        repos=repos,
        feed=_NoFeed(),
        sender=sender,
        channel_requests=None,
        topic=TOPIC,
        marquee=True,
        engine_settings=EngineSettings(),
        settings=MatchActorSettings(routine_after_s=0.0),  # no wait after the poll: the bench has no poll
        lease=OrchestratorSettings(),
        on_delivery=deliveries.append,
        live=LiveWork(),
        sharing=Sharing(settings=FanoutSettings(share_above=1)) if args.shared else None,
    )
    people = make_followers(
        match_id, args.tokens, [str(tape.localteam.id), str(tape.visitorteam.id)], sessions=True
    )
    actor.audience.sessions = {
        f.visitor_key: Session(
            f.visitor_key,
            f.user_id,
            str(f.update_token),
            TokenRef("la", match_id, visitor_key=f.visitor_key, user_id=f.user_id),
        )
        for f in people
    }
    actor.audience.follower_team = {f.user_id: str(f.team_id) for f in people}
    balls: list[dict[str, Any]] = []
    profile: dict[str, Any] | None = None
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(sender.run)
            await actor.lease.acquire()
            if not actor.lease.held:
                raise SystemExit("the bench could not take its match's lease")
            nursery.start_soon(actor.lease.keep)
            gctune.freeze_startup_heap()  # as the daemon does once it is up
            profiler = cProfile.Profile() if args.profile else None
            for i, fixture in enumerate(fixtures):
                update = FeedUpdate(match_id, fixture, time.time(), "fixture", True)
                before = len(deliveries)
                measured = i > 0  # the first ball opens the connections and sets the baseline
                if profiler is not None and measured:
                    profiler.enable()
                wall, cpu = time.perf_counter(), time.process_time()
                await actor.handle(update)
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                if profiler is not None and measured:
                    profiler.disable()
                fanned = deliveries[before:]
                pushes = sum(d.tokens for d in fanned)
                row = {
                    "ball": i,
                    "warm_up": not measured,
                    "pushes": pushes,
                    "alert": any(d.priority == 10 for d in fanned),
                    "event": next((d.event for d in fanned if d.event), None),
                    "accepted": sum(d.accepted for d in fanned),
                    "cpu_s": round(cpu, 3),
                    "cpu_us_per_push": round(cpu / pushes * 1e6, 1) if pushes else None,
                    "wall_s": round(wall, 3),
                    "pushes_per_s": round(pushes / wall, 1) if pushes and wall > 0 else None,
                }
                balls.append(row)
                print(json.dumps(row), file=sys.stderr)
            stats = sender.stats()
            if profiler is not None:
                ps = pstats.Stats(profiler)
                seconds = stage_breakdown(ps)
                total = sum(seconds.values())
                profile = {
                    "profiled_cpu_s": round(total, 3),
                    "share": {
                        k: round(v / total, 3) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])
                    },
                }
                if args.profile_out:
                    ps.dump_stats(args.profile_out)
            if args.h2load:
                payload_bytes = round(statistics.mean(len(p) for p in update_payloads(actor)))
                h2 = run_h2load(
                    nginx.url,
                    ca_file=nginx.ca_file,
                    n=args.h2load_n,
                    body=b"x" * payload_bytes,
                    token=people[0].update_token or "",
                    topic=TOPIC + H2LOAD_TOPIC_SUFFIX,
                    priority=5,
                    authorization=provider_authorization(
                        {"private_pem": private_pem, "team_id": apns.team_id, "key_id": apns.key_id}
                    ),
                    streams=apns.max_streams_per_connection,
                )
            else:
                h2 = None
            nursery.cancel_scope.cancel()
    finally:
        dynamo.close()
        moto.stop()
        nginx.stop()
    timed = [b for b in balls if not b["warm_up"] and b["pushes"]]
    total = sum(b["pushes"] for b in timed)
    cpu_s = sum(b["cpu_s"] for b in timed)
    wall_s = sum(b["wall_s"] for b in timed)
    fan_outs = sum(1 for b in balls if b["pushes"])
    if args.record:  # nginx's own record: every token got one accepted push per ball
        per_token = Counter(r["token"] for r in nginx.records() if r["status"] == 200)
        once = len(per_token) == args.tokens and set(per_token.values()) == {fan_outs}
        accepted = sum(per_token.values())
    else:  # the sender's results: every push of every ball accepted
        once = all(b["accepted"] == b["pushes"] == args.tokens for b in balls if b["pushes"])
        accepted = stats["pushes"]["accepted"]
    out: dict[str, Any] = {
        "tokens": args.tokens,
        "shared": args.shared,
        "connections": args.connections,
        "balls_measured": len(timed),
        "pushes": total,
        "cpu_s": round(cpu_s, 3),
        "cpu_us_per_push": round(cpu_s / total * 1e6, 1) if total else None,
        "cpu_us_per_push_by_ball": [b["cpu_us_per_push"] for b in timed],
        "cpu_us_per_push_routine": _per_push([b for b in timed if not b["alert"]]),
        "cpu_us_per_push_alert": _per_push([b for b in timed if b["alert"]]),
        "wall_s": round(wall_s, 3),
        "pushes_per_s": round(total / wall_s, 1) if wall_s > 0 else None,
        "failed_or_rejected": sum(b["pushes"] - b["accepted"] for b in balls),
        "every_token_once_per_ball": once,
        "apns_requests_accepted": accepted,
        "peer": "nginx recording every push" if args.record else "nginx answering as APNs does",
        "connects": stats["connects"],
        "gc": gctune.snapshot(),
    }
    if args.shared:  # the last work item of each lane: its shards and pushes, summed from their records
        out["share_last"] = actor.share.describe()["last"]
    if profile is not None:
        out["profile"] = profile
    if h2 is not None:
        out["h2load"] = h2
        if h2.get("cpu_us_per_request") and out["cpu_us_per_push"]:
            out["h2load_cpu_share_of_ours"] = round(h2["cpu_us_per_request"] / out["cpu_us_per_push"], 3)
    return out


def _per_push(rows: list[dict[str, Any]]) -> float | None:
    pushes = sum(r["pushes"] for r in rows)
    return round(sum(r["cpu_s"] for r in rows) / pushes * 1e6, 1) if pushes else None


def update_payloads(actor: MatchActor) -> list[bytes]:
    """The routine update payloads of the last ball's display, one per perspective (h2load's body size)."""
    from daemon.cricket import payloads

    now = int(time.time())
    by_perspective = payloads.tick_payloads(
        actor.latest.display or {},
        kind="update",
        timestamp=now,
        event=None,
        events=(),
        dismissal_date=now,
        stale_date=now + actor.settings.stale_after_s if actor.settings.stale_after_s else None,
    )
    return list(by_perspective.values()) or [b"{}"]


def code_under_test() -> dict[str, Any]:
    """Which checkout ran: its commit (and whether it had changes), and where the sender's modules came from
    (they must be this checkout's, not another one the virtualenv points at)."""
    import subprocess

    import daemon.apns.connection

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    module = Path(daemon.apns.connection.__file__).resolve()
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "changed_files": len(git("status", "--porcelain", "--untracked-files=no").splitlines()),
        "modules_from_this_checkout": module.is_relative_to(ROOT),
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=100_000, help="per-token sessions of the match")
    p.add_argument("--balls", type=int, default=6, help="measured balls (after one warm-up ball)")
    p.add_argument(
        "--connections", type=int, default=None, help="APNs connections (default: the daemon's [apns])"
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="nginx as the soak runs it: reads every body and records every push (its answers are three "
        "frames: a stream WINDOW_UPDATE, HEADERS, an empty DATA with END_STREAM); default: nginx answering "
        "as APNs does, one HEADERS frame with END_STREAM",
    )
    p.add_argument("--seed", type=int, default=7, help="the synthesised T20's seed")
    p.add_argument(
        "--shared",
        action="store_true",
        help="the match is hot: its fan-outs go through the board and its shards, all delivered by the owner",
    )
    p.add_argument("--profile", action="store_true", help="cProfile the measured balls; print stage shares")
    p.add_argument("--profile-out", metavar="FILE", help="with --profile: also dump the raw profile here")
    p.add_argument("--h2load", action="store_true", help="then run h2load on the same nginx")
    p.add_argument("--h2load-n", type=int, default=100_000, help="h2load's requests (default 100000)")
    p.add_argument("--log-file", default=None, help="the daemon's log lines (default: a temporary file)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.connections is None:
        args.connections = ApnsSettings().connections
    workdir = Path(tempfile.mkdtemp(prefix="fanout-cpu-"))
    log_path = Path(args.log_file) if args.log_file else workdir / "daemon.log"
    # the daemon's logging (JSON lines at info) and garbage collector settings
    with log_path.open("w") as log_stream:
        configure("info", json=True, stream=log_stream, instance_id=OWNER)
        gctune.configure(InstanceSettings().gc_young_threshold)
        gc.collect()
        result = trio.run(fan_out, args, workdir)
    result["log_lines"] = sum(1 for _ in log_path.open())
    result["code"] = code_under_test()
    print(json.dumps(result))
    return 0 if result["failed_or_rejected"] == 0 and result["every_token_once_per_ball"] else 1


if __name__ == "__main__":
    sys.exit(main())
