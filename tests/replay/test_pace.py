"""The pace of synthesised matches comes from real ones (``daemon.replay.pace``).

The shipped quantile table is derived again from the real fixture (``../shared/data/sportmonks``) and must
equal it; synthesised tapes drawn from it must show the real median, 5th and 95th percentiles; the replay
clock serves each entry at the tape's own gap.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from daemon.replay import pace
from daemon.replay.cursor import ReplayClock
from daemon.replay.synth import synthesise


def test_the_shipped_table_is_what_the_real_fixture_gives(real_fixture_path: Path) -> None:
    gaps = pace.ball_gaps(json.loads(real_fixture_path.read_text()))
    assert len(gaps) == 133  # 135 balls in two innings: the gap across the break is not a ball gap
    assert pace.quantile_table(gaps) == pace.BALL_GAP_QUANTILES_S
    assert pace.quantile(gaps, 0.5) == 46.0 and pace.quantile(gaps, 0.05) == 3.0


def test_a_ball_gap_is_between_balls_of_one_innings_in_id_order() -> None:
    fixture = {
        "data": {
            "balls": [
                {"id": 3, "scoreboard": "S1", "updated_at": "2026-01-01T10:01:40.000000Z"},
                {"id": 1, "scoreboard": "S1", "updated_at": "2026-01-01T10:00:00.000000Z"},
                {"id": 2, "scoreboard": "S1", "updated_at": "2026-01-01T10:00:30.000000Z"},
                {"id": 9, "scoreboard": "S2", "updated_at": "2026-01-01T10:30:00.000000Z"},
                {"id": 10, "scoreboard": "S2", "updated_at": "not a time"},
            ]
        }
    }
    assert pace.ball_gaps(fixture) == [30.0, 70.0]


def test_draws_follow_the_table() -> None:
    rng = random.Random(7)
    draws = [pace.draw_gap_s(rng) for _ in range(20_000)]
    table = pace.BALL_GAP_QUANTILES_S
    assert min(draws) >= table[0] and max(draws) <= table[-1]
    for i, q in enumerate((0.05, 0.25, 0.5, 0.75, 0.95)):
        expected = table[round(q / pace.QUANTILE_STEP)]
        assert abs(pace.quantile(draws, q) - expected) <= 0.03 * table[-1], (i, q)
    assert abs(sum(draws) / len(draws) - pace.mean_gap_s()) < 1.0


def test_synthesised_matches_have_the_real_pace() -> None:
    """Over a dozen matches' deliveries: median 40-47 s, 5th percentile 3-4 s, 95th within what real matches
    show (114 s in 71344, 118-136 s in others), not a fixed interval."""
    gaps = [
        e.gap_ms / 1000.0
        for seed in range(12)
        for e in synthesise("T20", seed=seed).entries
        if e.op == "ball" and e.gap_ms is not None
    ]
    assert len(gaps) > 2000
    assert 40.0 <= pace.quantile(gaps, 0.5) <= 47.0
    assert 3.0 <= pace.quantile(gaps, 0.05) <= 4.0
    assert 110.0 <= pace.quantile(gaps, 0.95) <= 136.0
    assert len({round(g) for g in gaps}) > 100


def test_a_pace_scales_the_gaps_and_keeps_their_shape_and_the_match() -> None:
    real = synthesise("T10", seed=3)
    fast = synthesise("T10", seed=3, ms_per_ball=1000.0)
    assert [e.ball for e in fast.entries] == [e.ball for e in real.entries]  # the same match
    assert fast.ms_per_ball == pytest.approx(1000.0, rel=0.25)
    ratios = {
        round((f.gap_ms or 0) / (r.gap_ms or 1), 2) for f, r in zip(fast.entries, real.entries, strict=True)
    }
    assert len(ratios) <= 3  # one scale (rounding aside)


def test_the_clock_serves_each_entry_at_its_own_gap() -> None:
    tape = synthesise("T10", seed=3, overs=2)
    clock = ReplayClock.for_tape(tape, starts_at=1000.0, break_ms=60_000.0)
    offsets = tape.entry_offsets_ms()
    brk = tape.innings_break_index()
    assert brk is not None
    for i, at in enumerate(offsets):
        due = 1000.0 + (at + (60_000.0 if i >= brk else 0.0)) / 1000.0
        assert clock.cursor(due) == i + 1 or offsets[i + 1 : i + 2] == [at]
        assert clock.cursor(due - 0.01) <= i
    # at another pace, the same shape
    half = ReplayClock.for_tape(tape, starts_at=1000.0, break_ms=60_000.0, ms_per_ball=tape.ms_per_ball / 2)
    assert half.due_ms(brk - 1) == pytest.approx(clock.due_ms(brk - 1) / 2)
