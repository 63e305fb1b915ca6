"""``sightscreen events TAPE [--cadence SECONDS] [--marquee]``: a tape through the engine, as the daemon sees it.

Output: one JSON line per key event that would be pushed (``ball``, ``over``, ``type``, ``subject``,
``priority``, ``alert`` (title and body, or null), ``text``), then one line
``{"counts": {type: n}, "polls": n, "pushes": n}``. The replay itself is ``daemon.replay.offline``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from daemon.commands.common import finite
from daemon.replay.offline import event_line, replay_events
from daemon.replay.tape import TapeError, resolve_tape


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="sightscreen events",
        description="Replay a tape through the match engine as the daemon would poll it; print one JSON line "
        "per key event that would be pushed, then the counts per type.",
    )
    parser.add_argument("tape", help="tape file (.json or .json.gz), or the name of a built-in tape")
    parser.add_argument("--cadence", type=finite(), default=2.5, help="seconds between polls (default 2.5)")
    parser.add_argument(
        "--marquee",
        action="store_true",
        help="poll with balls (Tier1 ball events); default is the score-only feed",
    )
    args = parser.parse_args(argv)
    try:
        tape = resolve_tape(args.tape)
    except (TapeError, FileNotFoundError, ValueError) as exc:
        print(f"sightscreen events: {exc}", file=sys.stderr)
        return 2
    counts: Counter[str] = Counter()
    polls = pushes = 0
    out = sys.stdout
    for _poll, result in replay_events(tape, cadence=args.cadence, marquee=args.marquee):
        polls += 1
        if result.display_changed or result.events:
            pushes += 1
        for event in result.events:
            counts[event.type] += 1
            out.write(json.dumps(event_line(event), ensure_ascii=False) + "\n")
    out.write(json.dumps({"counts": dict(sorted(counts.items())), "polls": polls, "pushes": pushes}) + "\n")
    return 0
