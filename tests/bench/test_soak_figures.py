"""The soak's fleet figures, from given counts (pure): SportMonks calls per hour for the region and per
instance over the run's window, the region's ratio to a single instance's companion run, and the targets."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from soak import (  # noqa: E402
    _per_slot,
    _stage_buckets,
    cadence_arg,
    endpoint_lag_arg,
    fanout_s,
    fleet_figures,
    main,
    single_instance_args,
    stage_quantiles,
    targets,
    with_single_instance,
)


def test_calls_per_hour_are_counted_over_the_window_for_the_region_and_each_instance() -> None:
    figures = fleet_figures(
        region_calls=200,
        window_s=100.0,
        by_instance={"i1": 10.0, "i0": 190.0},
        cadence_s=0.5,
        single_per_hour=None,
    )
    assert figures["sportmonks_calls_per_hour_region"] == 7200
    assert figures["sportmonks_calls_per_hour_by_instance"] == {"i0": 6840, "i1": 360}
    assert figures["sportmonks_calls_per_hour_one_instance_theory"] == 7200
    assert figures["sportmonks_region_vs_theory"] == 1.0
    assert figures["sportmonks_region_vs_single_instance"] is None
    assert figures["sportmonks_calls_per_hour_region_at_2_5s"] == 1440


def test_an_instances_calls_leave_out_what_its_first_processes_made_before_the_window() -> None:
    # slot i0's first process had made 30 calls when the window opened, then was killed at 80; its
    # successor made 25; slot i1 made nothing in the window
    calls = {("i0", 11): 80.0, ("i0", 12): 25.0, ("i1", 13): 4.0}
    base = {("i0", 11): 30.0, ("i1", 13): 4.0}
    assert _per_slot(calls, base) == {"i0": 75.0, "i1": 0.0}


def _result(**over: Any) -> dict[str, Any]:
    base = {
        "cadence_s": 2.5,
        "kills": 0,
        "lost": 0,
        "duplicate_alerts": 0,
        "lag_s": {"p50": 1.0, "p99": 3.2, "max": 3.3},
        "sportmonks_calls_per_hour_region": 1500,
        "sportmonks_region_vs_single_instance": None,
        "lag_target_s": None,
        "status_flips": 0,
        "balls_withdrawn_unexplained": 0,
        "sportmonks_budget": {"livescores": {"answered": 90, "refused": 0, "limit": 2000}},
    }
    return {**base, **over}


def test_the_region_is_compared_with_the_single_instance_companion_run() -> None:
    single = {
        "tokens": 200,
        "seconds": 300.0,
        "matches_ended": 20,
        "sportmonks_window_s": 280.0,
        "sportmonks_calls_per_hour_region": 1440,
        "sportmonks_requests_by_endpoint": {"livescores": 112},
        "lost": 0,
        "duplicate_alerts": 0,
        "lag_s": {"p99": 2.0},
        "kills": 0,
    }
    out = with_single_instance(_result(kills=14), single)
    assert out["sportmonks_calls_per_hour_single_instance"] == 1440
    assert out["sportmonks_region_vs_single_instance"] == round(1500 / 1440, 3)
    assert out["single_instance_run"]["sportmonks_requests_by_endpoint"] == {"livescores": 112}
    verdict = targets(out)
    assert verdict["region_calls_within_10pct_of_single_instance"] is True
    assert verdict["lost_zero"] and verdict["duplicate_alerts_zero"]
    assert verdict["lag_p99_within_bound"] is None  # with kills the lag target does not apply
    over = with_single_instance(_result(sportmonks_calls_per_hour_region=1600), single)
    assert targets(over)["region_calls_within_10pct_of_single_instance"] is False  # 1.11x


def test_the_targets_say_what_failed() -> None:
    assert targets(_result())["lag_p99_within_bound"] is True
    assert targets(_result(lag_s={"p99": 3.6}))["lag_p99_within_bound"] is False
    assert targets(_result(lag_s={"p99": None}))["lag_p99_within_bound"] is None
    assert targets(_result(lost=3))["lost_zero"] is False
    assert targets(_result(duplicate_alerts=1))["duplicate_alerts_zero"] is False
    assert targets(_result())["region_calls_within_10pct_of_single_instance"] is None  # no companion run
    assert targets(_result(lag_target_s=1.3))["lag_p99_within_bound"] is False  # 3.2 s against 1.3 s
    assert targets(_result(status_flips=2))["status_flips_zero"] is False
    assert targets(_result(balls_withdrawn_unexplained=1))["no_unexplained_ball_withdrawn"] is False
    refused = {"livescores": {"answered": 90, "refused": 4, "limit": 2000}}
    assert targets(_result(sportmonks_budget=refused))["no_call_refused_by_the_plan"] is False
    assert targets(_result())["no_call_refused_by_the_plan"] is True


def test_the_cadence_is_seconds_or_the_plan_and_a_lag_names_its_endpoint() -> None:
    assert cadence_arg("plan") is None and cadence_arg("2.5") == 2.5
    assert endpoint_lag_arg("fixtures:5") == ("fixtures", 5.0)
    for bad in ("nan", "0", "-1", "fast"):
        with pytest.raises(argparse.ArgumentTypeError):
            cadence_arg(bad)
    for bad in ("teams:5", "livescores:inf", "livescores:", "livescores:-2"):
        with pytest.raises(argparse.ArgumentTypeError):
            endpoint_lag_arg(bad)


def test_the_companion_run_is_the_main_run_with_one_instance_no_kills_and_few_tokens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[Any] = []

    def fake_run(fn: Any, args: Any) -> dict[str, Any]:  # records the options each run was given
        seen.append(args)
        return _result(
            kills=args.kill_every and 3,
            sportmonks_calls_per_hour_region=1440 if args.instances == 1 else 1480,
            tokens=args.tokens,
            seconds=10.0,
        )

    monkeypatch.setattr("soak.trio.run", fake_run)
    monkeypatch.setattr("soak.signal.signal", lambda *a: None)  # main's SIGTERM handler: not in pytest
    argv = ["--matches", "20", "--tokens", "200000", "--instances", "3", "--kill-every", "60"]
    assert main([*argv, "--compare-single", "--cadence", "2.5"]) == 0
    main_args, companion = seen
    assert (main_args.instances, companion.instances) == (3, 1)
    assert companion.kill_every == 0.0 and companion.tokens == 200 and companion.matches == 20
    assert companion.cadence == main_args.cadence == 2.5 and companion.duration == main_args.duration
    assert single_instance_args(main_args).tokens == 200
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["sportmonks_region_vs_single_instance"] == round(1480 / 1440, 3)
    assert printed["targets"]["region_calls_within_10pct_of_single_instance"] is True


def test_stage_histograms_are_summed_over_label_sets_and_processes_into_bucket_bounds() -> None:
    text = "\n".join(
        [
            "# HELP sightscreen_fixture_cache_age_seconds ...",
            'sightscreen_fixture_cache_age_seconds_bucket{le="0.25"} 10.0',
            'sightscreen_fixture_cache_age_seconds_bucket{le="0.5"} 90.0',
            'sightscreen_fixture_cache_age_seconds_bucket{le="1.0"} 99.0',
            'sightscreen_fixture_cache_age_seconds_bucket{le="+Inf"} 100.0',
            "sightscreen_fixture_cache_age_seconds_count 100.0",
            'sightscreen_event_loop_lag_seconds_bucket{le="0.01"} 4.0',
            'sightscreen_event_loop_lag_seconds_bucket{le="+Inf"} 4.0',
        ]
    )
    other = "\n".join(
        [
            'sightscreen_fixture_cache_age_seconds_bucket{le="0.25"} 50.0',
            'sightscreen_fixture_cache_age_seconds_bucket{le="0.5"} 60.0',
            'sightscreen_fixture_cache_age_seconds_bucket{le="1.0"} 100.0',
            'sightscreen_fixture_cache_age_seconds_bucket{le="+Inf"} 100.0',
        ]
    )
    got = stage_quantiles([_stage_buckets(text), _stage_buckets(other)])
    # 200 reads: 60 within 0.25 s, 150 within 0.5 s, 199 within 1 s
    assert got["fixture_cache_age_at_read"] == {
        "n": 200,
        "p50_at_most": 0.5,
        "p90_at_most": 1.0,
        "p99_at_most": 1.0,
    }
    one = stage_quantiles([_stage_buckets(text)])  # 1 of 100 past every bound: p99 within 1 s
    assert one["fixture_cache_age_at_read"]["p99_at_most"] == 1.0
    assert got["event_loop_lag"] == {"n": 4, "p50_at_most": 0.01, "p90_at_most": 0.01, "p99_at_most": 0.01}
    assert "ball_to_push" not in got  # nothing observed: no figure rather than a made-up one


def test_a_key_events_fan_out_runs_from_its_first_token_to_its_94th_percentile() -> None:
    lags = [2.0 + i / 100 for i in range(101)]  # 2.00 s to 3.00 s, one token every 10 ms
    assert fanout_s(lags) == 0.94
    assert fanout_s(list(reversed(lags))) == 0.94  # in any order
    assert fanout_s([1.5]) == 0.0  # a single token
