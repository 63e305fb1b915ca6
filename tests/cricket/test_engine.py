"""Detector definitions, filters and the tick contract, each on a small scripted match."""

from __future__ import annotations

import json
from dataclasses import replace

from daemon.cricket import payloads
from daemon.cricket.engine import process_tick
from daemon.cricket.settings import EngineSettings
from daemon.cricket.snapshot import snapshot_from_fixture
from tests.cricket.match_script import Script


def started(**kw: object) -> Script:
    s = Script(**kw)  # type: ignore[arg-type]
    s.tick()  # the pre-match tick: what follows is news
    return s


def all_types(s: Script) -> list[str]:
    return [e.type for r in s.results for e in r.events]


# ---- Tier1: hat-tricks -------------------------------------------------------------------------------
def test_hattrick_spans_overs_and_another_bowlers_over_between() -> None:
    s = started()
    for code in "0 0 0 0 W".split():
        s.ball(code, 201)
        s.tick()
    s.ball("W", 201)
    assert s.types(s.tick()) == ["wicket", "on_hattrick", "maiden"]  # a double-wicket maiden
    s.balls_of("0 0 0 0 0 1", bowler=202)
    s.tick()
    s.ball("B", 201)
    result = s.tick()
    assert "hattrick" in s.types(result)
    assert result.best is not None and result.best.type == "hattrick" and result.best.alert_worthy


def test_a_run_out_between_two_wickets_breaks_the_hattrick() -> None:
    s = started()
    for code in ("W", "RO", "W", "W"):
        s.ball(code, 201)
        s.tick()
    types = all_types(s)
    assert types.count("wicket") == 4
    assert "hattrick" not in types
    assert types.count("on_hattrick") == 1  # only after the last two, which are both the bowler's


def test_a_wide_between_two_wickets_does_not_break_the_sequence() -> None:
    s = started()
    for code in ("W", "wd", "W"):
        s.ball(code, 201)
        s.tick()
    assert "on_hattrick" in all_types(s)


def test_on_hattrick_is_stale_once_the_bowler_has_bowled_again_in_the_same_burst() -> None:
    s = started()
    s.balls_of("W W 0")
    s.tick()
    types = all_types(s)
    assert types.count("wicket") == 2 and "on_hattrick" not in types


# ---- Tier1: maidens, sixes, fours ------------------------------------------------------------------------
def test_maiden_counts_the_bowlers_runs_only() -> None:
    s = started()
    s.balls_of("0 1lb 0 0 1b 0")
    s.tick()
    assert "maiden" in s.types()
    s.balls_of("0 0 wd 0 0 0 0", bowler=202)
    s.tick()
    assert "maiden" not in s.types()  # a wide is charged to the bowler


def test_an_over_shared_by_two_bowlers_is_no_ones_maiden() -> None:
    s = started()
    s.balls_of("0 0 0", bowler=201)
    s.balls_of("0 0 0", bowler=202)
    s.tick()
    assert "maiden" not in all_types(s)


def test_consecutive_sixes_are_by_one_batter_off_consecutive_balls_he_faced() -> None:
    s = started(settings=EngineSettings(cooldowns_s={"six": 0}))
    s.ball("6")
    s.tick()
    s.ball("wd")
    s.ball("6")
    result = s.tick()
    assert [e.type for e in result.events] == ["consecutive_sixes"]  # the plain six is stale beside it
    assert result.events[0].subject.endswith(":2")
    s.ball("1")  # strike changes
    s.ball("6")  # the other batter: no run of sixes
    s.tick()
    assert s.types() == ["six"]


def test_fours_and_sixes_are_bat_boundaries_only() -> None:
    s = started()
    s.ball("4b")
    s.tick()
    assert s.types() == []
    s.ball("4")
    s.tick()
    assert s.types() == ["four"]


