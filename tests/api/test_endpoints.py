"""Every endpoint against moto's server, through httpx's ASGI transport, with tokens from the local issuer."""

from __future__ import annotations

import calendar
import json
import time
from typing import Any

import httpx

from tests.api.conftest import Api, seed_matches

A = "user-aaaa-1111"
B = "user-bbbb-2222"
DEV_TOKEN = "ab" * 32
PTS = "cd" * 32
UPD = "ef" * 32


async def seed_reference(repos: Any) -> None:
    await repos.leagues.put_league({"leagueId": "5", "name": "Big Bash", "code": "BBL", "active": True})
    await repos.leagues.put_league({"leagueId": "7", "name": "IPL", "code": "IPL", "active": False})
    await repos.teams.batch_write_teams(
        [{"teamId": "10", "name": "Sixers", "code": "SIX"}, {"teamId": "11", "name": "Stars", "code": "STA"}]
    )
    await repos.team_seasons.write_season_team_records(
        [{"seasonId": "99", "teamId": "10", "stats": {"won": 3}}, {"seasonId": "99", "teamId": "11"}]
    )
    await repos.fixtures.batch_write_fixtures(
        [
            {
                "matchId": "1001",
                "leagueCode": "BBL",
                "startTime": "2026-12-20T08:00:00Z",
                "live": True,
                "localteamId": "10",
                "visitorteamId": "11",
            },
            {"matchId": "1002", "leagueCode": "BBL", "startTime": "2026-12-22T08:00:00Z", "live": False},
            {"matchId": "1003", "leagueCode": "BBL", "startTime": "2027-01-30T08:00:00Z", "live": False},
            {"matchId": "2001", "leagueCode": "IPL", "startTime": "2026-12-21T08:00:00Z", "live": False},
        ]
    )


# --- health and the OpenAPI document -------------------------------------------------------------------


async def test_healthz_readyz_and_openapi_need_no_token(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"keys": True, "dynamodb": True}
    doc = (await client.get("/openapi.json")).json()
    for path in (
        "/matches",
        "/matches/{matchId}",
        "/matches/{matchId}/display",
        "/teams",
        "/teams/{teamId}",
        "/seasons/{seasonId}/teams",
        "/leagues",
        "/leagues/{leagueId}",
        "/user/device",
        "/user/device/push-to-start",
        "/user/follow/{matchId}",
        "/user/activity/{matchId}",
        "/user/activity/{matchId}/channel",
        "/user/activities",
    ):
        assert path in doc["paths"], path
    schemas = doc["components"]["schemas"]
    assert set(schemas["ActivityIn"]["properties"]) == {"deviceId", "updateToken"}
    assert set(schemas["ChannelActivityIn"]["properties"]) == {"deviceId", "channelId"}


async def test_readyz_is_503_without_keys(api: Api, client: httpx.AsyncClient) -> None:
    api.state.keys.keys = {}
    resp = await client.get("/readyz")
    assert resp.status_code == 503 and resp.json()["ready"] is False


# --- matches ------------------------------------------------------------------------------------------------


async def test_matches_by_ids_answers_found_and_missing(api: Api, client: httpx.AsyncClient) -> None:
    await seed_reference(api.repos)
    resp = await client.get("/matches", params={"ids": "1001,2001,4040"}, headers=api.headers(A))
    assert resp.status_code == 200
    body = resp.json()
    assert [m["matchId"] for m in body["matches"]] == ["1001", "2001"]
    assert body["missing"] == ["4040"]


async def test_matches_by_league_and_date_range_use_the_start_time(
    api: Api, client: httpx.AsyncClient
) -> None:
    await seed_reference(api.repos)
    resp = await client.get(
        "/matches",
        params={"league": "BBL", "from": "2026-12-01T00:00:00Z", "to": "2026-12-31T00:00:00+00:00"},
        headers=api.headers(A),
    )
    assert resp.status_code == 200
    assert [m["matchId"] for m in resp.json()["matches"]] == ["1001", "1002"]


