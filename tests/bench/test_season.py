"""The season benchmark's own rules (pure): when each match is expected to start with at most K at once, the
RSS growth after warm-up within one process, a wicket's ball, and what the idle figures read from a
``runtime`` answer. The season itself runs as ``python bench/season.py`` (docs/performance.md)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from season import (  # noqa: E402
    back_to_idle,
    expected_starts,
    idle_view,
    rss_growth,
    season_tapes,
    tcp_peers,
    wicket_ball,
)


def test_matches_start_when_a_slot_frees_with_at_most_k_at_once() -> None:
    assert expected_starts([10.0, 20.0, 5.0, 5.0], 2) == [0.0, 0.0, 10.0, 15.0]
    assert expected_starts([3.0, 3.0], 1) == [0.0, 3.0]


def test_rss_growth_runs_from_the_fifth_match_to_the_last_of_the_process_that_made_the_last() -> None:
    series = [(1, 100.0)] * 5 + [(1, 105.0), (1, 108.0)]
    assert rss_growth(series) == 0.08
    # a replaced engine: only its own entries count, and five are not enough to judge
    assert rss_growth([*series, (2, 60.0), (2, 61.0)]) is None
    assert rss_growth([]) is None


def test_the_season_mixes_t10_and_t20_and_names_each_wickets_ball() -> None:
    tapes = season_tapes(2, seed=5)
    lengths = [len(t) for t in tapes]
    assert lengths[1] > lengths[0]  # the T20 has more balls than the T10
    fixture = tapes[0].fixture_at(len(tapes[0]))
    wickets = [
        b for b in fixture["balls"] if (b.get("score") or {}).get("is_wicket") and b.get("batsmanout_id")
    ]
    assert wickets
    name = f"{wickets[0]['scoreboard']}:{wickets[0]['batsmanout_id']}"
    assert wicket_ball(tapes[0], name) == int(wickets[0]["id"])
    assert wicket_ball(tapes[0], "S9:0") is None


def test_the_idle_figures_are_the_tasks_descriptors_and_apns_connections_of_a_runtime_answer() -> None:
    runtime = {"tasks": 40, "fds": {"total": 21, "socket": 15}, "apns": {"push": 2, "management": 1}}
    view = idle_view(runtime)
    assert (view["tasks"], view["fds"], view["apns"], view["tcp_peers"]) == (40, 21, 3, {})
    assert idle_view(None) == {"tasks": None, "fds": None, "apns": None}


SS = """ESTAB 0 0 127.0.0.1:50000 127.0.0.1:8000 users:(("python",pid=42,fd=7))
ESTAB 0 0 127.0.0.1:50001 127.0.0.1:8000 users:(("python",pid=42,fd=8))
CLOSE-WAIT 1 0 127.0.0.1:50002 127.0.0.1:9000 users:(("python",pid=42,fd=9))
ESTAB 0 0 127.0.0.1:50003 127.0.0.1:8000 users:(("python",pid=43,fd=7))
LISTEN 0 128 127.0.0.1:7000 0.0.0.0:* users:(("python",pid=42,fd=3))
"""


def test_a_processs_tcp_sockets_are_counted_by_peer_and_state() -> None:
    names = {8000: "dynamodb", 9000: "sportmonks", 7000: "api"}
    assert tcp_peers(42, names, SS) == {"dynamodb:ESTAB": 2, "listen:api": 1, "sportmonks:CLOSE-WAIT": 1}


def _idle(
    tasks: dict[str, int], sockets: int, peers: dict[str, int], pools: dict[str, int]
) -> dict[str, object]:
    return {
        "tasks_by_name": tasks,
        "fds_by_kind": {"total": sockets + 3, "file": 3, "socket": sockets},
        "tcp_peers": peers,
        "apns_pools": pools,
    }


BOUNDS = {"dynamodb": 24, "apns": 2, "apns_apns": 2}


def test_pools_filled_to_their_bounds_and_the_leaders_jobs_moving_are_back_to_idle() -> None:
    start = {
        "engine-0": _idle({"sync": 1, "a": 5}, 2, {"dynamodb:ESTAB": 2}, {"push": 0}),
        "engine-1": _idle({"a": 5}, 2, {"dynamodb:ESTAB": 2}, {"push": 0}),
        "api": _idle({"serve": 1}, 1, {}, {}),
    }
    end = {
        "engine-0": _idle({"a": 5}, 14, {"dynamodb:ESTAB": 12, "apns_apns:ESTAB": 2}, {"push": 2}),
        "engine-1": _idle(
            {"sync": 1, "a": 5, POOL: 2}, 4, {"dynamodb:ESTAB": 2, "apns_apns:ESTAB": 2}, {"push": 2}
        ),
        "api": _idle({"serve": 1}, 1, {}, {}),
    }
    assert back_to_idle(start, end, BOUNDS) == {"tasks": [], "fds": [], "apns": []}


def test_a_task_a_descriptor_or_a_connection_left_per_match_is_not_back_to_idle() -> None:
    start = {"engine-0": _idle({"a": 5}, 2, {"dynamodb:ESTAB": 2}, {"push": 2}), "api": _idle({}, 1, {}, {})}
    end = {
        "engine-0": _idle(
            {"a": 5, "match_task": 30}, 40, {"dynamodb:ESTAB": 30, "other:ESTAB": 8}, {"push": 9}
        ),
        "api": _idle({"conn": 3}, 1, {}, {}),
    }
    end["engine-0"]["fds_by_kind"]["pipe"] = 2  # type: ignore[index]
    problems = back_to_idle(start, end, BOUNDS)
    assert problems["apns"] == ["engine-0: push pool 2 -> 9"]
    assert "engines: match_task 0 -> 30" in problems["tasks"] and "api: conn 0 -> 3" in problems["tasks"]
    assert any("sockets to dynamodb 2 -> 30" in p for p in problems["fds"])
    assert any("sockets to other 0 -> 8" in p for p in problems["fds"])
    assert "engine-0: pipe 0 -> 2" in problems["fds"]


POOL = "daemon.apns.driver.ConnectionPool._reader"
