"""A match ends only when the end is confirmed; a score going back further than a correction is doubted.

Pure: scripted fixtures through ``process_tick``, the state carried as the match actor carries it (the record
round trip, the doubts in memory). A pushed tick is one with ``display_changed`` or events; a written tick is
one whose state differs from the previous one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.cricket.engine import TickResult, process_tick
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import snapshot_from_fixture
from daemon.cricket.state import MatchState
from daemon.replay.offline import replay_events
from daemon.replay.synth import synthesise
from tests.cricket.fixture_builder import make_ball, rebuild, score_obj, truncated
from tests.cricket.match_script import Script, carried, iso

CONFIRM = EngineSettings(confirm_polls=3, confirm_s=30.0, cooldowns_s={"four": 0, "six": 0})


def live_match(overs: int = 20) -> Script:
    s = Script(settings=CONFIRM, overs=overs)
    s.tick()
    s.balls_of("1 0 4 0")
    s.tick()
    return s


def pushed(result: TickResult) -> bool:
    return result.display_changed or bool(result.events)


def glitch(s: Script, status: str, *, at: float, **fields: Any) -> TickResult:
    """One tick of the current balls with ``status`` (and fixture fields) as the feed shows them at ``at``."""
    fx = s.fixture(status)
    fx.update(fields)
    before = s.state
    result = process_tick(before, snapshot_from_fixture(fx), now=at, marquee=True, settings=s.settings)
    s.state = carried(result)
    s.results.append(result)
    return result


# ---- the end --------------------------------------------------------------------------------------------
def test_a_final_status_that_flips_back_pushes_nothing_and_changes_no_state() -> None:
    s = live_match()
    before = s.state
    for status in ("Finished", "Aban."):
        for i in range(2):
            result = glitch(s, status, at=s.clock + 2 * i, note="Target 9 runs")
            assert result.end_pending and not result.ended and result.phase == "live"
            assert not pushed(result) and result.state == before  # no push, nothing to write
        back = glitch(s, "1st Innings", at=s.clock + 5)
        assert back.end_withdrawn and not back.end_pending and not pushed(back)
        assert back.state == before and back.state.end_doubt is None


def test_a_final_status_is_believed_on_consecutive_polls_spanning_the_confirm_time() -> None:
    s = live_match()
    t0 = s.clock
    assert glitch(s, "Finished", at=t0).end_pending
    assert glitch(s, "Finished", at=t0 + 1).end_pending
    assert glitch(s, "Finished", at=t0 + 2).end_pending  # three polls, but only 2 s
    end = glitch(s, "Finished", at=t0 + 30)
    assert end.ended and end.phase == "completed" and [e.type for e in end.events] == ["match_end"]


def test_the_confirm_time_alone_is_not_enough_without_consecutive_polls() -> None:
    s = live_match()
    t0 = s.clock
    assert glitch(s, "Finished", at=t0).end_pending
    assert glitch(s, "Finished", at=t0 + 100).end_pending  # two polls only
    assert glitch(s, "1st Innings", at=t0 + 101).end_withdrawn
    assert glitch(s, "Finished", at=t0 + 200).end_pending  # the count starts again
    assert glitch(s, "Finished", at=t0 + 230).end_pending
    assert glitch(s, "Finished", at=t0 + 231).ended


def test_balls_bowled_while_an_end_is_unconfirmed_are_reported_as_live() -> None:
    s = live_match()
    s.ball("6")
    result = glitch(s, "Finished", at=s.clock)
    assert result.end_pending and "six" in [e.type for e in result.events]
    assert result.display["neutral"]["phase"] == "live" and result.display["neutral"]["result"] is None


def chase(s: Script, codes: str) -> None:
    """Balls of the second innings (team 2 batting, scoreboard S2)."""
    for n, code in enumerate(codes.split()):
        s.clock += 40
        s.next_id += 7
        over, ball = divmod(n, 6)
        s.balls.append(
            make_ball(
                s.next_id,
                f"{over}.{ball + 1}",
                code,
                batsman=201 + n % 2,
                bowler=101,
                crease=(201, 202),
                team=2,
                scoreboard="S2",
                stamp=iso(s.clock),
            )
        )


def test_an_end_the_fixture_corroborates_is_believed_at_once() -> None:
    s = Script(settings=CONFIRM, overs=1)
    s.tick()
    s.balls_of("1 0 0 0 0 0")  # S1: 1 run off the over
    s.tick()
    chase(s, "4")  # the target of 2 reached off the first ball
    end = glitch(s, "Finished", at=s.clock, winner_team_id=2, note="Away won by 10 wickets")
    assert end.ended and end.best is not None and end.best.type == "match_end"
    assert end.display["neutral"]["result"] == "Away won by 10 wickets"


def test_a_result_the_scores_contradict_is_not_corroboration() -> None:
    s = Script(settings=CONFIRM, overs=1)
    s.tick()
    s.balls_of("1 0 0 0 0 0")
    s.tick()
    chase(s, "0")  # 0/0 after one ball: nothing decided
    result = glitch(s, "Finished", at=s.clock, winner_team_id=1, note="Home won by 1 run")
    assert result.end_pending and not result.ended


def test_an_abandonment_the_note_states_is_believed_at_once_and_a_bare_one_is_not() -> None:
    s = live_match()
    bare = glitch(s, "Aban.", at=s.clock, note="Target 183 runs")
    assert bare.end_pending
    stated = glitch(s, "Aban.", at=s.clock + 1, note="Match abandoned due to rain")
    assert stated.ended and stated.phase == "abandoned"


def test_a_match_ended_wrongly_and_taken_again_reports_its_real_end() -> None:
    s = live_match()
    t0 = s.clock
    for wait in (0, 15, 30):
        wrong = glitch(s, "Finished", at=t0 + wait)
    assert wrong.ended and s.state is not None and s.state.match_phase == "completed"
    s.ball("4")
    again = s.tick()  # the feed shows it live: the new owner carries on
    assert again.phase == "live" and not again.ended and "four" in [e.type for e in again.events]
    assert not any(k.startswith("match_end:") for k in again.state.cooldowns)
    t1 = s.clock
    for wait in (0, 15, 30):
        real = glitch(s, "Finished", at=t1 + wait)
    assert real.ended and [e.type for e in real.events] == ["match_end"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["Finished", "Aban."]), st.integers(1, 2), st.booleans()), max_size=6)
)
def test_glitches_shorter_than_the_confirmation_never_end_the_match_or_change_what_is_written(
    glitches: list[tuple[str, int, bool]],
) -> None:
    clean, glitched = live_match(), live_match()
    for status, polls, with_ball in glitches:
        if with_ball:
            for s in (clean, glitched):
                s.ball("1")
        for i in range(polls):
            result = glitch(glitched, status, at=glitched.clock + i)
            assert not result.ended and result.phase == "live"
        back = glitched.tick()
        assert not back.ended
        clean.tick()
        assert glitched.state is not None and clean.state is not None
        assert glitched.state.to_item() == clean.state.to_item()


# ---- scores going back ------------------------------------------------------------------------------------
def test_a_correction_sized_drop_is_taken_and_a_bigger_one_is_skipped_until_it_persists() -> None:
    s = live_match()
    s.balls_of("6 4 6")
    s.tick()
    good = s.state
    assert good is not None and good.score_for("S1") is not None
    fx = s.fixture()
    fx["runs"][0]["score"] -= 4  # a boundary taken back: a correction, stamped when the scorers made it
    fx["runs"][0]["updated_at"] = iso(s.clock + 5)
    assert (
        process_tick(good, snapshot_from_fixture(fx), now=s.clock, marquee=True, settings=s.settings).skipped
        is None
    )
    fx["runs"][0]["score"] = 0  # 21 runs gone at once
    t0 = s.clock
    for wait in (0, 1, 2):
        result = glitch_fixture(s, fx, at=t0 + wait)
        assert result.skipped and "runs went back" in result.skipped
        assert not pushed(result) and result.state == good
    taken = glitch_fixture(s, fx, at=t0 + 30)
    assert taken.skipped is None and taken.state.score_for("S1").runs == 0  # type: ignore[union-attr]


def test_wickets_and_balls_going_back_too_far_are_skipped() -> None:
    s = live_match()
    s.balls_of("W 0 W 0 0 0 0 0")
    s.tick()
    fx = s.fixture()
    fx["runs"][0]["wickets"] = 0
    fx["runs"][0]["updated_at"] = iso(s.clock + 5)
    assert "wickets went back" in (glitch_fixture(s, fx, at=s.clock).skipped or "")
    fx = s.fixture()
    fx["runs"][0]["overs"] = 0.1
    fx["runs"][0]["updated_at"] = iso(s.clock + 5)
    assert "legal balls went back" in (glitch_fixture(s, fx, at=s.clock).skipped or "")


def test_a_score_going_back_with_no_newer_stamp_is_older_content_and_never_counts_as_a_correction() -> None:
    """The same drop stamped no later than the state's fixture is what an answer that lags shows: behind,
    not a doubt to confirm, however long it persists."""
    s = live_match()
    s.balls_of("6 4 6")
    s.tick()
    good = s.state
    fx = s.fixture()
    fx["runs"][0]["score"] = 0
    for wait in (0, 1, 2, 30, 60):
        result = glitch_fixture(s, fx, at=s.clock + wait)
        assert result.behind is not None and result.skipped is None and not pushed(result)
        assert result.state == good


def glitch_fixture(s: Script, fx: dict[str, Any], *, at: float) -> TickResult:
    result = process_tick(s.state, snapshot_from_fixture(fx), now=at, marquee=True, settings=s.settings)
    s.state = result.state
    return result


def test_the_doubts_are_not_part_of_the_record() -> None:
    s = live_match()
    glitch(s, "Finished", at=s.clock)
    assert s.state is not None and s.state.end_doubt is not None
    item = s.state.to_item()
    assert MatchState.from_item(item).end_doubt is None and "endDoubt" not in item
    assert rebuild(s.base, s.balls)["status"] == "1st Innings"


# ---- a final status the balls contradict ---------------------------------------------------------------------
def test_a_wrong_final_status_while_balls_keep_coming_never_ends_the_match_however_long_it_lasts() -> None:
    """SportMonks showed "Finished" for 40 s while new balls kept arriving in the same answers: each new ball
    starts the confirmation again, so the match goes on and every ball is reported."""
    s = live_match()
    fours = [e.type for r in s.results for e in r.events].count("four")
    t0 = s.clock
    for wait in range(0, 41, 2):  # a poll every 2 s for 40 s, a ball every 10 s
        if wait and wait % 10 == 0:
            s.ball("4", gap=0)
        result = glitch(s, "Finished", at=t0 + wait)
        assert result.end_pending and not result.ended and result.phase == "live"
    assert [e.type for r in s.results for e in r.events].count("four") == fours + 4
    back = glitch(s, "1st Innings", at=t0 + 42)
    assert back.end_withdrawn and not back.ended


def test_a_final_status_held_with_no_new_ball_is_still_believed_after_the_confirmation() -> None:
    s = live_match()
    s.ball("1")
    t0 = s.clock
    glitch(s, "Finished", at=t0)
    s.ball("1", gap=0)  # a ball in the second answer: the count starts from here
    glitch(s, "Finished", at=t0 + 10)
    assert glitch(s, "Finished", at=t0 + 20).end_pending
    assert glitch(s, "Finished", at=t0 + 39).end_pending  # 30 s after the first answer, 29 after the ball
    assert glitch(s, "Finished", at=t0 + 40).ended


# ---- balls from nowhere ------------------------------------------------------------------------------------
def ball_from_the_future(s: Script, *, overs_ahead: int = 3, new_id: int = 99) -> dict[str, Any]:
    """The newest ball copied ``overs_ahead`` overs on, made a wicket, with a new id (a rewriting glitch)."""
    newest = max(s.balls, key=lambda b: b["id"])
    fake = make_ball(
        newest["id"] + new_id,
        f"{float(newest['ball']) + overs_ahead:.1f}",
        "W",
        batsman=newest["batsman_id"],
        bowler=newest["bowler_id"],
        crease=(newest["batsman_one_on_creeze_id"], newest["batsman_two_on_creeze_id"]),
        stamp=newest["updated_at"],
    )
    return fake


def forged_tick(s: Script, extra: list[dict[str, Any]], *, at: float) -> TickResult:
    fx = s.fixture()
    fx["balls"] = sorted([*fx["balls"], *extra], key=lambda b: b["id"])
    result = process_tick(s.state, snapshot_from_fixture(fx), now=at, marquee=True, settings=s.settings)
    s.state = carried(result)
    s.results.append(result)
    return result


def test_a_ball_from_the_future_sends_no_wicket_and_is_forgotten_when_it_goes() -> None:
    s = live_match()
    s.balls_of("1 0")
    s.tick()
    before = s.state
    fake = ball_from_the_future(s)
    t0 = s.clock
    for wait in range(0, 6):  # in every answer for 5 s
        result = forged_tick(s, [fake], at=t0 + wait)
        assert not result.events and not pushed(result), result.events
        assert result.state == before and result.state.ball_doubt is not None
    gone = s.tick(now=t0 + 6)
    assert not gone.events and gone.state.ball_doubt is None
    s.ball("W")  # the real next ball is a wicket: reported, once
    assert s.types(s.tick()) == ["wicket"]


@pytest.mark.parametrize("pre_match_look", [True, False], ids=["after-a-pre-match-look", "first-look"])
def test_a_ball_from_the_future_among_a_matchs_first_balls_is_held(pre_match_look: bool) -> None:
    """The first balls a match shows (no ball stands yet) must lead from its first delivery: a copy three
    overs ahead in the same answer is held, after a pre-match look and at a first look of a match just begun
    alike, and the real balls around it still count."""
    s = Script(settings=CONFIRM)
    if pre_match_look:
        s.tick()
    s.balls_of("1 4")
    fake = ball_from_the_future(s)
    result = forged_tick(s, [fake], at=s.clock)
    assert "wicket" not in s.types(result) and "four" in s.types(result)
    assert result.state.ball_doubt is not None and fake["id"] not in {b.id for b in result.state.last30_balls}
    gone = s.tick(now=s.clock + 1)
    assert not gone.events and gone.state.ball_doubt is None


def test_a_matchs_first_balls_that_lead_from_its_first_delivery_are_never_held() -> None:
    s = Script(settings=CONFIRM)
    s.tick()
    s.balls_of("wd 1 0 W")
    result = s.tick()
    assert result.state.ball_doubt is None and "wicket" in s.types(result)


def test_a_new_id_for_a_legal_ball_that_stands_is_held() -> None:
    s = live_match()
    s.balls_of("1 0")
    s.tick()
    newest = max(s.balls, key=lambda b: b["id"])
    copy = dict(
        newest, id=newest["id"] + 3, score_id=54, score=score_obj("W"), batsmanout_id=newest["batsman_id"]
    )
    result = forged_tick(s, [copy], at=s.clock + 1)
    assert not result.events and result.state.ball_doubt is not None


def test_a_held_ball_that_stands_for_the_confirmation_is_believed() -> None:
    """A gap SportMonks never fills: after confirm_polls answers spanning confirm_s the ball is taken."""
    s = live_match()
    s.balls_of("1 0")
    s.tick()
    fake = ball_from_the_future(s, overs_ahead=2)
    t0 = s.clock
    assert not forged_tick(s, [fake], at=t0).events
    assert not forged_tick(s, [fake], at=t0 + 15).events
    assert not forged_tick(s, [fake], at=t0 + 29).events
    taken = forged_tick(s, [fake], at=t0 + 30)
    assert "wicket" in [e.type for e in taken.events] and taken.state.ball_doubt is None


def test_a_burst_of_balls_after_a_stall_is_taken_whole_and_balls_after_a_held_one_still_count() -> None:
    s = live_match()
    s.balls_of("1 0 4 0 0 W 1 1 0 0 0 6")  # two overs at once
    burst = s.tick()
    assert {"wicket", "four", "six"} <= set(s.types(burst)) and burst.state.ball_doubt is None
    fake = ball_from_the_future(s, new_id=1)  # held ...
    s.next_id += 5
    s.ball("W")  # ... while the real next ball, with a higher id, comes in the same answer
    result = forged_tick(s, [fake], at=s.clock)
    assert [e.type for e in result.events if e.type == "wicket"] == ["wicket"]
    assert result.state.ball_doubt is not None and fake["id"] not in {b.id for b in result.state.last30_balls}


def test_extras_repeat_the_number_and_a_new_innings_starts_at_the_first_ball() -> None:
    s = live_match()
    s.balls_of("wd nb 5wd 0 1 0 0 0")  # three extras numbered like the legal ball after them, over ends
    result = s.tick()
    assert result.state.ball_doubt is None and len(result.state.last30_balls) == 12
    s2 = Script(settings=CONFIRM, overs=1)
    s2.tick()
    s2.balls_of("1 0 0 0 0 0")
    s2.tick()
    chase(s2, "W 0")
    second = s2.tick()
    assert second.state.ball_doubt is None and "wicket" in s2.types(second)


@pytest.mark.parametrize(("fmt", "seed"), [("T20", 1), ("T20", 364), ("T10", 5)])
def test_no_ball_of_a_synthesised_match_is_ever_held(fmt: str, seed: int) -> None:
    """Every delivery of a whole match, its extras, corrections and deleted phantoms, polled entry by entry:
    each can follow the one before, so the rule never delays a real ball."""
    tape = synthesise(fmt, seed=seed)
    held = [
        poll.cursor
        for poll, result in replay_events(tape, cadence=tape.ms_per_ball / 1000, marquee=True)
        if result.state.ball_doubt
    ]
    assert held == []


def test_no_ball_of_the_real_match_is_ever_held(real_fixture_path: Path) -> None:
    real = json.loads(real_fixture_path.read_text())["data"]
    state = None
    for n in range(len(real["balls"]) + 1):
        result = process_tick(
            state, snapshot_from_fixture(truncated(real, n)), now=1e9 + n, marquee=True, settings=CONFIRM
        )
        assert result.state.ball_doubt is None, n
        state = result.state