# ---- Tier0 ------------------------------------------------------------------------------------------------
def test_a_burst_of_balls_between_ticks_loses_no_event_and_headlines_the_wicket() -> None:
    s = started(settings=EngineSettings(cooldowns_s={"four": 0, "six": 0}))
    s.balls_of("6 0 4 W")
    result = s.tick()
    assert [e.type for e in result.events] == ["six", "four", "wicket"]
    assert result.best is not None and result.best.type == "wicket"
    body = json.loads(
        payloads.update_payload(
            result.display["neutral"], timestamp=result.timestamp, event=result.best, events=result.events
        )
    )
    assert [i["type"] for i in body["aps"]["content-state"]["events"]] == ["wicket", "six", "four"]
    assert body["aps"]["alert"]["title"].startswith("WICKET!")


def test_fifty_and_nineties_are_stale_when_the_batter_reaches_a_hundred_in_one_tick() -> None:
    s = started()
    for _ in range(4):  # 31 an over, and the single off the last ball keeps him on strike: 124
        s.balls_of("6 6 6 6 6 1")
    result = s.tick()
    types = [e.type for e in result.events]
    assert "hundred" in types and "fifty" not in types and "batsman_on_90s" not in types


def test_milestones_cross_once_each() -> None:
    s = started()
    for code in "4 4 4 4 4 1 4 4 4 4 4 1 4 4 1 4".split():  # the single ending an over keeps him on strike
        s.ball(code)
        s.tick()
    fifties = [e for r in s.results for e in r.events if e.type == "fifty"]
    assert len(fifties) == 1
    assert fifties[0].over == "2.2" and fifties[0].text == "50 for H Bat1: 50 (14)"


def test_batsman_on_fire_is_thirty_at_a_strike_rate_of_two_hundred_once() -> None:
    s = started(settings=EngineSettings(cooldowns_s={"four": 0}))
    for code in "4 4 4 4 4 1 4 4 4 4 1".split():
        s.ball(code)
        s.tick()
    fired = [e for r in s.results for e in r.events if e.type == "batsman_on_fire"]
    assert [e.text for e in fired] == ["H Bat1 on fire: 33 (9)"]


def test_bowler_on_fire_is_his_third_wicket_and_each_after() -> None:
    s = started()
    for code in "W 0 W 0 W 0 W".split():
        s.ball(code, 203)
        s.tick()
    subjects = [e.subject for r in s.results for e in r.events if e.type == "bowler_on_fire"]
    assert subjects == ["S1:203:3", "S1:203:4"]


def test_new_batsman_after_a_wicket_never_for_the_openers() -> None:
    s = started()
    s.ball("1")
    s.tick()
    assert "new_batsman" not in s.types()
    s.ball("W")
    s.tick()
    assert s.types() == ["wicket"]
    s.ball("0")  # the new batter faces: now he is at the crease in the feed
    assert [(e.type, e.subject) for e in s.tick().events] == [("new_batsman", "S1:103")]


def test_new_batsman_is_stale_once_he_has_faced_three_balls() -> None:
    s = started()
    s.balls_of("W 0 0 0")  # the new batter faces three dots before the next poll
    s.tick()
    assert "new_batsman" not in s.types() and "wicket" in s.types()


# ---- corrections, deletions, wickets exactly once -----------------------------------------------------
def test_a_corrected_ball_does_not_produce_a_phantom_event() -> None:
    s = started()
    four = s.ball("4")
    s.tick()
    assert s.types() == ["four"]
    s.correct(four, "5wd")
    s.ball("0")
    result = s.tick()
    assert result.events == ()
    assert result.display_changed  # the score did change


def test_a_deleted_ball_does_not_produce_an_event() -> None:
    s = started()
    s.ball("1")
    six = s.ball("6")
    s.tick()
    s.delete(six)
    assert s.tick().events == ()


def test_a_catch_given_late_is_reported_once_with_its_ball() -> None:
    s = started()
    dot = s.ball("0")
    s.tick()
    s.correct(dot, "W")
    result = s.tick()
    assert [(e.type, e.ball_id) for e in result.events] == [("wicket", str(dot["id"]))]
    assert s.tick().events == ()