async def test_a_league_code_alone_lists_the_leagues_cached_fixtures_by_start_time(
    api: Api, client: httpx.AsyncClient
) -> None:
    await seed_reference(api.repos)
    fc = api.repos.fixture_cache
    now = time.time()
    for mid, league, starting, ttl_s, at in (
        ("2002", "5", "2026-12-22T08:00:00Z", 600, now),
        ("2001", "5", "2026-12-20T08:00:00Z", 600, now),
        ("2003", "5", "2026-12-19T08:00:00Z", 10, now - 60),  # expired: not listed
        ("2004", "7", "2026-12-21T08:00:00Z", 600, now),  # another league
    ):
        raw = {"id": int(mid), "league_id": int(league), "starting_at": starting, "status": "NS"}
        await fc.put_single_fixture(mid, raw, league_id=league, starting_at=starting, ttl_s=ttl_s, now=at)
    h = api.headers(A)
    resp = await client.get("/matches", params={"league": "BBL"}, headers=h)
    assert resp.status_code == 200
    body = resp.json()
    assert [m["matchId"] for m in body["matches"]] == ["2001", "2002"]
    assert body["matches"][0] == {
        "matchId": "2001",
        "leagueCode": "BBL",
        "rawFixture": {"id": 2001, "league_id": 5, "starting_at": "2026-12-20T08:00:00Z", "status": "NS"},
    }
    ipl = (await client.get("/matches", params={"league": "IPL"}, headers=h)).json()
    assert [m["matchId"] for m in ipl["matches"]] == ["2004"]
    unknown = await client.get("/matches", params={"league": "XYZ"}, headers=h)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    assert (await client.get("/matches", params={"league": "BBL"})).status_code == 401


async def test_matches_answers_every_combination_its_schema_allows(
    api: Api, client: httpx.AsyncClient
) -> None:
    """What the document says of GET /matches holds: every combination of the parameters is a list."""
    await seed_reference(api.repos)
    h = api.headers(A)

    async def listed(**params: str) -> list[str]:
        resp = await client.get("/matches", params=params, headers=h)
        assert resp.status_code == 200, (params, resp.text)
        return [m["matchId"] for m in resp.json()["matches"]]

    # ids, narrowed by league and start time; those not found are missing either way
    assert await listed(ids="1001,2001,4040", **{"from": "2026-12-21T00:00:00Z"}) == ["2001"]
    assert await listed(ids="1001,2001", league="BBL") == ["1001"]
    resp = await client.get("/matches", params={"ids": "1,1001", "from": "2026-01-01T00:00:00Z"}, headers=h)
    assert resp.json()["missing"] == ["1"]
    # a league with one bound: the other is open
    assert await listed(league="BBL", **{"from": "2026-12-21T00:00:00Z"}) == ["1002", "1003"]
    assert await listed(league="BBL", to="2026-12-21T00:00:00Z") == ["1001"]
    # neither ids nor league: every active league's (IPL is not active), by start time
    assert await listed() == ["1001", "1002", "1003"]
    assert await listed(to="2026-12-31T00:00:00Z") == ["1001", "1002"]
    # from after to: an empty range, not an error
    assert await listed(league="BBL", **{"from": "2026-12-02T00:00:00Z", "to": "2026-12-01T00:00:00Z"}) == []


async def test_matches_refuses_what_its_schema_refuses(api: Api, client: httpx.AsyncClient) -> None:
    h = api.headers(A)
    for params, field in (
        ({"league": "BBL", "from": "yesterday", "to": "2026-12-01T00:00:00Z"}, "query.from"),
        ({"ids": "1,a#b"}, "query.ids"),
        ({"ids": ",".join(str(i) for i in range(101))}, "query.ids"),
        ({"ids": ""}, "query.ids"),
        ({"limit": "0"}, "query.limit"),
        ({"cursor": "bm90LWEtY3Vyc29y"}, "query.cursor"),
    ):
        resp = await client.get("/matches", params=params, headers=h)
        assert resp.status_code == 422, params
        assert resp.json()["error"]["fields"][0]["field"] == field, params


