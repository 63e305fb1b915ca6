"""The replay server's valid-but-wrong data faults, its speed bound, and the client's body cap against it.

Real loopback HTTP; the server's wall clock is a hand-moved fake, so what is served is exact.
"""

from __future__ import annotations

import httpx
import pytest
import trio

from daemon.replay.cursor import MAX_SPEED, ReplayClock, check_speed
from daemon.replay.server import ReplayServer
from daemon.replay.tape import Tape, builtin_tape_path, load_tape
from daemon.sportmonks.client import SportMonksClient
from daemon.sportmonks.errors import ResponseTooLarge
from daemon.sportmonks.settings import SportMonksSettings
from tests.replay.test_server import FakeClock, start


@pytest.fixture(scope="module")
def demo() -> Tape:
    return load_tape(builtin_tape_path())


async def test_a_speed_that_would_overflow_the_clock_is_refused_and_the_feed_keeps_answering(
    nursery: trio.Nursery, demo: Tape
) -> None:
    clock = FakeClock()
    server, http = await start(nursery, [demo], clock=clock)
    async with http:
        for x in ("1e308", "inf", "nan", "0", "-1", str(MAX_SPEED * 10)):
            r = await http.post("/replay/speed", params={"x": x})
            assert r.status_code == 400, x
            assert r.json()["message"].startswith(("x: ", "speed: "))
        r = await http.post("/replay/play", params={"speed": "1e308"})
        assert r.status_code == 400 and "at most" in r.text
        assert (await http.post("/replay/speed", params={"x": str(MAX_SPEED)})).status_code == 200
        clock.t += 3600
        assert (await http.get("/livescores")).status_code == 200
    with pytest.raises(ValueError, match="at most"):
        ReplayServer([demo], speed=1e308)
    with pytest.raises(ValueError, match="at most"):
        ReplayClock(total=1, ms_per_ball=1.0, break_index=None, break_ms=0.0, starts_at=0.0, speed=1e9)
    assert check_speed(2) == 2.0


async def test_wrong_status_changed_id_and_implausible_totals_apply_for_their_time(
    nursery: trio.Nursery, demo: Tape
) -> None:
    clock = FakeClock()
    server, http = await start(nursery, [demo], clock=clock)
    fid = demo.fixture_id
    async with http:
        clock.t += 20
        r = await http.post("/replay/faults", json={"mode": "wrong_status", "duration_s": 4})
        assert r.status_code == 200
        assert (await http.get("/livescores")).json()["data"][0]["status"] == "Finished"
        assert (await http.get(f"/fixtures/{fid}")).json()["data"]["status"] == "Finished"
        clock.t += 5
        assert (await http.get("/livescores")).json()["data"][0]["status"] == "1st Innings"

        await http.post("/replay/faults", json={"mode": "changed_id", "endpoint": "livescores", "count": 1})
        assert (await http.get("/livescores")).json()["data"][0]["id"] == 123
        assert (await http.get("/livescores")).json()["data"][0]["id"] == int(fid)
        assert (await http.get("/fixtures/123")).status_code == 404

        await http.post(
            "/replay/faults", json={"mode": "implausible", "count": 1, "fixture_id": "999"}
        )  # another fixture: untouched
        runs = (await http.get("/livescores", params={"include": "runs"})).json()["data"][0]["runs"]
        assert all(row["score"] >= 0 for row in runs)
        await http.post("/replay/faults", json={"mode": "implausible", "count": 1, "value": 10**40})
        runs = (await http.get("/livescores", params={"include": "runs"})).json()["data"][0]["runs"]
        assert runs and all(row["score"] == 10**40 for row in runs)
    assert server.faults() == []


async def test_the_client_stops_reading_an_enormous_body_with_a_clear_error(
    nursery: trio.Nursery, demo: Tape
) -> None:
    clock = FakeClock()
    server, http = await start(nursery, [demo], clock=clock)
    async with http:
        clock.t += 20
        await http.post("/replay/faults", json={"mode": "huge_body", "size_bytes": 8 * 1024 * 1024})
        base_url = str(http.base_url)
    settings = SportMonksSettings(api_token="t", base_url=base_url, max_retries=2, max_body_bytes=1024 * 1024)
    async with SportMonksClient(settings) as client:
        with pytest.raises(ResponseTooLarge, match="max_body_bytes=1048576"):
            await client.livescores()
        assert client.calls["livescores"] == {"error": 1}  # one attempt: not retried
        server.clear_faults()
        assert isinstance(await client.livescores(), list)

    async with httpx.AsyncClient(base_url=base_url, timeout=5) as plain:
        await plain.post("/replay/faults", json={"mode": "huge_body", "size_bytes": 2048, "count": 1})
        r = await plain.get("/livescores")
        assert len(r.content) > 2048 and r.json()["data"]  # still valid JSON, only bigger
