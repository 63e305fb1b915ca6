"""The API beside a real engine: one daemon with both roles on the fault rig's local parts (moto, the replay
server playing a synthesised T10, the project's APNs server), the app's side driven over HTTP.

- A client generated from ``/openapi.json`` by openapi-python-client drives a phone's whole flow through the
  document alone: register the device (with a push-to-start token), follow the match supporting a team, get
  the engine's push-to-start, register the Live Activity, get its updates, read the team's display.
- The neutral display (``GET /matches/{id}/display`` without ``team``) of a live match is the match actor's
  neutral perspective, read from DisplayStateCache as the team perspectives are.
"""

from __future__ import annotations

import importlib
import json
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from daemon.demo.issuer import LocalIssuer
from daemon.replay.synth import synthesise
from tests.harness.fault_rig import FaultRig, RigOptions

CLIENT_CONFIG = """project_name_override: sightscreen-client
package_name_override: sightscreen_client
post_hooks: []
"""


@asynccontextmanager
async def live_rig(
    tmp_path: Path, moto_url: str, prefix: str, issuer: LocalIssuer, *, followers: int = 2
) -> AsyncIterator[tuple[FaultRig, trio.Nursery]]:
    """A rig whose daemon also serves the API (on a free port, tokens from ``issuer``); the match is not yet
    served: ``rig.start_match()`` starts it."""
    auth = {"issuer": issuer.issuer, "jwks_url": issuer.jwks_url, "client_ids": [issuer.client_id]}
    options = RigOptions(
        followers=followers,
        speed=200.0,
        # one daemon with both roles: its calls are neither the engine's nor the API's alone (the AWS policy
        # gate records each role from its own process, in tests/e2e and tests/deploy)
        dynamodb_role=None,
        extra={
            "instance": {"roles": ["engine", "api"]},
            "api": {"listen": "127.0.0.1:0"},
            "auth": auth,
            # a follow made over the API is seen within a second (the production default re-reads each minute)
            "match": {"follower_refresh_s": 1.0},
        },
    )
    rig = FaultRig(
        tmp_path / "rig",
        moto_url=moto_url,
        tape=synthesise("T10", seed=7, overs=5),
        table_prefix=prefix,
        options=options,
    )
    try:
        async with trio.open_nursery() as nursery:
            await rig.start(nursery, add_tape=False)
            try:
                yield rig, nursery
            finally:
                with trio.CancelScope(shield=True):
                    await rig.stop_daemon()
                nursery.cancel_scope.cancel()
    finally:
        rig.close()


def generate_client(doc: dict[str, Any], where: Path) -> Any:
    """The package openapi-python-client generates from ``doc``, imported."""
    (where / "openapi.json").write_text(json.dumps(doc))
    (where / "config.yaml").write_text(CLIENT_CONFIG)
    subprocess.run(
        [
            str(Path(sys.executable).with_name("openapi-python-client")),
            "generate",
            "--path",
            str(where / "openapi.json"),
            "--output-path",
            str(where / "client"),
            "--config",
            str(where / "config.yaml"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    sys.path.insert(0, str(where / "client"))
    return importlib.import_module("sightscreen_client")


def accepted(rig: FaultRig, token: str) -> list[dict[str, Any]]:
    return [r for r in rig.apns.records if r.get("token") == token and r.get("status") == 200]


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_a_client_generated_from_the_document_drives_a_phones_whole_flow(
    tmp_path: Path, moto_server: Any, table_prefix: str, issuer: LocalIssuer
) -> None:
    async with live_rig(tmp_path, moto_server.url, table_prefix, issuer) as (rig, _):
        url = rig.daemon.api.url
        async with httpx.AsyncClient(base_url=url) as plain:
            doc = (await plain.get("/openapi.json")).json()
        sc = generate_client(doc, tmp_path)
        api = importlib.import_module("sightscreen_client.api")
        models = importlib.import_module("sightscreen_client.models")
        for group in ("device", "follows", "activities", "matches"):
            importlib.import_module(f"sightscreen_client.api.{group}")

        def op(group: str, prefix: str) -> Any:
            package = importlib.import_module(f"sightscreen_client.api.{group}")
            for path in Path(package.__file__).parent.glob(f"{prefix}*.py"):
                return importlib.import_module(f"sightscreen_client.api.{group}.{path.stem}")
            raise AssertionError(f"no {group}/{prefix}* operation in the generated client")

        assert api is not None
        client = sc.AuthenticatedClient(base_url=url, token=issuer.mint("generated-client-user"))
        match_id, team = rig.match_id, str(rig.tape.localteam.id)
        phone, push_to_start, update = (secrets.token_hex(32) for _ in range(3))

        device = await op("device", "register_device").asyncio_detailed(
            client=client,
            body=models.DeviceIn(
                device_token=phone, os_version="17.5", app_version="3.2.0", push_to_start_token=push_to_start
            ),
        )
        assert device.status_code == 200 and device.parsed.device_token == phone
        follow = await op("follows", "follow").asyncio_detailed(
            match_id, client=client, body=models.FollowIn(team_id=team)
        )
        assert follow.status_code == 201 and follow.parsed.team_id == team

        rig.start_match()
        await rig.wait_for(lambda: bool(accepted(rig, push_to_start)), 90, "the engine's push-to-start")
        assert accepted(rig, push_to_start)[0]["payload"]["aps"]["event"] == "start"

        activity = await op("activities", "register_activity").asyncio_detailed(
            match_id, client=client, body=models.ActivityIn(device_id="iphone-gen", update_token=update)
        )
        assert activity.status_code == 201 and activity.parsed.status == "active"
        await rig.wait_for(lambda: bool(accepted(rig, update)), 90, "an update to the registered activity")

        display = await op("matches", "get_display").asyncio_detailed(match_id, client=client, team=team)
        assert display.status_code == 200
        assert display.parsed.team == team
        assert display.parsed.display_state.additional_properties["perspective"] == team
        listed = await op("activities", "list_activities").asyncio_detailed(client=client)
        assert [a.device_id for a in listed.parsed.activities] == ["iphone-gen"]


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_the_neutral_display_of_a_live_match_is_the_match_actors(
    tmp_path: Path, moto_server: Any, table_prefix: str, issuer: LocalIssuer
) -> None:
    """Needs the match actor to write the neutral perspective to DisplayStateCache (as it writes each team's)."""
    async with live_rig(tmp_path, moto_server.url, table_prefix, issuer) as (rig, _):
        rig.start_match()
        headers = {"Authorization": f"Bearer {issuer.mint('neutral-viewer')}"}
        team = str(rig.tape.localteam.id)
        async with httpx.AsyncClient(base_url=rig.daemon.api.url, headers=headers) as http:
            # the match is live once a team's display is cached: the engine's first display tick
            with trio.fail_after(90):
                while (
                    await http.get(f"/matches/{rig.match_id}/display", params={"team": team})
                ).status_code != 200:
                    await trio.sleep(0.2)
            resp = await http.get(f"/matches/{rig.match_id}/display")
            assert resp.status_code == 200, resp.text
            body = resp.json()
            assert body["team"] == "neutral" and body["displayState"]["perspective"] == "neutral"
            # it is DisplayStateCache's item, the one the engine wrote, not something the API made up
            cached = await rig.repos.display_cache.get_cached_display_state(rig.match_id, "neutral")
            assert cached is not None and cached["perspective"] == "neutral"
            assert (await rig.match_item() or {}).get("matchPhase") not in (None, "pre")
