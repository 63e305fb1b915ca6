"""The APNs server over real HTTP/2 + TLS: accepting, validating, recording (faults: test_server_faults.py)."""

from __future__ import annotations

import json
import re
import time

import pytest
import trio

from daemon.apns.certs import generate_signing_key, make_provider_token
from daemon.apns.server import ApnsTestServer
from tests.apns.conftest import BUNDLE_ID, LA_TOPIC, TEAM_ID, TOKEN, la_payload, push_headers

UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@pytest.fixture(params=["h2", "lean"])
def apns_engine(request: pytest.FixtureRequest) -> str:
    """Every test here runs on both HTTP/2 engines of the server."""
    return str(request.param)


async def test_valid_live_activity_update_is_accepted_with_apns_id_and_recorded(
    apns_server: ApnsTestServer, open_client, provider_token
):
    apns_id = "0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b"
    body = la_payload()
    async with open_client(apns_server) as client:
        resp = await client.request(f"/3/device/{TOKEN}", push_headers(provider_token, apns_id=apns_id), body)
    assert resp.status == 200
    assert resp.body == b""
    assert resp.headers["apns-id"] == apns_id
    assert UUID_RE.fullmatch(resp.headers["apns-unique-id"])
    [record] = apns_server.records
    assert record["token"] == TOKEN
    assert record["status"] == 200 and record["reason"] is None
    assert record["apns_id"] == apns_id
    assert record["payload"] == json.loads(body)
    assert record["headers"]["apns-topic"] == LA_TOPIC
    assert record["headers"]["authorization"].startswith("bearer <kid=KEY0000001 iat=")
    assert provider_token not in json.dumps(record)
    assert record["stream_id"] == 1 and record["connection_id"] >= 1


async def test_server_generates_a_uuid_apns_id_when_the_request_has_none(
    apns_server: ApnsTestServer, open_client, provider_token
):
    async with open_client(apns_server) as client:
        resp = await client.request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
    assert resp.status == 200
    assert UUID_RE.fullmatch(resp.headers["apns-id"])


async def test_stream_limit_is_one_until_first_accepted_request_then_the_configured_maximum(
    start_apns_server, open_client, provider_token
):
    server = await start_apns_server(max_concurrent_streams=1000)
    async with open_client(server) as client:
        assert client.max_streams == 1
        resp = await client.request(f"/3/device/{TOKEN}", push_headers(provider_token, priority="5"), b"")
        assert resp.status == 400 and resp.reason == "PayloadEmpty"
        # A rejected request does not open the connection up.
        assert client.max_streams == 1
        resp = await client.request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
        assert resp.status == 200
        with trio.fail_after(5):
            while client.max_streams != 1000:
                await client.changed.wait()
        assert client.max_streams_seen == [1, 1000]


async def test_concurrent_streams_on_several_connections_are_all_answered(
    apns_server: ApnsTestServer, open_client, provider_token
):
    per_connection, connections = 150, 3
    statuses: list[int] = []

    async def one_connection() -> None:
        async with open_client(apns_server) as client:
            first = await client.request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
            statuses.append(first.status or 0)
            async with trio.open_nursery() as nursery:
                for i in range(per_connection - 1):

                    async def push(i: int = i) -> None:
                        token = f"{i:04x}" * 8
                        r = await client.request(
                            f"/3/device/{token}", push_headers(provider_token), la_payload()
                        )
                        statuses.append(r.status or 0)

                    nursery.start_soon(push)

    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(one_connection)
    assert statuses == [200] * (per_connection * connections)
    assert apns_server.records_total == per_connection * connections
    assert len({r["connection_id"] for r in apns_server.records}) == connections
    # More than one stream was open at once on some connection: the limit really rose above 1.
    assert apns_server.stats()["max_open_streams"] > 1
    assert apns_server.stats()["protocol_errors"] == []


async def test_wait_for_records_returns_once_enough_requests_were_answered(
    apns_server: ApnsTestServer, open_client, provider_token
):
    async with trio.open_nursery() as nursery:

        async def push_three() -> None:
            async with open_client(apns_server) as client:
                for _ in range(3):
                    await client.request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())

        nursery.start_soon(push_three)
        with trio.fail_after(5):
            records = await apns_server.wait_for_records(3)
    assert [r["status"] for r in records] == [200, 200, 200]


