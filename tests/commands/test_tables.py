"""`sightscreen tables create|check` end to end against the moto server."""

from __future__ import annotations

import subprocess
import sys

import boto3

from daemon.cli import main as sightscreen
from daemon.store.tables import TABLE_SPECS


def test_create_then_check_then_drift_is_reported(moto_server, table_prefix, capsys):
    opts = ["--endpoint-url", moto_server.url, "--region", "us-east-1", "--prefix", table_prefix]
    assert sightscreen(["tables", "check", *opts]) == 1
    out = capsys.readouterr().out
    assert out.count("table is missing") == len(TABLE_SPECS)

    assert sightscreen(["tables", "create", *opts]) == 0
    out = capsys.readouterr().out
    assert f"created {table_prefix}cricket-locks" in out and "11 created, 0 already existed" in out

    assert sightscreen(["tables", "create", *opts]) == 0
    assert "0 created, 11 already existed" in capsys.readouterr().out

    assert sightscreen(["tables", "check", *opts]) == 0
    assert "all 11 tables match the specs" in capsys.readouterr().out

    # drift: someone adds a GSI by hand
    client = boto3.client("dynamodb", endpoint_url=moto_server.url, region_name="us-east-1")
    client.update_table(
        TableName=f"{table_prefix}cricket-teams",
        AttributeDefinitions=[{"AttributeName": "code", "AttributeType": "S"}],
        GlobalSecondaryIndexUpdates=[
            {
                "Create": {
                    "IndexName": "code-index",
                    "KeySchema": [{"AttributeName": "code", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            }
        ],
    )
    assert sightscreen(["tables", "check", *opts]) == 1
    captured = capsys.readouterr()
    assert captured.out.strip() == f"{table_prefix}cricket-teams: GSI code-index is not in the spec"
    assert "1 difference(s)" in captured.err


def test_unknown_action_is_a_usage_error(capsys):
    try:
        code = sightscreen(["tables", "drop"])
    except SystemExit as exc:  # argparse exits with 2 on bad usage
        code = exc.code
    assert code == 2
    assert "invalid choice: 'drop'" in capsys.readouterr().err


def test_the_installed_entry_point_runs_the_command(moto_server, table_prefix):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "daemon",
            "tables",
            "check",
            "--endpoint-url",
            moto_server.url,
            "--prefix",
            table_prefix,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert f"{table_prefix}active-matches: table is missing" in proc.stdout
