"""Who a match reaches and how: its active Live Activity sessions (per token, or on a broadcast channel) and
its followers (their team and the device their follow names), held in memory for the match actor and
re-read on a slower cadence than ticks, so a tick's DynamoDB calls do not grow with its followers.

Owns the reads (``live-activities`` by match, ``follows`` by match, projected to the few attributes used),
the re-read cadence (longer for a big match, spread so matches taken together do not re-read together) and
each follower's display perspective. Must not push or decide what to push (``actors.match``).
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass

import trio

from actors.janitor import TokenRef
from actors.ports import AudienceStore
from actors.settings import MatchActorSettings
from daemon.logs import get_logger
from daemon.metrics import SESSIONS_BY_PATH

NEUTRAL = "neutral"
# What a refresh reads: only these attributes come back (a match can have 100,000 sessions and followers,
# held in memory for the whole match; the rest of each item is not needed here).
SESSION_FIELDS = ("visitorKey", "userId", "updateToken", "channelId", "status")
FOLLOWER_FIELDS = ("userId", "teamId", "deviceToken")

REFRESH_FIRST_SPREAD = (0.5, 1.0)  # the first re-read after the load: anywhere in the second half
REFRESH_SPREAD = (0.85, 1.15)  # every later one: within 15% of the interval either side


def refresh_pause(interval_s: float, *, first: bool, u: float | None = None) -> float:
    """The pause before a match's next session re-read: ``interval_s`` spread by ``u`` (uniform in [0, 1),
    drawn when not given). Matches taken together (a round of fixtures starting at the same minute, an
    instance taking a dead one's matches) would otherwise re-read their sessions at the same moments, every
    interval: at 10,000 sessions a match that is half a second of the instance's CPU and a burst of reads on
    the table, and a wicket fanned out then waits behind all of them."""
    low, high = REFRESH_FIRST_SPREAD if first else REFRESH_SPREAD
    draw = random.random() if u is None else u
    return interval_s * (low + (high - low) * draw)


@dataclass(frozen=True, slots=True)
class Session:
    visitor_key: str
    user_id: str
    token: str
    ref: TokenRef  # what its pushes carry back (built once, not once per push)
    channel: str = ""  # a channel session's broadcast channel (then ``token`` is empty)


class MatchAudience:
    """The sessions and followers of one match, as last read."""

    def __init__(
        self, match_id: str, store: AudienceStore, settings: MatchActorSettings, *, export: bool = True
    ) -> None:
        """``export``: the sessions gauge is this view's (the owner's); an engine helping another's hot match
        keeps a view of its own without exporting it (the gauge counts each match once)."""
        self.match_id = match_id
        self._export = export
        self._store = store
        self._settings = settings
        self.log = get_logger("match", match_id=match_id)
        self.sessions: dict[str, Session] = {}  # token sessions by visitor key
        self.channel_sessions: dict[str, Session] = {}  # sessions started on a broadcast channel
        self.follower_team: dict[str, str] = {}  # user id -> team id ("" for none)
        self.follower_device: dict[str, str] = {}  # user id -> the device token their follow names
        self.items_read = 0  # items the last session read returned (ended and channel ones too)
        self.loaded = trio.Event()  # set after the first read (or its failure: the actor goes on without)
        self._sorted: list[str] = []  # the token sessions' keys, sorted, as of the read ``_sorted_of``
        self._sorted_of: dict[str, Session] | None = None

    # --- reads -------------------------------------------------------------------------------------------
    async def refresh(self, *, followers: bool = True) -> None:
        """Re-read the match's sessions (and followers, unless told not to). Unchanged sessions keep their
        objects and user ids are shared between the maps, so a big match costs its memory once, not once per
        refresh."""
        items = await self._store.live_activities.get_all_la_sessions_for_match(
            self.match_id, fields=SESSION_FIELDS
        )
        old, old_channel, self.items_read = self.sessions, self.channel_sessions, len(items)
        fresh: dict[str, Session] = {}
        fresh_channel: dict[str, Session] = {}
        for item in items:
            if item.get("status", "active") != "active":
                continue
            key = str(item["visitorKey"])
            token = item.get("updateToken")
            if not token:
                channel = item.get("channelId")
                if channel:  # started on a broadcast channel: counted, never pushed per device
                    known = old_channel.get(key)
                    if known is not None and known.channel == channel:
                        fresh_channel[key] = known
                    else:
                        user = sys.intern(str(item.get("userId") or key.split("#", 1)[0]))
                        ref = TokenRef("la", self.match_id, visitor_key=key, user_id=user)
                        fresh_channel[key] = Session(key, user, "", ref, str(channel))
                continue
            known = old.get(key)
            if known is not None and known.token == token:
                fresh[key] = known
            else:
                user = sys.intern(str(item.get("userId") or key.split("#", 1)[0]))
                ref = TokenRef("la", self.match_id, visitor_key=key, user_id=user)
                fresh[key] = Session(key, user, str(token), ref)
        del items
        if followers:
            follows = await self._store.follows.get_followers_for_match(self.match_id, fields=FOLLOWER_FIELDS)
            teams: dict[str, str] = {}  # one string per team, not one per follower
            follower_team: dict[str, str] = {}
            follower_device: dict[str, str] = {}
            for f in follows:
                team = str(f.get("teamId") or "")
                user = sys.intern(str(f["userId"]))
                follower_team[user] = teams.setdefault(team, team)
                if f.get("deviceToken"):
                    follower_device[user] = str(f["deviceToken"])
            self.follower_team = follower_team
            self.follower_device = follower_device
        self.sessions = fresh
        self.channel_sessions = fresh_channel
        if self._export:
            SESSIONS_BY_PATH.labels(self.match_id, "token").set(len(fresh))
            SESSIONS_BY_PATH.labels(self.match_id, "channel").set(len(fresh_channel))
        self.loaded.set()

    def refresh_interval(self) -> float:
        """Seconds to the next session re-read: ``session_refresh_s``, longer for a big match so that its
        re-reads stay under ``session_refresh_items_per_s`` (their decoding is most of a big match's CPU).
        Every item the read returns counts: channel and ended sessions are read and decoded too."""
        s = self._settings
        return max(s.session_refresh_s, self.items_read / s.session_refresh_items_per_s)

    async def keep_fresh(self) -> None:
        """Re-read for as long as the match runs; a failed read keeps the last good view."""
        followers_due, first = -math.inf, True
        while True:
            with_followers = trio.current_time() >= followers_due
            try:
                await self.refresh(followers=with_followers)
                if with_followers:
                    followers_due = trio.current_time() + self._settings.follower_refresh_s
            except Exception as exc:  # keep the last good view; try again next round
                self.log.warning("session_refresh_failed", error=repr(exc))
                self.loaded.set()
            await trio.sleep(refresh_pause(self.refresh_interval(), first=first))
            first = False

    # --- questions -----------------------------------------------------------------------------------------
    def perspective(self, user_id: str, display: Mapping[str, object]) -> str:
        """The display perspective a follower sees: their team's when the display has it, else neutral."""
        team = self.follower_team.get(user_id, "")
        return team if team and team in display else NEUTRAL

    def sorted_keys(self) -> list[str]:
        """The token sessions' visitor keys in order, sorted once per read (a hot match's shards each take a
        slice of them by bisection instead of scanning every session). A session dropped since the read is
        still listed: a caller keeps only the keys still in ``sessions``."""
        if self._sorted_of is not self.sessions:
            self._sorted, self._sorted_of = sorted(self.sessions), self.sessions
        return self._sorted

    def users_with_session(self) -> set[str]:
        users = {s.user_id for s in self.sessions.values()}
        users.update(s.user_id for s in self.channel_sessions.values())
        return users

    # --- changes pushes bring ------------------------------------------------------------------------------
    def drop_session(self, visitor_key: str) -> None:
        """APNs rejected the session's token: it is pushed no more (the janitor suspends it in the table)."""
        self.sessions.pop(visitor_key, None)

    def drop_channel_sessions(self, channels: set[str]) -> set[str]:
        """Forget the sessions on ``channels`` (APNs no longer knows them); the users they were of."""
        users: set[str] = set()
        for key, session in list(self.channel_sessions.items()):
            if session.channel in channels:
                users.add(session.user_id)
                del self.channel_sessions[key]
        return users
