"""The replay server over real loopback HTTP: SportMonks shapes, the cursor, the controls and the faults.

The server's wall clock is a hand-moved fake, so cursor positions are exact without sleeping.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from daemon.replay.server import ReplayServer
from daemon.replay.synth import synthesise
from daemon.replay.tape import Tape, builtin_tape_path, iso, load_tape, tape_from_fixture
from tests.doubles import Clock

MPB = 1000.0  # one entry per second of (fake) wall time at speed 1


def evenly_paced(tape: Tape) -> Tape:
    """``tape`` with one gap for every entry (its ``ms_per_ball``): these tests count entries by the second;
    the real pace of synthesised tapes is tests/replay/test_pace.py's."""
    return tape.model_copy(update={"entries": [e.model_copy(update={"gap_ms": None}) for e in tape.entries]})


@pytest.fixture(scope="module")
def demo() -> Tape:
    return evenly_paced(load_tape(builtin_tape_path()))


async def start(
    nursery: trio.Nursery, tapes: list[Tape], **kw: Any
) -> tuple[ReplayServer, httpx.AsyncClient]:
    kw.setdefault("ms_per_ball", MPB)
    kw.setdefault("innings_break_s", 30.0)
    server = ReplayServer(tapes, **kw)
    port = await nursery.start(server.serve)
    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5)
    return server, client


async def test_livescores_serves_the_balls_the_clock_has_reached(nursery: trio.Nursery, demo: Tape) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, [demo], clock=clock)
    async with http:
        clock.now += 12.5
        body = (await http.get("/livescores", params={"include": "runs,balls.score"})).json()
        (fx,) = body["data"]
        assert fx["id"] == int(demo.fixture_id) and fx["status"] == "1st Innings"
        assert len(fx["balls"]) == len(demo.fixture_at(12)["balls"])
        want = demo.fixture_at(12, include=["runs"])["runs"]
        assert [{k: v for k, v in r.items() if k != "updated_at"} for r in fx["runs"]] == [
            {k: v for k, v in r.items() if k != "updated_at"} for r in want
        ]
        assert fx["runs"][0]["score"] > 0
        # the production base path works too, and the slash is escaped as PHP does
        raw = (await http.get("/api/v2.0/livescores", params={"include": "localteam"})).text
        assert "https:\\/\\/cdn.sportmonks.com" in raw
        assert server.status()[demo.fixture_id]["cursor"] == 12


async def test_ball_updated_at_is_when_the_entry_became_visible(nursery: trio.Nursery, demo: Tape) -> None:
    clock = Clock(1_700_000_000.0)
    server, http = await start(nursery, [demo], clock=clock, speed=2.0)
    async with http:
        clock.now += 3.0  # 6 s of match time: entries 0..5 due at 0.5 s, 1.0 s, ... after the start
        fx = (await http.get(f"/fixtures/{demo.fixture_id}", params={"include": "balls"})).json()["data"]
        stamps = [b["updated_at"] for b in fx["balls"]]
        first = iso(datetime.fromtimestamp(1_700_000_000.5, UTC))
        assert stamps[0] == first
        assert server.ball_served_at(demo.fixture_id, 0) == pytest.approx(1_700_000_000.5)
        assert server.ball_served_at(demo.fixture_id, 10) is None


