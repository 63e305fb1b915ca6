"""``sightscreen apns-server`` as a separate process: the JSON line, real pushes, SIGTERM exits 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from daemon.apns.certs import SigningKeyPair, client_ssl_context, make_provider_token, write_key_files
from tests.apns.conftest import TOKEN, open_h2_client, push_headers

PROJECT_ROOT = Path(__file__).resolve().parents[2]


async def start_cli(*args: str) -> tuple[trio.Process, dict[str, Any]]:
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "daemon", "apns-server", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=PROJECT_ROOT,
    )
    assert proc.stdout is not None
    buffer = b""
    with trio.fail_after(20):
        while b"\n" not in buffer:
            chunk = await proc.stdout.receive_some(4096)
            assert chunk, "apns-server exited before printing its address"
            buffer += chunk
    line = buffer.split(b"\n", 1)[0]
    return proc, json.loads(line)["apns_server"]


async def stop(proc: trio.Process, sig: int = signal.SIGTERM) -> int:
    proc.send_signal(sig)
    with trio.fail_after(10):
        return await proc.wait()


async def test_cli_prints_address_serves_pushes_records_and_exits_0_on_sigterm(tmp_path):
    record = tmp_path / "rec.jsonl"
    proc, info = await start_cli("--record", str(record), "--topic", "com.sightscreen.app", "--fast")
    try:
        assert info["host"] == "127.0.0.1" and info["port"] > 0
        assert info["engine"] == "lean"
        assert await trio.Path(info["ca_file"]).is_file()
        pem = await trio.Path(info["private_key_file"]).read_text()
        pair = SigningKeyPair(info["key_id"], pem, "")
        token = make_provider_token(pair, info["team_id"])
        async with open_h2_client(info["port"], client_ssl_context(info["ca_file"])) as client:
            resp = await client.request(f"/3/device/{TOKEN}", push_headers(token), _payload())
            assert resp.status == 200
            await client.control("POST", "/ctl/script", {"tokens": {TOKEN: {"status": 410}}})
            resp = await client.request(f"/3/device/{TOKEN}", push_headers(token), _payload())
            assert resp.status == 410
    finally:
        code = await stop(proc)
    assert code == 0
    lines = [json.loads(line) for line in (await trio.Path(record).read_text()).splitlines()]
    assert [r["status"] for r in lines] == [200, 410]
    assert not await trio.Path(info["ca_file"]).exists()  # its temp directory is cleaned up on exit


async def test_cli_verifies_tokens_against_given_public_keys_and_exits_0_on_sigint(tmp_path, signing_key):
    _, public = write_key_files(signing_key, tmp_path)
    proc, info = await start_cli(
        "--key-id",
        signing_key.key_id,
        "--public-key",
        str(public),
        "--team-id",
        "TEAMXYZ123",
        "--script",
        json.dumps({"storm": {"status": 503, "count": 1}}),
    )
    try:
        assert "private_key_file" not in info
        assert info["engine"] == "h2"
        good = make_provider_token(signing_key, "TEAMXYZ123")
        wrong_team = make_provider_token(signing_key, "TEAM000001")
        async with open_h2_client(info["port"], client_ssl_context(info["ca_file"])) as client:
            stormed = await client.request(f"/3/device/{TOKEN}", push_headers(good), _payload())
            accepted = await client.request(f"/3/device/{TOKEN}", push_headers(good), _payload())
        async with open_h2_client(info["port"], client_ssl_context(info["ca_file"])) as client:
            refused = await client.request(f"/3/device/{TOKEN}", push_headers(wrong_team), _payload())
    finally:
        code = await stop(proc, signal.SIGINT)
    assert code == 0
    assert stormed.status == 503
    assert accepted.status == 200
    assert (refused.status, refused.reason) == (403, "InvalidProviderToken")


def test_cli_refuses_unpaired_key_options_with_exit_2():
    result = subprocess.run(
        [sys.executable, "-m", "daemon", "apns-server", "--key-id", "K1"],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=30,
    )
    assert result.returncode == 2
    assert "--public-key" in result.stderr


def test_cli_refuses_a_bad_script_naming_the_field():
    result = subprocess.run(
        [sys.executable, "-m", "daemon", "apns-server", "--script", '{"storm": {"status": 404}}'],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=30,
    )
    assert result.returncode == 2
    assert "storm.status" in result.stderr


def _payload() -> bytes:
    import time

    return json.dumps(
        {"aps": {"timestamp": int(time.time()), "event": "update", "content-state": {}}}
    ).encode()