def test_an_overturned_wicket_is_withdrawn_and_the_batters_real_dismissal_is_reported() -> None:
    s = started()
    wicket = s.ball("W")
    s.tick()
    assert s.types() == ["wicket"]
    s.correct(wicket, "0")
    s.crease[s.crease.index(103)] = 101  # he was not out after all
    s.next_batter = 103
    s.tick()
    assert s.state is not None and "S1:101" not in s.state.reported_wickets
    s.balls_of("1 W 0")  # 102 is out now, 103 comes in and faces
    s.tick()
    s.balls_of("1 W")  # 103 takes a single, and 101 is out for real
    s.tick()
    wickets = [e.subject for r in s.results for e in r.events if e.type == "wicket"]
    assert wickets.count("S1:101") == 2  # the withdrawn one, then the real one


def test_score_feed_reports_wickets_from_the_batting_table() -> None:
    s = started(marquee=False)
    s.balls_of("1 W 0")
    result = s.tick()
    assert [(e.type, e.subject, e.ball_id) for e in result.events if e.type == "wicket"] == [
        ("wicket", "S1:102", None)
    ]
    assert not any(e.type in ("four", "six", "maiden") for e in result.events)


def test_first_tick_mid_innings_reports_no_history() -> None:
    s = Script()
    s.balls_of("W 4 W 6 4 W 0 1")
    first = s.tick()
    assert first.events == () and first.display_changed
    assert s.state is not None and len(s.state.reported_wickets) == 3
    s.ball("W")
    assert [e.type for e in s.tick().events if e.type == "wicket"] == ["wicket"]


def test_a_first_look_at_a_match_in_its_first_over_reports_its_balls_as_news() -> None:
    # the owner's first look came after the first ball (a pre-match look held up by the feed): nobody ticked
    # the match before, so nobody alerted for it, and a first-ball wicket is news to every follower
    s = Script()
    s.balls_of("W 1")
    assert "wicket" in s.types(s.tick())
    s.ball("W")
    assert s.types(s.tick()).count("wicket") == 1  # the next wicket once, the first not again


def test_the_first_over_rule_stops_at_its_bound_and_can_be_switched_off() -> None:
    over = Script()
    over.balls_of("W 1 0 0 0 0 1")  # seven legal balls: past the first over, history
    assert over.tick().events == ()
    off = Script(settings=EngineSettings(first_look_news_balls=0))
    off.balls_of("W")
    assert off.tick().events == ()


def test_balls_appearing_late_for_a_match_with_play_are_history() -> None:
    s = started(marquee=False)
    s.balls_of("6 6 W 4")
    s.tick()
    s.marquee = True
    result = s.tick()
    assert result.events == ()


# ---- innings and match end ---------------------------------------------------------------------------
def test_innings_end_when_the_overs_are_used_and_match_end_for_the_chase() -> None:
    s = started(overs=1, settings=EngineSettings(cooldowns_s={"four": 0}))
    s.balls_of("1 4 0 0 1 0")
    result = s.tick()
    assert "innings_end" in [e.type for e in result.events]
    assert result.best is not None and result.best.type == "innings_end"
    brk = s.tick("Innings Break")
    assert brk.events == () and brk.display["neutral"]["phase"] == "innings_break"
    assert brk.display["neutral"]["subtitle"] == "Innings break · AWY need 7 to win"
    # The away side never batted: the scores do not corroborate the result, so the end is believed once
    # seen on confirm_polls ticks spanning confirm_s.
    for wait in (0.0, s.settings.confirm_s / 2):
        pending = s.tick("Finished", winner=1, note="Home won by 6 runs", now=s.clock + wait)
        assert pending.end_pending and not pending.ended and pending.events == ()
    last = s.tick("Finished", winner=1, note="Home won by 6 runs", now=s.clock + s.settings.confirm_s)
    assert [e.type for e in last.events] == ["match_end"]
    assert last.ended and last.phase == "completed"
    assert last.display["neutral"]["result"] == "Home won by 6 runs"
    again = s.tick("Finished", winner=1, note="Home won by 6 runs", now=s.clock + s.settings.confirm_s)
    assert not again.ended and again.events == ()