async def test_a_balls_first_poll_is_when_a_request_first_got_it_not_when_it_became_due(
    nursery: trio.Nursery, demo: Tape
) -> None:
    clock = Clock(1_700_000_000.0)
    server, http = await start(nursery, [demo], clock=clock, speed=2.0)
    async with http:
        clock.now += 3.0  # entries 0..5 due 0.5 s apart from the start; nobody asks yet
        assert server.ball_polled_at(demo.fixture_id, 0) is None
        assert server.ball_served_at(demo.fixture_id, 0) == pytest.approx(1_700_000_000.5)
        clock.now += 1.0  # the first poll comes 4 s in: entries 0..7 are got now
        await http.get("/livescores", params={"include": "balls"})
        assert server.ball_polled_at(demo.fixture_id, 0) == pytest.approx(1_700_000_004.0)
        assert server.ball_polled_at(demo.fixture_id, 7) == pytest.approx(1_700_000_004.0)
        assert server.ball_polled_at(demo.fixture_id, 8) is None
        clock.now += 1.0  # the next poll gets 8 and 9 only; the earlier stamps stay
        await http.get(f"/fixtures/{demo.fixture_id}", params={"include": "balls"})
        assert server.ball_polled_at(demo.fixture_id, 0) == pytest.approx(1_700_000_004.0)
        assert server.ball_polled_at(demo.fixture_id, 9) == pytest.approx(1_700_000_005.0)
        server.status()  # the harness looking does not count as a poll
        clock.now += 1.0
        server.status()
        assert server.ball_polled_at(demo.fixture_id, 10) is None


async def test_not_started_fixture_is_ns_and_absent_from_livescores(
    nursery: trio.Nursery, demo: Tape
) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, [demo], clock=clock, start_delay_s=60.0, speed=2.0)
    async with http:
        assert (await http.get("/livescores")).json() == {"data": []}
        fx = (await http.get(f"/fixtures/{demo.fixture_id}", params={"include": "balls,lineup"})).json()[
            "data"
        ]
        assert fx["status"] == "NS" and fx["balls"] == [] and len(fx["lineup"]) == 22
        clock.now += 30.0  # 60 s of match time at 2x
        assert len((await http.get("/livescores")).json()["data"]) == 1


async def test_innings_break_holds_the_cursor_then_the_chase_starts(
    nursery: trio.Nursery, demo: Tape
) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, [demo], clock=clock, innings_break_s=30.0)
    brk = demo.innings_break_index()
    assert brk is not None
    async with http:
        clock.now += brk + 1
        fx = (await http.get("/livescores", params={"include": "runs"})).json()["data"][0]
        assert fx["status"] == "Innings Break" and len(fx["runs"]) == 1
        assert fx["note"] == f"Target {fx['runs'][0]['score'] + 1} runs"
        assert server.status()[demo.fixture_id]["innings_break"]
        clock.now += 29  # still inside the 30 s break
        assert server.status()[demo.fixture_id]["cursor"] == brk
        clock.now += 1
        fx = (await http.get("/livescores", params={"include": "runs"})).json()["data"][0]
        assert fx["status"] == "2nd Innings" and len(fx["runs"]) == 2


async def test_finished_match_leaves_livescores_and_fixture_shows_the_result(
    nursery: trio.Nursery, demo: Tape
) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, [demo], clock=clock, innings_break_s=0.0)
    async with http:
        clock.now += len(demo) + 5
        assert (await http.get("/livescores")).json() == {"data": []}
        fx = (await http.get(f"/fixtures/{demo.fixture_id}", params={"include": "winnerteam,runs"})).json()[
            "data"
        ]
        assert fx["status"] == "Finished"
        assert fx["winner_team_id"] == fx["runs"][1]["team_id"] == fx["winnerteam"]["id"]
        assert "won by" in fx["note"]
        assert server.status()[demo.fixture_id]["finished"]


async def test_pause_seek_and_speed_over_http(nursery: trio.Nursery, demo: Tape) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, [demo], clock=clock)
    fid = demo.fixture_id
    async with http:
        clock.now += 5
        r = await http.post("/replay/pause", params={"fixture_id": fid})
        assert r.status_code == 200 and r.json()["fixtures"][fid]["paused"]
        clock.now += 100
        assert (await http.get("/replay/status")).json()["fixtures"][fid]["cursor"] == 5
        r = await http.post("/replay/seek", params={"fixture_id": fid, "entry": "40"})
        assert r.json()["fixtures"][fid]["cursor"] == 40
        fx = (await http.get(f"/fixtures/{fid}", params={"include": "balls"})).json()["data"]
        assert len(fx["balls"]) == len(demo.fixture_at(40)["balls"])
        await http.post("/replay/play")
        await http.post("/replay/speed", params={"x": "10"})
        clock.now += 1
        status = server.status()[fid]
        assert status["cursor"] == 50 and status["speed"] == 10.0 and not status["paused"]
        ball_id = demo.entries[demo.ball_entry_indices()[3]].target_id
        r = await http.post("/replay/seek", params={"fixture_id": fid, "ball_id": str(ball_id)})
        assert r.json()["fixtures"][fid]["cursor"] == demo.ball_entry_indices()[3] + 1


