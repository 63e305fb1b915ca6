"""CPU per DynamoDB call in the daemon's process: what one prematch follower costs.

Usage: python bench/dynamodb_call_cost.py [-n 400] [--dynamodb dynalite|moto]

Runs each call ``n`` times, one after the other, through the daemon's own ``Dynamo`` client and
repositories, against a local peer (dynalite by default: the soak's; moto with ``--dynamodb moto``), and
prints the process's CPU (user + system) and the wall time per call. The peer's own CPU is not counted:
it runs in another process. A prematch follower is a device look-up (Query), a claim and a confirmation
(conditional UpdateItems), or a look-up and one write when nothing can reach the follower.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.store import Repositories  # noqa: E402
from daemon.store.dynamo import Dynamo  # noqa: E402
from daemon.store.settings import DynamoSettings  # noqa: E402
from daemon.store.tables import create_tables  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _measure(n: int, call: Callable[[int], Awaitable[Any]]) -> dict[str, float]:
    await call(-1)  # warm: the first call loads botocore's models
    cpu, wall = _cpu(), time.perf_counter()
    for i in range(n):
        await call(i)
    return {
        "cpu_ms_per_call": round(1000 * (_cpu() - cpu) / n, 3),
        "wall_ms_per_call": round(1000 * (time.perf_counter() - wall) / n, 3),
    }


async def run(url: str, n: int) -> dict[str, Any]:
    dynamo = Dynamo(DynamoSettings(endpoint_url=url, table_prefix="bench-"))
    await create_tables(dynamo)
    repos = Repositories(dynamo)
    start = time.time() + 1800
    out: dict[str, Any] = {"calls": n}
    out["PutItem-like upsert (follow_match)"] = await _measure(
        n, lambda i: repos.follows.follow_match("m1", f"u{i}", "t1", time.time() + 3600)
    )
    out["conditional UpdateItem (claim_prematch)"] = await _measure(
        n,
        lambda i: repos.follows.claim_prematch(
            "m1",
            f"u{i}",
            start_iso="2026-12-03T15:00:00Z",
            start_epoch=start,
            now=time.time(),
            threshold_s=900,
            expires_at=start + 4200,
        ),
    )
    out["Query Limit 1 (get_device_for_user)"] = await _measure(
        n, lambda i: repos.devices.get_device_for_user(f"u{i}")
    )
    dynamo.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=400, help="calls of each kind")
    parser.add_argument("--dynamodb", default="dynalite", choices=["dynalite", "moto"])
    args = parser.parse_args()
    if args.dynamodb == "dynalite":
        from tests.harness.dynalite import DynaliteServer

        server: Any = DynaliteServer()
    else:
        from daemon.store.local import MotoServer

        server = MotoServer()
    server.start()
    try:
        print(json.dumps(trio.run(run, server.url, args.n)))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
