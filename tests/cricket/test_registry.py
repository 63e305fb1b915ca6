"""The event-type registry: one row per type, priorities 1..N once each, and the settings' defaults taken from
it (the engine's behaviour per type is pinned by test_engine.py and test_golden.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from daemon.cricket import registry
from daemon.cricket.events import EventType, Tier
from daemon.cricket.registry import EVENTS, RegistryError, check
from daemon.cricket.settings import EngineSettings


def test_every_event_type_has_one_row_and_the_priorities_are_one_to_fifteen_in_row_order() -> None:
    assert [row.type for row in EVENTS] == list(EventType)
    assert [row.priority for row in EVENTS] == list(range(1, 16))
    assert registry.NAMES == tuple(t.value for t in EventType)


def test_a_repeated_priority_is_refused() -> None:
    rows = list(EVENTS)
    rows[4] = replace(rows[4], priority=3)  # wicket given the hat-trick's priority
    with pytest.raises(RegistryError, match=r"each once.*\[3\] repeated"):
        check(rows)


def test_a_priority_out_of_range_is_refused() -> None:
    rows = list(EVENTS)
    rows[0] = replace(rows[0], priority=16)
    with pytest.raises(RegistryError, match="priorities must be 1..15"):
        check(rows)


def test_a_type_without_a_row_or_with_two_is_refused() -> None:
    with pytest.raises(RegistryError, match=r"no row for \['maiden'\]"):
        check(EVENTS[:-1])
    with pytest.raises(RegistryError, match="four: two rows"):
        check([*EVENTS, EVENTS[12]])


def test_the_settings_defaults_are_the_tables() -> None:
    settings = EngineSettings()
    assert settings.cooldowns_s == {row.type.value: row.cooldown_s for row in EVENTS}
    assert settings.alert_worthy == [row.type.value for row in EVENTS if row.alert_worthy]
    assert settings.cooldown("match_end") == 6 * 3600.0
    assert list(settings.cooldowns_s) == list(registry.NAMES)  # the example configuration's order


def test_an_override_keeps_the_other_types_defaults() -> None:
    settings = EngineSettings(cooldowns_s={"four": 0}, alert_worthy=["wicket"])
    assert settings.cooldown("four") == 0 and settings.cooldown("six") == 60.0
    assert settings.alert_worthy == ["wicket"]


def test_ball_detectors_are_the_tier_one_rows() -> None:
    ball = {row.type.value for row in EVENTS if row.tier is Tier.BALL}
    assert ball == {"hattrick", "on_hattrick", "consecutive_sixes", "six", "four", "maiden"}