async def test_bad_control_requests_get_a_4xx_naming_the_problem(nursery: trio.Nursery, demo: Tape) -> None:
    server, http = await start(nursery, [demo], clock=Clock(1_000_000.0))
    async with http:
        r = await http.post("/replay/seek", params={"fixture_id": demo.fixture_id, "entry": "99999"})
        assert r.status_code == 400 and "entry" in r.json()["message"]
        r = await http.post("/replay/speed", params={"x": "fast"})
        assert r.status_code == 400 and "x" in r.json()["message"]
        r = await http.post("/replay/seek", params={"fixture_id": "1", "entry": "1"})
        assert r.status_code == 404 and "fixture_id" in r.json()["message"]
        r = await http.get("/replay/play")
        assert r.status_code == 405
        r = await http.post("/replay/faults", content=b'{"mode": "explode"}')
        assert r.status_code == 400 and "mode" in r.json()["message"]
        r = await http.get("/livescores", params={"include": "balls,weather"})
        assert r.status_code == 400 and "weather" in r.json()["message"]
        r = await http.get("/fixtures", params={"filter[colour]": "red"})
        assert r.status_code == 400 and "colour" in r.json()["message"]
        r = await http.get("/fixtures/123")
        assert r.status_code == 404
        assert (await http.get("/nowhere")).status_code == 404


async def test_api_token_is_checked_when_the_server_has_one(nursery: trio.Nursery, demo: Tape) -> None:
    server, http = await start(nursery, [demo], clock=Clock(1_000_000.0), api_token="s3cret")
    async with http:
        assert (await http.get("/livescores")).status_code == 401
        assert (await http.get("/livescores", params={"api_token": "nope"})).status_code == 401
        assert (await http.get("/livescores", params={"api_token": "s3cret"})).status_code == 200
        assert (await http.get("/replay/status")).status_code == 200  # controls need no token


async def test_fixtures_list_is_paginated_like_laravel_and_filters(nursery: trio.Nursery, demo: Tape) -> None:
    other = synthesise("T10", 3)
    server, http = await start(nursery, [demo, other], clock=Clock(1_000_000.0), page_size=1)
    async with http:
        first = (await http.get("/fixtures", params={"sort": "id", "include": "localteam"})).json()
        assert [f["id"] for f in first["data"]] == [int(demo.fixture_id)]
        assert (
            first["meta"]["total"] == 2 and first["meta"]["last_page"] == 2 and first["meta"]["per_page"] == 1
        )
        next_url = first["links"]["next"]
        assert next_url.endswith("/fixtures?page=2")  # the query is not repeated (spec §9.10)
        second = (await http.get(next_url + "&sort=id")).json()  # re-append our query, as clients must
        assert [f["id"] for f in second["data"]] == [int(other.fixture_id)] and second["links"][
            "next"
        ] is None
        only = (await http.get("/fixtures", params={"filter[type]": "T10"})).json()
        assert [f["id"] for f in only["data"]] == [int(other.fixture_id)]
        desc = (await http.get("/fixtures", params={"sort": "-id"})).json()
        assert desc["data"][0]["id"] == int(other.fixture_id)
        day = demo.starting_at.date().isoformat()
        between = (await http.get("/fixtures", params={"filter[starts_between]": f"{day},{day}"})).json()
        assert [f["id"] for f in between["data"]] == [int(demo.fixture_id)]


