"""Every scripted fault of the APNs server, driven by the plain h2 test client over real TLS."""

from __future__ import annotations

import json
import time

import h2.errors
import h2.settings
import pytest
import trio
from hyperframe.frame import DataFrame

from daemon.apns.certs import generate_signing_key, make_provider_token
from daemon.apns.server import ApnsTestServer
from tests.apns.conftest import TEAM_ID, TOKEN, H2Response, H2TestClient, la_payload, push_headers

OTHER = "cd" * 32


@pytest.fixture(params=["h2", "lean"])
def apns_engine(request: pytest.FixtureRequest) -> str:
    """Every test here runs on both HTTP/2 engines of the server."""
    return str(request.param)


async def push(client: H2TestClient, provider_token: str, token: str = TOKEN, body: bytes | None = None):
    return await client.request(f"/3/device/{token}", push_headers(provider_token), body or la_payload())


async def open_up(client: H2TestClient, provider_token: str) -> None:
    """One accepted push, after which the server raises the stream limit."""
    resp = await push(client, provider_token)
    assert resp.status == 200
    with trio.fail_after(5):
        while client.max_streams == 1:
            await client.changed.wait()


async def test_scripted_410_carries_reason_and_millisecond_timestamp(
    apns_server, open_client, provider_token
):
    apns_server.set_token_status(OTHER, 410, "Unregistered", timestamp_ms=1_700_000_000_123)
    async with open_client(apns_server) as client:
        dead = await push(client, provider_token, OTHER)
        alive = await push(client, provider_token, TOKEN)
    assert dead.status == 410
    assert dead.json() == {"reason": "Unregistered", "timestamp": 1_700_000_000_123}
    assert alive.status == 200
    assert apns_server.records[0]["timestamp_ms"] == 1_700_000_000_123