async def test_every_list_is_paged(api: Api, client: httpx.AsyncClient) -> None:
    await seed_reference(api.repos)
    h = api.headers(A)
    for path, key, total in (("/matches", "matches", 3), ("/teams", "teams", 2), ("/leagues", "leagues", 2)):
        seen: list[Any] = []
        cursor = None
        pages = 0
        while True:
            params = {"limit": "1", **({"cursor": cursor} if cursor else {})}
            body = (await client.get(path, params=params, headers=h)).json()
            seen += body[key]
            pages += 1
            cursor = body["next"]
            if cursor is None:
                break
        assert len(seen) == total and pages == total, path
        assert len({json.dumps(x, sort_keys=True) for x in seen}) == total, path
    body = (await client.get("/seasons/99/teams", params={"limit": "1"}, headers=h)).json()
    assert len(body["teams"]) == 1 and body["next"] is not None


async def test_one_match_has_its_cached_raw_fixture_where_one_exists(
    api: Api, client: httpx.AsyncClient
) -> None:
    await seed_reference(api.repos)
    await api.repos.fixture_cache.put_single_fixture(
        "1001",
        {"id": 1001, "status": "1st Innings", "runs": [{"score": 54}]},
        league_id="5",
        starting_at="2026-12-20T08:00:00Z",
        ttl_s=600,
    )
    h = api.headers(A)
    live = (await client.get("/matches/1001", headers=h)).json()
    assert live["live"] is True and live["rawFixture"]["runs"] == [{"score": 54}]
    plain = (await client.get("/matches/1002", headers=h)).json()
    assert plain["matchId"] == "1002" and "rawFixture" not in plain
    missing = await client.get("/matches/4040", headers=h)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    listed = await client.get("/matches", params={"ids": "1001,1002", "include": "raw"}, headers=h)
    assert [("rawFixture" in m) for m in listed.json()["matches"]] == [True, False]


async def test_display_reads_the_engines_cache_per_team_and_neutral(
    api: Api, client: httpx.AsyncClient
) -> None:
    cache = api.repos.display_cache
    await cache.set_cached_display_state("1001", "10", {"score": "154/3", "perspective": "10"}, ttl_s=60)
    await cache.set_cached_display_state(
        "1001", "neutral", {"score": "154/3", "perspective": "neutral"}, ttl_s=60
    )
    h = api.headers(A)
    team = await client.get("/matches/1001/display", params={"team": "10"}, headers=h)
    assert team.json() == {
        "matchId": "1001",
        "team": "10",
        "displayState": {"score": "154/3", "perspective": "10"},
    }
    neutral = await client.get("/matches/1001/display", headers=h)
    assert neutral.json()["displayState"]["perspective"] == "neutral"
    assert (await client.get("/matches/1001/display", params={"team": "11"}, headers=h)).status_code == 404


async def test_display_reads_are_served_from_memory_within_the_cache_time(make_api: Any, repos: Any) -> None:
    api: Api = await make_api(api={"display_cache_s": 30.0, "rate_burst": 1000})
    await repos.display_cache.set_cached_display_state("1001", "neutral", {"score": "1/0"}, ttl_s=60)
    async with api.client() as client:
        h = api.headers(A)
        first = await client.get("/matches/1001/display", headers=h)
        await repos.display_cache.set_cached_display_state("1001", "neutral", {"score": "9/9"}, ttl_s=60)
        for _ in range(20):
            again = await client.get("/matches/1001/display", headers=h)
            assert again.json() == first.json()
    assert api.state.displays.cache.loads == 1


async def test_a_display_answer_has_an_etag_and_an_unchanged_one_is_answered_304_on_every_path(
    make_api: Any, repos: Any
) -> None:
    api: Api = await make_api(api={"display_cache_s": 0.0, "rate_burst": 1000})  # 0: every read loads
    await repos.display_cache.set_cached_display_state("1001", "neutral", {"score": "1/0"}, ttl_s=60)
    async with api.client() as client:
        h = api.headers(A)
        first = await client.get("/matches/1001/display", headers=h)
        etag = first.headers["etag"]
        assert first.status_code == 200 and etag.startswith('"') and etag.endswith('"')
        assert first.headers["cache-control"] == "private, no-cache"
        # the fast path, and the FastAPI route (an unknown query parameter takes the request there)
        for params in ({}, {"x": "1"}):
            for sent in (etag, f'"other", W/{etag}', "*"):
                same = await client.get(
                    "/matches/1001/display", params=params, headers={**h, "If-None-Match": sent}
                )
                assert same.status_code == 304, (params, sent)
                assert same.content == b"" and same.headers["etag"] == etag
            other = await client.get(
                "/matches/1001/display", params=params, headers={**h, "If-None-Match": '"other"'}
            )
            assert other.status_code == 200 and other.json() == first.json()
        # a token is needed whatever If-None-Match says
        refused = await client.get("/matches/1001/display", headers={"If-None-Match": etag})
        assert refused.status_code == 401
        await repos.display_cache.set_cached_display_state("1001", "neutral", {"score": "2/0"}, ttl_s=60)
        changed = await client.get("/matches/1001/display", headers={**h, "If-None-Match": etag})
        assert changed.status_code == 200 and changed.headers["etag"] != etag
        assert changed.json()["displayState"] == {"score": "2/0"}


