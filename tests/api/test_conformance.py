"""Property-based conformance: schemathesis drives every operation of ``/openapi.json`` against the API served
by hypercorn over moto's server, with a valid token, for a bounded time.

Checks: every one of schemathesis's (all are on unless switched off; no 5xx, answers conforming to their schemas, statuses and content types as
documented, schema-invalid requests refused, unsupported methods answered 405 with ``Allow``, requests
without the token refused), plus ``no_other_users_items`` (``schemathesis_hooks.py``): another user's items,
seeded beside the token's user, never appear in an answer, and are unchanged afterwards.

Four of schemathesis's checks assume what this API does not claim, each switched off for the operations
named (every other check still runs on them):

- "schema-valid request accepted" on ``POST /user/follow/{matchId}`` (``teamId`` must be one of that match's
  teams: data, not shape; 422) and on ``POST /user/activity/{matchId}/channel`` (``channelId`` must be one
  of the match's broadcast channels: data again); every combination of ``GET /matches``'s parameters is
  accepted, so that check runs there;
- "deleted resource still available" on ``GET /user/follow/{matchId}`` (it answers whether you follow, 200
  with ``following: false`` after an unfollow, as documented) and, with "created resource available", on
  ``PATCH /user/activity/{matchId}`` (a session is the match and the ``deviceId`` in the body: another
  device's session is another session, whatever was created or deleted for the match).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from daemon.api.server import ApiServer
from daemon.api.settings import ApiSettings, AuthSettings
from daemon.demo.issuer import LocalIssuer

ROOT = Path(__file__).resolve().parents[2]
MAX_TIME_S = 100  # the run's budget; with start-up and the checks after it, about two minutes
OTHER = "other-user-7f3a9c"
OTHER_DEVICE, OTHER_P2S, OTHER_UPDATE = "0f" * 32, "1e" * 32, "2d" * 32
CONFIG = """
[[operations]]
include-path = "/user/follow/{matchId}"
include-method = "POST"
checks.positive_data_acceptance.enabled = false

[[operations]]
include-path = "/user/activity/{matchId}/channel"
include-method = "POST"
checks.positive_data_acceptance.enabled = false

[[operations]]
include-path = "/user/follow/{matchId}"
include-method = "GET"
checks.use_after_free.enabled = false

[[operations]]
include-path = "/user/activity/{matchId}"
include-method = "PATCH"
checks.use_after_free.enabled = false
checks.ensure_resource_availability.enabled = false
"""


async def seed(repos: Any) -> None:
    """What the examples of the document name (match 1001, teams 10 and 11, league 5, season 99) and the
    other user's device, follow and Live Activity."""
    await repos.leagues.put_league({"leagueId": "5", "name": "Big Bash", "code": "BBL", "active": True})
    await repos.teams.batch_write_teams(
        [{"teamId": "10", "name": "Sixers"}, {"teamId": "11", "name": "Stars"}]
    )
    await repos.team_seasons.write_season_team_records([{"seasonId": "99", "teamId": "10"}])
    await repos.fixtures.batch_write_fixtures(
        [
            {
                "matchId": "1001",
                "leagueCode": "BBL",
                "startTime": "2026-12-20T08:00:00Z",
                "localteamId": "10",
                "visitorteamId": "11",
            }
        ]
    )
    for team in ("neutral", "10", "11"):
        await repos.display_cache.set_cached_display_state("1001", team, {"score": "1/0"}, ttl_s=3600)
    await repos.devices.register_device(OTHER, OTHER_DEVICE, push_to_start_token=OTHER_P2S)
    await repos.follows.follow_match("1001", OTHER, "10", 2_000_000_000, device_token=OTHER_DEVICE)
    await repos.live_activities.register_la_session("1001", OTHER, "other-iphone", OTHER_UPDATE)


async def others_items(repos: Any) -> tuple[Any, ...]:
    return (
        await repos.devices.get_devices_for_user(OTHER),
        await repos.follows.check_if_user_follows_match("1001", OTHER),
        await repos.live_activities.get_user_la_sessions(OTHER),
    )


@pytest.mark.slow
@pytest.mark.timeout(MAX_TIME_S + 120)
async def test_every_operation_conforms_to_the_document_under_generated_requests(
    repos: Any, issuer: LocalIssuer, tmp_path: Path
) -> None:
    await seed(repos)
    before = await others_items(repos)
    settings = ApiSettings(
        listen="127.0.0.1:0",
        # one client sends everything: the limits would only answer 429 (documented, but testing nothing)
        rate_per_s=10_000,
        rate_burst=100_000,
        refused_per_s=10_000,
        refused_burst=100_000,
    )
    auth = AuthSettings(issuer=issuer.issuer, jwks_url=issuer.jwks_url, client_ids=[issuer.client_id])
    server = ApiServer(repos, settings, auth)
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SCHEMATHESIS_HOOKS": "tests.api.schemathesis_hooks",
        "SIGHTSCREEN_OTHER_USER_SECRETS": json.dumps([OTHER, OTHER_DEVICE, OTHER_P2S, OTHER_UPDATE]),
    }
    token = issuer.mint("conformance-user", groups=["admin"], ttl_s=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        run = await trio.run_process(
            [
                str(Path(sys.executable).with_name("schemathesis")),
                "--config-file",
                str(config),
                "run",
                f"{server.url}/openapi.json",
                "--header",
                f"Authorization: Bearer {token}",
                "--max-time",
                str(MAX_TIME_S),
                "--workers",
                "1",
                "--seed",
                "20515",
                # a loaded machine (the suite's other workers) is slow to generate data and to answer: that
                # is the machine, not the API; neither may fail the run
                "--suppress-health-check",
                "too_slow",
                "--request-timeout",
                "60",
                "--report",
                "junit",
                "--report-dir",
                str(tmp_path / "report"),
            ],
            check=False,
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            cwd=str(tmp_path),  # schemathesis keeps its state (.schemathesis/) in the working directory
        )
        server.stop()
    output = (run.stdout + run.stderr).decode(errors="replace")
    assert run.returncode == 0, output[-6000:]
    assert "26 selected / 26 total" in output, output[-2000:]
    assert await others_items(repos) == before


def test_the_isolation_check_fails_on_an_answer_naming_the_other_user(monkeypatch: Any) -> None:
    from tests.api import schemathesis_hooks

    monkeypatch.setattr(schemathesis_hooks, "SECRETS", [OTHER, OTHER_UPDATE])

    class Answer:
        text = json.dumps({"activities": [{"userId": OTHER, "updateToken": OTHER_UPDATE}]})

    with pytest.raises(AssertionError, match="another user's items"):
        schemathesis_hooks.no_other_users_items(None, Answer(), None)
    Answer.text = json.dumps({"activities": []})
    schemathesis_hooks.no_other_users_items(None, Answer(), None)
