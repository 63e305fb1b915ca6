"""Bytes and CPU of one live poll with 20 live matches: whole answers against sparse ones (``fields[...]``).

Usage: python bench/feed_sparse.py [--matches 20] [--polls 40] [--entries 150] [--endpoint livescores]

Serves ``--matches`` synthesised T20s (each ``--entries`` entries in: mid-chase with the defaults, about 200
balls each) from the project's replay server, in a thread of its own so its CPU is not counted, and polls them
the way the feed leader does (the marquee include set, balls and all), first whole, then cut to the fields the
engine and the cache read (``client.LIVE_FIELDS``). Per poll it prints the body's bytes and the leader's CPU
(this thread's, ``time.thread_time``) for each step a poll costs it: the call (HTTP, JSON decoding and the
pydantic check of every fixture, by a client that has checked none of them; and by one that checked them in
its last poll and skips those unchanged, as the feed's client does with most fixtures from one poll to the
next), the feed's order marks (``daemon.cricket.order``) and the match actors' snapshots
(``snapshot_from_fixture``). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.cricket.order import mark_of_fixture  # noqa: E402
from daemon.cricket.snapshot import snapshot_from_fixture  # noqa: E402
from daemon.replay.server import ReplayServer  # noqa: E402
from daemon.replay.synth import synthesise  # noqa: E402
from daemon.sportmonks.client import (  # noqa: E402
    DEFAULT_FIXTURE_INCLUDE,
    LIVE_FIELDS,
    LIVE_STATUSES,
    SportMonksClient,
)
from daemon.sportmonks.settings import SportMonksSettings  # noqa: E402


class Served:
    """The replay server in a thread of its own (its own trio loop), paused at the chosen cursor."""

    def __init__(self, matches: int, entries: int) -> None:
        tapes = [synthesise("T20", seed=100 + i) for i in range(matches)]
        self.server = ReplayServer(tapes)
        for tape in tapes:
            self.server.seek(tape.fixture_id, min(entries, len(tape) - 1))
        self.server.pause()
        self.port: int | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=trio.run, args=(self._serve,), daemon=True)

    async def _serve(self) -> None:
        async with trio.open_nursery() as nursery:
            self.port = await nursery.start(self.server.serve)
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()

    def __enter__(self) -> Served:
        self._thread.start()
        self._ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        trio.from_thread.run_sync(self.server.stop, trio_token=self._token)
        self._thread.join(10)


def thread_ms(before: float) -> float:
    return 1000 * (time.thread_time() - before)


async def measure(port: int, endpoint: str, polls: int, sparse: bool) -> dict[str, Any]:
    # decoded in this thread whatever the size (the daemon hands bodies over 256 KB to a worker thread: the
    # same CPU, elsewhere), so thread_time sees it
    settings = SportMonksSettings(
        base_url=f"http://127.0.0.1:{port}",
        api_token="bench",
        hourly_budget=10**6,
        offload_parse_bytes=10**12,
    )
    fields = LIVE_FIELDS if sparse else None
    cold: list[float] = []  # a client that has checked none of the fixtures: each one checked
    warm: list[float] = []  # a client that checked them in its last poll (nothing changed: none checked)
    marks: list[float] = []
    snaps: list[float] = []
    async with SportMonksClient(settings) as client:
        await client.live_list(endpoint, DEFAULT_FIXTURE_INCLUDE, fields=fields)  # warm: the server renders
        for _ in range(polls):
            before = time.thread_time()
            result = await client.live_list(endpoint, DEFAULT_FIXTURE_INCLUDE, fields=fields)
            warm.append(thread_ms(before))
            before = time.thread_time()
            for fixture in result.fixtures:
                mark_of_fixture(fixture)
            marks.append(thread_ms(before))
            before = time.thread_time()
            for fixture in result.fixtures:
                snapshot_from_fixture(fixture)
            snaps.append(thread_ms(before))
        matches = len(result.fixtures)
    for _ in range(polls):
        async with SportMonksClient(settings) as fresh:
            before = time.thread_time()
            await fresh.live_list(endpoint, DEFAULT_FIXTURE_INCLUDE, fields=fields)
            cold.append(thread_ms(before))
    served = await body_bytes(port, endpoint, fields)
    med = {
        name: round(statistics.median(v), 2)
        for name, v in (("cold", cold), ("warm", warm), ("marks", marks), ("snaps", snaps))
    }
    return {
        "matches": matches,
        "bytes_per_poll": served,
        "bytes_per_match": round(served / max(1, matches)),
        "cpu_ms_per_poll": {
            "call_decode_check_every_fixture": med["cold"],
            "call_decode_check_unchanged_skipped": med["warm"],
            "order_marks": med["marks"],
            "snapshots": med["snaps"],
        },
    }


async def body_bytes(port: int, endpoint: str, fields: dict[str, tuple[str, ...]] | None) -> int:
    """The body's size as served (the replay server sends no compression)."""
    params: dict[str, str] = {"include": ",".join(DEFAULT_FIXTURE_INCLUDE)}
    if endpoint == "fixtures":
        params["filter[status]"] = ",".join(LIVE_STATUSES)
    for resource, names in (fields or {}).items():
        params[f"fields[{resource}]"] = ",".join(names)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        return len((await http.get(f"/{endpoint}", params=params)).content)


async def main_async(args: argparse.Namespace, port: int) -> dict[str, Any]:
    whole = await measure(port, args.endpoint, args.polls, sparse=False)
    sparse = await measure(port, args.endpoint, args.polls, sparse=True)
    return {
        "endpoint": args.endpoint,
        "matches": args.matches,
        "entries_in": args.entries,
        "whole": whole,
        "sparse": sparse,
        "bytes_ratio": round(sparse["bytes_per_poll"] / whole["bytes_per_poll"], 3),
        "decode_check_cpu_ratio": round(
            sparse["cpu_ms_per_poll"]["call_decode_check_every_fixture"]
            / whole["cpu_ms_per_poll"]["call_decode_check_every_fixture"],
            3,
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matches", type=int, default=20)
    parser.add_argument("--polls", type=int, default=40)
    parser.add_argument("--entries", type=int, default=150, help="entries into each tape (mid-chase: 150)")
    parser.add_argument("--endpoint", choices=["livescores", "fixtures"], default="livescores")
    args = parser.parse_args(argv)
    if args.matches < 1 or args.polls < 1 or args.entries < 1:
        parser.error("--matches, --polls and --entries must be at least 1")
    with Served(args.matches, args.entries) as served:
        assert served.port is not None
        out = trio.run(main_async, args, served.port)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
