"""Push-to-start of a match's iOS 18 followers: how long the owner takes to start them all, and its DynamoDB calls.

    python bench/push_to_start.py [--followers 1600] [--named 1.0] [--dynamodb moto|dynalite]

Seeds one match with ``--followers`` followers without a Live Activity, each with a registered iOS 18
device and a push-to-start token; ``--named`` is the share of follows that name their device
(``deviceToken``, as the API writes it when a user with a registered device follows). Then a match actor,
live, runs one ``heal`` against the local DynamoDB peer (moto's server on loopback by default) with a sender
that accepts every push at once (APNs is not what is measured here), and prints one JSON line: followers
started, seconds, DynamoDB calls, and both per follower. The owner's other work (ticks, lease renewals) is
not running: this is the push-to-start path alone, the part of a match's go-live that grows with its iOS
18 followers.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.match import MatchActor  # noqa: E402
from actors.settings import MatchActorSettings, OrchestratorSettings  # noqa: E402
from daemon import logs  # noqa: E402
from daemon.apns.types import Push, PushResult  # noqa: E402
from daemon.cricket.settings import EngineSettings  # noqa: E402
from daemon.store import Dynamo, DynamoSettings, Repositories, create_tables  # noqa: E402
from daemon.store.dynamo import count_calls  # noqa: E402
from daemon.store.local import MotoServer  # noqa: E402
from daemon.store.locks import match_lock_key  # noqa: E402
from tests.harness.dynalite import DynaliteServer  # noqa: E402

MATCH = "700"


class AcceptingSender:
    """Answers every push as APNs would have accepted it, at once."""

    def __init__(self) -> None:
        self.pushes = 0

    async def send(self, push: Push) -> None:
        self.pushes += 1
        assert push.reply_to is not None
        await push.reply_to.send(PushResult(push, "accepted", 200, None, None, 1, 0.0))

    async def send_many(self, pushes: list[Push]) -> None:
        for push in pushes:
            await self.send(push)


async def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    dynamo = Dynamo(DynamoSettings(endpoint_url=url, table_prefix="p2s-", read_timeout_s=60.0))
    await create_tables(dynamo)
    repos = Repositories(dynamo)
    devices: list[dict[str, Any]] = []
    follows: list[dict[str, Any]] = []
    named_every = args.named
    for n in range(args.followers):
        user, device = f"u{n:07d}", secrets.token_hex(32)
        devices.append(
            {
                "userId": user,
                "deviceToken": device,
                "platform": "ios",
                "osVersion": "18.2",
                "pushToStartToken": secrets.token_hex(32),
            }
        )
        follow = {
            "matchId": MATCH,
            "userId": user,
            "teamId": "7" if n % 2 else "8",
            "expiresAt": 4_000_000_000,
        }
        if int((n + 1) * named_every) > int(n * named_every):
            follow["deviceToken"] = device
        follows.append(follow)
    await repos.devices.import_items(devices)
    await repos.follows.import_items(follows)
    sender = AcceptingSender()
    actor = MatchActor(
        MATCH,
        instance_id="bench",
        epoch=1,
        repos=repos,
        feed=cast(Any, None),  # heal alone: no ticks
        sender=sender,
        channel_requests=None,
        topic="app.bench",
        marquee=True,
        engine_settings=EngineSettings(),
        settings=MatchActorSettings(heal_chunk=args.chunk, heal_concurrency=args.concurrency),
        lease=OrchestratorSettings(lease_s=600.0),  # no renewals here: one lease outlasts the heal
    )
    await repos.locks.acquire_fenced(match_lock_key(MATCH), "bench", 3600.0)
    await actor.lease.acquire()
    actor.latest.phase = "live"
    actor.latest.display = {"neutral": {"title": "A v B", "subtitle": "live", "score": "1/0", "overs": "0.1"}}
    await actor.audience.refresh()
    started = time.perf_counter()
    cpu = time.process_time()
    with count_calls() as calls:
        sent = await actor.starts.heal()
    seconds = time.perf_counter() - started
    return {
        "followers": args.followers,
        "named_share": args.named,
        "heal_chunk": args.chunk,
        "heal_concurrency": args.concurrency,
        "started": sent,
        "seconds": round(seconds, 2),
        "ms_per_follower": round(1000 * seconds / max(1, sent), 3),
        "dynamodb_calls": calls.n,
        "dynamodb_calls_per_follower": round(calls.n / max(1, sent), 3),
        "client_cpu_s": round(time.process_time() - cpu, 2),
        "dynamodb": args.dynamodb,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--followers", type=int, default=1600)
    parser.add_argument("--named", type=float, default=1.0, help="share of follows that name their device")
    parser.add_argument("--chunk", type=int, default=100, help="match.heal_chunk")
    parser.add_argument("--concurrency", type=int, default=4, help="match.heal_concurrency")
    parser.add_argument("--dynamodb", default="moto", choices=["moto", "dynalite"])
    args = parser.parse_args()
    logs.configure("warning")
    if args.dynamodb == "dynalite":
        store: Any = DynaliteServer(log_path=Path(tempfile.mkdtemp(prefix="p2s-")) / "dynalite.log").start()
    else:
        store = MotoServer().start()
    try:
        result = trio.run(run, args, store.url)
    finally:
        store.stop()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
