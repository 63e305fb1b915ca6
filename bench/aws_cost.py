"""What a region's DynamoDB work costs, measured: request units per hour of a live match, and per app
registration.

    python bench/aws_cost.py engine --followers 200 --minutes 4
    python bench/aws_cost.py engine --followers 1000 --minutes 4
    python bench/aws_cost.py api --users 300

``engine`` plays one synthesised T20 at real speed (a ball about every 40 s) with the production cadences
(feed 2.5 s, the orchestrator's and the match actor's own defaults) on two ``sightscreen run`` instances, each
follower with a running Live Activity session, for ``--minutes`` after the first ball. ``api`` runs the API as
its own process and has ``--users`` app users register as the app does: their device, a follow, a Live
Activity session. Both run against the test AWS peer's meter (``tests/harness/aws_peer.py``), which bills each
request of the engine's and the API's processes as on-demand DynamoDB would (read and write request units
from the items' sizes, a write on the larger of the item before and after it, and again for each global
secondary index it writes), and print one JSON line: units per hour (engine) or per registration (api), by
table (or index) and operation, with the SportMonks calls and APNs pushes of the same window. docs/cost.md
turns them into money.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.harness.aws_peer import AwsPeer  # noqa: E402


def summarise(meter: Path, scale: float) -> dict[str, Any]:
    """The meter's lines added up per role (and per table or index and operation), each sum times ``scale``.
    An index's line is the write units a request spent on that global secondary index: counted in the role's
    units, not as a call of its own."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    detail: dict[str, dict[str, dict[str, float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float))
    )
    for line in meter.read_text().splitlines() if meter.exists() else []:
        entry = json.loads(line)
        where = entry["table"] if "index" not in entry else f"{entry['table']}/index/{entry['index']}"
        role, key = entry["role"], f"{where} {entry['op']}"
        calls = 0.0 if "index" in entry else 1.0
        for name, value in (("calls", calls), ("rru", entry["rru"]), ("wru", entry["wru"])):
            totals[role][name] += value * scale
            detail[role][key][name] += value * scale
    out: dict[str, Any] = {}
    for role, sums in totals.items():
        rows = sorted(detail[role].items(), key=lambda kv: -(kv[1]["rru"] + kv[1]["wru"]))
        out[role] = {
            **{k: round(v, 2) for k, v in sums.items()},
            "by_table_op": {k: {n: round(v, 2) for n, v in d.items()} for k, d in rows},
        }
    return out


