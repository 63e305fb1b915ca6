"""The OpenAPI document as a generated client sees it (openapi-python-client): a typed body for every
operation that takes one, operations named for what they do, and ``follow`` callable without a body, driven
through the generated code against the app."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.api.conftest import Api, seed_matches
from tests.api.test_live import generate_client

A = "user-aaaa-1111"


def operations(package: str) -> dict[str, Any]:
    """Every generated operation module by name (``sightscreen_client.api.<tag>.<operation>``)."""
    root = Path(importlib.import_module(package).__file__ or "").parent
    found = {}
    for path in root.glob("*/*.py"):
        if path.stem != "__init__":
            found[path.stem] = importlib.import_module(f"{package}.{path.parent.name}.{path.stem}")
    return found


async def test_a_generated_client_has_typed_bodies_named_operations_and_a_bodiless_follow(
    api: Api, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    doc = (await client.get("/openapi.json")).json()
    try:
        generate_client(doc, tmp_path)
        ops = operations("sightscreen_client.api")
        models = importlib.import_module("sightscreen_client.models")
        assert {"register_device", "follow", "register_activity", "register_channel_activity"} <= set(ops)
        assert {"list_activities", "list_matches", "get_display", "rotate_activity_token"} <= set(ops)
        for name, module in ops.items():
            body = inspect.signature(module.asyncio_detailed).parameters.get("body")
            if body is not None:
                annotation = str(body.annotation)
                assert "Any" not in annotation and "dict" not in annotation.lower(), (name, annotation)
        assert "ActivityIn" in str(inspect.signature(ops["register_activity"].asyncio_detailed))

        await seed_matches(api.repos, "1001")
        sc = importlib.import_module("sightscreen_client")
        gen = sc.AuthenticatedClient(base_url="http://api.test", token="unused")
        gen.set_async_httpx_client(
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=api.app), base_url="http://api.test", headers=api.headers(A)
            )
        )
        followed = await ops["follow"].asyncio_detailed("1001", client=gen)  # no body at all
        assert followed.status_code == 201, followed.content
        assert followed.parsed.match_id == "1001" and not isinstance(followed.parsed.team_id, str)
        registered = await ops["register_activity"].asyncio_detailed(
            "1001", client=gen, body=models.ActivityIn(device_id="iphone-1", update_token="ab" * 32)
        )
        assert registered.status_code == 201 and registered.parsed.status == "active"
        listed = await ops["list_activities"].asyncio_detailed(client=gen, limit=10)
        assert [a.device_id for a in listed.parsed.activities] == ["iphone-1"] and listed.parsed.next_ is None
    finally:
        sys.modules.pop("sightscreen_client", None)
        for name in [m for m in sys.modules if m.startswith("sightscreen_client.")]:
            sys.modules.pop(name, None)
        if str(tmp_path / "client") in sys.path:
            sys.path.remove(str(tmp_path / "client"))
