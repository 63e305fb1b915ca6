"""``sightscreen tape ...`` and ``sightscreen replay ...``: make tapes, serve them.

Owns argument parsing and process plumbing only (exit codes, the one JSON line ``replay serve`` prints,
signals); the work is in tape.py, synth.py, record.py and server.py.

    sightscreen tape synth --format T20|ODI|T10 --seed N -o FILE
    sightscreen tape from-fixture FIXTURE.json -o FILE
    sightscreen tape record FIXTURE_ID -o FILE [--base-url URL] [--token-file F] [--interval S]
    sightscreen tape info FILE|BUILTIN
    sightscreen replay serve --tape FILE|BUILTIN [--tape ...] [--host H] [--port P] [--speed X]
                             [--ms-per-ball MS] [--innings-break-s S] [--start-delay-s S] [--api-token-file F]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio

from daemon.replay.tape import Tape, TapeError, builtin_tape_path, load_tape, save_tape, tape_from_fixture


def _fail(message: str) -> int:
    print(f"sightscreen: {message}", file=sys.stderr)
    return 2


def resolve_tape(name: str) -> Tape:
    """A tape file, or the name of a tape shipped with the package (``t20-demo``)."""
    path = Path(name)
    if path.exists():
        return load_tape(path)
    try:
        return load_tape(builtin_tape_path(name))
    except TapeError:
        raise TapeError(f"{name}: no such file, and not a built-in tape") from None


def _summary(tape: Tape) -> dict[str, Any]:
    final = tape.fixture_at(len(tape), include=["runs"])
    ops: dict[str, int] = {}
    for entry in tape.entries:
        ops[entry.op] = ops.get(entry.op, 0) + 1
    return {
        "fixture_id": tape.fixture_id,
        "source": tape.source,
        "type": tape.type,
        "league_id": tape.league_id,
        "teams": [tape.localteam.name, tape.visitorteam.name],
        "entries": len(tape),
        "ops": ops,
        "innings_break_index": tape.innings_break_index(),
        "status_at_end": final["status"],
        "note_at_end": final["note"],
        "runs": [(r["team_id"], r["score"], r["wickets"], r["overs"]) for r in final["runs"]],
    }


def _logs() -> None:
    from daemon.logs import configure

    configure(level="info", stream=sys.stderr)  # stdout carries only the command's JSON result


def tape_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sightscreen tape", description="make and inspect match tapes")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("synth", help="synthesise a realistic match")
    p.add_argument("--format", default="T20", choices=["T20", "ODI", "T10"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fixture-id", default=None)
    p.add_argument("--ms-per-ball", type=float, default=40_000.0)
    p.add_argument("-o", "--output", required=True)
    p = sub.add_parser("from-fixture", help="a tape from a /fixtures/{id} response that includes balls")
    p.add_argument("fixture_json")
    p.add_argument("-o", "--output", required=True)
    p = sub.add_parser("record", help="record a live match from the API (resumable)")
    p.add_argument("fixture_id")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--base-url", default=None, help="API root (default: production SportMonks)")
    p.add_argument(
        "--token-file", default=None, help="file holding the API token (else $SIGHTSCREEN_SPORTMONKS_TOKEN)"
    )
    p.add_argument("--interval", type=float, default=5.0, help="seconds between polls (default 5)")
    p.add_argument("--max-polls", type=int, default=None)
    p = sub.add_parser("info", help="summarise a tape")
    p.add_argument("tape")
    args = parser.parse_args(argv)
    _logs()

    try:
        if args.cmd == "synth":
            from daemon.replay.synth import synthesise

            tape = synthesise(
                args.format, args.seed, fixture_id=args.fixture_id, ms_per_ball=args.ms_per_ball
            )
            save_tape(tape, args.output)
            print(json.dumps({"tape": args.output, **_summary(tape)}))
        elif args.cmd == "from-fixture":
            try:
                payload = json.loads(Path(args.fixture_json).read_text())
            except OSError as exc:
                return _fail(f"{args.fixture_json}: cannot read: {exc.strerror or exc}")
            except json.JSONDecodeError as exc:
                return _fail(f"{args.fixture_json}: not JSON: {exc}")
            if not isinstance(payload, dict):
                return _fail(f"{args.fixture_json}: expected a JSON object")
            tape = tape_from_fixture(payload, source=f"from-fixture {Path(args.fixture_json).name}")
            save_tape(tape, args.output)
            print(json.dumps({"tape": args.output, **_summary(tape)}))
        elif args.cmd == "record":
            from daemon.replay.record import PRODUCTION_BASE_URL, RecordError, read_token, record

            try:
                token = read_token(args.token_file)
                outcome = trio.run(
                    lambda: record(
                        args.fixture_id,
                        args.output,
                        base_url=args.base_url or PRODUCTION_BASE_URL,
                        token=token,
                        interval_s=args.interval,
                        max_polls=args.max_polls,
                    )
                )
            except RecordError as exc:
                return _fail(str(exc))
            except KeyboardInterrupt:
                print("interrupted; run the same command again to resume", file=sys.stderr)
                return 130
            print(json.dumps({"tape": args.output, **outcome.__dict__}))
            return 0 if outcome.finished or args.max_polls else 1
        else:
            print(json.dumps(_summary(resolve_tape(args.tape))))
    except (TapeError, ValueError) as exc:
        return _fail(str(exc))
    return 0


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


def replay_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sightscreen replay", description="serve tapes like SportMonks")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve", help="serve tapes over HTTP")
    p.add_argument("--tape", action="append", required=True, help="tape file or built-in name (repeatable)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--ms-per-ball", type=float, default=None, help="default: each tape's own")
    p.add_argument("--innings-break-s", type=float, default=1200.0, help="match seconds (scaled by speed)")
    p.add_argument("--start-delay-s", type=float, default=0.0, help="match seconds before the first ball")
    p.add_argument(
        "--start-at",
        default=None,
        help="wall-clock start of every tape served (ISO 8601, e.g. 2026-12-04T00:15:00Z): the fixtures say "
        "so in starting_at and the first ball comes then; replaces --start-delay-s",
    )
    p.add_argument("--api-token-file", default=None, help="if given, requests must carry this api_token")
    args = parser.parse_args(argv)
    _logs()

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
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"{args.api_token_file}: cannot read: {exc.strerror or exc}")

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:

                async def watch_signals() -> None:
                    async for _ in signals:
                        server.stop()
                        return

                async def run_server(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                    await server.serve(args.host, args.port, task_status=task_status)
                    nursery.cancel_scope.cancel()  # stopped (signal or POST /replay/stop): leave

                nursery.start_soon(watch_signals)
                port = await nursery.start(run_server)
                line = {"replay": {"host": args.host, "port": port, "fixtures": server.fixture_ids}}
                print(json.dumps(line), flush=True)

    try:
        trio.run(main)
    except OSError as exc:
        return _fail(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
    return 0
