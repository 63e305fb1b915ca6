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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError

from tests.harness.nginx_apns import NginxApns
from tests.harness.tools import nginx_installed  # noqa: F401 - a fixture

pytestmark = (
    pytest.mark.slow
)  # starts the soak benchmark's peers (nginx, dynalite on node) as child processes

HAS_NODE = shutil.which("node") is not None and shutil.which("npm") is not None


async def _status_across_a_reload(client: httpx.AsyncClient, token: str) -> int | None:
    """A push's status, or None when a reload's GOAWAY came before its stream (a client sends it again)."""
    try:
        return (await client.post(f"/3/device/{token}", content=_body("update", []))).status_code
    except httpx.RemoteProtocolError:
        return None


def _body(event: str, events: list[dict[str, str]], timestamp: int = 1) -> bytes:
    state = {"title": "A v B", "events": events}
    return json.dumps(
        {"aps": {"timestamp": timestamp, "event": event, "content-state": state}}, separators=(",", ":")
    ).encode()


@pytest.mark.usefixtures("nginx_installed")
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
                await client.post("/3/device/bbb", content=_body("update", [], 1796547646)),
                await client.post("/3/device/ccc", content=_body("end", [])),
                await client.post("/3/device/ddd", content=_body("start", [])),
            ]
        assert [a.status_code for a in answers] == [200, 200, 200, 200]
        assert {a.http_version for a in answers} == {"HTTP/2"}
    finally:
        server.stop()  # flushes the buffered record lines
    records = list(server.records())
    assert [(r["token"], r["kind"], r["status"]) for r in records] == [
        ("aaa", "update", 200),
        ("bbb", "update", 200),
        ("ccc", "end", 200),
        ("ddd", "start", 200),
    ]
    assert records[0]["payload"]["aps"]["content-state"]["events"] == wicket  # non-ASCII survives the log
    assert records[1]["payload"] is None  # nothing to look at: the body is not logged
    assert [r["stamp"] for r in records] == [1, 1796547646, 1, 1]  # ... but every push's tick is
    assert records[2]["payload"]["aps"]["event"] == "end"
    assert records[3]["payload"]["aps"]["event"] == "start"  # a push-to-start always: it names the channel
    assert all(r["time"] > 1.7e9 for r in records)


@pytest.mark.usefixtures("nginx_installed")
async def test_nginx_with_several_workers_records_every_push_of_every_connection_once(tmp_path: Path) -> None:
    """A benchmark's peer with two workers: both run, and the record still holds each push of eight
    connections once, as a whole line."""
    import trio

    server = NginxApns(record_path=tmp_path / "records.jsonl", workdir=tmp_path / "nginx", workers=2)
    server.start()
    try:
        context = ssl.create_default_context(cafile=server.ca_file)

        async def one_connection(n: int) -> None:
            async with httpx.AsyncClient(http2=True, verify=context, base_url=server.url) as client:
                for i in range(25):
                    answer = await client.post(f"/3/device/c{n}t{i}", content=_body("update", [], 7))
                    assert answer.status_code == 200

        async with trio.open_nursery() as nursery:
            for n in range(8):
                nursery.start_soon(one_connection, n)
        assert server.proc is not None
        assert len(server.worker_pids()) == 2, "nginx runs two workers"
        cpu = server.cpu_s()
        assert cpu is not None and cpu >= 0.0, "the master's and its workers' CPU is read from /proc"
    finally:
        server.stop()
    assert server.cpu_s() is None and server.worker_pids() == [], "a stopped peer has no processes to read"
    tokens = [r["token"] for r in server.records()]
    assert sorted(tokens) == sorted(f"c{n}t{i}" for n in range(8) for i in range(25))


