"""The replay server as the two-endpoint feed meets it: the live list through /fixtures, sparse fieldsets, the
plan's hourly budget per entity (429 past it), the calls it counts, and an endpoint that lags the other.

Real loopback HTTP; the server's wall clock is a hand-moved fake, so what is served is exact.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from daemon.replay.server import ReplayServer
from daemon.replay.synth import synthesise
from daemon.replay.tape import Tape
from daemon.sportmonks.client import LIVE_FIELDS, LIVE_STATUSES, SportMonksClient
from daemon.sportmonks.errors import SportMonksHTTPError
from daemon.sportmonks.settings import SportMonksSettings
from tests.doubles import Clock
from tests.replay.test_server import evenly_paced, start

LIVE = {"filter[status]": ",".join(LIVE_STATUSES), "include": "runs,balls.score,balls.batsman"}


@pytest.fixture(scope="module")
def tapes() -> list[Tape]:
    return [evenly_paced(synthesise("T10", seed=s, overs=3)) for s in (1, 2)]


async def test_the_live_list_through_fixtures_is_what_livescores_lists(
    nursery: trio.Nursery, tapes: list[Tape]
) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, tapes, clock=clock, start_delay_s=0)
    server.add_tape(evenly_paced(synthesise("T10", seed=3, overs=3)), start_delay_s=3600)  # not started: NS
    async with http:
        clock.now += 20
        listed = (await http.get("/fixtures", params=LIVE)).json()
        live = (await http.get("/livescores", params={"include": LIVE["include"]})).json()
        assert listed["data"] == live["data"] and len(live["data"]) == 2
        assert listed["meta"]["total"] == 2  # the NS one is in /fixtures, not in the live statuses
        assert len((await http.get("/fixtures")).json()["data"]) == 3


async def test_sparse_fieldsets_cut_each_resource_and_keep_its_relations(
    nursery: trio.Nursery, tapes: list[Tape]
) -> None:
    clock = Clock(1_000_000.0)
    _, http = await start(nursery, tapes, clock=clock)
    async with http:
        clock.now += 20
        params = {
            "include": "runs,balls.score,balls.batsman,localteam",
            "fields[fixtures]": "id,status",
            "fields[balls]": "id,ball,score_id",
            "fields[players]": "fullname",
            "fields[runs]": "score",
        }
        full = (await http.get("/livescores", params={"include": params["include"]})).json()["data"][0]
        cut = (await http.get("/livescores", params=params)).json()["data"][0]
        assert set(cut) == {"resource", "id", "status", "runs", "balls", "localteam"}
        assert set(cut["balls"][0]) == {"resource", "id", "ball", "score_id", "score", "batsman"}
        assert set(cut["balls"][0]["batsman"]) == {"resource", "id", "fullname"}
        assert cut["balls"][0]["score"] == full["balls"][0]["score"]  # no fieldset: whole
        assert cut["localteam"] == full["localteam"]
        assert set(cut["runs"][0]) == {"resource", "id", "score"}
        bad = await http.get("/livescores", params={"fields[balls]": ""})
        assert bad.status_code == 400 and "fields[balls]" in bad.json()["message"]


async def test_past_the_plans_hourly_calls_an_entity_is_answered_429_until_its_window_resets(
    nursery: trio.Nursery, tapes: list[Tape]
) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(
        nursery, tapes, clock=clock, hourly_budget=3, endpoint_budgets={"livescores": 2}
    )
    fid = tapes[0].fixture_id
    async with http:
        clock.now += 20
        assert [(await http.get("/livescores")).status_code for _ in range(3)] == [200, 200, 429]
        # /fixtures/{id} and /fixtures are one entity, as SportMonks counts them
        codes = [(await http.get(f"/fixtures/{fid}")).status_code, (await http.get("/fixtures")).status_code]
        codes.append((await http.get("/fixtures", params=LIVE)).status_code)
        refused = await http.get(f"/fixtures/{fid}")
        assert codes == [200, 200, 200] and refused.status_code == 429
        assert 3500 <= int(refused.headers["retry-after"]) <= 3600
        calls = server.calls()
        assert calls["by_entity"]["livescores"] == {
            "answered": 2,
            "refused": 1,
            "limit": 2,
            "window_calls": 2,
            "window_left_s": 3600.0,
        }
        assert (
            calls["by_entity"]["fixtures"]["answered"] == 3 and calls["by_entity"]["fixtures"]["refused"] == 1
        )
        assert calls["by_endpoint"] == {"livescores": 2, "fixture": 1, "fixtures": 2}
        assert (await http.get("/replay/status")).json()["calls"] == server.calls()
        clock.now += 3600  # a new window
        assert (await http.get("/livescores")).status_code == 200
    with pytest.raises(ValueError, match="hourly_budget"):
        ReplayServer(tapes, hourly_budget=-1)


async def test_an_endpoint_that_lags_answers_what_was_true_lag_s_ago(
    nursery: trio.Nursery, tapes: list[Tape]
) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, tapes, clock=clock, start_delay_s=0)
    fid = tapes[0].fixture_id

    async def balls(path: str, **params: Any) -> int:
        body = (await http.get(path, params={"include": "balls.score", **params})).json()["data"]
        fixture = next(f for f in body if str(f["id"]) == fid) if isinstance(body, list) else body
        return len(fixture["balls"])

    async with http:
        clock.now += 8
        r = await http.post(
            "/replay/faults", json={"mode": "lag", "endpoint": "livescores", "lag_s": 5, "duration_s": 10}
        )
        assert r.status_code == 200
        clock.now += 6
        now, lagging = (
            await balls("/fixtures", **{"filter[status]": LIVE["filter[status]"]}),
            await balls("/livescores"),
        )
        assert now == len(tapes[0].fixture_at(14)["balls"])
        assert lagging == len(tapes[0].fixture_at(9)["balls"]) < now
        assert await balls(f"/fixtures/{fid}") == now  # the other endpoints as they are
        clock.now += 5  # the fault is over
        assert await balls("/livescores") == await balls(f"/fixtures/{fid}")
        bad = await http.post("/replay/faults", json={"mode": "lag", "lag_s": 5})
        assert bad.status_code == 400 and "endpoint" in bad.json()["message"]
    assert server.ball_polled_at(fid, 13) is not None


async def test_the_client_reads_the_live_list_through_fixtures_page_by_page_sparse(
    nursery: trio.Nursery, tapes: list[Tape]
) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, tapes, clock=clock, start_delay_s=0, page_size=1)
    await http.aclose()
    clock.now += 20
    client = SportMonksClient(SportMonksSettings(base_url=f"http://127.0.0.1:{server.port}", api_token="t"))
    async with client:
        result = await client.live_list("fixtures", fields=LIVE_FIELDS)
        assert sorted(str(f["id"]) for f in result.fixtures) == sorted(t.fixture_id for t in tapes)
        assert server.calls()["by_endpoint"]["fixtures"] == 2  # one page each: each a call
        assert "image_path" not in result.fixtures[0]["lineup"][0]
        with pytest.raises(ValueError, match="livescores or fixtures"):
            await client.live_list("teams")
    server.budget.limits["fixtures"] = 0
    async with SportMonksClient(
        SportMonksSettings(base_url=f"http://127.0.0.1:{server.port}", api_token="t", max_retries=0)
    ) as client:
        with pytest.raises(SportMonksHTTPError) as refused:
            await client.live_list("fixtures", retries=0)
        assert refused.value.status == 429 and refused.value.retry_after is not None


async def test_a_ball_from_the_future_and_a_fixture_left_out_of_one_live_list(
    nursery: trio.Nursery, tapes: list[Tape]
) -> None:
    clock = Clock(1_000_000.0)
    server, http = await start(nursery, tapes, clock=clock, start_delay_s=0)
    fid = tapes[0].fixture_id
    async with http:
        clock.now += 8
        r = await http.post(
            "/replay/faults", json={"mode": "future_ball", "fixture_id": fid, "duration_s": 5}
        )
        assert r.status_code == 200
        fx = (await http.get(f"/fixtures/{fid}", params={"include": "balls.score"})).json()["data"]
        *real, fake = sorted(fx["balls"], key=lambda b: b["id"])
        newest = real[-1]
        assert fake["id"] == newest["id"] + 1_000_000 and fake["ball"] == round(newest["ball"] + 3, 1)
        assert fake["score"]["is_wicket"] and fake["batsmanout_id"] == newest["batsman_id"]
        other = (await http.get(f"/fixtures/{tapes[1].fixture_id}", params={"include": "balls"})).json()
        assert all(b["id"] < fake["id"] - 100_000 for b in other["data"]["balls"])  # only the fixture named
        clock.now += 6
        fx = (await http.get(f"/fixtures/{fid}", params={"include": "balls.score"})).json()["data"]
        assert fake["id"] not in {b["id"] for b in fx["balls"]}  # the fault is over
        r = await http.post(
            "/replay/faults",
            json={"mode": "unlisted", "endpoint": "livescores", "fixture_id": fid, "duration_s": 5},
        )
        assert r.status_code == 200
        live = [str(f["id"]) for f in (await http.get("/livescores")).json()["data"]]
        listed = [str(f["id"]) for f in (await http.get("/fixtures", params=LIVE)).json()["data"]]
        assert fid not in live and fid in listed and tapes[1].fixture_id in live
        bad = await http.post("/replay/faults", json={"mode": "unlisted"})
        assert bad.status_code == 400
