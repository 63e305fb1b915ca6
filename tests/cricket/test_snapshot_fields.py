"""``snapshot.FIELDS_READ`` names every field the engine reads: a fixture cut to those fields (as a sparse
SportMonks answer, ``fields[...]``, is cut by the replay server) gives the same snapshot, the same stamp and the
same tick as the whole fixture, for synthesised matches at every stage and for the real fixture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.cricket.engine import process_tick
from daemon.cricket.order import stamp_of_fixture
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import FIELDS_READ, snapshot_from_fixture
from daemon.replay.server.query import relation_names, sparse
from daemon.replay.synth import synthesise
from daemon.sportmonks.client import DEFAULT_FIXTURE_INCLUDE

FIELDS = tuple(sorted((resource, frozenset(names)) for resource, names in FIELDS_READ.items()))
RELATIONS = relation_names(",".join(DEFAULT_FIXTURE_INCLUDE))


def cut(fixture: dict[str, Any]) -> dict[str, Any]:
    cut_fixture: dict[str, Any] = sparse(fixture, FIELDS, RELATIONS)
    return cut_fixture


def test_the_cut_drops_what_the_engine_does_not_read() -> None:
    fx = synthesise("T10", seed=2).fixture_at(60)
    small = cut(fx)
    assert len(json.dumps(small)) < 0.6 * len(json.dumps(fx))
    ball = small["balls"][0]
    assert "image_path" not in ball["batsman"] and "dateofbirth" not in ball["batsman"]
    assert set(ball) <= {*FIELDS_READ["balls"], "resource", "batsman", "bowler", "score", "team"}


@pytest.mark.parametrize(("fmt", "seed"), [("T20", 364), ("T10", 5)])
def test_a_cut_fixture_gives_the_same_snapshot_and_tick(fmt: str, seed: int) -> None:
    tape = synthesise(fmt, seed=seed)
    settings = EngineSettings()
    full_state = cut_state = None
    for cursor in range(0, len(tape) + 1, 7):
        fx = tape.fixture_at(cursor)
        full, small = snapshot_from_fixture(fx), snapshot_from_fixture(cut(fx))
        assert small == full and small.players == full.players
        assert stamp_of_fixture(cut(fx)) == stamp_of_fixture(fx)
        a = process_tick(full_state, full, now=1e9 + cursor, marquee=True, settings=settings)
        b = process_tick(cut_state, small, now=1e9 + cursor, marquee=True, settings=settings)
        assert a.events == b.events and a.display == b.display
        full_state, cut_state = a.state, b.state


def test_the_real_fixture_cut_gives_the_same_snapshot(real_fixture_path: Path) -> None:
    real = json.loads(real_fixture_path.read_text())["data"]
    assert snapshot_from_fixture(cut(real)) == snapshot_from_fixture(real)
    assert snapshot_from_fixture(cut(real)).players == snapshot_from_fixture(real).players
