"""The names of the fifteen key-event types and of the two detector tiers.

Only the names: everything the engine knows of a type (its tier, priority, default cooldown and
alert-worthiness, staleness rule and detector) is its row in ``daemon.cricket.registry``. The values are the
strings the persisted state, the cooldown keys ("wicket:S1:914") and the payloads carry, so they never change.
"""

from __future__ import annotations

import enum


class EventType(enum.StrEnum):
    MATCH_END = "match_end"
    INNINGS_END = "innings_end"
    HATTRICK = "hattrick"
    HUNDRED = "hundred"
    WICKET = "wicket"
    FIFTY = "fifty"
    ON_HATTRICK = "on_hattrick"
    CONSECUTIVE_SIXES = "consecutive_sixes"
    BOWLER_ON_FIRE = "bowler_on_fire"
    BATSMAN_ON_FIRE = "batsman_on_fire"
    BATSMAN_ON_90S = "batsman_on_90s"
    SIX = "six"
    FOUR = "four"
    NEW_BATSMAN = "new_batsman"
    MAIDEN = "maiden"


class Tier(enum.Enum):
    """Which matches and ticks a detector runs on (platform-docs §11)."""

    SCORE = "tier0"  # the batting, bowling and runs tables: every match, with or without balls
    BALL = "tier1"  # the balls bowled since the previous tick: marquee matches whose feed carries balls