@pytest.mark.usefixtures("nginx_installed")
async def test_nginx_answers_a_dead_token_410_and_a_reload_sends_goaway_to_its_connections(
    tmp_path: Path,
) -> None:
    import h2.connection
    import h2.events
    import trio

    server = NginxApns(record_path=tmp_path / "records.jsonl", workdir=tmp_path / "nginx")
    server.set_dead({"dead0"})  # before the start: in the map nginx reads at start
    server.start()
    try:
        context = ssl.create_default_context(cafile=server.ca_file)
        async with httpx.AsyncClient(http2=True, verify=context, base_url=server.url) as client:
            assert (await client.post("/3/device/dead0", content=_body("update", []))).status_code == 410
            assert (await client.post("/3/device/dead1", content=_body("update", []))).status_code == 200
            server.set_dead({"dead1"})  # while running: applied by a reload
            deadline = time.monotonic() + 10
            while await _status_across_a_reload(client, "dead1") != 410:
                assert time.monotonic() < deadline, "the reload did not apply the new dead token"
                await trio.sleep(0.1)
            answer = await client.post("/3/device/dead1", content=_body("update", []))
            assert answer.json() == {"reason": "Unregistered"}
        # a connection open across a reload is told to go away
        raw = socket.create_connection(("127.0.0.1", server.port))
        context.set_alpn_protocols(["h2"])
        tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
        conn = h2.connection.H2Connection()
        conn.initiate_connection()
        tls.sendall(conn.data_to_send())
        tls.settimeout(10)
        conn.receive_data(tls.recv(65536))  # the server's SETTINGS
        tls.sendall(conn.data_to_send())
        server.reload()
        events: list[Any] = []
        while not any(isinstance(e, h2.events.ConnectionTerminated) for e in events):
            data = tls.recv(65536)
            assert data, "closed without a GOAWAY"
            events.extend(conn.receive_data(data))
        tls.close()
    finally:
        server.stop()
    statuses = [(r["token"], r["status"]) for r in server.records()]
    assert ("dead0", 410) in statuses and ("dead1", 200) in statuses and ("dead1", 410) in statuses


@pytest.mark.usefixtures("nginx_installed")
async def test_nginx_answers_410_to_dead_tokens_of_apns_length_set_before_the_start_and_by_a_reload(
    tmp_path: Path,
) -> None:
    """APNs tokens are 64 hex digits: their paths are longer than nginx's default map bucket, and a map that
    does not build fails the start (and leaves a reload's workers on the old map)."""
    import secrets

    import trio

    tokens = [secrets.token_hex(32) for _ in range(3)]
    server = NginxApns(record_path=tmp_path / "records.jsonl", workdir=tmp_path / "nginx")
    server.set_dead({tokens[0]})
    server.start()
    try:
        context = ssl.create_default_context(cafile=server.ca_file)
        async with httpx.AsyncClient(http2=True, verify=context, base_url=server.url) as client:
            assert (
                await client.post(f"/3/device/{tokens[0]}", content=_body("update", []))
            ).status_code == 410
            assert (
                await client.post(f"/3/device/{tokens[1]}", content=_body("update", []))
            ).status_code == 200
            server.set_dead({tokens[1], tokens[2]})
            deadline = time.monotonic() + 10
            while await _status_across_a_reload(client, tokens[2]) != 410:
                assert time.monotonic() < deadline, "the reload did not apply the new dead tokens"
                await trio.sleep(0.1)
            assert (
                await client.post(f"/3/device/{tokens[1]}", content=_body("update", []))
            ).status_code == 410
    finally:
        server.stop()


@pytest.mark.usefixtures("nginx_installed")
async def test_nginx_answers_every_push_with_a_storms_status_until_it_is_lifted(tmp_path: Path) -> None:
    import trio

    server = NginxApns(record_path=tmp_path / "records.jsonl", workdir=tmp_path / "nginx")
    server.start()
    try:
        context = ssl.create_default_context(cafile=server.ca_file)
        async with httpx.AsyncClient(http2=True, verify=context, base_url=server.url) as client:

            async def status_becomes(want: int) -> None:
                deadline = time.monotonic() + 10
                while await _status_across_a_reload(client, "aa") != want:
                    assert time.monotonic() < deadline, f"never answered {want}"
                    await trio.sleep(0.1)

            for status in (429, 500):
                server.storm(status)
                await status_becomes(status)
                server.storm(None)
                await status_becomes(200)
        with pytest.raises(ValueError, match="storm"):
            server.storm(503)
    finally:
        server.stop()
    statuses = {r["status"] for r in server.records()}
    assert {200, 429, 500} <= statuses


@pytest.mark.usefixtures("nginx_installed")
def test_nginx_records_skip_a_body_cut_short_by_a_client_that_went_away(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(
        '{"t":1.5,"s":499,"u":"/3/device/ddd","k":"update","b":"{\\"aps\\":{\\"timest"}\nnot json at all\n'
    )
    (record,) = NginxApns(record_path=path).records()
    assert record == {
        "time": 1.5,
        "status": 499,
        "token": "ddd",
        "kind": "update",
        "stamp": None,
        "payload": None,
    }


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


# --- TransactWriteItems, run by the launcher in front of dynalite -------------------------------------------


@pytest.fixture
def dynalite() -> Iterator[Any]:
    if not HAS_NODE:
        pytest.skip("dynalite needs node >= 20 and npm")
    from tests.harness.dynalite import DynaliteServer

    try:
        server = DynaliteServer().start()
    except Exception as exc:  # noqa: BLE001 - no registry access here: say so rather than fail
        pytest.skip(f"dynalite could not be installed or started: {exc}")
    try:
        yield server
    finally:
        server.stop()


def _client(url: str) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="peer",
        aws_secret_access_key="peer",
    )