# --- reference data ---------------------------------------------------------------------------------------


async def test_teams_seasons_and_leagues_are_readable_by_any_user(
    api: Api, client: httpx.AsyncClient
) -> None:
    await seed_reference(api.repos)
    h = api.headers(B)
    assert {t["teamId"] for t in (await client.get("/teams", headers=h)).json()["teams"]} == {"10", "11"}
    assert (await client.get("/teams/10", headers=h)).json()["name"] == "Sixers"
    assert (await client.get("/teams/77", headers=h)).status_code == 404
    season = (await client.get("/seasons/99/teams", headers=h)).json()["teams"]
    assert {t["teamId"] for t in season} == {"10", "11"}
    assert {lg["code"] for lg in (await client.get("/leagues", headers=h)).json()["leagues"]} == {
        "BBL",
        "IPL",
    }
    assert (await client.get("/leagues/5", headers=h)).json()["name"] == "Big Bash"
    assert (await client.get("/leagues/77", headers=h)).status_code == 404


async def test_admins_patch_teams_and_leagues_and_delete_leagues(api: Api, client: httpx.AsyncClient) -> None:
    await seed_reference(api.repos)
    admin = api.headers("admin-user", admin=True)
    resp = await client.patch("/teams/10", json={"name": "Sydney Sixers"}, headers=admin)
    assert resp.status_code == 200
    assert (await api.repos.teams.get_team("10"))["name"] == "Sydney Sixers"
    # the cached scan is dropped by the change
    assert "Sydney Sixers" in {t["name"] for t in (await client.get("/teams", headers=admin)).json()["teams"]}
    assert (await client.patch("/teams/77", json={"name": "x"}, headers=admin)).status_code == 404
    assert await api.repos.teams.get_team("77") is None  # the condition kept a PATCH from creating one

    resp = await client.patch(
        "/leagues/7", json={"active": True, "imageUrl": "https://img.test/ipl.png"}, headers=admin
    )
    assert resp.status_code == 200
    league = await api.repos.leagues.get_league("7")
    assert league["active"] is True and league["imageUrl"] == "https://img.test/ipl.png"
    assert (await client.patch("/leagues/77", json={"name": "x"}, headers=admin)).status_code == 404

    deleted = await client.delete("/leagues/7", headers=admin)
    assert deleted.status_code == 200 and deleted.json()["code"] == "IPL"
    assert await api.repos.leagues.get_league("7") is None
    assert (await client.delete("/leagues/7", headers=admin)).status_code == 404


async def test_admin_endpoints_are_403_for_other_users_and_change_nothing(
    api: Api, client: httpx.AsyncClient
) -> None:
    await seed_reference(api.repos)
    h = api.headers(A)
    for method, path, body in (
        ("PATCH", "/teams/10", {"name": "hacked"}),
        ("PATCH", "/leagues/5", {"name": "hacked"}),
        ("DELETE", "/leagues/5", None),
    ):
        resp = await client.request(method, path, json=body, headers=h)
        assert resp.status_code == 403, path
        assert resp.json()["error"]["code"] == "forbidden"
    assert (await api.repos.teams.get_team("10"))["name"] == "Sixers"
    assert (await api.repos.leagues.get_league("5"))["name"] == "Big Bash"
    # another group name is not the admin group
    other = {"Authorization": f"Bearer {api.issuer.mint(A, groups=['editors'])}"}
    assert (await client.delete("/leagues/5", headers=other)).status_code == 403