@pytest.mark.parametrize(
    ("status", "reason"),
    [(400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"), (410, "ExpiredToken"), (403, "Forbidden")],
)
async def test_scripted_token_outcomes_repeat_until_cleared(
    apns_server, open_client, provider_token, status, reason
):
    apns_server.set_token_status(OTHER, status, reason)
    async with open_client(apns_server) as client:
        first = await push(client, provider_token, OTHER)
        second = await push(client, provider_token, OTHER)
        apns_server.script(clear_tokens=[OTHER])
        third = await push(client, provider_token, OTHER)
    assert [(r.status, r.reason) for r in (first, second)] == [(status, reason)] * 2
    assert third.status == 200


async def test_too_many_requests_for_a_token_for_n_requests_then_accepted(
    apns_server, open_client, provider_token
):
    apns_server.set_token_status(OTHER, 429, count=2)
    async with open_client(apns_server) as client:
        results = [await push(client, provider_token, OTHER) for _ in range(3)]
    assert [(r.status, r.reason) for r in results] == [(429, "TooManyRequests")] * 2 + [(200, None)]


async def test_stream_limit_drops_to_one_after_a_rejection_and_recovers_after_an_accept(
    start_apns_server, open_client, provider_token
):
    server = await start_apns_server(max_concurrent_streams=50)
    server.script(drop_streams_on_rejection=True)
    server.set_token_status(OTHER, 400, "BadDeviceToken", count=1)
    async with open_client(server) as client:
        await open_up(client, provider_token)
        assert client.max_streams == 50
        assert (await push(client, provider_token, OTHER)).status == 400
        with trio.fail_after(5):
            while client.max_streams != 1:
                await client.changed.wait()
        # A 410 is not an error for APNs: it does not cut the limit.
        assert (await push(client, provider_token, TOKEN)).status == 200
        with trio.fail_after(5):
            while client.max_streams != 50:
                await client.changed.wait()
    assert client.max_streams_seen == [1, 50, 1, 50]


async def test_goaway_after_n_requests_answers_up_to_last_stream_id_and_never_processes_the_rest(
    apns_server, open_client, provider_token
):
    async with open_client(apns_server) as client:
        await open_up(client, provider_token)  # stream 1
        apns_server.goaway_linger_s = 0.05  # the test client does not hang up by itself
        apns_server.goaway("Shutdown", after=2)
        sids = await client.start_batch(
            [(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload()) for _ in range(5)]
        )
        with trio.fail_after(5):
            await client.goaway_event.wait()
            await client.closed.wait()
    assert sids == [3, 5, 7, 9, 11]
    assert client.goaway is not None
    assert client.goaway.last_stream_id == 5
    assert client.goaway.error_code == h2.errors.ErrorCodes.NO_ERROR
    assert json.loads(client.goaway.additional_data) == {"reason": "Shutdown"}
    answered = {sid: r.status for sid, r in client.responses.items() if r.status is not None}
    assert answered == {1: 200, 3: 200, 5: 200}
    assert sorted(r["stream_id"] for r in apns_server.records) == [1, 3, 5]
    assert apns_server.stats()["goaways_sent"] == 1


async def test_goaway_now_reaches_every_open_connection(apns_server, open_client, provider_token):
    async with open_client(apns_server) as first, open_client(apns_server) as second:
        await push(first, provider_token)
        await push(second, provider_token)
        apns_server.goaway("BadCertificateEnvironment", error_code=0)
        with trio.fail_after(5):
            await first.goaway_event.wait()
            await second.goaway_event.wait()
    for client in (first, second):
        assert client.goaway.last_stream_id == 1
        assert json.loads(client.goaway.additional_data)["reason"] == "BadCertificateEnvironment"


async def test_graceful_goaway_now_waits_for_held_answers_then_sends_goaway(
    apns_server, open_client, provider_token
):
    async with open_client(apns_server) as client:
        await open_up(client, provider_token)
        apns_server.delay(0.3, count=1)
        held = await client.start_request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
        while not apns_server.answers_held():
            await trio.sleep(0.01)
        apns_server.goaway("Shutdown")
        with trio.fail_after(5):
            resp = await client.response(held)
            await client.goaway_event.wait()
    # The held answer came first; then GOAWAY covering it (an h2 client cannot read answers after GOAWAY).
    assert resp.status == 200
    assert client.goaway.last_stream_id == held
    assert client.protocol_error is None


async def test_non_graceful_goaway_is_sent_before_held_answers(apns_server, open_client, provider_token):
    async with open_client(apns_server) as client:
        await open_up(client, provider_token)
        apns_server.delay(0.3, count=1)
        held = await client.start_request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
        while not apns_server.answers_held():
            await trio.sleep(0.01)
        apns_server.goaway("Shutdown", graceful=False)
        with trio.fail_after(5):
            await client.goaway_event.wait()
            await client.closed.wait()
    assert client.goaway.last_stream_id == held
    # h2 as a client refuses frames after GOAWAY: a sender must treat held streams as unknown outcomes.
    assert client.responses[held].status is None
    assert client.protocol_error is not None


async def test_refused_streams_are_reset_with_refused_stream_and_not_recorded(
    apns_server, open_client, provider_token
):
    async with open_client(apns_server) as client:
        await open_up(client, provider_token)
        apns_server.refuse_streams(2)
        results = [await push(client, provider_token) for _ in range(3)]
    assert [r.reset_code for r in results] == [h2.errors.ErrorCodes.REFUSED_STREAM] * 2 + [None]
    assert results[2].status == 200
    assert apns_server.records_total == 2
    assert apns_server.stats()["refused_streams"] == 2


async def test_delayed_answer_is_overtaken_by_a_later_request(apns_server, open_client, provider_token):
    async with open_client(apns_server) as client:
        await open_up(client, provider_token)
        apns_server.delay(0.5, count=1)
        slow = await client.start_request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
        fast = await client.start_request(f"/3/device/{OTHER}", push_headers(provider_token), la_payload())
        with trio.fail_after(5):
            assert (await client.response(fast)).status == 200
            assert client.responses[slow].status is None  # still held
            assert (await client.response(slow)).status == 200
    assert [r["stream_id"] for r in apns_server.records] == [1, fast, slow]


async def test_per_token_delay_holds_only_that_token(apns_server, open_client, provider_token):
    apns_server.set_token_status(OTHER, 429, count=1, delay_s=0.5)
    async with open_client(apns_server) as client:
        await open_up(client, provider_token)
        slow = await client.start_request(f"/3/device/{OTHER}", push_headers(provider_token), la_payload())
        fast = await client.start_request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
        with trio.fail_after(5):
            assert (await client.response(fast)).status == 200
            assert (await client.response(slow)).status == 429


async def test_small_window_is_advertised_and_respected_bodies_still_arrive(
    apns_server, open_client, provider_token
):
    apns_server.set_window(1000, update_delay_s=0.05)
    async with open_client(apns_server) as client:
        assert client.h2.remote_settings.initial_window_size == 1000
        body = la_payload(pad=3000)
        assert len(body) > 3000
        resp = await push(client, provider_token, body=body)
    assert resp.status == 200
    assert apns_server.records[0]["payload"] == json.loads(body)
    assert apns_server.stats()["protocol_errors"] == []


async def test_client_that_overruns_the_window_gets_flow_control_error(
    apns_server, open_client, provider_token
):
    apns_server.set_window(1000)
    async with open_client(apns_server) as client:
        sid = client.h2.get_next_available_stream_id()
        client.h2.send_headers(
            sid,
            [
                (":method", "POST"),
                (":path", f"/3/device/{TOKEN}"),
                (":scheme", "https"),
                (":authority", "localhost"),
                *push_headers(provider_token).items(),
            ],
        )
        client.responses[sid] = H2Response(sid)
        client.done[sid] = trio.Event()
        await client.flush()
        frame = DataFrame(sid, data=b"x" * 2000, flags=["END_STREAM"])  # twice the window, bypassing h2
        await client.stream.send_all(frame.serialize())
        with trio.fail_after(5):
            await client.closed.wait()
    assert client.goaway is not None
    assert client.goaway.error_code == h2.errors.ErrorCodes.FLOW_CONTROL_ERROR
    assert apns_server.stats()["flow_control_violations"] == 1


async def test_stream_over_the_limit_is_refused_and_counted_while_the_first_is_answered(
    apns_server, open_client, provider_token
):
    async with open_client(apns_server) as client:
        assert client.max_streams == 1
        # Bypass the client's own stream accounting: pretend the limit is higher, send two at once.
        client.h2.remote_settings[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] = 10
        client.h2.remote_settings.acknowledge()
        first, second = await client.start_batch(
            [(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload()) for _ in range(2)]
        )
        with trio.fail_after(5):
            answered = await client.response(first)
            refused = await client.response(second)
    assert answered.status == 200
    assert refused.status is None and refused.reset_code == h2.errors.ErrorCodes.REFUSED_STREAM
    assert apns_server.stats()["stream_limit_violations"] == 1
    assert apns_server.records_total == 1


async def test_token_churn_answers_too_many_provider_token_updates_and_poisons_the_connection(
    apns_server, open_client, signing_key
):
    first = make_provider_token(signing_key, TEAM_ID, iat=int(time.time()) - 10)
    second = make_provider_token(signing_key, TEAM_ID)
    async with open_client(apns_server) as client:
        assert (await push(client, first)).status == 200
        churned = await push(client, second)
        after = await push(client, first)
    assert (churned.status, churned.reason) == (429, "TooManyProviderTokenUpdates")
    assert (after.status, after.reason) == (429, "TooManyProviderTokenUpdates")
    async with open_client(apns_server) as fresh:
        assert (await push(fresh, second)).status == 200
    assert apns_server.stats()["token_churn_rejections"] == 2


async def test_token_switch_is_allowed_when_the_interval_is_scripted_to_zero(
    apns_server, open_client, signing_key
):
    apns_server.script(token_update_interval_s=0)
    first = make_provider_token(signing_key, TEAM_ID, iat=int(time.time()) - 10)
    second = make_provider_token(signing_key, TEAM_ID)
    async with open_client(apns_server) as client:
        assert (await push(client, first)).status == 200
        assert (await push(client, second)).status == 200


async def test_second_key_on_a_connection_is_unrelated_key_id(start_apns_server, open_client, signing_key):
    other = generate_signing_key("KEY0000002")
    server = await start_apns_server(
        keys={signing_key.key_id: signing_key.public_pem, other.key_id: other.public_pem}
    )
    async with open_client(server) as client:
        assert (await push(client, make_provider_token(signing_key, TEAM_ID))).status == 200
        resp = await push(client, make_provider_token(other, TEAM_ID))
    assert (resp.status, resp.reason) == (403, "UnrelatedKeyIdInToken")
    async with open_client(server) as client:
        assert (await push(client, make_provider_token(other, TEAM_ID))).status == 200


async def test_5xx_storm_for_n_requests(apns_server, open_client, provider_token):
    apns_server.storm(500, count=3)
    async with open_client(apns_server) as client:
        results = [await push(client, provider_token) for _ in range(4)]
    assert [(r.status, r.reason) for r in results] == [(500, "InternalServerError")] * 3 + [(200, None)]


async def test_503_storm_for_a_duration_ends_by_itself(apns_server, open_client, provider_token):
    async with open_client(apns_server) as client:
        await open_up(client, provider_token)
        apns_server.storm(503, duration_s=30)
        first = await push(client, provider_token)
        assert (first.status, first.reason) == (503, "ServiceUnavailable")
        apns_server.faults.storm_until = time.monotonic()  # the storm's time is up (no waiting in tests)
        assert (await push(client, provider_token)).status == 200


async def test_drop_after_n_requests_closes_the_tcp_connection_without_goaway(
    apns_server, open_client, provider_token
):
    apns_server.drop_connections(after=2)
    async with open_client(apns_server) as client:
        assert (await push(client, provider_token)).status == 200
        assert (await push(client, provider_token)).status == 200
        sid = await client.start_request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
        with trio.fail_after(5):
            await client.closed.wait()
    assert client.goaway is None
    assert client.responses[sid].status is None
    assert apns_server.records_total == 2
    assert apns_server.stats()["connections_dropped"] == 1
    # The fault is spent: a new connection works.
    async with open_client(apns_server) as client:
        assert (await push(client, provider_token)).status == 200


async def test_drop_now_closes_every_open_connection(apns_server, open_client, provider_token):
    async with open_client(apns_server) as first, open_client(apns_server) as second:
        await push(first, provider_token)
        apns_server.drop_connections()
        with trio.fail_after(5):
            await first.closed.wait()
            await second.closed.wait()
    assert apns_server.stats()["connections_open"] == 0


async def test_freeze_leaves_open_connections_open_and_silent_while_new_ones_are_served(
    apns_server, open_client, provider_token
):
    async with open_client(apns_server) as frozen:
        await open_up(frozen, provider_token)
        apns_server.delay(0.3, count=1)  # an answer held when the flow dies is never sent either
        held = await frozen.start_request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
        await trio.sleep(0.1)
        apns_server.freeze_connections()
        sid = await frozen.start_request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
        frozen.h2.ping(b"anyoneth")
        await frozen.flush()
        async with open_client(apns_server) as fresh:  # a new connection is served as usual
            assert (await push(fresh, provider_token)).status == 200
        await trio.sleep(0.5)
        assert not frozen.closed.is_set(), "the connection stays open: nothing says it died"
        assert frozen.responses[sid].status is None and frozen.responses[sid].reset_code is None
        assert frozen.responses[held].status is None and frozen.goaway is None
    assert apns_server.stats()["connections_frozen"] == 1
    assert [r["connection_id"] for r in apns_server.records] == [1, 2]  # nothing answered after the freeze


async def test_reset_forgets_faults_but_keeps_records(apns_server, open_client, provider_token):
    apns_server.storm(500)
    async with open_client(apns_server) as client:
        assert (await push(client, provider_token)).status == 500
        apns_server.reset()
        assert (await push(client, provider_token)).status == 200
    assert apns_server.records_total == 2


async def test_server_without_initial_stream_limit_starts_at_the_maximum(start_apns_server, open_client):
    server: ApnsTestServer = await start_apns_server(initial_streams=None, max_concurrent_streams=7)
    async with open_client(server) as client:
        assert client.max_streams == 7


async def test_idle_connection_gets_goaway_idle_timeout_and_busy_one_does_not(
    apns_server, open_client, provider_token
):
    async with open_client(apns_server) as idle, open_client(apns_server) as busy:
        await push(idle, provider_token)
        apns_server.script(idle_timeout_s=1.0)
        with trio.fail_after(5):
            while not idle.goaway_event.is_set():
                await push(busy, provider_token)
                await trio.sleep(0.05)
        assert json.loads(idle.goaway.additional_data) == {"reason": "IdleTimeout"}
        assert idle.goaway.last_stream_id == 1
        assert not busy.goaway_event.is_set()
    assert apns_server.stats()["idle_timeouts"] == 1


async def test_streams_sent_before_acknowledging_settings_are_served_but_counted(apns_server, provider_token):
    """A client that does not wait for SETTINGS (spec §1.7) is served, as RFC 9113 allows, and counted."""
    import h2.config
    import h2.connection

    tcp = await trio.open_tcp_stream("127.0.0.1", apns_server.port)
    tls = trio.SSLStream(tcp, apns_server.ssl_context_for_clients(), server_hostname="localhost")
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    headers = [
        (":method", "POST"),
        (":path", f"/3/device/{TOKEN}"),
        (":scheme", "https"),
        (":authority", "localhost"),
        *push_headers(provider_token).items(),
    ]
    for sid in (1, 3, 5):
        conn.send_headers(sid, headers)
        conn.send_data(sid, la_payload(), end_stream=True)
    await tls.send_all(conn.data_to_send())  # preface, SETTINGS and three requests before reading anything
    ended: set[int] = set()
    try:
        with trio.fail_after(5):
            while len(ended) < 3:
                for event in conn.receive_data(await tls.receive_some(65536)):
                    if isinstance(event, h2.events.StreamEnded):
                        ended.add(event.stream_id)
                await tls.send_all(conn.data_to_send())
    finally:
        await trio.aclose_forcefully(tls)
    assert ended == {1, 3, 5}
    assert apns_server.stats()["streams_over_limit_before_settings_ack"] == 2
    assert "stream_limit_violations" not in apns_server.stats()