def test_innings_end_when_the_status_moves_on_before_any_new_row_or_ball() -> None:
    s = started(overs=2)
    s.balls_of("1 0 W 0 0 0")  # 1.0 overs of 2: not over on the overs
    s.tick()
    fx = s.fixture("2nd Innings")
    result = process_tick(s.state, snapshot_from_fixture(fx), now=0, marquee=True, settings=s.settings)
    assert [e.type for e in result.events] == ["innings_end"]
    assert result.events[0].subject == "S1" and result.events[0].body == "HOM 1/1 (1 ov). AWY need 2 to win"


# ---- cooldowns --------------------------------------------------------------------------------------
def test_an_event_key_does_not_repeat_inside_its_cooldown_and_may_after_it() -> None:
    s = started(settings=EngineSettings(cooldowns_s={"four": 100}))
    s.ball("4", gap=40)
    s.tick()
    s.ball("4", gap=40)  # same batter 40 s later: muted
    s.tick()
    s.ball("4", gap=80)  # 120 s after the first: fires
    s.tick()
    assert [len(r.events) for r in s.results[1:]] == [1, 0, 1]


def test_cooldowns_are_pruned_once_expired() -> None:
    s = started(settings=EngineSettings(cooldowns_s={"four": 30}))
    s.ball("4")
    s.tick()
    assert s.state is not None and "four:S1:101" in s.state.cooldowns
    s.ball("0", gap=60)
    s.tick()
    assert "four:S1:101" not in s.state.cooldowns


# ---- the tick contract --------------------------------------------------------------------------------
def test_rerunning_a_tick_from_the_persisted_state_gives_the_same_events_and_timestamp() -> None:
    s = started()
    s.balls_of("1 W 4")
    prev = s.state
    snap = snapshot_from_fixture(s.fixture())
    a = process_tick(prev, snap, now=1.0, marquee=True, settings=s.settings)
    b = process_tick(prev, snap, now=99999.0, marquee=True, settings=s.settings)
    assert (
        a.events == b.events and a.timestamp == b.timestamp and a.state == b.state and a.display == b.display
    )


def test_a_repeated_snapshot_is_a_fixed_point() -> None:
    s = started()
    s.balls_of("1 W 4 6")
    first = s.tick()
    second = s.tick()
    assert first.events and second.events == ()
    assert not second.display_changed
    assert second.state == first.state and second.timestamp == first.timestamp


def test_timestamps_increase_strictly_across_ticks_whose_display_changed() -> None:
    s = started()
    stamps = []
    for code in "1 0 4 W 0 6".split():
        s.ball(code, gap=0)  # the feed stamps several balls with one second
        stamps.append(s.tick().timestamp)
    assert all(b > a for a, b in zip(stamps, stamps[1:], strict=False))


def test_the_timestamp_falls_back_to_now_only_without_feed_time() -> None:
    s = Script()
    fx = s.fixture()
    for key in ("runs", "batting", "bowling", "balls"):
        fx[key] = []
    snap = snapshot_from_fixture(fx)
    assert snap.updated_at is None
    result = process_tick(None, snap, now=1234.9, marquee=True, settings=s.settings)
    assert result.timestamp == 1234


def test_display_unchanged_when_nothing_shown_changed() -> None:
    s = started()
    s.ball("1")
    s.tick()
    snap = snapshot_from_fixture(s.fixture())
    later = process_tick(
        s.state,
        replace(snap, updated_at=(snap.updated_at or 0) + 5),
        now=0,
        marquee=True,
        settings=s.settings,
    )
    assert not later.display_changed and later.events == ()