async def test_admin_patches_refuse_unknown_or_empty_fields(api: Api, client: httpx.AsyncClient) -> None:
    await seed_reference(api.repos)
    admin = api.headers("admin-user", admin=True)
    for body in ({}, {"teamId": "12"}, {"name": 5}, {"imageUrl": "javascript:alert(1)"}):
        resp = await client.patch("/teams/10", json=body, headers=admin)
        assert resp.status_code == 422, body
    assert (await api.repos.teams.get_team("10")) == {"teamId": "10", "name": "Sixers", "code": "SIX"}


# --- the user's device ----------------------------------------------------------------------------------


def device_body(token: str = DEV_TOKEN, **extra: Any) -> dict[str, Any]:
    return {"deviceToken": token, "platform": "ios", "osVersion": "18.2", "appVersion": "2.1.0", **extra}


async def test_device_register_read_push_to_start_and_delete(api: Api, client: httpx.AsyncClient) -> None:
    h = api.headers(A)
    assert (await client.get("/user/device", headers=h)).status_code == 404
    resp = await client.post("/user/device", json=device_body(pushToStartToken=PTS), headers=h)
    assert resp.status_code == 200
    assert resp.json()["userId"] == A and resp.json()["pushToStartToken"] == PTS
    got = (await client.get("/user/device", headers=h)).json()
    assert got["deviceToken"] == DEV_TOKEN and got["osVersion"] == "18.2" and got["appVersion"] == "2.1.0"

    new_pts = "12" * 32
    resp = await client.put("/user/device/push-to-start", json={"pushToStartToken": new_pts}, headers=h)
    assert resp.status_code == 200
    assert (await api.repos.devices.get_device_for_user(A))["pushToStartToken"] == new_pts

    deleted = await client.delete("/user/device", headers=h)
    assert deleted.status_code == 200 and deleted.json()["deviceToken"] == DEV_TOKEN
    assert await api.repos.devices.get_device_for_user(A) is None
    assert (await client.delete("/user/device", headers=h)).status_code == 404
    resp = await client.put("/user/device/push-to-start", json={"pushToStartToken": new_pts}, headers=h)
    assert resp.status_code == 404


async def test_a_new_device_token_replaces_the_old_one(api: Api, client: httpx.AsyncClient) -> None:
    h = api.headers(A)
    await client.post("/user/device", json=device_body(), headers=h)
    await client.post("/user/device", json=device_body("99" * 32), headers=h)
    devices = await api.repos.devices.get_devices_for_user(A)
    assert [d["deviceToken"] for d in devices] == ["99" * 32]


# --- follows ----------------------------------------------------------------------------------------------


async def test_follow_check_change_team_and_unfollow(api: Api, client: httpx.AsyncClient) -> None:
    await seed_reference(api.repos)
    h = api.headers(A)
    assert (await client.get("/user/follow/1001", headers=h)).json() == {"following": False, "follow": None}
    resp = await client.post("/user/follow/1001", json={"teamId": "10"}, headers=h)
    assert resp.status_code == 201
    follow = resp.json()
    assert follow["teamId"] == "10" and follow["userId"] == A
    # expires 48 h after the match's start
    assert follow["expiresAt"] == calendar.timegm(time.strptime("2026-12-22T08:00:00", "%Y-%m-%dT%H:%M:%S"))
    check = (await client.get("/user/follow/1001", headers=h)).json()
    assert check["following"] is True and check["follow"]["teamId"] == "10"

    assert (await client.patch("/user/follow/1001", json={"teamId": "11"}, headers=h)).status_code == 200
    assert (await api.repos.follows.check_if_user_follows_match("1001", A))["teamId"] == "11"

    gone = await client.delete("/user/follow/1001", headers=h)
    assert gone.status_code == 200 and gone.json()["teamId"] == "11"
    assert await api.repos.follows.check_if_user_follows_match("1001", A) is None
    assert (await client.delete("/user/follow/1001", headers=h)).status_code == 404
    assert (await client.patch("/user/follow/1001", json={"teamId": "10"}, headers=h)).status_code == 404
    assert await api.repos.follows.check_if_user_follows_match("1001", A) is None  # PATCH created nothing


