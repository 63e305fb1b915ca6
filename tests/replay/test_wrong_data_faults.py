"""The replay server's valid-but-wrong data faults, its speed bound, and the client's body cap against it.

Real loopback HTTP; the server's wall clock is a hand-moved fake, so what is served is exact.
"""

from __future__ import annotations

from datetime import datetime

import httpx
import pytest
import trio

from daemon.replay.cursor import MAX_SPEED, ReplayClock, check_speed
from daemon.replay.server import ReplayServer
from daemon.replay.tape import Tape, builtin_tape_path, load_tape
from daemon.sportmonks.client import SportMonksClient
from daemon.sportmonks.errors import ResponseTooLarge
from daemon.sportmonks.settings import SportMonksSettings
from tests.doubles import Clock
from tests.replay.test_server import start


@pytest.fixture(scope="module")
def demo() -> Tape:
    return load_tape(builtin_tape_path())


async def test_a_speed_that_would_overflow_the_clock_is_refused_and_the_feed_keeps_answering(
    nursery: trio.Nursery, demo: Tape
) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, [demo], clock=clock)
    async with http:
        for x in ("1e308", "inf", "nan", "0", "-1", str(MAX_SPEED * 10)):
            r = await http.post("/replay/speed", params={"x": x})
            assert r.status_code == 400, x
            assert r.json()["message"].startswith(("x: ", "speed: "))
        r = await http.post("/replay/play", params={"speed": "1e308"})
        assert r.status_code == 400 and "at most" in r.text
        assert (await http.post("/replay/speed", params={"x": str(MAX_SPEED)})).status_code == 200
        clock.now += 3600
        assert (await http.get("/livescores")).status_code == 200
    with pytest.raises(ValueError, match="at most"):
        ReplayServer([demo], speed=1e308)
    with pytest.raises(ValueError, match="at most"):
        ReplayClock(total=1, ms_per_ball=1.0, break_index=None, break_ms=0.0, starts_at=0.0, speed=1e9)
    assert check_speed(2) == 2.0


async def test_wrong_status_changed_id_and_implausible_totals_apply_for_their_time(
    nursery: trio.Nursery, demo: Tape
) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, [demo], clock=clock)
    fid = demo.fixture_id
    async with http:
        clock.now += 20
        r = await http.post("/replay/faults", json={"mode": "wrong_status", "duration_s": 4})
        assert r.status_code == 200
        assert (await http.get("/livescores")).json()["data"][0]["status"] == "Finished"
        assert (await http.get(f"/fixtures/{fid}")).json()["data"]["status"] == "Finished"
        clock.now += 5
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
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, [demo], clock=clock)
    async with http:
        clock.now += 20
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


async def test_a_ghost_is_listed_for_its_time_and_answers_by_id_until_the_faults_are_cleared(
    nursery: trio.Nursery, demo: Tape
) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, [demo], clock=clock)
    fid = demo.fixture_id
    async with http:
        clock.now += 20
        for bad in ({"fixture_id": fid}, {"fixture_id": "abc"}, {}):
            r = await http.post("/replay/faults", json={"mode": "ghost", "count": 1, **bad})
            assert r.status_code == 400 and "ghost needs a numeric id" in r.text
        r = await http.post("/replay/faults", json={"mode": "ghost", "fixture_id": "4242", "duration_s": 10})
        assert r.status_code == 200
        include = {"include": "runs,balls,batting,bowling,tosswon"}
        listed = {f["id"]: f for f in (await http.get("/livescores", params=include)).json()["data"]}
        assert set(listed) == {int(fid), 4242} and listed[int(fid)]["balls"]  # the real match is untouched
        ghost = listed[4242]
        assert (
            ghost["status"] == "1st Innings"
            and ghost["toss_won_team_id"] is None
            and ghost["tosswon"] is None
        )
        assert ghost["balls"] == ghost["runs"] == ghost["batting"] == ghost["bowling"] == []
        days_before = (
            clock.now - datetime.fromisoformat(ghost["starting_at"].replace("Z", "+00:00")).timestamp()
        ) / 86400
        assert round(days_before) == 30
        live_list = {"filter[status]": "1st Innings,2nd Innings", **include}
        by_list = {f["id"]: f for f in (await http.get("/fixtures", params=live_list)).json()["data"]}
        assert by_list[4242] == ghost  # the /fixtures live list shows the stale status too
        assert 4242 not in {f["id"] for f in (await http.get("/fixtures")).json()["data"]}  # not a live list
        clock.now += 11
        assert [f["id"] for f in (await http.get("/livescores")).json()["data"]] == [int(fid)]
        by_id = (await http.get("/fixtures/4242", params=include)).json()["data"]
        assert by_id == ghost  # still answering, unchanged: no play, ever
        await http.post(
            "/replay/faults",
            json={
                "mode": "ghost",
                "fixture_id": "77",
                "count": 1,
                "value": "Delayed",
                "starting_at": "2020-01-01T10:00:00.000000Z",
            },
        )
        (listed77,) = [f for f in (await http.get("/livescores")).json()["data"] if f["id"] == 77]
        assert listed77["status"] == "Delayed" and listed77["starting_at"] == "2020-01-01T10:00:00.000000Z"
        assert 77 not in {f["id"] for f in (await http.get("/livescores")).json()["data"]}  # count: 1 answer
        await http.post("/replay/faults", json={"mode": "ghost", "fixture_id": "78", "endpoint": "fixtures"})
        assert 78 not in {f["id"] for f in (await http.get("/livescores")).json()["data"]}
        assert 78 in {f["id"] for f in (await http.get("/fixtures", params=live_list)).json()["data"]}
        await http.delete("/replay/faults")
        assert (await http.get("/fixtures/4242")).status_code == 404
