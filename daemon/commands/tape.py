"""``sightscreen tape ...``: make and inspect tapes (the work is in ``daemon.replay``).

sightscreen tape synth --format T20|ODI|T10 --seed N -o FILE
sightscreen tape from-fixture FIXTURE.json -o FILE
sightscreen tape record FIXTURE_ID -o FILE [--base-url URL] [--token-file F] [--interval S]
sightscreen tape info FILE|BUILTIN
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import trio

from daemon.commands.common import fail, finite, log_to_stderr
from daemon.replay.tape import Tape, TapeError, resolve_tape, save_tape, tape_from_fixture


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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sightscreen tape", description="make and inspect match tapes")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("synth", help="synthesise a realistic match")
    p.add_argument("--format", default="T20", choices=["T20", "ODI", "T10"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fixture-id", default=None)
    p.add_argument(
        "--ms-per-ball",
        type=finite(),
        default=None,
        help="mean gap between balls (default: real pace, ~52 s)",
    )
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
    p.add_argument("--interval", type=finite(), default=5.0, help="seconds between polls (default 5)")
    p.add_argument("--max-polls", type=int, default=None)
    p = sub.add_parser("info", help="summarise a tape")
    p.add_argument("tape")
    args = parser.parse_args(argv)
    log_to_stderr()

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
                return fail(f"{args.fixture_json}: cannot read: {exc.strerror or exc}")
            except json.JSONDecodeError as exc:
                return fail(f"{args.fixture_json}: not JSON: {exc}")
            if not isinstance(payload, dict):
                return fail(f"{args.fixture_json}: expected a JSON object")
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
                return fail(str(exc))
            except KeyboardInterrupt:
                print("interrupted; run the same command again to resume", file=sys.stderr)
                return 130
            print(json.dumps({"tape": args.output, **outcome.__dict__}))
            return 0 if outcome.finished or args.max_polls else 1
        else:
            print(json.dumps(_summary(resolve_tape(args.tape))))
    except (TapeError, ValueError) as exc:
        return fail(str(exc))
    return 0
