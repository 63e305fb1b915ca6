"""The daemon's admin commands: names, usage, argument checks and the wording of their errors.

Each command reads what the running daemon exposes through ``DaemonView`` (its public introspection) and the
``active-matches`` table through ``ActiveMatchesView``, and returns plain data. A peer's outage is an answer,
not an error: a command whose DynamoDB read fails or times out answers with what this process knows and says
what could not be read, so ``ctl`` never answers "internal error" because DynamoDB is down.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

import trio

from actors.feed import check_match_id
from daemon.metrics import render
from daemon.runtime.admin.protocol import AdminError, Handler, expect_args

# How long a command waits for DynamoDB before answering with what this process knows.
STORE_READ_S = 3.0


class MatchView(Protocol):
    """What ``matches`` and ``match`` read of a match actor this instance runs."""

    last_tick_lag_s: float | None
    last_tick_at: float | None
    ticks: int

    @property
    def token_sessions(self) -> int: ...

    @property
    def channel_session_count(self) -> int: ...

    @property
    def hot(self) -> bool: ...

    @property
    def shared(self) -> bool: ...

    def channel_ids(self) -> dict[str, str]: ...

    def describe(self) -> dict[str, Any]: ...


class DaemonView(Protocol):
    """The running daemon as the admin commands see it."""

    def health(self) -> dict[str, Any]: ...

    def readiness(self) -> Awaitable[dict[str, Any]]: ...

    def status(self) -> dict[str, Any]: ...

    def owned_matches(self) -> Mapping[str, MatchView]: ...

    def sender_stats(self) -> dict[str, Any] | None: ...

    def feed_view(self) -> Awaitable[dict[str, Any]]: ...

    def jobs_view(self) -> dict[str, Any]: ...

    def shares_view(self) -> Awaitable[dict[str, Any]]: ...

    def drain(self) -> dict[str, Any]: ...


class ActiveMatchesView(Protocol):
    """The reads of ``active-matches`` the commands make."""

    def get_all_active_matches(self) -> Awaitable[list[dict[str, Any]]]: ...

    def get_active_match_state(self, match_id: str) -> Awaitable[dict[str, Any] | None]: ...


def _row_of(actor: MatchView) -> dict[str, Any]:
    at = actor.last_tick_at
    return {
        "lag_s": actor.last_tick_lag_s,
        # how long since the last tick was done: a stuck match (its pushes not answered) shows here, its
        # last lag does not
        "since_last_tick_s": None if at is None else round(max(0.0, time.time() - at), 3),
        "tokens": actor.token_sessions,
        "ticks": actor.ticks,
        "channel_sessions": actor.channel_session_count,
        "channels": actor.channel_ids(),
        "hot": actor.hot,
        "shared": actor.shared,
    }


def daemon_handlers(daemon: DaemonView, active_matches: ActiveMatchesView) -> dict[str, Handler]:
    """The commands a running daemon answers (``help`` and the socket's own ``metrics`` aside)."""

    async def health(args: list[str]) -> Any:
        """Liveness: the process answers."""
        expect_args("health", args)
        return daemon.health()

    async def ready(args: list[str]) -> Any:
        """Readiness: DynamoDB reachable; engine: APNs connected, SportMonks breaker not open; API: keys."""
        expect_args("ready", args)
        return await daemon.readiness()

    async def status(args: list[str]) -> Any:
        """Instance id, version, uptime and the matches this instance owns."""
        expect_args("status", args)
        return daemon.status()

    async def matches(args: list[str]) -> Any:
        """Every active match: owner, epoch, phase, last tick (lag and tokens for ours)."""
        expect_args("matches", args)
        mine = daemon.owned_matches()
        try:
            with trio.fail_after(STORE_READ_S):
                items = await active_matches.get_all_active_matches()
        except Exception as exc:  # noqa: BLE001 - DynamoDB down: answer with what this process runs
            return {
                "error": f"active-matches unreadable: {type(exc).__name__}",
                "owned": [{"match_id": m, **_row_of(a)} for m, a in sorted(mine.items())],
            }
        rows = []
        for item in items:
            match_id = str(item["matchId"])
            row = {
                "match_id": match_id,
                "status": item.get("status"),
                "owner": item.get("instanceId"),
                "epoch": item.get("ownerEpoch"),
                "phase": item.get("matchPhase"),
                "last_tick_at": item.get("lastTickAt"),
            }
            actor = mine.get(match_id)
            if actor is not None:
                row.update(_row_of(actor))
            rows.append(row)
        return rows

    async def match(args: list[str]) -> Any:
        """One match: its state, cooldowns and last key events. Usage: match ID"""
        (raw,) = expect_args("match", args, "MATCH_ID")
        try:
            match_id = check_match_id(raw)
        except ValueError:
            raise AdminError(f"match: expected a numeric SportMonks fixture id, got {raw!r}") from None
        actor = daemon.owned_matches().get(match_id)
        if actor is not None:
            return actor.describe()
        try:
            with trio.fail_after(STORE_READ_S):
                item = await active_matches.get_active_match_state(match_id)
        except Exception as exc:  # noqa: BLE001 - DynamoDB down: say so rather than "internal error"
            raise AdminError(
                f"match {match_id} is not run here and active-matches is unreadable ({type(exc).__name__})"
            ) from None
        if item is None:
            raise AdminError(f"no active match {match_id}")
        return {"match_id": match_id, "owner": item.get("instanceId"), "state": item}

    async def apns(args: list[str]) -> Any:
        """APNs sender: connections, streams, pushes by outcome, latency percentiles."""
        expect_args("apns", args)
        stats = daemon.sender_stats()
        if stats is None:
            raise AdminError('this instance has no APNs sender (its roles do not include "engine")')
        return stats

    async def feed(args: list[str]) -> Any:
        """The region's feed: who leads and how fresh the cache is; this instance's SportMonks calls, budget,
        breaker and subscribers."""
        expect_args("feed", args)
        return await daemon.feed_view()

    async def jobs(args: list[str]) -> Any:
        """Background jobs: the region-wide ones' leases (who runs them) and each job's progress; prematch's
        cycle in progress shows claims, sent, confirmed and time given way to live fan-outs."""
        expect_args("jobs", args)
        return daemon.jobs_view()

    async def shares(args: list[str]) -> Any:
        """Hot matches (their fan-outs shared by the region's engines): the hot list, each match's current work
        item per lane with its shards (holder, watermark, counts, how long each waited), who helps; this
        instance's own hot matches and its help to others."""
        expect_args("shares", args)
        return await daemon.shares_view()

    async def metrics(args: list[str]) -> Any:
        """Prometheus text exposition of every metric."""
        expect_args("metrics", args)
        return render().decode()

    async def drain(args: list[str]) -> Any:
        """Stop taking matches, hand owned matches over (locks released), then exit."""
        expect_args("drain", args)
        return daemon.drain()

    return {
        "health": health,
        "ready": ready,
        "status": status,
        "matches": matches,
        "match": match,
        "apns": apns,
        "feed": feed,
        "jobs": jobs,
        "shares": shares,
        "metrics": metrics,
        "drain": drain,
    }