async def test_5xx_fault_for_n_requests_on_one_endpoint(nursery: trio.Nursery, demo: Tape) -> None:
    server, http = await start(nursery, [demo], clock=Clock(1_000_000.0))
    async with http:
        r = await http.post(
            "/replay/faults", json={"mode": "5xx", "endpoint": "livescores", "count": 2, "status": 503}
        )
        assert r.status_code == 200
        assert (await http.get(f"/fixtures/{demo.fixture_id}")).status_code == 200  # other endpoint untouched
        assert [(await http.get("/livescores")).status_code for _ in range(3)] == [503, 503, 200]


async def test_429_fault_carries_retry_after_and_expires_after_its_duration(
    nursery: trio.Nursery, demo: Tape
) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, [demo], clock=clock)
    async with http:
        server.inject("429", duration_s=10, retry_after=7)
        r = await http.get("/fixtures")
        assert r.status_code == 429 and r.headers["retry-after"] == "7"
        clock.now += 10
        assert (await http.get("/fixtures")).status_code == 200
        assert server.faults() == []


async def test_body_faults_break_the_json_the_way_they_say(nursery: trio.Nursery, demo: Tape) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, [demo], clock=clock)
    async with http:
        clock.now += 10
        server.inject("truncated", count=1)
        with pytest.raises(json.JSONDecodeError):
            json.loads((await http.get("/livescores")).text)
        server.inject("malformed", count=1)
        r = await http.get("/livescores")
        assert r.status_code == 200
        with pytest.raises(json.JSONDecodeError):
            json.loads(r.text)
        server.inject("missing_field", field="status", count=1)
        assert "status" not in (await http.get("/livescores")).json()["data"][0]
        server.inject("wrong_type", field="balls.score_id", count=1)
        balls = (await http.get("/livescores", params={"include": "balls"})).json()["data"][0]["balls"]
        assert balls and all(b["score_id"] == "wrong" for b in balls)
        server.inject("wrong_type", field="status", value=[1], endpoint="fixture", count=1)
        assert (await http.get(f"/fixtures/{demo.fixture_id}")).json()["data"]["status"] == [1]
        assert (await http.get("/livescores")).json()["data"][0]["status"] == "1st Innings"


async def test_timeout_fault_holds_the_response_and_disconnect_drops_it(
    nursery: trio.Nursery, demo: Tape
) -> None:
    server, http = await start(nursery, [demo], clock=Clock(1_000_000.0))
    async with http:
        server.inject("timeout", hold_s=2.0, count=1)
        with pytest.raises(httpx.ReadTimeout):
            await http.get("/livescores", timeout=0.2)
        server.inject("disconnect", count=1)
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/livescores")
        assert (await http.get("/livescores")).status_code == 200


async def test_a_served_ball_can_be_corrected_or_deleted_afterwards(
    nursery: trio.Nursery, demo: Tape
) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, [demo], clock=clock)
    fid = demo.fixture_id
    async with http:
        clock.now += 20
        before = (await http.get(f"/fixtures/{fid}", params={"include": "balls,runs"})).json()["data"]
        last = before["balls"][-1]
        r = await http.post(
            "/replay/faults", json={"mode": "correct_ball", "fixture_id": fid, "score_id": 53}
        )
        assert r.status_code == 200
        after = (await http.get(f"/fixtures/{fid}", params={"include": "balls,runs"})).json()["data"]
        assert after["balls"][-1]["id"] == last["id"] and after["balls"][-1]["score_id"] == 53
        runs_before = last["score"]["runs"] + last["score"]["bye"] + last["score"]["leg_bye"]
        assert after["runs"][0]["score"] == before["runs"][0]["score"] - runs_before + 6
        server.inject("delete_ball", fixture_id=fid, ball_id=last["id"])
        gone = (await http.get(f"/fixtures/{fid}", params={"include": "balls"})).json()["data"]
        assert last["id"] not in {b["id"] for b in gone["balls"]}
        # the clock still moves on: later balls keep coming
        clock.now += 3
        later = (await http.get(f"/fixtures/{fid}", params={"include": "balls"})).json()["data"]
        assert len(later["balls"]) > len(gone["balls"])
        r = await http.post("/replay/faults", json={"mode": "delete_ball", "fixture_id": fid, "ball_id": 1})
        assert r.status_code == 400 and "ball_id" in r.json()["message"]


