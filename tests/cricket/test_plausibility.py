"""Plausibility at the snapshot: numbers cricket cannot produce are refused, naming the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.cricket.snapshot import ImplausibleSnapshot, SnapshotError, snapshot_from_fixture
from tests.cricket.match_script import Script


def live_fixture(overs: int = 20) -> dict[str, Any]:
    s = Script(overs=overs)
    s.balls_of("1 0 4 W 6 0 1 2 0")
    return s.fixture()


def refused(fx: dict[str, Any]) -> ImplausibleSnapshot:
    with pytest.raises(ImplausibleSnapshot) as info:
        snapshot_from_fixture(fx)
    assert isinstance(info.value, SnapshotError)  # the actor skips it as it skips a malformed tick
    return info.value


@pytest.mark.parametrize(
    ("where", "key", "value", "field"),
    [
        ("runs", "score", -5, "runs[inning 1].score"),
        ("runs", "score", 10**40, "runs[inning 1].score"),
        ("runs", "overs", 1e300, "runs[inning 1].overs"),
        ("runs", "overs", 21, "runs[inning 1].overs"),  # a 20-over match
        ("runs", "overs", 3.7, "runs[0].overs"),  # an over has six legal balls
        ("runs", "wickets", 11, "runs[inning 1].wickets"),
        ("runs", "wickets", -1, "runs[inning 1].wickets"),
        ("batting", "score", -1, "batting[S1:101].score"),
        ("bowling", "wickets", 11, "bowling[S1:201].wickets"),
        ("bowling", "runs", -3, "bowling[S1:201].runs"),
    ],
)
def test_an_implausible_total_is_refused_naming_its_field(
    where: str, key: str, value: Any, field: str
) -> None:
    fx = live_fixture()
    fx[where][0][key] = value
    assert refused(fx).field == field


def test_a_ball_with_negative_or_absurd_runs_is_refused() -> None:
    fx = live_fixture()
    fx["balls"][0]["score"]["runs"] = -1
    assert refused(fx).field.endswith(".score.runs")
    fx = live_fixture()
    fx["balls"][0]["score"]["runs"] = 400
    assert "more than cricket allows" in str(refused(fx))


def test_the_format_limits_the_innings() -> None:
    fx = live_fixture(overs=20)
    fx["total_overs_played"] = 10**9
    assert refused(fx).field == "total_overs_played"
    test = live_fixture()
    test["type"] = "Test/5day"
    test["total_overs_played"] = None
    test["runs"][0]["overs"] = 150  # a long Test innings is fine
    test["runs"][0]["score"] = 600
    snapshot_from_fixture(test)
    test["runs"].append({**copy.deepcopy(test["runs"][0]), "inning": 5})
    assert refused(test).field == "runs[inning 5].inning"


def test_a_huge_number_is_shown_short_in_the_error() -> None:
    fx = live_fixture()
    fx["runs"][0]["score"] = 10**400
    assert len(str(refused(fx))) < 200


@settings(max_examples=60, deadline=None)
@given(st.text("0146W", min_size=0, max_size=60).filter(lambda codes: codes.count("W") <= 10))
def test_every_scripted_innings_is_plausible(codes: str) -> None:
    # an innings is all out at its tenth wicket: a script with more is not cricket (refused, below)
    s = Script()
    s.balls_of(" ".join(codes))
    snapshot_from_fixture(s.fixture())  # never raises


def test_an_eleventh_wicket_in_one_innings_is_refused() -> None:
    s = Script()
    s.balls_of(" ".join("W" * 11))
    assert "more than cricket allows" in str(refused(s.fixture()))


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(
        [
            ("runs", "score"),
            ("runs", "wickets"),
            ("batting", "score"),
            ("batting", "ball"),
            ("bowling", "runs"),
            ("bowling", "wickets"),
        ]
    ),
    st.integers(max_value=-1),
)
def test_any_negative_count_is_refused(place: tuple[str, str], value: int) -> None:
    fx = live_fixture()
    fx[place[0]][0][place[1]] = value
    refused(fx)
