"""``sightscreen tables create|check``: create the missing tables, or compare the live ones with the specs.

Owns only the command line; the work is ``tables.create_tables`` / ``tables.check_tables``. Options default
to ``DynamoSettings``' defaults (AWS's regional endpoint, no prefix). Exit codes: 0 done / no difference,
1 differences found (each printed on its own line), 2 bad usage or DynamoDB unreachable / refused.
"""

from __future__ import annotations

import argparse
import sys

import trio
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from daemon.commands.common import finite
from daemon.store.dynamo import Dynamo
from daemon.store.settings import DynamoSettings
from daemon.store.tables import TABLE_SPECS, check_tables, create_tables


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sightscreen tables", description="Create or check the DynamoDB tables.")
    p.add_argument(
        "action", choices=["create", "check"], help="create what is missing, or check against the specs"
    )
    p.add_argument(
        "--endpoint-url", default=None, help="DynamoDB endpoint (default: AWS's regional endpoint)"
    )
    p.add_argument("--region", default=None, help="AWS region (default: us-east-1, as in DynamoSettings)")
    p.add_argument("--prefix", default="", help="table name prefix, e.g. 'staging-'")
    p.add_argument(
        "--timeout", type=finite(), default=300.0, help="seconds to wait for tables to become active"
    )
    return p


async def _run(action: str, settings: DynamoSettings, timeout_s: float) -> int:
    dynamo = Dynamo(settings)
    try:
        if action == "create":
            created = await create_tables(dynamo, timeout_s=timeout_s)
            for name in created:
                print(f"created {name}")
            print(f"{len(created)} created, {len(TABLE_SPECS) - len(created)} already existed")
            diffs = await check_tables(dynamo)
        else:
            diffs = await check_tables(dynamo)
        for line in diffs:
            print(line)
        if diffs:
            print(f"{len(diffs)} difference(s) from the specs", file=sys.stderr)
            return 1
        if action == "check":
            print(f"all {len(TABLE_SPECS)} tables match the specs")
        return 0
    finally:
        dynamo.close()


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    fields: dict[str, object] = {"endpoint_url": args.endpoint_url, "table_prefix": args.prefix}
    if args.region:
        fields["region"] = args.region
    try:
        settings = DynamoSettings.model_validate(fields)
    except ValidationError as exc:
        print(f"sightscreen tables: bad option: {exc}", file=sys.stderr)
        return 2
    try:
        return trio.run(_run, args.action, settings, args.timeout)
    except (ClientError, BotoCoreError) as exc:
        print(f"sightscreen tables: DynamoDB error: {exc}", file=sys.stderr)
        return 2
    except trio.TooSlowError:
        print(f"sightscreen tables: tables not active within {args.timeout:g}s", file=sys.stderr)
        return 2
