"""Golden test: the real fixture 71344 (PAK v SL T20I) replayed ball by ball through the engine.

The expected list was written by hand from the ball-by-ball record (spec/sportmonks-api.md; the fixture's
balls printed in id order), the way a scorer would call the SL innings and the start of the PAK chase:

- wickets: Kusal Mendis 0.5, Kamil Mishara 3.3, Kamindu Mendis 9.4 (the feed's batsmanout_id wrongly names
  Mishara; the batting table's fall of wicket says Kamindu), Arachchige 10.1, Shanaka 15.5, Wellalage 18.3
  (bowled), Udara 18.6 (91), Theekshana 19.1 (c & b Raza Ullah);
- new batters after each wicket (Chameera is at the crease for 19.1, Malinga for 19.2); the openers of
  either side are not "new";
- Udara's fifty (11.5, 1 run from 49) and his 90s (18.5, a four from 87);
- Naseem Shah's third wicket (18.6) makes him "on fire" (3 wickets);
- no maiden (every over cost the bowler a run), no hat-trick (18.6 and 19.1 are different bowlers), no
  consecutive sixes (13.6 Shanaka and 14.1 Udara are different batters);
- the innings ends at 19.6 (20 overs): SL 182/8; then the PAK openers' boundaries.
Boundaries: all 22 fours and sixes of the feed, except Kamindu Mendis's 5.5 four, which the feed posted 4
seconds after his 5.4 four: the documented per-batter boundary cooldown (60 s of feed time) mutes it. Every
other boundary of a batter came more than a minute after his previous one (checked by hand on the stamps).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from daemon.cricket.engine import process_tick
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import snapshot_from_fixture
from tests.cricket.fixture_builder import truncated

# (over, type, who) in the order the engine reports them, written by hand.
EXPECTED: list[tuple[str, str, str]] = [
    ("0.5", "wicket", "Kusal Mendis"),
    ("0.6", "new_batsman", "K Mishara"),
    ("2.4", "four", "K Mishara"),
    ("3.3", "wicket", "K Mishara"),
    ("3.4", "new_batsman", "Kamindu Mendis"),
    ("3.5", "four", "Kamindu Mendis"),
    ("4.3", "four", "L Udara"),
    ("4.6", "four", "L Udara"),
    ("5.4", "four", "Kamindu Mendis"),
    ("5.5", "four", "Kamindu Mendis"),
    ("7.2", "four", "L Udara"),
    ("7.4", "four", "L Udara"),
    ("8.4", "four", "Kamindu Mendis"),
    ("9.4", "wicket", "Kamindu Mendis"),
    ("9.5", "new_batsman", "S Arachchige"),
    ("9.6", "four", "L Udara"),
    ("10.1", "wicket", "S Arachchige"),
    ("10.2", "new_batsman", "D Shanaka"),
    ("11.1", "four", "L Udara"),
    ("11.5", "fifty", "L Udara"),
    ("12.1", "four", "L Udara"),
    ("12.6", "four", "L Udara"),
    ("13.6", "six", "D Shanaka"),
    ("14.1", "six", "L Udara"),
    ("14.6", "four", "L Udara"),
    ("15.4", "six", "D Shanaka"),
    ("15.5", "wicket", "D Shanaka"),
    ("15.6", "new_batsman", "D Wellalage"),
    ("17.4", "four", "L Udara"),
    ("18.3", "wicket", "D Wellalage"),
    ("18.4", "new_batsman", "M Theekshana"),
    ("18.5", "batsman_on_90s", "L Udara"),
    ("18.5", "four", "L Udara"),
    ("18.6", "wicket", "L Udara"),
    ("18.6", "bowler_on_fire", "N Shah"),
    ("19.1", "wicket", "M Theekshana"),
    ("19.1", "new_batsman", "D Chameera"),
    ("19.2", "new_batsman", "E Malinga"),
    ("19.4", "four", "D Chameera"),
    ("20", "innings_end", "SL 182/8"),
    ("0.5", "four", "S Farhan"),
    ("1.2", "four", "F Zaman"),
]
# The boundary the per-batter cooldown mutes (13:34:03, four seconds after the same batter's 13:33:59 four).
MUTED = {("5.5", "four", "Kamindu Mendis")}


def _who(event: Any, snap: Any) -> str:
    if event.type == "innings_end":
        return event.text.split(": ", 1)[1].split(" (")[0]
    return snap.name(event.player_id)


def _replay(raw: dict[str, Any], settings: EngineSettings) -> list[tuple[str, str, str]]:
    n_s1 = sum(1 for b in raw["balls"] if b["scoreboard"] == "S1")
    state = None
    got: list[tuple[str, str, str]] = []
    for n in range(0, len(raw["balls"]) + 1):
        statuses: list[str | None] = ["NS"] if n == 0 else [None]
        if n == n_s1:
            statuses.append("Innings Break")
        for status in statuses:
            snap = snapshot_from_fixture(truncated(raw, n, status=status))
            result = process_tick(state, snap, now=0.0, marquee=True, settings=settings)
            state = result.state
            got += [(e.over or "", e.type, _who(e, snap)) for e in result.events]
    return got


def test_real_fixture_ball_by_ball_gives_the_events_a_scorer_would_name(real_fixture_path: Path) -> None:
    raw = json.loads(real_fixture_path.read_text())["data"]
    got = _replay(raw, EngineSettings())
    expected = [e for e in EXPECTED if e not in MUTED]
    assert got == expected


def test_without_boundary_cooldowns_every_boundary_of_the_feed_is_reported(real_fixture_path: Path) -> None:
    raw = json.loads(real_fixture_path.read_text())["data"]
    got = _replay(raw, EngineSettings(cooldowns_s={"four": 0, "six": 0}))
    boundaries = [(o, t, w) for o, t, w in got if t in ("four", "six")]
    fours_and_sixes = sum(1 for b in raw["balls"] if b["score"]["four"] or b["score"]["six"])
    assert len(boundaries) == fours_and_sixes == 19 + 3
    assert [e for e in got if e[1] not in ("four", "six")] == [
        e for e in EXPECTED if e[1] not in ("four", "six")
    ]
