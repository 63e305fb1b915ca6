"""The garbage collector's share of a big instance's fan-outs: CPython's defaults vs the daemon's settings.

    python bench/gc_fanout.py [--matches 7] [--sessions 10000] [--fanouts 30]

A model of one instance at the target soak's load: ``--matches`` owned matches of ``--sessions`` sessions each
(the match actor's own ``Session`` and ``TokenRef`` objects), and ``--fanouts`` fan-outs, one match at a time,
each building the real objects a push lives in (the ``Push``, an h2 stream with its state machine and flow
window, the ``PushResult``), holding them while the fan-out is "in flight" (two fan-outs overlap, as when
one is answered while the next is built) and dropping them. Each configuration runs in a fresh interpreter;
the pauses are timed with ``gc.callbacks``. Prints one JSON line: time and collector pauses per configuration
and the speed-up. No network or server is involved: this measures the collector alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def model(matches: int, sessions_per_match: int, fanouts: int, tuned: bool) -> dict[str, Any]:
    import h2.config
    import h2.stream

    from actors.audience import Session
    from actors.janitor import TokenRef
    from daemon.apns.types import Push, PushResult
    from daemon.config import InstanceSettings
    from daemon.runtime import gctune

    monitor = gctune.configure(InstanceSettings().gc_young_threshold if tuned else 0)
    if tuned:
        gctune.freeze_startup_heap()  # what the daemon does once it is up (modules loaded, nothing owned yet)
    owned: list[list[Session]] = []
    for m in range(matches):
        match_id = str(9_000_000 + m)
        rows = []
        for i in range(sessions_per_match):
            key = f"user-{m}-{i:06d}#device-{i:06d}"
            user = f"user-{m}-{i:06d}"
            rows.append(
                Session(
                    key, user, f"{m:04x}{i:0156x}", TokenRef("la", match_id, visitor_key=key, user_id=user)
                )
            )
        owned.append(rows)
    config = h2.config.H2Configuration(client_side=True)
    payload = b'{"aps":{"event":"update","content-state":{}}}'
    collections_before, pause_before = list(monitor.collections), list(monitor.pause_s)
    cpu = time.process_time()
    in_flight: list[list[Any]] = []
    for f in range(fanouts):
        live = []
        for n, s in enumerate(owned[f % matches]):
            push = Push(s.token, "liveactivity", "app.topic", payload, 5, "update", context=s.ref)
            stream = h2.stream.H2Stream(
                2 * n + 1, config=config, inbound_window_size=65535, outbound_window_size=65535
            )
            live.append((push, stream, PushResult(push, "accepted", 200, None, None, 1, 0.01)))
        in_flight.append(live)
        if len(in_flight) > 2:
            in_flight.pop(0)
    cpu = time.process_time() - cpu
    return {
        "cpu_s": round(cpu, 3),
        "gc_pause_s": round(sum(monitor.pause_s) - sum(pause_before), 3),
        "collections": [a - b for a, b in zip(monitor.collections, collections_before, strict=True)],
        "thresholds": list(gc.get_threshold()),
        "frozen_objects": gc.get_freeze_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matches", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--fanouts", type=int, default=30)
    parser.add_argument("--one", choices=("default", "tuned"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(model(args.matches, args.sessions, args.fanouts, args.one == "tuned")))
        return
    runs = {}
    for name in ("default", "tuned"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                name,
                "--matches",
                str(args.matches),
                "--sessions",
                str(args.sessions),
                "--fanouts",
                str(args.fanouts),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        runs[name] = json.loads(out.strip().splitlines()[-1])
    default, tuned = runs["default"], runs["tuned"]
    print(
        json.dumps(
            {
                "matches": args.matches,
                "sessions_per_match": args.sessions,
                "fanouts": args.fanouts,
                "cpython_default": default,
                "daemon_settings": tuned,
                "gc_share_default": round(default["gc_pause_s"] / default["cpu_s"], 3)
                if default["cpu_s"]
                else None,
                "gc_share_tuned": round(tuned["gc_pause_s"] / tuned["cpu_s"], 3) if tuned["cpu_s"] else None,
                "speedup": round(default["cpu_s"] / tuned["cpu_s"], 2) if tuned["cpu_s"] else None,
            }
        )
    )


if __name__ == "__main__":
    main()
