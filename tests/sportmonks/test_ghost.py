"""The ghost-fixture rule (``daemon.sportmonks.ghost``): a listed fixture that answers yet never shows play is
released after bounded, backed-off looks; a real match in its pre-ball phase never is.

The false-positive checks drive the real replay server in process (its wall clock a hand-moved number) the way
the feed polls it: ``/livescores`` every 5 s, ``/fixtures/{id}`` for the subscribed match while it is absent
from ``/livescores`` (at the rule's backoff while it is under suspicion), from ten minutes before the start to
the final status; every look goes through ``judge``. A replayed tape carries its recording's ``starting_at``,
so the sweep runs with the replay's clock unrelated to the schedule (as in replay mode) and aligned with it
(as in production).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from daemon.replay.server import ReplayServer
from daemon.replay.synth import synthesise
from daemon.replay.tape import Tape
from daemon.sportmonks.ghost import GhostRule, Sighting, Verdict, Watch, fingerprint, judge, played, sighting

RULE = GhostRule()  # the defaults FeedSettings ships with
TODAY = datetime(2026, 12, 4, 3, 0, tzinfo=UTC).timestamp()
FAR = "2025-06-01T10:00:00.000000Z"  # a schedule long gone by TODAY


def blank(
    fixture_id: int = 123, *, status: str = "1st Innings", starting_at: str | None = FAR
) -> dict[str, Any]:
    """A fixture that answers but shows nothing: no ball, no score row, no toss."""
    return {
        "resource": "fixtures",
        "id": fixture_id,
        "league_id": 3,
        "starting_at": starting_at,
        "status": status,
        "note": None,
        "toss_won_team_id": None,
        "elected": None,
        "winner_team_id": None,
        "runs": [],
        "balls": [],
    }


def looks(
    fixture: dict[str, Any], times: list[float], *, listed: bool = True, wall: float = TODAY
) -> list[tuple[Watch | None, Verdict]]:
    """``judge`` over looks at ``fixture`` at ``times`` (seconds from ``wall``)."""
    out = []
    watch = None
    for t in times:
        watch, verdict = judge(watch, sighting(fixture, listed=listed), now=t, wall=wall + t, rule=RULE)
        out.append((watch, verdict))
    return out


# ------------------------------------------------------------------------------------------------ the rule


def test_a_listed_blank_unchanged_fixture_is_released_after_the_tries_and_the_time_not_before() -> None:
    every_5s = [5.0 * i for i in range(0, 241)]  # /livescores looks for 20 minutes
    verdicts = [v.kind for _, v in looks(blank(), every_5s)]
    assert verdicts[:-1] == ["suspect"] * 240 and verdicts[-1] == "release"
    # Listed once, then polled by id at the rule's own backoff: the calls double from 30 s to the cap, 7 in
    # all to the release.
    watch, t, calls = None, 0.0, []
    while True:
        look = sighting(blank(), listed=not calls)
        watch, verdict = judge(watch, look, now=t, wall=TODAY + t, rule=RULE)
        calls.append(t)
        if verdict.kind == "release":
            break
        assert watch is not None and verdict.kind == "suspect" and verdict.retry_in_s is not None
        t += verdict.retry_in_s
    gaps = [b - a for a, b in zip(calls, calls[1:], strict=False)]
    assert gaps == [30, 60, 120, 240, 480, 600] and len(calls) == 7


def test_an_id_seen_in_livescores_once_is_still_judged_when_polled_by_id() -> None:
    watch, verdict = judge(None, sighting(blank(), listed=True), now=0, wall=TODAY, rule=RULE)
    assert verdict.kind == "suspect" and watch is not None and watch.listed
    watch, verdict = judge(watch, sighting(blank(), listed=False), now=30, wall=TODAY + 30, rule=RULE)
    assert verdict.kind == "suspect" and watch is not None and watch.polls == 2


def test_a_change_of_any_shown_field_starts_the_count_again() -> None:
    times = [5.0 * i for i in range(0, 200)]
    result = looks(blank(), times)
    watch = result[-1][0]
    assert watch is not None and watch.polls == 200
    for field, value in [("toss_won_team_id", 39), ("status", "Delayed"), ("note", "Rain"), ("runs", [{}])]:
        changed = blank() | {field: value}
        assert fingerprint(changed) != fingerprint(blank()), field
        after, verdict = judge(watch, sighting(changed, listed=True), now=1000, wall=TODAY + 1000, rule=RULE)
        assert verdict.kind == "suspect" and after is not None and (after.polls, after.since) == (1, 1000)


@pytest.mark.parametrize(
    ("fixture", "why"),
    [
        (blank() | {"runs": [{"inning": 1, "score": 0, "wickets": 0, "overs": 0.1}]}, "shows play"),
        (blank() | {"balls": {"data": [{"id": 1}]}}, "shows play"),
        (blank(status="Finished"), "final status"),
        (blank(status="Aban."), "final status"),
        (blank(starting_at=None), "cannot be dated"),
        (blank(starting_at="not a date"), "cannot be dated"),
    ],
    ids=["a-score-row", "a-wrapped-ball", "finished", "abandoned", "no-schedule", "bad-schedule"],
)
def test_play_a_final_status_or_no_schedule_is_never_judged(fixture: dict[str, Any], why: str) -> None:
    for watch, verdict in looks(fixture, [60.0 * i for i in range(100)]):
        assert watch is None and verdict.kind in ("play", "waiting") and why in verdict.reason


def test_a_fixture_not_started_and_never_listed_is_a_scheduled_wait_but_another_status_is_judged() -> None:
    for watch, verdict in looks(blank(status="NS"), [60.0 * i for i in range(100)], listed=False):
        assert watch is None and verdict.kind == "waiting"
    kinds = [
        v.kind for _, v in looks(blank(status="1st Innings"), [60.0 * i for i in range(100)], listed=False)
    ]
    assert kinds[:20] == ["suspect"] * 20 and kinds[20] == "release"


@pytest.mark.parametrize("status", ["1st Innings", "Delayed", "Int.", "NS"])
@pytest.mark.parametrize("offset_h", [-0.9, 0.0, 3.0, 9.5])
def test_a_fixture_within_its_scheduled_start_is_waiting_for_its_first_ball(
    status: str, offset_h: float
) -> None:
    """Hours of rain before the first ball, the toss posted or not: never released while the schedule says now."""
    start = datetime.fromtimestamp(TODAY - offset_h * 3600, UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    fixture = blank(status=status, starting_at=start)
    for _watch, verdict in looks(fixture, [5.0 * i for i in range(0, 1800, 5)]):  # 2.5 h of looks from there
        assert verdict.kind != "release", (status, offset_h)
    assert looks(fixture, [0.0])[0][1].kind == "waiting"
    assert looks(fixture | {"toss_won_team_id": 39}, [0.0], wall=TODAY + 13 * 3600)[0][1].kind == "suspect"


def test_sighting_reads_odd_values_without_raising() -> None:
    odd = {"status": None, "runs": [None, {"score": "x"}], "balls": "no", "starting_at": 5}
    look = sighting(odd, listed=True)
    assert look == Sighting(
        status="", played=False, starting_at=None, fingerprint=fingerprint(odd), listed=True
    )
    assert played({"runs": {"data": [{"wickets": 1}]}})


# ------------------------------------------------------------------------------------------------ real responses


def test_the_real_responses_are_never_released(shared_data: Path) -> None:
    folder = shared_data / "sportmonks"
    fixtures: list[dict[str, Any]] = []
    for path in sorted(folder.glob("fixture*.json")):
        data = json.loads(path.read_text())["data"]
        fixtures.extend(data if isinstance(data, list) else [data])
    assert len(fixtures) >= 2
    for fixture in fixtures:
        for wall in (TODAY, _epoch(fixture["starting_at"]) + 600):
            verdicts = {v.kind for _, v in looks(fixture, [30.0 * i for i in range(200)], wall=wall)}
            assert verdicts <= {"play"}, fixture["id"]


def test_the_real_live_fixture_before_its_first_ball_waits_on_schedule_and_is_released_far_from_it(
    real_fixture_path: Path,
) -> None:
    """71344 as it stood between the toss and the first ball (no balls, no score rows, toss posted)."""
    fixture = json.loads(real_fixture_path.read_text())["data"]
    before = {**fixture, "balls": [], "runs": [], "batting": [], "bowling": [], "status": "1st Innings"}
    assert before["toss_won_team_id"] is not None
    start = _epoch(fixture["starting_at"])
    hour = [5.0 * i for i in range(720)]
    assert {v.kind for _, v in looks(before, hour, wall=start - 1800)} == {"waiting"}
    assert {v.kind for _, v in looks(before, hour, wall=start + 4 * 3600)} == {"waiting"}
    # The same blank fixture listed a year from its schedule: a stale entry, released after 20 minutes.
    kinds = [v.kind for _, v in looks(before, hour, wall=start + 365 * 86400)]
    assert kinds.index("release") == 240


# ------------------------------------------------------------------------------------------------ synth tapes


async def replay_looks(tape: Tape, t0: float, *, rule: GhostRule = RULE) -> Counter[str]:
    """Every verdict the feed's looks at ``tape``'s fixture give, served from ``t0`` (wall) on: the start two
    minutes later, then the whole match to its final status."""
    t = t0
    server = ReplayServer([tape], speed=1.0, start_delay_s=120.0, innings_break_s=1200.0, clock=lambda: t)
    fid = tape.fixture_id

    async def get(path: str) -> Any:
        response = await server.handle("GET", "/api/v2.0" + path)
        assert response.status == 200, response.body[:200]
        return json.loads(response.body)["data"]

    watch: Watch | None = None
    next_fetch, seen, kinds = t0, False, Counter[str]()
    while t - t0 < 12 * 3600:
        listed = [f for f in await get("/livescores?include=runs") if str(f["id"]) == fid]
        if listed:
            watch, verdict = judge(watch, sighting(listed[0], listed=True), now=t, wall=t, rule=rule)
            kinds[verdict.kind] += 1
        elif t >= next_fetch:
            fixture = await get(f"/fixtures/{fid}?include=runs")
            watch, verdict = judge(watch, sighting(fixture, listed=False), now=t, wall=t, rule=rule)
            kinds[verdict.kind] += 1
            next_fetch = t + (verdict.retry_in_s or 30.0)
            if fixture["status"] == "Finished":
                return kinds
        else:
            verdict = None
        seen = seen or (verdict is not None and verdict.kind == "play")
        t += 1800.0 if seen else 5.0  # once it has shown play every look does: sample the rest
    raise AssertionError(f"{tape.fixture_id}: no final status within 12 h")


SAMPLE = [0, 180, 338, 364]  # across the year, with the end of it (schedules after TODAY)


@pytest.mark.parametrize("seed", SAMPLE)
async def test_synth_matches_are_never_released_whatever_the_replay_clock(seed: int) -> None:
    tape = synthesise("T20", seed)
    unrelated = await replay_looks(tape, TODAY)
    assert unrelated["release"] == 0 and unrelated["suspect"] > 0 and unrelated["play"] > 0, unrelated
    aligned = await replay_looks(tape, tape.starting_at.timestamp() - 120.0)
    assert aligned["release"] == 0 and aligned["suspect"] == 0, aligned


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["T20", "T10", "ODI"])
async def test_every_synth_seed_of_a_year_is_never_released(fmt: str) -> None:
    """All 365 seeds (one per day of the year's schedules), the replay clock unrelated to the schedule."""
    released = [seed for seed in range(365) if (await replay_looks(synthesise(fmt, seed), TODAY))["release"]]
    assert released == []


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