def _tables(client: Any) -> None:
    for name, key in (("locks", "lockKey"), ("cache", "matchId")):
        client.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
    client.put_item(
        TableName="locks",
        Item={"lockKey": {"S": "feed:eu"}, "owner": {"S": "a"}, "epoch": {"N": "3"}, "note": {"S": "kept"}},
    )


def _check(owner: str, key: str = "feed:eu") -> dict[str, Any]:
    return {
        "ConditionCheck": {
            "TableName": "locks",
            "Key": {"lockKey": {"S": key}},
            "ConditionExpression": "#o = :o AND #e = :e",
            "ExpressionAttributeNames": {"#o": "owner", "#e": "epoch"},
            "ExpressionAttributeValues": {":o": {"S": owner}, ":e": {"N": "3"}},
        }
    }


def _put(match_id: str, **condition: Any) -> dict[str, Any]:
    return {"Put": {"TableName": "cache", "Item": {"matchId": {"S": match_id}, "v": {"N": "1"}}, **condition}}


def _cached(client: Any) -> list[str]:
    return sorted(it["matchId"]["S"] for it in client.scan(TableName="cache", ConsistentRead=True)["Items"])


def _lock(client: Any, key: str = "feed:eu") -> dict[str, Any] | None:
    item: dict[str, Any] | None = client.get_item(
        TableName="locks", Key={"lockKey": {"S": key}}, ConsistentRead=True
    ).get("Item")
    return item


def _cancelled(client: Any, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with pytest.raises(ClientError) as caught:
        client.transact_write_items(TransactItems=items)
    assert caught.value.response["Error"]["Code"] == "TransactionCanceledException"
    reasons: list[dict[str, Any]] = caught.value.response["CancellationReasons"]
    return reasons


def test_a_dynalite_transaction_whose_check_holds_writes_every_put(dynalite: Any) -> None:
    client = _client(dynalite.url)
    _tables(client)
    lock_before = _lock(client)
    client.transact_write_items(TransactItems=[_check("a"), *(_put(str(i)) for i in range(99))])
    assert _cached(client) == sorted(str(i) for i in range(99))
    assert _lock(client) == lock_before  # the check wrote nothing on the lock


def test_a_dynalite_transaction_whose_condition_fails_writes_nothing(dynalite: Any) -> None:
    client = _client(dynalite.url)
    _tables(client)
    lock_before = _lock(client)
    reasons = _cancelled(client, [_check("b"), _put("1"), _put("2")])
    assert reasons == [
        {"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"},
        {"Code": "None"},
        {"Code": "None"},
    ]
    assert _cached(client) == []
    # a later Put's own condition failing keeps the earlier Puts out too: every condition comes first
    client.put_item(TableName="cache", Item={"matchId": {"S": "taken"}})
    guarded = _put("taken", ConditionExpression="attribute_not_exists(matchId)")
    reasons = _cancelled(client, [_check("a"), _put("3"), guarded])
    assert [r["Code"] for r in reasons] == ["None", "None", "ConditionalCheckFailed"]
    assert _cached(client) == ["taken"]
    assert _lock(client) == lock_before


def test_a_dynalite_condition_check_never_creates_or_changes_the_item_it_checks(dynalite: Any) -> None:
    client = _client(dynalite.url)
    _tables(client)
    lock_before = _lock(client)
    # a check that holds on an existing item, one that fails on it, and one on a missing item each way
    client.transact_write_items(TransactItems=[_check("a"), _put("1")])
    _cancelled(client, [_check("b"), _put("2")])
    absent = {
        "ConditionCheck": {
            "TableName": "locks",
            "Key": {"lockKey": {"S": "feed:us"}},
            "ConditionExpression": "attribute_not_exists(lockKey)",
        }
    }
    client.transact_write_items(TransactItems=[absent, _put("3")])  # holds on a missing item
    assert [r["Code"] for r in _cancelled(client, [_check("a", key="feed:us"), _put("4")])] == [
        "ConditionalCheckFailed",
        "None",
    ]
    assert _lock(client) == lock_before
    assert _lock(client, "feed:us") is None  # neither check created the missing item
    assert client.scan(TableName="locks", ConsistentRead=True)["Count"] == 1
    assert _cached(client) == ["1", "3"]


def test_dynalite_transactions_refuse_bad_input_with_a_validation_error(dynalite: Any) -> None:
    client = _client(dynalite.url)
    _tables(client)
    bad: list[tuple[list[dict[str, Any]], str]] = [
        ([_check("a"), *(_put(str(i)) for i in range(100))], "less than or equal to 100"),
        ([_put("1"), _put("1")], "multiple operations on one item"),
    ]
    for items, message in bad:
        with pytest.raises(ClientError) as caught:
            client.transact_write_items(TransactItems=items)
        assert caught.value.response["Error"]["Code"] == "ValidationException"
        assert message in caught.value.response["Error"]["Message"]
    # shapes boto3 refuses to send: straight over HTTP, as another client could
    for action in ({**_put("1"), **_check("a")}, {"Get": {"TableName": "cache", "Key": {}}}):
        answer = httpx.post(
            dynalite.url,
            content=json.dumps({"TransactItems": [action]}),
            headers={
                "Content-Type": "application/x-amz-json-1.0",
                "X-Amz-Target": "DynamoDB_20120810.TransactWriteItems",
                "Authorization": "AWS4-HMAC-SHA256 Credential=peer/20260101/us-east-1/dynamodb/aws4_request, "
                "SignedHeaders=host, Signature=0",
                "X-Amz-Date": "20260101T000000Z",
            },
        )
        assert answer.status_code == 400
        assert answer.json()["__type"].endswith("#ValidationException")
        assert "only contain one of Check, Put, Update or Delete" in answer.json()["message"]
    assert _cached(client) == []


def test_dynalite_transactions_are_serialised_against_each_other(dynalite: Any) -> None:
    """Eight transactions race for one claim item, each first writing its own marker: were two to run
    their conditions before either wrote, two markers would land. Serialised, exactly one does."""
    client = _client(dynalite.url)
    _tables(client)

    def attempt(i: int) -> bool:
        own = _client(dynalite.url)
        claim = _put("claim", ConditionExpression="attribute_not_exists(matchId)")
        try:
            own.transact_write_items(TransactItems=[_put(f"winner-{i}"), claim])
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "TransactionCanceledException"
            return False
        return True

    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(attempt, range(8)))
    assert won.count(True) == 1
    assert _cached(client) == sorted(["claim", f"winner-{won.index(True)}"])


