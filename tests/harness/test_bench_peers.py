"""The soak benchmark's fast peers: nginx recording what it was pushed, dynalite as DynamoDB.

Each is a real server on loopback; a test is skipped (with the reason) when its program is not installed.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import struct
import time
from pathlib import Path

import httpx
import pytest

from tests.harness.nginx_apns import NginxApns

pytestmark = (
    pytest.mark.slow
)  # starts the soak benchmark's peers (nginx, dynalite on node) as child processes

HAS_NGINX = shutil.which("nginx") is not None or Path("/usr/sbin/nginx").exists()
HAS_NODE = shutil.which("node") is not None and shutil.which("npm") is not None


def _body(event: str, events: list[dict[str, str]]) -> bytes:
    state = {"title": "A v B", "events": events}
    return json.dumps(
        {"aps": {"timestamp": 1, "event": event, "content-state": state}}, separators=(",", ":")
    ).encode()


@pytest.mark.skipif(not HAS_NGINX, reason="nginx is not installed (Debian: apt-get install nginx-light)")
async def test_nginx_peer_answers_200_over_http2_and_records_the_pushes_that_carry_something(
    tmp_path: Path,
) -> None:
    server = NginxApns(record_path=tmp_path / "records.jsonl", workdir=tmp_path / "nginx").start()
    try:
        context = ssl.create_default_context(cafile=server.ca_file)
        async with httpx.AsyncClient(http2=True, verify=context, base_url=server.url) as client:
            wicket = [{"type": "wicket", "subject": "S1:42", "text": "OUT! “caught”"}]
            answers = [
                await client.post("/3/device/aaa", content=_body("update", wicket)),
                await client.post("/3/device/bbb", content=_body("update", [])),
                await client.post("/3/device/ccc", content=_body("end", [])),
            ]
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert {a.http_version for a in answers} == {"HTTP/2"}
    finally:
        server.stop()  # flushes the buffered record lines
    records = list(server.records())
    assert [(r["token"], r["kind"], r["status"]) for r in records] == [
        ("aaa", "update", 200),
        ("bbb", "update", 200),
        ("ccc", "end", 200),
    ]
    assert records[0]["payload"]["aps"]["content-state"]["events"] == wicket  # non-ASCII survives the log
    assert records[1]["payload"] is None  # nothing to look at: the body is not logged
    assert records[2]["payload"]["aps"]["event"] == "end"
    assert all(r["time"] > 1.7e9 for r in records)


@pytest.mark.skipif(not HAS_NGINX, reason="nginx is not installed (Debian: apt-get install nginx-light)")
def test_nginx_records_skip_a_body_cut_short_by_a_client_that_went_away(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(
        '{"t":1.5,"s":499,"u":"/3/device/ddd","k":"update","b":"{\\"aps\\":{\\"timest"}\nnot json at all\n'
    )
    (record,) = NginxApns(record_path=path).records()
    assert record == {"time": 1.5, "status": 499, "token": "ddd", "kind": "update", "payload": None}


def _abort_mid_request(port: int) -> None:
    """Half a request, then a reset (SO_LINGER 0): what a client killed mid-call leaves behind."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\n"
        b'X-Amz-Target: DynamoDB_20120810.GetItem\r\nContent-Length: 1000\r\n\r\n{"TableN'
    )
    time.sleep(0.2)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    time.sleep(0.2)


@pytest.mark.skipif(not HAS_NODE, reason="dynalite needs node >= 20 and npm")
async def test_the_store_runs_on_dynalite_despite_its_gaps() -> None:
    from daemon.store import Dynamo, DynamoSettings, Repositories, create_tables
    from tests.harness.dynalite import DynaliteServer

    try:
        server = DynaliteServer().start()
    except Exception as exc:  # noqa: BLE001 - no registry access here: say so rather than fail
        pytest.skip(f"dynalite could not be installed or started: {exc}")
    try:
        dynamo = Dynamo(DynamoSettings(endpoint_url=server.url, table_prefix="peer-"))
        await create_tables(dynamo)  # no UpdateTimeToLive on dynalite: logged, not fatal
        repos = Repositories(dynamo)
        assert await repos.active_matches.register_active_match("77", "me")
        # a failed condition comes back without the item on dynalite: it is read instead
        assert await repos.active_matches.register_active_match("77", "me")  # idempotent for the owner
        assert not await repos.active_matches.register_active_match("77", "someone-else")
        _abort_mid_request(server.port)  # as a daemon killed mid-call does
        assert await repos.active_matches.register_active_match("78", "me")  # still serving
        dynamo.close()
    finally:
        server.stop()
