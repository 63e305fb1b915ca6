"""The synthesiser: deterministic, realistic, and the shipped demo tape is what it says it is."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.replay.synth import SYNTH_LEAGUE_ID, synthesise
from daemon.replay.tape import Tape, builtin_tape_path, load_tape, tape_to_json

DEMO_SEED = 364


def _final(tape: Tape) -> dict[str, Any]:
    return tape.fixture_at(len(tape))


def _hattricks(tape: Tape, fx: dict[str, Any]) -> int:
    scores = tape.score_catalogue()
    runs: Counter[int] = Counter()
    found = 0
    for ball in fx["balls"]:
        score = scores[ball["score_id"]]
        if score.is_wide:
            continue
        bowler_wicket = score.is_wicket and not score.is_run_out
        runs[ball["bowler_id"]] = runs[ball["bowler_id"]] + 1 if bowler_wicket else 0
        found += runs[ball["bowler_id"]] == 3
    return found


def test_same_format_and_seed_give_the_same_tape_and_other_seeds_differ() -> None:
    a, b = synthesise("T20", 7), synthesise("T20", 7)
    assert tape_to_json(a) == tape_to_json(b)
    c = synthesise("T20", 8)
    assert c.fixture_id != a.fixture_id
    assert [e.ball.score_id for e in c.entries[:40] if e.ball] != [
        e.ball.score_id for e in a.entries[:40] if e.ball
    ]
    assert synthesise("ODI", 7).fixture_id != a.fixture_id


@pytest.mark.parametrize("fmt", ["T20", "ODI", "T10"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_synthesised_matches_finish_with_a_result_inside_the_laws(fmt: str, seed: int) -> None:
    tape = synthesise(fmt, seed)
    fx = _final(tape)
    overs = {"T20": 20, "ODI": 50, "T10": 10}[fmt]
    assert fx["status"] == "Finished"
    assert fx["league_id"] == SYNTH_LEAGUE_ID and fx["type"] == fmt and fx["total_overs_played"] == overs
    first, second = fx["runs"]
    assert first["team_id"] != second["team_id"]
    assert first["overs"] == overs or first["wickets"] == 10
    assert second["score"] > first["score"] or second["overs"] == overs or second["wickets"] == 10
    if fx["winner_team_id"] is None:
        assert fx["note"] == "Match Tied"
    else:
        assert "won by" in fx["note"]
    # no bowler over his quota, never two overs in a row
    for row in fx["bowling"]:
        assert row["overs"] <= max(1, overs // 5)
    for board in ("S1", "S2"):
        by_over: dict[int, set[int]] = {}
        for ball in fx["balls"]:
            if ball["scoreboard"] == board:
                by_over.setdefault(int(round(ball["ball"] * 10)) // 10, set()).add(ball["bowler_id"])
        for over in by_over:
            if over + 1 in by_over:
                assert not by_over[over] & by_over[over + 1]
    # ball ids increase in posting order
    posted = [e.ball.id for e in tape.entries if e.op == "ball" and e.ball]
    assert posted == sorted(posted) and len(set(posted)) == len(posted)


def test_a_run_of_seeds_shows_every_kind_of_wicket_extra_and_feed_correction() -> None:
    names: set[str] = set()
    ops: Counter[str] = Counter()
    maidens = hattricks = 0
    for seed in range(12):
        tape = synthesise("T20", seed)
        fx = _final(tape)
        scores = tape.score_catalogue()
        names |= {scores[b["score_id"]].name for b in fx["balls"]}
        ops.update(e.op for e in tape.entries)
        maidens += sum(r["medians"] for r in fx["bowling"])
        hattricks += _hattricks(tape, fx)
    for kind in ("Catch Out", "Clean Bowled", "LBW OUT", "Run Out", "FOUR", "SIX", "1 Wide", "1 Leg Bye"):
        assert kind in names
    assert any("No Ball" in n for n in names) and any("Stump" in n for n in names)
    assert ops["correct"] > 0 and ops["delete"] > 0
    assert maidens > 0
    assert hattricks <= 6  # occasional, not routine


def test_shipped_demo_tape_is_the_documented_seed_and_has_everything_the_demo_needs() -> None:
    demo = load_tape(builtin_tape_path("t20-demo"))
    assert tape_to_json(demo) == tape_to_json(synthesise("T20", DEMO_SEED))
    fx = _final(demo)
    scores = demo.score_catalogue()
    kinds = {scores[b["score_id"]].name for b in fx["balls"] if scores[b["score_id"]].is_wicket}
    assert len(kinds) >= 4
    assert any(scores[b["score_id"]].four for b in fx["balls"])
    assert any(scores[b["score_id"]].six for b in fx["balls"])
    assert any(not scores[b["score_id"]].is_legal for b in fx["balls"])
    assert sum(r["medians"] for r in fx["bowling"]) >= 1
    assert _hattricks(demo, fx) >= 1
    # a chase that ends in a result: the side batting second wins
    assert fx["status"] == "Finished"
    assert fx["winner_team_id"] == fx["runs"][1]["team_id"]
    assert "wicket" in fx["note"]
    assert {e.op for e in demo.entries} == {"ball", "correct", "delete"}


def test_bad_format_or_seed_is_refused_naming_the_argument() -> None:
    with pytest.raises(ValueError, match="format"):
        synthesise("Test", 1)
    with pytest.raises(ValueError, match="seed"):
        synthesise("T20", -1)


@pytest.mark.parametrize(("fmt", "overs"), [("T10", 5), ("T20", 8)])
def test_a_shortened_match_is_a_whole_match_within_its_overs(fmt: str, overs: int) -> None:
    tape = synthesise(fmt, 3, overs=overs)
    assert tape_to_json(tape) == tape_to_json(synthesise(fmt, 3, overs=overs))
    fx = _final(tape)
    assert fx["status"] == "Finished" and fx["type"] == fmt and fx["total_overs_played"] == overs
    first, second = fx["runs"]
    assert first["overs"] == overs or first["wickets"] == 10
    assert second["score"] > first["score"] or second["overs"] == overs or second["wickets"] == 10
    assert fx["note"] == "Match Tied" if fx["winner_team_id"] is None else "won by" in fx["note"]
    assert all(row["overs"] <= -(-overs // 5) for row in fx["bowling"])
    assert len(tape) < len(synthesise(fmt, 3))


@pytest.mark.parametrize("overs", [0, 11, -1, 2.5])
def test_overs_outside_the_format_are_refused_naming_the_argument(overs: object) -> None:
    with pytest.raises(ValueError, match="overs: must be a whole number from 1 to 10 for T10"):
        synthesise("T10", 1, overs=overs)  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(["T20", "T10"]), seed=st.integers(0, 10_000), where=st.floats(0, 1))
def test_at_any_cursor_the_scorecard_adds_up_to_the_innings_totals(fmt: str, seed: int, where: float) -> None:
    tape = synthesise(fmt, seed)
    cursor = int(where * len(tape))
    fx = tape.fixture_at(cursor, include=["runs", "batting", "bowling", "balls"])
    scores = tape.score_catalogue()
    for row in fx["runs"]:
        board = f"S{row['inning']}"
        balls = [b for b in fx["balls"] if b["scoreboard"] == board]
        byes = sum(scores[b["score_id"]].bye + scores[b["score_id"]].leg_bye for b in balls)
        extras = sum(
            scores[b["score_id"]].runs - scores[b["score_id"]].bat_runs for b in balls
        )  # wides and no-ball penalties
        batting = [r for r in fx["batting"] if r["scoreboard"] == board]
        bowling = [r for r in fx["bowling"] if r["scoreboard"] == board]
        assert sum(r["score"] for r in batting) + extras + byes == row["score"]
        assert sum(r["runs"] for r in bowling) + byes == row["score"]
        assert sum(1 for r in batting if r["wicket_id"] != 84) == row["wickets"]
        assert sum(r["wickets"] for r in bowling) <= row["wickets"]  # run outs are nobody's
        legal = sum(1 for b in balls if scores[b["score_id"]].is_legal)
        assert row["overs"] == legal // 6 + (legal % 6) / 10
        # the two batters at the crease on the latest ball are not out
        if balls:
            last = balls[-1]
            out = {r["player_id"] for r in batting if r["wicket_id"] != 84}
            latest_out = {b.get("batsmanout_id") for b in balls[-1:] if scores[b["score_id"]].is_wicket}
            crease = {last["batsman_one_on_creeze_id"], last["batsman_two_on_creeze_id"]} - latest_out
            assert not crease & out