async def test_the_feed_leaders_fenced_cache_writes_work_on_dynalite(dynalite: Any) -> None:
    from daemon.store import Dynamo, DynamoSettings, Repositories, create_tables
    from daemon.store.caches import CachePut, FenceLost
    from daemon.store.locks import feed_lock_key

    dynamo = Dynamo(DynamoSettings(endpoint_url=dynalite.url, table_prefix="fence-"))
    try:
        await create_tables(dynamo)
        repos = Repositories(dynamo)
        locks, cache = repos.locks, repos.fixture_cache
        t = time.time()
        lease, _ = await locks.acquire_fenced(feed_lock_key("eu"), "a", 30, now=t)
        assert lease is not None
        fixtures = [{"id": i, "league_id": 3, "status": "1st Innings"} for i in range(120)]
        puts = [CachePut(str(f["id"]), f, ttl_s=600, seq=1, fetched_at=t) for f in fixtures]
        # 120 puts: two transactions (99 + 21), each beside the lease's ConditionCheck
        assert await cache.put_fixtures_fenced(puts, lambda: locks.lease_condition(lease, now=t), 1) == 120
        await cache.put_livescores_summary(
            "eu", [{"id": 0}], t, lambda: locks.lease_condition(lease, now=t), lease.epoch, ttl_s=60
        )
        entries = await cache.batch_get_entries([str(i) for i in range(120)], now=t)
        assert len(entries) == 120 and entries["7"].stamp == (1, 1) and entries["7"].fixture() == fixtures[7]
        summary = await cache.get_livescores_summary("eu", now=t)
        assert summary is not None and summary[0] == [{"id": 0}]
        lock_item = await locks.read(feed_lock_key("eu"))
        # another instance takes the lease once it ran out: the deposed leader's writes are refused whole
        taken, _ = await locks.acquire_fenced(feed_lock_key("eu"), "b", 30, now=t + 31)
        assert taken is not None and taken.epoch == 2
        later = [
            CachePut(str(f["id"]), {**f, "status": "2nd Innings"}, ttl_s=600, seq=2, fetched_at=t + 1)
            for f in fixtures
        ]
        with pytest.raises(FenceLost):
            await cache.put_fixtures_fenced(later, lambda: locks.lease_condition(lease, now=t + 1), 1)
        with pytest.raises(FenceLost):
            await cache.put_livescores_summary(
                "eu", [], t + 1, lambda: locks.lease_condition(lease, now=t + 1), lease.epoch, ttl_s=60
            )
        after = await cache.batch_get_entries([str(i) for i in range(120)], now=t)
        assert {e.stamp for e in after.values()} == {(1, 1)}  # nothing of the refused batch landed
        assert (await cache.get_livescores_summary("eu", now=t)) == summary
        now_lock = await locks.read(feed_lock_key("eu"))
        assert now_lock is not None and lock_item is not None
        assert (now_lock["owner"], now_lock["epoch"]) == ("b", 2)  # the failed checks left b's lease alone
        # the new holder writes
        assert (
            await cache.put_fixtures_fenced(later[:5], lambda: locks.lease_condition(taken, now=t + 32), 2)
            == 5
        )
        assert (await cache.batch_get_entries(["0"], now=t))["0"].stamp == (2, 2)
    finally:
        dynamo.close()


