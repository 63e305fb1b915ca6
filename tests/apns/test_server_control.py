"""Scripting and reading the APNs server over its /ctl/* endpoints (for servers in another process)."""

from __future__ import annotations

import pytest
import trio

from tests.apns.conftest import TOKEN, la_payload, push_headers

OTHER = "ef" * 32


@pytest.fixture(params=["h2", "lean"])
def apns_engine(request: pytest.FixtureRequest) -> str:
    """Every test here runs on both HTTP/2 engines of the server."""
    return str(request.param)


async def test_script_over_http_makes_a_token_unregistered(apns_server, open_client, provider_token):
    async with open_client(apns_server) as ctl, open_client(apns_server) as client:
        resp = await ctl.control("POST", "/ctl/script", {"tokens": {OTHER: {"status": 410}}})
        assert (resp.status, resp.json()) == (200, {"ok": True})
        dead = await client.request(f"/3/device/{OTHER}", push_headers(provider_token), la_payload())
    assert (dead.status, dead.reason) == (410, "Unregistered")


async def test_bad_script_is_answered_400_naming_the_field(apns_server, open_client):
    async with open_client(apns_server) as ctl:
        resp = await ctl.control("POST", "/ctl/script", {"storm": {"status": 418}})
        unknown = await ctl.control("POST", "/ctl/script", {"tornado": True})
        not_json = await ctl.request("/ctl/script", {}, b"{nope")
    assert resp.status == 400 and resp.json()["reason"] == "BadScript"
    assert "storm.status" in resp.json()["detail"]
    assert unknown.status == 400 and "tornado" in unknown.json()["detail"]
    assert not_json.status == 400 and not_json.json()["reason"] == "BadScript"


async def test_records_stats_and_wait_over_http(apns_server, open_client, provider_token):
    async with open_client(apns_server) as ctl, open_client(apns_server) as client:
        for token in (TOKEN, OTHER, "zz"):
            await client.request(f"/3/device/{token}", push_headers(provider_token), la_payload())
        waited = await ctl.control("GET", "/ctl/wait?records=3&timeout=5")
        everything = await ctl.control("GET", "/ctl/records")
        tail = await ctl.control("GET", "/ctl/records?since=1&limit=1")
        stats = await ctl.control("GET", "/ctl/stats")
    assert waited.json() == {"total": 3, "reached": True}
    assert [r["status"] for r in everything.json()["records"]] == [200, 200, 400]
    assert everything.json()["total"] == 3
    assert [r["token"] for r in tail.json()["records"]] == [OTHER]
    assert tail.json()["since"] == 1
    assert stats.json()["statuses"] == {"200": 2, "400": 1}
    assert stats.json()["connections_open"] == 2


async def test_wait_over_http_times_out_with_reached_false(apns_server, open_client):
    async with open_client(apns_server) as ctl:
        resp = await ctl.control("GET", "/ctl/wait?records=1&timeout=0.05")
    assert resp.json() == {"total": 0, "reached": False}


async def test_large_record_listing_is_sent_within_the_clients_flow_control_window(
    apns_server, open_client, provider_token
):
    async with open_client(apns_server) as client:
        await client.request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
        async with trio.open_nursery() as nursery:
            for i in range(120):
                nursery.start_soon(
                    client.request, f"/3/device/{i:08x}", push_headers(provider_token), la_payload(pad=600)
                )
    async with open_client(apns_server) as ctl:
        resp = await ctl.control("GET", "/ctl/records")
    assert len(resp.body) > 65535  # larger than the client's default window: needs WINDOW_UPDATEs
    assert len(resp.json()["records"]) == 121


async def test_reset_over_http_clears_faults_and_optionally_records(apns_server, open_client, provider_token):
    async with open_client(apns_server) as ctl, open_client(apns_server) as client:
        await ctl.control("POST", "/ctl/script", {"storm": {"status": 503}})
        assert (
            await client.request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
        ).status == 503
        await ctl.control("POST", "/ctl/reset?records=1")
        assert (
            await client.request(f"/3/device/{TOKEN}", push_headers(provider_token), la_payload())
        ).status == 200
    assert [r["status"] for r in apns_server.records] == [200]


async def test_unknown_control_path_is_404_and_control_requests_are_not_records(apns_server, open_client):
    async with open_client(apns_server) as ctl:
        resp = await ctl.control("GET", "/ctl/nothing")
        assert ctl.max_streams == 1  # control requests do not count as accepted pushes
    assert resp.status == 404 and resp.json()["reason"] == "BadPath"
    assert apns_server.records_total == 0