async def test_a_follow_names_the_users_registered_device_so_the_owner_reads_devices_in_batches(
    api: Api, client: httpx.AsyncClient
) -> None:
    await seed_reference(api.repos)
    h = api.headers(A)
    resp = await client.post("/user/follow/1002", headers=h)  # no device registered yet: none named
    assert resp.status_code == 201 and "deviceToken" not in resp.json()
    await client.post("/user/device", json=device_body("77" * 32), headers=h)
    resp = await client.post("/user/follow/1001", json={"teamId": "10"}, headers=h)
    assert resp.status_code == 201 and resp.json()["deviceToken"] == "77" * 32
    stored = await api.repos.follows.check_if_user_follows_match("1001", A)
    found = await api.repos.devices.get_devices([(A, stored["deviceToken"])])
    assert found[A]["deviceToken"] == "77" * 32


async def test_follow_without_a_body_or_team_and_of_unknown_matches(
    api: Api, client: httpx.AsyncClient
) -> None:
    await seed_reference(api.repos)
    h = api.headers(A)
    resp = await client.post("/user/follow/1002", headers=h)
    assert resp.status_code == 201 and "teamId" not in resp.json()
    assert (await client.post("/user/follow/4040", json={}, headers=h)).status_code == 404
    wrong_team = await client.post("/user/follow/1001", json={"teamId": "55"}, headers=h)
    assert wrong_team.status_code == 422 and wrong_team.json()["error"]["fields"][0]["field"] == "body.teamId"
    assert await api.repos.follows.check_if_user_follows_match("1001", A) is None
    assert (await client.patch("/user/follow/1002", json={}, headers=h)).status_code == 422


# --- Live Activity sessions -------------------------------------------------------------------------------


async def test_activity_register_rotate_list_and_end(api: Api, client: httpx.AsyncClient) -> None:
    h = api.headers(A)
    await seed_matches(api.repos, "1001", "1002")
    resp = await client.post(
        "/user/activity/1001", json={"deviceId": "iphone-1", "updateToken": UPD}, headers=h
    )
    assert resp.status_code == 201
    session = await api.repos.live_activities.get_la_session("1001", A, "iphone-1")
    assert (
        session["status"] == "active"
        and session["updateToken"] == UPD
        and session["visitorKey"] == f"{A}#iphone-1"
    )

    new = "77" * 32
    resp = await client.patch(
        "/user/activity/1001", json={"deviceId": "iphone-1", "updateToken": new}, headers=h
    )
    assert resp.status_code == 200
    assert (await api.repos.live_activities.get_la_session("1001", A, "iphone-1"))["updateToken"] == new
    missing = await client.patch(
        "/user/activity/1001", json={"deviceId": "ipad-9", "updateToken": new}, headers=h
    )
    assert missing.status_code == 404
    assert await api.repos.live_activities.get_la_session("1001", A, "ipad-9") is None

    await client.post("/user/activity/1002", json={"deviceId": "iphone-1", "updateToken": UPD}, headers=h)
    listed = (await client.get("/user/activities", headers=h)).json()["activities"]
    assert sorted(a["matchId"] for a in listed) == ["1001", "1002"]

    ended = await client.delete("/user/activity/1001", params={"deviceId": "iphone-1"}, headers=h)
    assert ended.status_code == 200
    session = await api.repos.live_activities.get_la_session("1001", A, "iphone-1")
    assert session["status"] == "ended" and session["endReason"] == "user"
    assert (
        await client.delete("/user/activity/1001", params={"deviceId": "nope"}, headers=h)
    ).status_code == 404
    assert (await client.delete("/user/activity/1001", headers=h)).status_code == 422  # deviceId required


# --- users cannot see or change each other's items ------------------------------------------------------