async def test_connections_are_kept_alive_and_garbage_gets_a_400(nursery: trio.Nursery, demo: Tape) -> None:
    server, http = await start(nursery, [demo], clock=Clock(1_000_000.0))
    async with http:
        for _ in range(3):
            assert (await http.get("/replay/status")).status_code == 200
    stream = await trio.open_tcp_stream("127.0.0.1", server.port or 0)
    async with stream:
        await stream.send_all(
            b"GET /livescores HTTP/1.1\r\nHost: x\r\n\r\nGET /replay/status HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        got = b""
        with trio.move_on_after(5):
            while got.count(b"HTTP/1.1 200") < 2:
                got += await stream.receive_some(65536)
        assert got.count(b"HTTP/1.1 200") == 2  # two requests, one connection
    stream = await trio.open_tcp_stream("127.0.0.1", server.port or 0)
    async with stream:
        await stream.send_all(b"NOT HTTP AT ALL\r\n\r\n")
        reply = b""
        with trio.move_on_after(5):
            while b"\r\n\r\n" not in reply:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 400")
    stream = await trio.open_tcp_stream("127.0.0.1", server.port or 0)
    async with stream:
        await stream.send_all(b"GET /livescores HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
        reply = b""
        with trio.move_on_after(5):
            while b"\r\n\r\n" not in reply:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                reply += chunk
        assert reply[:12] in (b"HTTP/1.1 431", b"HTTP/1.1 400")


async def test_stop_over_http_ends_serve(demo: Tape) -> None:
    server = ReplayServer([demo], clock=Clock(1_000_000.0))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                r = await http.post("/replay/stop")
                assert r.json()["stopping"] is True
        # leaving the nursery means serve() returned


async def test_real_fixture_served_over_http_matches_its_own_scorecard(
    nursery: trio.Nursery, real_fixture_path: Path
) -> None:
    real = json.loads(await trio.Path(real_fixture_path).read_text())["data"]
    tape = tape_from_fixture(real)
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, [tape], clock=clock, innings_break_s=0.0)
    async with http:
        clock.now += len(tape) + 1
        fx = (
            await http.get(f"/fixtures/{tape.fixture_id}", params={"include": "runs,batting,bowling"})
        ).json()["data"]
        strip = lambda rows: [{k: v for k, v in r.items() if k != "updated_at"} for r in rows]  # noqa: E731
        for key in ("runs", "batting", "bowling"):
            assert strip(fx[key]) == strip(real[key])
        assert fx["status"] == "2nd Innings"  # the recording stops mid-chase: the match stays live
        assert len((await http.get("/livescores")).json()["data"]) == 1


async def test_stall_freezes_the_feed_then_it_catches_up_in_one_burst(
    nursery: trio.Nursery, demo: Tape
) -> None:
    clock = Clock(1_700_000_000.0)
    server, http = await start(nursery, [demo], clock=clock)
    fid = demo.fixture_id
    async with http:
        clock.now += 5
        r = await http.post("/replay/faults", json={"mode": "stall", "duration_s": 10})
        assert r.status_code == 200
        clock.now += 6
        assert server.status()[fid]["cursor"] == 5
        assert len(
            (await http.get(f"/fixtures/{fid}", params={"include": "balls"})).json()["data"]["balls"]
        ) == len(demo.fixture_at(5)["balls"])
        clock.now += 4  # the stall ends: ten entries at once, all stamped with the catch-up time
        fx = (await http.get(f"/fixtures/{fid}", params={"include": "balls"})).json()["data"]
        assert server.status()[fid]["cursor"] == 15
        stamps = {b["updated_at"] for b in fx["balls"][len(demo.fixture_at(5)["balls"]) :]}
        assert stamps == {iso(datetime.fromtimestamp(1_700_000_015.0, UTC))}
        r = await http.post("/replay/faults", json={"mode": "stall"})
        assert r.status_code == 400 and "duration_s" in r.json()["message"]
