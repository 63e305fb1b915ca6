from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from daemon.cricket.engine import process_tick
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import snapshot_from_fixture
from daemon.cricket.state import MatchState, StateError
from daemon.store import codec
from tests.cricket.match_script import Script


def _real_state(real_fixture_path: Path) -> MatchState:
    snap = snapshot_from_fixture(json.loads(real_fixture_path.read_text()))
    return process_tick(None, snap, now=0.0, marquee=True, settings=EngineSettings()).state


def test_item_round_trips_and_uses_the_data_model_names(real_fixture_path: Path) -> None:
    state = _real_state(real_fixture_path)
    item = state.to_item()
    for key in (
        "matchPhase",
        "previousStatus",
        "previousBallId",
        "previousScore",
        "previousBatting",
        "previousBowling",
        "last30Balls",
        "cooldowns",
        "lastTimestamp",
    ):
        assert key in item
    assert len(item["last30Balls"]) == 30
    assert MatchState.from_item(item) == state
    assert MatchState.from_item(json.loads(json.dumps(item))) == state


def test_item_survives_the_dynamodb_codec_and_stays_near_five_kilobytes(real_fixture_path: Path) -> None:
    s = Script(settings=EngineSettings())
    s.tick()
    s.balls_of("4 W 6 1 0 4")
    s.tick()
    for state in (_real_state(real_fixture_path), s.state):
        assert state is not None
        wire = codec.to_item(state.to_item())
        assert MatchState.from_item(codec.from_item(wire)) == state
        assert len(json.dumps(state.to_item(), separators=(",", ":"))) < 6000


def test_older_records_with_missing_keys_read_with_defaults() -> None:
    state = MatchState.from_item({"matchPhase": "live", "previousStatus": "1st Innings"})
    assert state.match_phase == "live" and state.previous_ball_id is None and state.cooldowns == {}
    assert state.last30_balls == () and state.reported_wickets == ()


def test_numbers_may_come_back_as_decimals() -> None:
    state = MatchState.from_item(
        {
            "matchPhase": "live",
            "previousBallId": Decimal("11917822"),
            "cooldowns": {"four:S1:1": Decimal("1791558700.5")},
            "lastTimestamp": Decimal("1791558696"),
        }
    )
    assert state.previous_ball_id == 11917822 and state.cooldowns["four:S1:1"] == 1791558700.5
    assert state.last_timestamp == 1791558696


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"cooldowns": []}, "cooldowns"),
        ({"cooldowns": {"four:S1:1": "soon"}}, "cooldowns.four:S1:1"),
        ({"last30Balls": [[1, "S1"]]}, "last30Balls[0]"),
        ({"previousBatting": {"S1-7": [1, 2, 0]}}, "previousBatting.S1-7"),
        ({"previousScore": {"innings": [[1, "39", "x", 0, 0]]}}, "previousScore.innings[0][2]"),
        ({"previousBallId": "abc"}, "previousBallId"),
    ],
)
def test_a_malformed_record_names_the_field(item: dict[str, object], field: str) -> None:
    with pytest.raises(StateError) as caught:
        MatchState.from_item({"matchPhase": "live", **item})
    assert str(caught.value).startswith(field)