async def test_push_to_start_claims_taken_meanwhile_are_left_out_on_dynalite(dynalite: Any) -> None:
    from daemon.store import Dynamo, DynamoSettings, Repositories, create_tables

    dynamo = Dynamo(DynamoSettings(endpoint_url=dynalite.url, table_prefix="claims-"))
    try:
        await create_tables(dynamo)
        locks = Repositories(dynamo).locks
        t = time.time()
        users = [f"u{n:03d}" for n in range(150)]  # two transactions
        assert await locks.claim_push_to_starts("9", users[100:101], owner="prematch", hold_s=600, now=t)
        # u100 taken after the owner's read: its transaction is cancelled, then written without it
        assert await locks._claim_chunk("9", users[50:150], "owner", 600, t + 1, set()) == [
            u for u in users[50:150] if u != "u100"
        ]
        assert (await locks.get("start:9:u100", now=t + 2) or {})["owner"] == "prematch"
        assert (
            await locks.claim_push_to_starts("9", users, owner="owner-2", hold_s=600, now=t + 3) == users[:50]
        )
    finally:
        dynamo.close()


def test_nginx_push_to_starts_are_read_as_they_are_flushed_complete_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    start = '{"t":2.5,"s":200,"u":"/3/device/%s","k":"start","b":"{\\"aps\\":{\\"event\\":\\"start\\"}}"}\n'
    update = '{"t":2.6,"s":200,"u":"/3/device/uuu","k":"update","b":""}\n'
    path.write_text(start % "s1" + update + (start % "s2")[:20])  # the last line not flushed whole yet
    server = NginxApns(record_path=path)
    starts, offset, through = server.starts_since(0)
    assert [(r["token"], r["payload"]) for r in starts] == [("s1", {"aps": {"event": "start"}})]
    assert through == 2.6  # the update after it was read too
    assert server.starts_since(offset) == ([], offset, None)
    path.write_text(path.read_text() + (start % "s2")[20:] + start % "s3")
    starts, offset, through = server.starts_since(offset)
    assert [r["token"] for r in starts] == ["s2", "s3"] and through == 2.5
    assert offset == path.stat().st_size


def test_a_dynalite_transaction_updates_with_values_its_condition_does_not_use(dynalite: Any) -> None:
    """An Update's values serve its UpdateExpression too (a claim's hold: ``SET expiresAt = :exp`` beside
    ``#owner = :owner``): its condition is checked with the values the condition names, and the update
    writes them all."""
    client = _client(dynalite.url)
    _tables(client)
    update = {
        "Update": {
            "TableName": "locks",
            "Key": {"lockKey": {"S": "feed:eu"}},
            "UpdateExpression": "SET #e = :exp, confirmedAt = :now",
            "ConditionExpression": "#o = :o",
            "ExpressionAttributeNames": {"#o": "owner", "#e": "epoch"},
            "ExpressionAttributeValues": {":exp": {"N": "4"}, ":now": {"N": "9"}, ":o": {"S": "a"}},
        }
    }
    client.transact_write_items(TransactItems=[update, _put("1")])
    lock = _lock(client)
    assert lock is not None and lock["epoch"] == {"N": "4"} and lock["confirmedAt"] == {"N": "9"}
    assert _cached(client) == ["1"]
    # the same with the condition failing: cancelled, nothing written
    update["Update"]["ExpressionAttributeValues"][":o"] = {"S": "b"}
    assert [r["Code"] for r in _cancelled(client, [update, _put("2")])] == ["ConditionalCheckFailed", "None"]
    assert _cached(client) == ["1"]