async def test_record_file_gets_one_json_line_per_answered_request(
    start_apns_server, open_client, provider_token, tmp_path
):
    path = tmp_path / "records.jsonl"
    server = await start_apns_server(record_path=path)
    async with open_client(server) as client:
        await client.request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
        await client.request("/3/device/zz", push_headers(provider_token), la_payload())
    server.flush_records()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["status"], r["reason"]) for r in lines] == [(200, None), (400, "BadDeviceToken")]
    assert all(
        {"time", "connection_id", "stream_id", "token", "headers", "payload", "apns_id"} <= r.keys()
        for r in lines
    )


async def test_provider_token_of_unknown_key_or_wrong_team_is_invalid(
    apns_server: ApnsTestServer, open_client, signing_key
):
    stranger = generate_signing_key("KEY0000002")
    cases = {
        "unknown key": make_provider_token(stranger, TEAM_ID),
        "wrong team": make_provider_token(signing_key, "OTHERTEAM1"),
        "kid of ours, signed by another key": make_provider_token(
            type(stranger)(signing_key.key_id, stranger.private_pem, stranger.public_pem), TEAM_ID
        ),
        "not a jwt": "not.a.jwt",
    }
    for name, token in cases.items():
        async with open_client(apns_server) as client:
            resp = await client.request(f"/3/device/{TOKEN}", push_headers(token), la_payload())
        assert (resp.status, resp.reason) == (403, "InvalidProviderToken"), name


async def test_missing_authorization_is_missing_provider_token(apns_server: ApnsTestServer, open_client):
    async with open_client(apns_server) as client:
        resp = await client.request(f"/3/device/{TOKEN}", push_headers(None), la_payload())
    assert (resp.status, resp.reason) == (403, "MissingProviderToken")


async def test_provider_token_older_than_an_hour_is_expired(apns_server, open_client, signing_key):
    old = make_provider_token(signing_key, TEAM_ID, iat=int(time.time()) - 3601)
    async with open_client(apns_server) as client:
        resp = await client.request(f"/3/device/{TOKEN}", push_headers(old), la_payload())
        assert (resp.status, resp.reason) == (403, "ExpiredProviderToken")
        # Replacing a refused token is not churn: the connection never adopted the expired one.
        fresh = make_provider_token(signing_key, TEAM_ID)
        resp = await client.request(f"/3/device/{TOKEN}", push_headers(fresh), la_payload())
        assert resp.status == 200


async def test_alert_push_to_plain_bundle_topic_is_accepted(apns_server, open_client, provider_token):
    body = json.dumps({"aps": {"alert": {"title": "FIFTY", "body": "Babar 50*"}}}).encode()
    async with open_client(apns_server) as client:
        resp = await client.request(
            f"/3/device/{TOKEN[:64]}", push_headers(provider_token, push_type="alert", topic=BUNDLE_ID), body
        )
    assert resp.status == 200


async def test_client_vanishing_with_held_answers_leaves_the_server_serving(
    apns_server: ApnsTestServer, open_client, provider_token
):
    async with open_client(apns_server) as client:
        await client.request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
        apns_server.delay(0.2)
        for _ in range(5):
            await client.start_request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
    # The client is gone; its answers fall due on a closed socket.
    await trio.sleep(0.4)
    apns_server.reset()
    async with open_client(apns_server) as client:
        resp = await client.request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
    assert resp.status == 200
    assert "internal_errors" not in apns_server.stats()


async def test_client_without_h2_alpn_is_refused_and_counted(apns_server: ApnsTestServer):
    import ssl

    ctx = ssl.create_default_context(cafile=apns_server.ca_file)
    ctx.set_alpn_protocols(["http/1.1"])
    tcp = await trio.open_tcp_stream("127.0.0.1", apns_server.port)
    tls = trio.SSLStream(tcp, ctx, server_hostname="localhost")
    try:
        await tls.do_handshake()
        with trio.fail_after(5):
            assert await tls.receive_some(100) == b""
    except (trio.BrokenResourceError, ssl.SSLError):
        pass  # the server may refuse during the handshake (no common ALPN) or hang up right after
    finally:
        await trio.aclose_forcefully(tls)
    assert apns_server.stats()["tls_failures"] == 1
