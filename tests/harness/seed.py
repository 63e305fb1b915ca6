"""Seeding a local world directly: the rows a test needs before the daemon starts, written with the harness's
own key instead of through the product's doors.

Only for shapes no product path makes quickly: 100,000 followers for a soak, sessions already running at a
match's first ball, a crashed owner's half-written state, a world for one unit of the daemon. A region as
production fills it (the syncs, the app's API) is ``tests/harness/region.py``; every use of this module says
why it seeds. One way, used by the cluster and fault rigs and the tests: a league and its teams, a fixture
that has not started yet, and followers of the match. Each follower may also have a registered device
(with a push-to-start token: the daemon starts its Live Activity) and a live-activity session already
running (with an update token: the daemon pushes to it from the first ball). Follows and sessions are
written with BatchWriteItem (25 a call), so seeding 100,000 followers takes seconds, not an hour of
UpdateItems; devices go through ``register_device``, the same path the app's registration takes.

Nothing here runs in production or ships in the wheel: the daemon's own writes go through its repositories'
access patterns.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.store import Repositories
from daemon.store.codec import iso
from daemon.store.follows import PREMATCH_SENT

# How long seeded follows live: long enough for any local run, short enough that DynamoDB's TTL cleans up.
FOLLOW_TTL_S = 48 * 3600
PREMATCH_MARKER_S = 4 * 3600  # a settled marker outlives the job's window (start + catch-up + grace)


@dataclass(frozen=True)
class Follower:
    """One user following a match, with what this world gives them."""

    user_id: str
    team_id: str | None
    device_id: str
    device_token: str | None = None  # registered device (with ``push_to_start_token``) when set
    push_to_start_token: str | None = None
    update_token: str | None = None  # a running live-activity session when set

    @property
    def visitor_key(self) -> str:
        return f"{self.user_id}#{self.device_id}"


@dataclass
class SeededMatch:
    match_id: str
    league_id: str
    followers: list[Follower]

    @property
    def tokens(self) -> dict[str, str]:
        """Live-activity update token -> visitor key, for every seeded session."""
        return {f.update_token: f.visitor_key for f in self.followers if f.update_token}


def make_followers(
    match_id: str,
    count: int,
    team_ids: Sequence[str | None],
    *,
    user_prefix: str | None = None,
    devices: bool = False,
    sessions: bool = False,
) -> list[Follower]:
    """``count`` followers supporting ``team_ids`` in turn, with fresh random tokens.

    User ids are ``<user_prefix><i>`` (default ``u<match_id>-``, zero-padded to six digits), device ids
    ``d<i>``.
    """
    prefix = f"u{match_id}-" if user_prefix is None else user_prefix
    out = []
    for i in range(count):
        out.append(
            Follower(
                user_id=f"{prefix}{i:06d}",
                team_id=team_ids[i % len(team_ids)] if team_ids else None,
                device_id=f"d{i}",
                device_token=secrets.token_hex(32) if devices else None,
                push_to_start_token=secrets.token_hex(32) if devices else None,
                update_token=secrets.token_hex(32) if sessions else None,
            )
        )
    return out


def fixture_row(tape: Any, *, starts_at: float, league_code: str) -> dict[str, Any]:
    """The fixtures-table row of a tape's match, not started yet, starting at ``starts_at`` (epoch s)."""
    return {
        "matchId": str(tape.fixture_id),
        "leagueId": str(tape.league_id),
        "leagueCode": league_code,
        "startTime": iso(starts_at, timespec="seconds"),
        "status": "NS",
        "localteamId": str(tape.localteam.id),
        "visitorteamId": str(tape.visitorteam.id),
        "live": False,
    }


async def seed_reference(
    repos: Repositories,
    *,
    league_id: str,
    league_name: str,
    league_code: str,
    teams: Iterable[tuple[str, str, str | None, str | None]] = (),
) -> None:
    """A league and its teams, given as (team id, name, code, image URL)."""
    await repos.leagues.put_league(
        {"leagueId": league_id, "name": league_name, "code": league_code, "active": True}
    )
    rows = [
        {"teamId": tid, "name": name, "code": code, **({"imageUrl": image} if image else {})}
        for tid, name, code, image in teams
    ]
    if rows:
        await repos.teams.batch_write_teams(rows)


