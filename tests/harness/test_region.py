"""The region rig's own rules (``tests/harness/region.py``): what each phone is expected to do, and the crowds
given per match or for all of them. The rig itself runs in ``tests/e2e/test_region_from_empty.py``."""

from __future__ import annotations

import pytest

from tests.harness.region import (
    DEAD_ACTIVITY,
    DEAD_DEVICE,
    DEAD_PUSH_TO_START,
    PhoneSpec,
    crowds_per_match,
    mixed_crowd,
)


def test_a_phone_is_live_unless_its_start_or_its_activitys_token_is_dead() -> None:
    assert PhoneSpec("18.2").on_channels and PhoneSpec("18.2").live
    assert not PhoneSpec("17.5").on_channels and PhoneSpec("17.5").live
    # a dead device token only loses the phone its alerts: its activity still starts and runs
    assert PhoneSpec("17.4", frozenset({DEAD_DEVICE})).live
    assert not PhoneSpec("18.1", frozenset({DEAD_PUSH_TO_START})).starts
    assert not PhoneSpec("18.1", frozenset({DEAD_PUSH_TO_START})).live
    # an activity's update token is dead only where the activity runs on a token
    assert PhoneSpec("17.6", frozenset({DEAD_ACTIVITY})).starts
    assert not PhoneSpec("17.6", frozenset({DEAD_ACTIVITY})).live
    assert PhoneSpec("18.0", frozenset({DEAD_ACTIVITY})).live


def test_a_token_kind_the_rig_does_not_know_is_refused() -> None:
    with pytest.raises(ValueError, match="alert"):
        PhoneSpec("17.5", frozenset({"alert"}))


def test_the_mixed_crowd_takes_every_path_and_crowds_come_per_match_or_for_all() -> None:
    crowd = mixed_crowd()
    assert {spec.on_channels for spec in crowd if spec.live} == {True, False}
    assert set().union(*(spec.dead for spec in crowd)) == {DEAD_DEVICE, DEAD_PUSH_TO_START, DEAD_ACTIVITY}
    assert crowds_per_match(crowd, 2) == [crowd, crowd]
    one, two = [PhoneSpec("18.2")], [PhoneSpec("17.5"), PhoneSpec("17.5")]
    assert crowds_per_match([one, two], 2) == [one, two]
