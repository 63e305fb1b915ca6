"""The demo's admin commands: the replay server's controls (``replay status|play|pause|stop|seek|speed``).

The replay server is a SportMonks stand-in, so its controls belong to the programs that run one (the demo, the
fault rig), which hand them to the daemon as extra admin commands; the production daemon has none.
"""

from __future__ import annotations

from typing import Any

import httpx

from daemon.runtime.admin.protocol import AdminError, Handler, expect_args


def replay_controls(base_url: str) -> dict[str, Handler]:
    """``replay`` for the replay server at ``base_url`` (the daemon's ``[sportmonks].base_url``)."""
    base = base_url.rstrip("/")

    async def replay(args: list[str]) -> Any:
        """Replay controls (replay mode): replay status|play|pause|stop|seek FIXTURE ENTRY|speed X."""
        actions = {"status", "play", "pause", "stop", "seek", "speed"}
        if not args or args[0] not in actions:
            raise AdminError(f"usage: replay {{{'|'.join(sorted(actions))}}} [ARGS]")
        action, rest = args[0], args[1:]
        params: dict[str, str] = {}
        if action == "seek":
            if len(rest) != 2:
                raise AdminError("usage: replay seek FIXTURE_ID ENTRY")
            params = {"fixture_id": rest[0], "entry": rest[1]}
        elif action == "speed":
            if len(rest) != 1:
                raise AdminError("usage: replay speed X")
            params = {"x": rest[0]}
        elif action in ("status", "stop"):
            expect_args(f"replay {action}", rest)
        else:
            fixture = expect_args(f"replay {action}", rest, optional=("FIXTURE_ID",))
            if fixture:
                params = {"fixture_id": fixture[0]}
        async with httpx.AsyncClient(timeout=5) as http:
            try:
                if action == "status":
                    resp = await http.get(f"{base}/replay/status")
                else:
                    resp = await http.post(f"{base}/replay/{action}", params=params)
            except httpx.HTTPError as exc:
                raise AdminError(f"replay server unreachable at {base}: {exc}") from exc
        if resp.status_code == 404:
            raise AdminError("the SportMonks endpoint is not a replay server (not in replay mode)")
        if resp.status_code >= 400:
            raise AdminError(f"replay server answered {resp.status_code}: {resp.text[:200]}")
        return resp.json()

    return {"replay": replay}