def prematch_marker(starts_at: float) -> dict[str, Any]:
    """The attributes the prematch job leaves on a follow whose follower it notified for ``starts_at``."""
    return {
        "prematchFor": iso(starts_at, timespec="seconds"),
        "prematchStart": int(starts_at),
        "prematchState": PREMATCH_SENT,
        "prematchResult": "accepted",
        "prematchExpiresAt": int(starts_at + PREMATCH_MARKER_S),
    }


async def seed_followers(
    repos: Repositories,
    match_id: str,
    followers: Iterable[Follower],
    *,
    expires_at: float,
    now: float | None = None,
    app_version: str = "local",
    marker: Mapping[str, Any] | None = None,
) -> None:
    """Write each follower's follow (with ``marker``'s attributes when given), and the device and session
    they were given."""
    followers = list(followers)
    stamp = iso(time.time() if now is None else now, timespec="seconds")
    follows = []
    sessions = []
    for f in followers:
        follow: dict[str, Any] = {
            "matchId": match_id,
            "userId": f.user_id,
            "expiresAt": int(expires_at),
            "createdAt": stamp,
            **(marker or {}),
        }
        if f.team_id is not None:
            follow["teamId"] = f.team_id
        if f.device_token:  # the device the follow names, as the API writes it
            follow["deviceToken"] = f.device_token
        follows.append(follow)
        if f.update_token:
            sessions.append(
                {
                    "matchId": match_id,
                    "visitorKey": f.visitor_key,
                    "userId": f.user_id,
                    "deviceId": f.device_id,
                    "updateToken": f.update_token,
                    "status": "active",
                    "sessionStartedAt": stamp,
                }
            )
    await repos.follows.import_items(follows)
    if sessions:
        await repos.live_activities.import_items(sessions)
    await seed_devices(repos, followers, now=now, app_version=app_version)


async def seed_devices(
    repos: Repositories,
    followers: Iterable[Follower],
    *,
    now: float | None = None,
    app_version: str = "local",
) -> None:
    """Register the device of every follower that has one (its token is also its alert token)."""
    for f in followers:
        if f.device_token:
            await repos.devices.register_device(
                f.user_id,
                f.device_token,
                platform="ios",
                app_version=app_version,
                apns_token=f.device_token,
                push_to_start_token=f.push_to_start_token,
                now=now,
            )


async def seed_match(
    repos: Repositories,
    tape: Any,
    *,
    starts_at: float,
    followers: int,
    league_name: str,
    league_code: str,
    user_prefix: str | None = None,
    devices: bool = False,
    sessions: bool = False,
    app_version: str = "local",
    prematch_settled: bool = False,
) -> SeededMatch:
    """The league, both teams, the fixture and ``followers`` followers (half each team) of a tape's match.
    ``prematch_settled``: each follow carries the prematch job's settled marker for this start, as if the job
    had notified its follower before the match (a run about live play, without the job's catch-up)."""
    match_id = str(tape.fixture_id)
    local, visitor = tape.localteam, tape.visitorteam
    await seed_reference(
        repos,
        league_id=str(tape.league_id),
        league_name=league_name,
        league_code=league_code,
        teams=[(str(t.id), t.name, t.code, getattr(t, "image_path", None)) for t in (local, visitor)],
    )
    await repos.fixtures.batch_write_fixtures(
        [fixture_row(tape, starts_at=starts_at, league_code=league_code)]
    )
    people = make_followers(
        match_id,
        followers,
        [str(local.id), str(visitor.id)],
        user_prefix=user_prefix,
        devices=devices,
        sessions=sessions,
    )
    await seed_followers(
        repos,
        match_id,
        people,
        expires_at=time.time() + FOLLOW_TTL_S,
        app_version=app_version,
        marker=prematch_marker(starts_at) if prematch_settled else None,
    )
    return SeededMatch(match_id, str(tape.league_id), people)
