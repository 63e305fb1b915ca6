"""``sightscreen replay serve ...``: serve tapes as a SportMonks-compatible API (``daemon.replay.server``).

Owns argument parsing and process plumbing only (exit codes, the one JSON line it prints, signals).

    sightscreen replay serve --tape FILE|BUILTIN [--tape ...] [--host H] [--port P] [--speed X]
                             [--ms-per-ball MS] [--innings-break-s S] [--start-delay-s S] [--api-token-file F]
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import trio

from daemon.commands.common import fail, finite, log_to_stderr
from daemon.replay.tape import TapeError, resolve_tape


def parse_start_at(text: str) -> datetime:
    """``--start-at``: an ISO 8601 date-time (``Z`` or an offset; none means UTC), or ValueError naming it."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--start-at: not an ISO 8601 date-time: {text!r} (e.g. 2026-12-04T00:15:00Z)"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def start_delay_for(start_at: datetime, now: float, speed: float) -> float:
    """The server's start delay (match seconds) that puts the first ball at ``start_at`` on the wall clock;
    0 for a start in the past (the match is then under way from its first ball now)."""
    return max(0.0, start_at.timestamp() - now) * speed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sightscreen replay", description="serve tapes like SportMonks")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve", help="serve tapes over HTTP")
    p.add_argument("--tape", action="append", required=True, help="tape file or built-in name (repeatable)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    p.add_argument("--speed", type=finite(), default=1.0)
    p.add_argument("--ms-per-ball", type=finite(), default=None, help="default: each tape's own")
    p.add_argument(
        "--innings-break-s",
        type=finite(inclusive=True),
        default=1200.0,
        help="match seconds (scaled by speed)",
    )
    p.add_argument(
        "--start-delay-s",
        type=finite(inclusive=True),
        default=0.0,
        help="match seconds before the first ball",
    )
    p.add_argument(
        "--start-at",
        default=None,
        help="wall-clock start of every tape served (ISO 8601, e.g. 2026-12-04T00:15:00Z): the fixtures say "
        "so in starting_at and the first ball comes then; replaces --start-delay-s",
    )
    p.add_argument("--api-token-file", default=None, help="if given, requests must carry this api_token")
    args = parser.parse_args(argv)
    log_to_stderr()

    from daemon.replay.server import ReplayServer

    try:
        tapes = [resolve_tape(name) for name in args.tape]
        start_delay_s = args.start_delay_s
        if args.start_at is not None:
            start_at = parse_start_at(args.start_at)
            tapes = [tape.model_copy(update={"starting_at": start_at}) for tape in tapes]
            start_delay_s = start_delay_for(start_at, time.time(), args.speed)
        token = Path(args.api_token_file).read_text().strip() if args.api_token_file else None
        server = ReplayServer(
            tapes,
            speed=args.speed,
            ms_per_ball=args.ms_per_ball,
            innings_break_s=args.innings_break_s,
            start_delay_s=start_delay_s,
            api_token=token,
        )
    except (TapeError, ValueError) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"{args.api_token_file}: cannot read: {exc.strerror or exc}")

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:

                async def watch_signals() -> None:
                    async for _ in signals:
                        server.stop()
                        return

                async def run_server(*, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
                    await server.serve(args.host, args.port, task_status=task_status)
                    nursery.cancel_scope.cancel()  # stopped (signal or POST /replay/stop): leave

                nursery.start_soon(watch_signals)
                port = await nursery.start(run_server)
                line = {"replay": {"host": args.host, "port": port, "fixtures": server.fixture_ids}}
                print(json.dumps(line), flush=True)

    try:
        trio.run(main)
    except OSError as exc:
        return fail(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
    return 0