async def engine(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from actors.settings import MatchActorSettings, OrchestratorSettings
    from daemon.replay.synth import synthesise
    from tests.harness.cluster import Cluster, admin_request

    meter = workdir / "meter.jsonl"
    orch, match = OrchestratorSettings(), MatchActorSettings()
    with AwsPeer(meter=meter) as peer:
        cluster = Cluster(
            workdir,
            moto_url=peer.url,
            tapes=[synthesise("T20", seed=args.seed)],
            table_prefix="cost-",
            speed=1.0,
            followers_per_match=args.followers,
            lease_s=orch.lease_s,
            cadence_s=2.5,
            cycle_s=orch.cycle_s,
            innings_break_s=1200.0,
            # the followers were told before play, as the prematch job leaves them: live play alone
            prematch_settled=True,
            extra_config={
                "match": {
                    "session_refresh_s": match.session_refresh_s,
                    "heal_every_s": match.heal_every_s,
                    "follower_refresh_s": match.follower_refresh_s,
                }
            },
        )
        async with trio.open_nursery() as nursery:
            await cluster.start(nursery, instances=2)
            (match_id,) = cluster.matches
            with trio.fail_after(300):
                while not cluster.replay.status()[match_id]["started"]:
                    await trio.sleep(0.5)
            meter.write_text("")  # from the first ball: the steady cost of live play
            calls_before = cluster.replay.sportmonks_requests()
            started = time.monotonic()
            await trio.sleep(args.minutes * 60)
            window = time.monotonic() - started
            calls = cluster.replay.sportmonks_requests() - calls_before
            accepted = [r for r in cluster.apns.records if r.get("status") == 200]
            pushes = len(accepted)
            # the JSON payload of each push (what leaves the region per push, before HTTP/2 framing and TLS)
            payload_bytes = sum(len(json.dumps(r.get("payload"), separators=(",", ":"))) for r in accepted)
            log_bytes = sum(inst.log_path.stat().st_size for inst in cluster.all_instances())
            cursor = cluster.replay.status()[match_id]
            samples = []  # what a scrape of each instance carries: Prometheus's ingestion is billed per sample
            for inst in list(cluster.instances.values()):
                text = await admin_request(cluster.admin_socket(inst), "metrics")
                samples.append(sum(1 for x in str(text or "").splitlines() if x and not x.startswith("#")))
            await cluster.stop_all()
            nursery.cancel_scope.cancel()
        cluster.dynamo.close()
    scale = 3600.0 / window
    return {
        "mode": "engine",
        "followers": args.followers,
        "window_s": round(window, 1),
        "replay": {k: v for k, v in cursor.items() if isinstance(v, int | float | str | bool)},
        "sportmonks_calls_per_hour": round(calls * scale),
        "apns_pushes_accepted_run": pushes,
        "apns_payload_bytes_mean": round(payload_bytes / max(1, pushes)),
        "log_bytes_per_hour_all_instances_from_start": round(log_bytes * scale),
        "metric_samples_per_scrape": samples,
        "per_hour": summarise(meter, scale),
    }


async def api(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import httpx

    from daemon.demo.issuer import LocalIssuer
    from daemon.replay.synth import synthesise
    from daemon.store import Dynamo, DynamoSettings, Repositories, create_tables
    from tests.harness.api_process import ApiProcess
    from tests.harness.seed import seed_match

    meter = workdir / "meter.jsonl"
    with AwsPeer(meter=meter) as peer, LocalIssuer().serve() as issuer:
        dynamo = Dynamo(DynamoSettings(endpoint_url=peer.url, table_prefix="cost-"))
        await create_tables(dynamo)
        tape = synthesise("T20", seed=args.seed)
        # seeded (tests/harness/seed.py): the API's requests are metered on a world the engine would have made
        seeded = await seed_match(
            Repositories(dynamo),
            tape,
            starts_at=time.time() + 3600,
            followers=0,
            league_name="Cost",
            league_code="COST",
        )
        process = ApiProcess(workdir, dynamodb_url=peer.url, table_prefix="cost-", issuer=issuer).start()
        async with httpx.AsyncClient(base_url=process.url, timeout=60) as http:
            await process.wait_ready(http)
            meter.write_text("")
            for n in range(args.users):
                headers = {"Authorization": f"Bearer {issuer.mint(f'cost-user-{n}')}"}
                device = f"{n:064x}"
                steps = [
                    (
                        "POST",
                        "/user/device",
                        {
                            "deviceToken": device,
                            "platform": "ios",
                            "osVersion": "17.5",
                            "appVersion": "1.0",
                            "pushToStartToken": device[::-1],
                        },
                    ),
                    ("POST", f"/user/follow/{seeded.match_id}", {"teamId": str(tape.localteam.id)}),
                    (
                        "POST",
                        f"/user/activity/{seeded.match_id}",
                        {"deviceId": f"d{n}", "updateToken": device},
                    ),
                ]
                for method, path, body in steps:
                    resp = await http.request(method, path, json=body, headers=headers)
                    assert resp.status_code < 300, (path, resp.status_code, resp.text)
            await process.stop()
        dynamo.close()
    return {"mode": "api", "users": args.users, "per_registration": summarise(meter, 1.0 / args.users)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    e = sub.add_parser("engine", help="one live match at real speed")
    e.add_argument("--followers", type=int, default=200)
    e.add_argument("--minutes", type=float, default=4.0)
    e.add_argument("--seed", type=int, default=3)
    a = sub.add_parser("api", help="app users registering")
    a.add_argument("--users", type=int, default=300)
    a.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sightscreen-cost-", dir="/tmp") as tmp:
        run = engine if args.mode == "engine" else api
        print(json.dumps(trio.run(run, args, Path(tmp))))


if __name__ == "__main__":
    main()
