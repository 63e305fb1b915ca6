"""The daemon's admin commands over a daemon view and an ``active-matches`` that can fail: a peer's outage is
an answer that says what could not be read, never "internal error"; a match stuck since its last tick shows
how long ago that was."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
import trio

from daemon.runtime.admin.handlers import daemon_handlers
from daemon.runtime.admin.protocol import AdminError


class Match:
    def __init__(self, last_tick_at: float | None) -> None:
        self.last_tick_lag_s = 0.001
        self.last_tick_at = last_tick_at
        self.ticks = 7

    @property
    def token_sessions(self) -> int:
        return 3

    @property
    def channel_session_count(self) -> int:
        return 0

    @property
    def hot(self) -> bool:
        return False

    @property
    def shared(self) -> bool:
        return False

    def channel_ids(self) -> dict[str, str]:
        return {}

    def describe(self) -> dict[str, Any]:
        return {"match_id": "71"}


class View:
    def __init__(self, owned: Mapping[str, Match]) -> None:
        self.owned = owned

    def health(self) -> dict[str, Any]:
        return {"alive": True}

    async def readiness(self) -> dict[str, Any]:
        return {"ready": True, "checks": {}}

    def status(self) -> dict[str, Any]:
        return {}

    def owned_matches(self) -> Mapping[str, Match]:
        return self.owned

    def sender_stats(self) -> dict[str, Any] | None:
        return None

    async def feed_view(self) -> dict[str, Any]:
        return {}

    def jobs_view(self) -> dict[str, Any]:
        return {}

    async def shares_view(self) -> dict[str, Any]:
        return {"region": "eu", "hot": {}}

    def drain(self) -> dict[str, Any]:
        return {}


class ActiveMatches:
    def __init__(self, *, hang: bool = False, fail: bool = False) -> None:
        self.hang = hang
        self.fail = fail

    async def get_all_active_matches(self) -> list[dict[str, Any]]:
        return await self._answer([{"matchId": "71", "status": "active", "instanceId": "me"}])

    async def get_active_match_state(self, match_id: str) -> dict[str, Any] | None:
        return await self._answer(None)

    async def _answer(self, value: Any) -> Any:
        if self.hang:
            await trio.sleep_forever()
        if self.fail:
            raise ConnectionError("DynamoDB unreachable")
        return value


async def test_matches_show_how_long_since_each_owned_match_last_ticked() -> None:
    handlers = daemon_handlers(View({"71": Match(time.time() - 40)}), ActiveMatches())
    (row,) = await handlers["matches"]([])
    assert row["match_id"] == "71" and row["lag_s"] == 0.001
    assert 39 <= row["since_last_tick_s"] <= 60, "stuck for 40 s, though its last lag was a millisecond"
    assert row["hot"] is False and row["shared"] is False


async def test_shares_answer_the_daemons_view_of_the_regions_hot_matches() -> None:
    handlers = daemon_handlers(View({}), ActiveMatches())
    assert await handlers["shares"]([]) == {"region": "eu", "hot": {}}
    with pytest.raises(AdminError):
        await handlers["shares"](["extra"])


@pytest.mark.parametrize("store", [ActiveMatches(fail=True), ActiveMatches(hang=True)])
async def test_matches_answer_from_memory_when_active_matches_cannot_be_read(
    store: ActiveMatches, autojump_clock: Any
) -> None:
    handlers = daemon_handlers(View({"71": Match(None)}), store)
    answer = await handlers["matches"]([])
    assert answer["error"].startswith("active-matches unreadable")
    assert [m["match_id"] for m in answer["owned"]] == ["71"]
    with pytest.raises(AdminError, match="active-matches is unreadable"):
        await handlers["match"](["99"])
    assert (await handlers["match"](["71"])) == {"match_id": "71"}, "a match run here needs no read"