async def test_users_cannot_see_or_change_each_others_items(api: Api, client: httpx.AsyncClient) -> None:
    await seed_reference(api.repos)
    a, b = api.headers(A), api.headers(B)
    await client.post("/user/device", json=device_body(pushToStartToken=PTS), headers=a)
    await client.post("/user/follow/1001", json={"teamId": "10"}, headers=a)
    await client.post("/user/activity/1001", json={"deviceId": "iphone-a", "updateToken": UPD}, headers=a)

    # B sees none of A's items
    assert (await client.get("/user/device", headers=b)).status_code == 404
    assert (await client.get("/user/follow/1001", headers=b)).json()["following"] is False
    assert (await client.get("/user/activities", headers=b)).json()["activities"] == []
    # B changes none of them
    assert (
        await client.put("/user/device/push-to-start", json={"pushToStartToken": "00" * 32}, headers=b)
    ).status_code == 404
    assert (await client.delete("/user/device", headers=b)).status_code == 404
    assert (await client.patch("/user/follow/1001", json={"teamId": "11"}, headers=b)).status_code == 404
    assert (await client.delete("/user/follow/1001", headers=b)).status_code == 404
    assert (
        await client.patch(
            "/user/activity/1001", json={"deviceId": "iphone-a", "updateToken": "00" * 32}, headers=b
        )
    ).status_code == 404
    assert (
        await client.delete("/user/activity/1001", params={"deviceId": "iphone-a"}, headers=b)
    ).status_code == 404
    # a user id in a body is refused, never used
    resp = await client.post(
        "/user/activity/1001", json={"deviceId": "iphone-a", "updateToken": "00" * 32, "userId": A}, headers=b
    )
    assert resp.status_code == 422

    device = await api.repos.devices.get_device_for_user(A)
    assert device["pushToStartToken"] == PTS
    assert (await api.repos.follows.check_if_user_follows_match("1001", A))["teamId"] == "10"
    session = await api.repos.live_activities.get_la_session("1001", A, "iphone-a")
    assert session["status"] == "active" and session["updateToken"] == UPD


async def test_display_refusals_have_the_same_shape_on_every_path(
    api: Api, client: httpx.AsyncClient
) -> None:
    await api.repos.display_cache.set_cached_display_state("1001", "neutral", {"score": "1/0"}, ttl_s=60)
    resp = await client.get("/matches/1001/display")
    assert resp.status_code == 401 and resp.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    h = api.headers(A)
    bad_team = await client.get("/matches/1001/display", params={"team": "a#b"}, headers=h)
    assert bad_team.status_code == 422 and bad_team.json()["error"]["fields"][0]["field"] == "query.team"
    bad_id = await client.get("/matches/" + "9" * 65 + "/display", headers=h)
    assert bad_id.status_code == 422 and bad_id.json()["error"]["fields"][0]["field"] == "path.matchId"
    extra = await client.get("/matches/1001/display", params={"team": "10", "x": "1"}, headers=h)
    assert (
        extra.status_code == 404
    )  # an unknown query parameter is ignored, as on every route; no state for 10
    ok = await client.get("/matches/1001/display", params={}, headers=h)
    assert ok.status_code == 200 and ok.json()["displayState"] == {"score": "1/0"}


async def test_a_registration_burst_is_written_in_batches_and_loses_nothing(
    make_api: Any, repos: Any
) -> None:
    api: Api = await make_api(api={"write_parallel": 2})
    await seed_matches(repos, "1001")
    await repos.live_activities.register_la_session("1001", "user-00000", "iphone", "aa" * 32)
    await repos.live_activities.suspend_la_session("1001", "user-00000#iphone")
    async with api.client() as client:
        codes: list[int] = []

        async def register(i: int) -> None:
            resp = await client.post(
                "/user/activity/1001",
                json={"deviceId": "iphone", "updateToken": f"{i:064x}"},
                headers=api.headers(f"user-{i:05d}"),
            )
            codes.append(resp.status_code)

        import trio

        async with trio.open_nursery() as n:
            for i in range(60):
                n.start_soon(register, i)
    assert codes == [201] * 60
    sessions = await repos.live_activities.get_all_la_sessions_for_match("1001")
    assert len(sessions) == 60
    assert all(
        s["status"] == "active" and s["updateToken"] == f"{int(s['userId'][5:]):064x}" for s in sessions
    )
    again = next(s for s in sessions if s["userId"] == "user-00000")
    assert "suspendedAt" not in again  # a re-registration reactivates, as the single upsert does
    assert api.state.registrations.batches < 60
