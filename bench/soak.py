"""Soak benchmark: many matches, many tokens, several instances, random kills; prove nothing is lost.

    python bench/soak.py [--matches M] [--tokens T] [--instances I] [--speed X] [--kill-every S]
                         [--duration S] [--cadence S] [--lease S] [--seed N] [--format T20|T10]
                         [--stagger S] [--drain S] [--dynamodb moto|dynalite] [--apns python|nginx]
                         [--ios18-share F] [--prematch-settled] [--compare-single] [--single-tokens T]

Runs M synthesised T20 matches concurrently at speed X against the local servers (moto on loopback, the
replay server, the APNs server), with T Live Activity tokens in total spread over the matches, across I
``sightscreen run`` processes, killing one at random (``kill -9``) every S seconds and starting a fresh one
in its place. It stops when every match ended or after ``--duration`` seconds (the cut-off); after a cut-off with
matches still on, it stops killing and lets the daemons run ``--drain`` more seconds, so what happened
before the cut-off can arrive, then judges.

Peers. By default the soak runs against the project's reference peers: moto (one thread) and the
project's validating Python APNs server. At the target scale (20 matches, 200,000 tokens) on a small machine
those peers, not the daemons, are the bottleneck (moto answers a Query of 10,000 sessions in ~5 s; the Python
APNs server costs 100-200 µs per push), so ``--dynamodb dynalite`` (npm, installed on first use) and
``--apns nginx`` (a C HTTP/2 server that records what it was sent) take their place. See
``tests/harness/dynalite.py`` and ``tests/harness/nginx_apns.py`` for what each does not check. With
``--apns nginx --ios18-share F`` the project's server runs beside nginx for channel management and
broadcasts (nginx cannot fan a broadcast out to the phones on a channel); every per-token push, the
push-to-starts included, goes to nginx, and the harness reads the push-to-starts from nginx's record file.

Definitions (what the figures mean):
- key events in the tapes: the events that must reach every token whatever the cadence — every wicket that
  stands at the end of the tape (corrected or deleted ones excluded) and each match's end;
- key events due: those of them that happened before the cut-off (a wicket whose ball was served by then;
  a match end that happened) — all of them when every match ended;
- delivered: a (token, key event) pair whose event appeared in an update (or the end) APNs accepted for that
  token; ``lost`` = pairs due minus pairs delivered, and ``lost_events`` each key event some token missed
  (its match, when it was served, how many tokens, how long after the last kill);
- duplicate alerts: a token that saw the same alerting event with two different timestamps (a repeat with
  the same timestamp is discarded by iOS, so it is not a duplicate on the device); an event is its type and
  subject, once per ball (``tests.harness.records.alerts_shown_twice``);
- pushes rejected: answered with an error by the APNs peer; pushes cut off by kills: requests a killed
  instance had in flight (nginx records them as 499, client gone), which its successor sends again;
- lag: from the moment a wicket's ball became visible at the replay server (its due time on the tape's
  clock, whether or not anyone polled then) to the moment APNs accepted the first update carrying it, per
  token (p50, p99, max): it includes the wait for the feed leader's next poll, up to one cadence;
- lag after the poll: the same from the first response that carried the ball (``/livescores`` or
  ``/fixtures/{id}``), i.e. without that wait: what the fleet itself adds (the poll's transfer and decoding,
  the cache hop on an instance that does not lead, the tick, the fan-out);
- peak RSS and CPU per instance (slot ``iN``): VmHWM and utime+stime from /proc, sampled every second; with
  kills, the highest peak of the slot's processes and the sum of their CPU (up to a second of a killed
  process's last CPU is not seen);
- DynamoDB calls per tick: the daemons' own histogram (sum / count), read over their admin sockets;
- SportMonks calls per hour (the fleet figures): requests the replay server answered from the moment the
  instances are up to the cut-off (or the end of the last match), per hour of that window: the region's
  calls (one feed leader polls for every instance); beside them each instance's own calls per hour over
  the same window (from its ``sightscreen_sportmonks_calls`` counter, summed over the slot's processes)
  and what one instance polls at this cadence in theory (``3600 / cadence``, /livescores alone);
- a single instance's calls per hour (``--compare-single``): a companion run in the same invocation, after
  the main one, with the same tapes, speed, cadence, lease, duration and peers, one instance and no kills,
  measured the same way; SportMonks calls do not depend on the number of tokens, so the companion seeds
  ``--single-tokens`` (default: 10 per match) to stay light. ``sportmonks_region_vs_single_instance`` is
  the region's figure over it;
- targets (``targets``): the region's calls per hour within 10% of the single instance's (with kills),
  ``lost`` 0, duplicate alerts 0, and lag p99 within cadence + 1 s (the lag target applies to runs
  without kills: a kill makes its owner's matches wait for the lease);
- slowest events: the five key events whose last token got them latest, with the wait for the leader's
  next poll (``poll_wait_s``), the lag of their first token (that wait, the cache hop and the tick), their
  median and their last, their fan-out (``fanout_s``: the first token to the 94th percentile), and how long
  after the last kill their ball came (a match whose owner was just killed waits for its lease to run out);
- fan-out (``fanout_s``): that first-to-94th-percentile time's median and maximum over the run's key events
  (a run's p99 is about the slowest wicket's wait for the poll plus its fan-out);
- stages (``stages_s``), from the daemons' own histograms (bucket bounds): the cache hop (a changed
  fixture's age when a non-leading instance read it), ball to push (the leader's fetch to the tick done:
  every push answered) and the event loop's lag (how much CPU the machine left each daemon).

- iOS 18 (``--ios18-share F``): that share of each match's followers is seeded without a session, on iOS 18;
  the daemons' push-to-start starts them on their perspective's broadcast channel and the harness registers
  their sessions (``channelId``), subscribing them at the APNs server, which fans each broadcast out to them.
  A channel phone's deliveries are the broadcasts that reached it; key events served before its activity
  started are not due for it (a token phone is seeded running). ``apns_requests_per_key_event``: accepted
  requests (per-token pushes and broadcasts) that carried a due key event, per due key event; ``channels``:
  created, deleted and still open at the APNs server at the end (a leak), and created twice for a
  perspective (two owners racing). ``ios18_start_s``: seconds from a match's first ball being served to each
  of its iOS 18 phones' activity starting (on a channel or, failing one, on a token): p50, p90, max, how
  many within 5/10/20/30/60 s, and how many never started.
- The prematch job: the matches start seconds after their 200,000 followers are seeded, so by default the
  job runs its downtime catch-up (every follower of every match at once) beside live play, paced by
  ``[jobs.prematch].live_followers_per_s`` (``prematch_followers``: how many it worked through).
  ``--prematch-settled`` seeds each follow with the job's settled marker instead, as production has it
  when play begins: the job notified the followers in the 30 minutes before the start, and at play its
  cycles find nothing to do.

The last line printed is one JSON object with those figures.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.replay.synth import synthesise  # noqa: E402
from daemon.store.local import MotoServer  # noqa: E402
from tests.harness import procfs  # noqa: E402
from tests.harness.cluster import Cluster, admin_request  # noqa: E402
from tests.harness.dynalite import DynaliteServer  # noqa: E402
from tests.harness.nginx_apns import NginxApns  # noqa: E402
from tests.harness.peer_priority import ahead_of_the_rig  # noqa: E402
from tests.harness.records import Alert, ShownOrder, alerts_shown_twice  # noqa: E402


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


class Tally:
    """Consumes the APNs server's records incrementally (so memory stays flat at 200,000 tokens)."""

    def __init__(self, token_match: dict[str, str]) -> None:
        self.token_match = token_match
        self.delivered: dict[str, set[tuple[str, str]]] = defaultdict(set)  # token -> {(type, ball)}
        self.first_seen: dict[tuple[str, str, str], float] = {}  # (token, type, ball) -> accept time
        self.alerts: dict[str, list[Alert]] = defaultdict(list)  # token -> alerts shown (headline, stamp)
        self.accepted = 0
        self.rejected = 0
        self.cut_off = 0
        self.by_kind: dict[str, int] = defaultdict(int)
        self.requests_per_event: dict[tuple[str, str, str], int] = defaultdict(int)  # (match, type, subject)
        self.token_requests_per_event: dict[tuple[str, str, str], int] = defaultdict(int)
        self.broadcasts_per_event: dict[tuple[str, str, str], int] = defaultdict(int)
        self.tokens_per_event: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        self.broadcasts = 0
        self.subscribers: Any = None  # the APNs server's subscriptions: broadcast channel -> devices
        # what each phone showed in the order iOS applies it: a token, or a channel's phones as one
        self.shown = ShownOrder()
        self.phone_match: dict[str, str] = {}  # a channel's phones -> its match

    def eat(self, records: Iterable[dict[str, Any]]) -> None:
        """Records as the APNs servers give them: ``token``, ``status``, ``time`` and ``payload`` (which
        nginx leaves out, None, for a push with no event; then ``kind`` says start/update/end)."""
        for r in records:
            if r.get("status") == 499:  # nginx: the client went away mid-request (a kill -9 of an instance)
                self.cut_off += 1
                continue
            if r.get("status") != 200:
                self.rejected += 1
                continue
            self.accepted += 1
            aps = (r.get("payload") or {}).get("aps") or {}
            event = str(aps.get("event") or r.get("kind"))
            self.by_kind[event] += 1
            if not aps:
                continue
            state = aps.get("content-state") or {}
            if r.get("channel_id"):  # a broadcast: what each device on the channel then got
                self.broadcasts += 1
                devices = (
                    sorted(self.subscribers.by_channel.get(r["channel_id"], ())) if self.subscribers else []
                )
                first = devices[0] if devices else None
                phones = f"channel:{r['channel_id']}"
                self.phone_match.setdefault(phones, self.token_match.get(first or "", "?"))
                self.shown.see(phones, int(aps.get("timestamp") or 0), state)
                for ev in state.get("events") or []:
                    key = (
                        self.token_match.get(first or "", "?"),
                        str(ev.get("type")),
                        str(ev.get("subject")),
                    )
                    self.requests_per_event[key] += 1
                    self.broadcasts_per_event[key] += 1
                for device in devices:
                    self._deliver(device, r, aps, state, event)
                continue
            token = r["token"]
            if state:
                self.shown.see(token, int(aps.get("timestamp") or 0), state)
            for ev in state.get("events") or []:
                key = (self.token_match.get(token, "?"), str(ev.get("type")), str(ev.get("subject")))
                self.requests_per_event[key] += 1
                self.token_requests_per_event[key] += 1
                self.tokens_per_event[key].add(token)
            self._deliver(token, r, aps, state, event)

    def _deliver(
        self, token: str, r: dict[str, Any], aps: dict[str, Any], state: dict[str, Any], event: str
    ) -> None:
        got = self.delivered[token]
        for ev in state.get("events") or []:
            key = (str(ev.get("type")), str(ev.get("subject")))
            if key not in got:
                got.add(key)
                self.first_seen[(token, *key)] = r["time"]
        if event == "end":
            got.add(("match_end", self.token_match.get(token, "?")))
        if aps.get("alert") and event == "update":
            head = (state.get("events") or [{}])[0]
            ball = head.get("ballId")
            self.alerts[token].append(
                (
                    str(state.get("eventType")),
                    str(head.get("subject")),
                    None if ball is None else str(ball),
                    int(aps.get("timestamp", 0)),
                )
            )


def fanout_s(lags: list[float]) -> float:
    """A key event's fan-out from its tokens' lags: the first token to the 94th percentile, in seconds."""
    return round((_pct(lags, 0.94) or 0.0) - min(lags), 2)


def _proc_sample(pid: int) -> tuple[int, float] | None:
    """The process's peak RSS in bytes (0 when ``/proc`` shows none) and CPU seconds; None when it is gone."""
    cpu = procfs.cpu_s(pid)
    return None if cpu is None else (procfs.peak_rss_bytes(pid) or 0, cpu)


def _calls_per_tick(metrics_text: str) -> tuple[float, float, float]:
    """(calls, ticks, ticks that made no call) from the daemon's histogram."""
    total = count = idle = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("sightscreen_dynamodb_calls_per_tick_sum"):
            total = float(line.split()[-1])
        elif line.startswith("sightscreen_dynamodb_calls_per_tick_count"):
            count = float(line.split()[-1])
        elif line.startswith('sightscreen_dynamodb_calls_per_tick_bucket{le="0.0"}'):
            idle = float(line.split()[-1])
    return total, count, idle


STAGE_HISTOGRAMS = {
    # the cache hop on an instance that does not lead: the leader's fetch to the reader handing it on
    "fixture_cache_age_at_read": "sightscreen_fixture_cache_age_seconds",
    # the feed receiving a fixture (on the leader) to the owner's tick done: APNs answered every push
    "ball_to_push": "sightscreen_ball_to_push_seconds",
    # how late a daemon's loop woke a 1 s sleep: the CPU the machine left it
    "event_loop_lag": "sightscreen_event_loop_lag_seconds",
}


def _stage_buckets(metrics_text: str) -> dict[str, dict[float, float]]:
    """Cumulative bucket counts (upper bound to count, summed over label sets) of the stage histograms."""
    wanted = {f"{metric}_bucket": stage for stage, metric in STAGE_HISTOGRAMS.items()}
    out: dict[str, dict[float, float]] = {stage: {} for stage in STAGE_HISTOGRAMS}
    for line in metrics_text.splitlines():
        name, _, rest = line.partition("{")
        stage = wanted.get(name)
        if stage is None:
            continue
        le = re.search(r'le="([^"]+)"', rest)
        if le is None:
            continue
        bound = float(le.group(1))  # "+Inf" parses as inf
        out[stage][bound] = out[stage].get(bound, 0.0) + float(line.split()[-1])
    return out


def _bucket_bound(merged: dict[float, float], q: float) -> float | None:
    """The smallest bucket bound under which a share ``q`` of the observations fell (None: past every
    finite bound)."""
    total = merged.get(math.inf, 0.0)
    for bound in sorted(merged):
        if merged[bound] >= q * total:
            return None if math.isinf(bound) else bound
    return None


def stage_quantiles(per_process: list[dict[str, dict[float, float]]]) -> dict[str, Any]:
    """Per stage, over every process: how many observations and the bucket bound under which half, 90% and
    99% of them fell (a histogram gives bounds, not exact values)."""
    out: dict[str, Any] = {}
    for stage in STAGE_HISTOGRAMS:
        merged: dict[float, float] = defaultdict(float)
        for buckets in per_process:
            for bound, n in buckets.get(stage, {}).items():
                merged[bound] += n
        total = merged.get(math.inf, 0.0)
        if total:
            out[stage] = {
                "n": int(total),
                "p50_at_most": _bucket_bound(merged, 0.5),
                "p90_at_most": _bucket_bound(merged, 0.9),
                "p99_at_most": _bucket_bound(merged, 0.99),
            }
    return out


def _metric_sum(metrics_text: str, name: str, label: str, values: tuple[str, ...]) -> float:
    """The sum of a counter's samples whose ``label`` is one of ``values``."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(name + "{") and any(f'{label}="{v}"' in line for v in values):
            total += float(line.split()[-1])
    return total


def _sportmonks_calls(metrics_text: str) -> float:
    """Requests this daemon sent to SportMonks (every attempt: ok, error, retry; skipped calls sent none)."""
    return _metric_sum(
        metrics_text, "sightscreen_sportmonks_calls_total", "outcome", ("ok", "error", "retry")
    )


def _prematch_followers(metrics_text: str) -> float:
    """Followers the prematch job worked through in this daemon: claims taken, taken over, or settled as
    having no device."""
    return _metric_sum(
        metrics_text,
        "sightscreen_prematch_notifications_total",
        "result",
        ("claimed", "recovered", "no_device"),
    )


def _feed_held(metrics_text: str) -> dict[str, float]:
    """Answers this daemon's feed did not hand on, by verdict (behind: older content than delivered;
    unconfirmed: a change at the same stamp one answer alone showed)."""
    return {
        verdict: _metric_sum(metrics_text, "sightscreen_feed_answers_held_total", "verdict", (verdict,))
        for verdict in ("behind", "unconfirmed")
    }


def _per_slot(calls: dict[tuple[str, int], float], base: dict[tuple[str, int], float]) -> dict[str, float]:
    """Each slot's calls summed over its processes, less what the processes it had at the start of the
    window had already made."""
    out: dict[str, float] = defaultdict(float)
    for (slot, pid), n in calls.items():
        out[slot] += n - base.get((slot, pid), 0.0)
    return dict(out)


def fleet_figures(
    *,
    region_calls: int,
    window_s: float,
    by_instance: dict[str, float],
    cadence_s: float,
    single_per_hour: float | None,
) -> dict[str, Any]:
    """The SportMonks figures of a run: calls per hour for the region and per instance over the window,
    the theory for one instance at this cadence, and the region's ratio to a single instance's measured
    rate (None without a companion run)."""
    hours = max(window_s, 1e-9) / 3600.0
    region = region_calls / hours
    theory = 3600.0 / cadence_s
    return {
        "sportmonks_window_s": round(window_s, 1),
        "sportmonks_calls_per_hour_region": round(region),
        "sportmonks_calls_per_hour_by_instance": {
            k: round(v / hours) for k, v in sorted(by_instance.items())
        },
        "sportmonks_calls_per_hour_one_instance_theory": round(theory),
        "sportmonks_region_vs_theory": round(region / theory, 3),
        "sportmonks_calls_per_hour_single_instance": None
        if single_per_hour is None
        else round(single_per_hour),
        "sportmonks_region_vs_single_instance": round(region / single_per_hour, 3)
        if single_per_hour
        else None,
        # the region's, scaled to the production marquee cadence (2.5 s): what the region's budget sees
        "sportmonks_calls_per_hour_region_at_2_5s": round(region * cadence_s / 2.5),
    }


def targets(result: dict[str, Any]) -> dict[str, Any]:
    """The fleet's targets, judged on a run's figures: each None when the run cannot say (no companion run
    for the calls; kills for the lag target, which applies without them)."""
    ratio = result.get("sportmonks_region_vs_single_instance")
    p99 = (result.get("lag_s") or {}).get("p99")
    bound = result["lag_target_s"] or (result["cadence_s"] or 0.0) + 1.0
    budget = result.get("sportmonks_budget") or {}
    return {
        "no_call_refused_by_the_plan": all(row["refused"] == 0 for row in budget.values()),
        "status_flips_zero": result["status_flips"] == 0,
        "no_unexplained_ball_withdrawn": result["balls_withdrawn_unexplained"] == 0,
        "region_calls_within_10pct_of_single_instance": None if ratio is None else abs(ratio - 1.0) <= 0.10,
        "lost_zero": result["lost"] == 0,
        "duplicate_alerts_zero": result["duplicate_alerts"] == 0,
        "lag_p99_bound_s": bound,
        "lag_p99_within_bound": None if result["kills"] or p99 is None else p99 <= bound,
    }


def _start_store(kind: str, workdir: Path) -> MotoServer | DynaliteServer:
    store = DynaliteServer(log_path=workdir / "dynalite.log") if kind == "dynalite" else MotoServer()
    store.start()
    if store.proc is not None:  # DynamoDB's stand-in answers ahead of the daemons it serves, as AWS would
        ahead_of_the_rig(store.proc.pid)
    return store


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    tapes = [synthesise(args.format, seed=args.seed + i) for i in range(args.matches)]
    per_match = max(1, args.tokens // args.matches)
    workdir = Path(tempfile.mkdtemp(prefix="sightscreen-soak-"))
    # Peers start from this (the main) thread, not a worker thread: they die with the process that started
    # them, and the kernel ties that to the starting thread (see die_with_parent).
    store = _start_store(args.dynamodb, workdir)
    nginx = NginxApns(record_path=workdir / "apns-records.jsonl") if args.apns == "nginx" else None
    started = time.time()
    samples: dict[tuple[str, int], tuple[int, float]] = {}  # (instance slot, pid): last (VmHWM, CPU) seen
    tick_calls: dict[tuple[str, int], tuple[float, float, float]] = {}  # per process: a kill loses none
    stages: dict[tuple[str, int], dict[str, dict[float, float]]] = {}  # the same, stage histograms
    sm_calls: dict[tuple[str, int], float] = {}  # (instance slot, pid): SportMonks requests it sent
    prematch: dict[tuple[str, int], float] = {}  # the same: followers its prematch job worked through
    sm_base: dict[tuple[str, int], float] = {}  # the same at the start of the window
    window_start = window_end = started
    served_start = served_end = 0
    sm_at_cut: dict[tuple[str, int], float] = {}
    kills = 0
    kill_times: list[float] = []
    tally: Tally | None = None
    feed_plan: dict[str, Any] = {}
    budget_at_start: dict[str, Any] = {}
    budget_at_cut: dict[str, Any] = {}
    cadence_in_use: float | None = args.cadence
    feed_held: dict[tuple[str, int], dict[str, float]] = {}  # per process: answers its feed held, by verdict
    held: list[dict[str, Any]] = []  # beside nginx: broadcasts not yet counted (see the sample loop)
    cut = started
    try:
        if nginx is not None:
            nginx.start()
        cluster = Cluster(
            workdir,
            moto_url=store.url,
            tapes=tapes,
            table_prefix="soak-",
            speed=args.speed,
            followers_per_match=per_match,
            lease_s=args.lease,
            cadence_s=args.cadence,
            sportmonks_plan=args.plan,
            endpoint_lag=args.endpoint_lag,
            cycle_s=min(5.0, args.lease),
            innings_break_s=1200.0,
            start_delay_wall_s=args.start_delay,
            stagger_wall_s=args.stagger,
            apns_peer=(nginx.url, nginx.ca_file) if nginx is not None else None,
            extra_config={"match": {"session_refresh_s": args.session_refresh}},
            ios18_share=args.ios18_share,
            prematch_settled=args.prematch_settled,
        )
        async with trio.open_nursery() as nursery:
            try:
                await cluster.start(nursery, instances=args.instances)
                print(
                    f"soak: {args.matches} matches, {per_match * args.matches} tokens seeded, "
                    f"{args.instances} instances up after {time.time() - started:.0f} s",
                    file=sys.stderr,
                )
                token_match = {t: m.match_id for m in cluster.matches.values() for t in m.tokens}
                tally = Tally(token_match)
                # the cadence in use and the plan it came from, as the first instance's ctl feed says
                first = next(iter(cluster.instances.values()))
                view = await admin_request(cluster.admin_socket(first), "feed")
                if isinstance(view, dict):
                    feed_plan = view.get("plan") or {}
                    in_use = (feed_plan.get("in_use_s") or {}).get("marquee") or view.get("cadence_s")
                    cadence_in_use = float(in_use) if in_use else args.cadence
                # the SportMonks window opens now: what each process had called before it is left out
                window_start, served_start = time.time(), cluster.replay.sportmonks_requests()
                budget_at_start = cluster.replay.calls()
                for inst in list(cluster.instances.values()):
                    text = await admin_request(cluster.admin_socket(inst), "metrics")
                    if isinstance(text, str):
                        sm_base[(f"i{inst.slot}", inst.proc.pid)] = _sportmonks_calls(text)

                start_offset = [0]  # how far the nginx record file has been read for push-to-starts
                read_to = [0.0]  # ... and up to what time

                async def sample_loop() -> None:
                    while True:
                        for name, proc in (("dynamodb", store.proc), ("apns", nginx.proc if nginx else None)):
                            if proc is not None and proc.poll() is not None:
                                raise RuntimeError(
                                    f"the {name} peer exited with code {proc.returncode}: see {workdir}"
                                )
                        if nginx is not None and cluster.apns is not None:
                            # push-to-starts go to nginx, broadcasts to the project's server beside it: a
                            # broadcast is counted once the starts answered before it are read, so it reaches
                            # the phones that were on its channel by then (nginx flushes once a second)
                            starts, start_offset[0], through = nginx.starts_since(start_offset[0])
                            await cluster.start_phones(starts)
                            read_to[0] = max(read_to[0], through or 0.0, time.time() - 3.0)
                            held.extend(cluster.apns.records)
                            cluster.apns.records = []
                            tally.eat(r for r in held if r["time"] <= read_to[0])
                            held[:] = [r for r in held if r["time"] > read_to[0]]
                        elif cluster.apns is not None:
                            records, cluster.apns.records = cluster.apns.records, []
                            if cluster.channel_phones:
                                await cluster.start_phones(records)
                            tally.eat(records)
                        for inst in list(cluster.instances.values()):
                            s = _proc_sample(inst.proc.pid)
                            if s is not None and s[0] > 0:  # (a process that has exited reports no VmHWM)
                                samples[(f"i{inst.slot}", inst.proc.pid)] = s
                            text = await admin_request(cluster.admin_socket(inst), "metrics")
                            if isinstance(text, str):
                                tick_calls[(inst.instance_id, inst.proc.pid)] = _calls_per_tick(text)
                                stages[(inst.instance_id, inst.proc.pid)] = _stage_buckets(text)
                                sm_calls[(f"i{inst.slot}", inst.proc.pid)] = _sportmonks_calls(text)
                                prematch[(f"i{inst.slot}", inst.proc.pid)] = _prematch_followers(text)
                                feed_held[(f"i{inst.slot}", inst.proc.pid)] = _feed_held(text)
                        await trio.sleep(1.0)

                tally.subscribers = cluster.apns.subscriptions if cluster.apns is not None else None
                nursery.start_soon(sample_loop)
                all_ended = False
                with trio.move_on_after(args.duration):
                    next_kill = trio.current_time() + (args.kill_every or 1e12)
                    while not (all_ended := await cluster.wait_all_ended(1.0)):
                        if args.kill_every and trio.current_time() >= next_kill:
                            slot = rng.choice(sorted(cluster.instances))
                            cluster.kill(slot)
                            kill_times.append(time.time())
                            kills += 1
                            cluster.spawn(slot)
                            next_kill = trio.current_time() + args.kill_every
                cut = time.time()
                # the SportMonks window closes at the cut-off (or the last match's end): the drain is left out
                window_end, served_end = cut, cluster.replay.sportmonks_requests()
                budget_at_cut = cluster.replay.calls()
                for inst in list(cluster.instances.values()):
                    text = await admin_request(cluster.admin_socket(inst), "metrics")
                    if isinstance(text, str):
                        sm_calls[(f"i{inst.slot}", inst.proc.pid)] = _sportmonks_calls(text)
                sm_at_cut = dict(sm_calls)
                if not all_ended:
                    # the cut-off: no more kills; what happened before it has --drain seconds to arrive
                    print(
                        f"soak: cut-off after {cut - started:.0f} s; draining {args.drain:.0f} s",
                        file=sys.stderr,
                    )
                    await cluster.wait_all_ended(args.drain)
                await trio.sleep(1.5)
                ended = {
                    str(i["matchId"]) for i in await cluster.active_records() if i.get("status") == "ended"
                }
                elapsed = time.time() - started
                replay_stats = cluster.replay.status() if hasattr(cluster.replay, "status") else {}
                budget_calls = cluster.replay.calls()
                served = getattr(cluster.replay, "requests_served", {}) or {}
                wickets_served = {
                    str(tape.fixture_id): _standing_wickets(tape, cluster.replay) for tape in tapes
                }
                live_at = {
                    str(tape.fixture_id): _first_ball_served_at(tape, cluster.replay) for tape in tapes
                }
            finally:
                with trio.CancelScope(shield=True):
                    await cluster.stop_all()
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            peers = {"dynamodb": procfs.tree_cpu_s(store.proc.pid) if store.proc else None}
            if nginx is not None and nginx.proc is not None:
                peers["apns"] = procfs.tree_cpu_s(nginx.proc.pid)
            await trio.to_thread.run_sync(store.stop)
            if nginx is not None:
                await trio.to_thread.run_sync(nginx.stop)
    assert tally is not None
    if cluster.apns is not None:  # the project's server: every push, or beside nginx the broadcasts
        tally.eat([*held, *cluster.apns.records])
    if nginx is not None:
        tally.eat(nginx.records())
    if args.keep_workdir:
        print(f"soak: logs, configurations and APNs records kept in {workdir}", file=sys.stderr)
    else:  # nginx's record of a target run is hundreds of MB
        shutil.rmtree(workdir, ignore_errors=True)

    channel_keys = {str(f.update_token) for _, f in cluster.channel_phones.values()}
    match_channel_phones: dict[str, int] = defaultdict(int)
    for phone_match, _ in cluster.channel_phones.values():
        match_channel_phones[phone_match] += 1
    lost_by_path: dict[str, int] = defaultdict(int)
    lost_events: list[dict[str, Any]] = []
    expected = 0
    delivered_all = 0
    lost = 0
    lags: list[float] = []
    polled_lags: list[float] = []  # the same from the leader's poll that first got the ball
    requests_per_event: list[int] = []
    split: dict[str, list[float]] = defaultdict(list)  # what each due key event's requests were
    per_event: list[dict[str, Any]] = []
    key_events = 0
    due_events = 0
    for tape in tapes:
        match_id = str(tape.fixture_id)
        match = cluster.matches[match_id]
        events = wickets_served[match_id] + [("match_end", match_id, None, None)]
        key_events += len(events)
        for etype, subject, served_at, polled_at in events:
            if etype == "match_end" and match_id not in ended:
                continue  # not due: the match had not ended
            if etype != "match_end" and (served_at is None or served_at > cut):
                continue  # not due: the ball came after the cut-off
            due_events += 1
            missed = 0  # tokens due this event that never got it
            event_lags: list[float] = []
            # when it was served, and how long after the last kill: where to look in the logs
            at_s = None if served_at is None else round(served_at - started, 1)
            kills_before = [k for k in kill_times if served_at is not None and k <= served_at]
            since_kill = (
                None if served_at is None or not kills_before else round(served_at - kills_before[-1], 1)
            )
            for token in match.tokens:
                started_at = cluster.channel_started.get(token, cluster.token_started.get(token))
                if token in channel_keys and (
                    started_at is None or (served_at is not None and served_at < started_at)
                ):
                    continue  # not due for this phone: its activity had not started yet
                expected += 1
                if (etype, subject) in tally.delivered.get(token, set()):
                    seen = tally.first_seen.get((token, etype, subject))
                    if served_at is not None and seen is not None:
                        event_lags.append(max(0.0, seen - served_at))
                    if polled_at is not None and seen is not None:
                        polled_lags.append(max(0.0, seen - polled_at))
                else:
                    missed += 1
                    lost_by_path[
                        "channel"
                        if token in cluster.channel_started
                        else "ios18_token"
                        if token in cluster.token_started
                        else "token"
                    ] += 1
            lost += missed
            delivered_all += missed == 0
            if missed:
                lost_events.append(
                    {
                        "match": match_id,
                        "event": f"{etype} {subject}",
                        "at_s": at_s,
                        "lost": missed,
                        "since_last_kill_s": since_kill,
                    }
                )
            ekey = (match_id, etype, subject)
            requests_per_event.append(tally.requests_per_event.get(ekey, 0))
            phones = match_channel_phones.get(match_id, 0)
            split["token_requests"].append(tally.token_requests_per_event.get(ekey, 0))
            split["tokens_reached"].append(len(tally.tokens_per_event.get(ekey, ())))
            split["broadcasts"].append(tally.broadcasts_per_event.get(ekey, 0))
            split["ios17_tokens"].append(len(match.tokens) - phones)
            split["ios18_on_tokens"].append(sum(1 for t in match.tokens if t in cluster.token_started))
            split["goal"].append(len(match.tokens) - phones + 3)
            lags.extend(event_lags)
            if event_lags and served_at is not None:
                per_event.append(
                    {
                        "match": match_id,
                        "event": f"{etype} {subject}",
                        "at_s": at_s,
                        # the wait for the leader's next poll, part of every token's lag
                        "poll_wait_s": None
                        if polled_at is None
                        else round(max(0.0, polled_at - served_at), 2),
                        "lag_first_s": round(min(event_lags), 2),
                        "lag_p50_s": round(_pct(event_lags, 0.5) or 0.0, 2),
                        "lag_max_s": round(max(event_lags), 2),
                        "fanout_s": fanout_s(event_lags),
                        "since_last_kill_s": since_kill,
                    }
                )
    server_channels = cluster.apns.channels if cluster.apns is not None else None
    channel_stats = {
        "created": server_channels.created if server_channels else 0,
        "deleted": server_channels.deleted if server_channels else 0,
        "open_at_end": server_channels.count() if server_channels else 0,
        "creates_logged": sum(
            1
            for e in (cluster.apns.channel_log if cluster.apns else [])
            if e["op"] == "create" and e["status"] == 201
        ),
    }
    ios18_start = _start_delays(cluster, live_at)
    duplicates = sum(len(alerts_shown_twice(alerts)) for alerts in tally.alerts.values())
    shown_backwards = _shown_backwards(tally, tapes)
    total_calls = sum(c[0] for c in tick_calls.values())
    total_ticks = sum(c[1] for c in tick_calls.values())
    busy_ticks = total_ticks - sum(c[2] for c in tick_calls.values())
    run_s = max(1e-9, cut - started)
    # per instance slot across its processes (each kill starts a new generation): the highest peak, the CPU of all
    peak_rss: dict[str, int] = {}
    cpu_s: dict[str, float] = {}
    for (instance, _pid), (hwm, cpu) in sorted(samples.items()):
        peak_rss[instance] = max(peak_rss.get(instance, 0), hwm)
        cpu_s[instance] = cpu_s.get(instance, 0.0) + cpu
    return {
        "matches": args.matches,
        "matches_ended": len(ended),
        "tokens": per_match * args.matches,
        "instances": args.instances,
        "speed": args.speed,
        "cadence_s": cadence_in_use,
        "cadence_configured": args.cadence is not None,
        "sportmonks_plan_per_endpoint": args.plan,
        "feed_plan": feed_plan or None,
        "endpoint_lag": None if args.endpoint_lag is None else {args.endpoint_lag[0]: args.endpoint_lag[1]},
        "lag_target_s": args.lag_target,
        "peers": {"dynamodb": args.dynamodb, "apns": args.apns},
        "kills": kills,
        "seconds": round(elapsed, 1),
        "key_events_in_tapes": key_events,
        "key_events_due": due_events,
        "key_events_delivered_to_every_token": delivered_all,
        "expected_deliveries": expected,
        "lost": lost,
        "lost_by_path": dict(lost_by_path),
        "lost_events": lost_events,
        "duplicate_alerts": duplicates,
        # what phones showed going back, as iOS applies updates (older timestamps dropped): status flips,
        # and balls withdrawn beyond what the tapes' own deletions and corrections explain
        **shown_backwards,
        # answers the feed leaders held back (their content older than delivered, or unconfirmed)
        "feed_answers_held": {
            verdict: round(sum(h.get(verdict, 0.0) for h in feed_held.values()))
            for verdict in ("behind", "unconfirmed")
        },
        "pushes_accepted": tally.accepted,
        "pushes_per_s": round(tally.accepted / run_s, 1),
        "pushes_by_event": dict(tally.by_kind),
        "pushes_rejected": tally.rejected,
        "ios18_share": args.ios18_share,
        "broadcasts": tally.broadcasts,
        "channel_phones": len(channel_keys),
        "channel_phones_started": len(cluster.channel_started),
        "ios18_phones_started_on_tokens": len(cluster.token_started),
        "ios18_start_s": ios18_start,
        # iOS 18 phones that got more than one push-to-start (each would start one more activity on the phone)
        "ios18_phones_started_twice": sum(1 for n in cluster.start_pushes.values() if n > 1),
        "apns_requests_per_key_event": round(sum(requests_per_event) / len(requests_per_event), 1)
        if requests_per_event
        else None,
        # per due key event, on average: per-token requests carrying it, the distinct tokens they reached (the
        # rest are repeats: a tick re-sent after a kill or a lost answer), broadcasts carrying it, the match's
        # iOS 17 tokens, its iOS 18 phones started on tokens, and the goal (iOS 17 tokens + 3 perspectives)
        "apns_requests_per_key_event_split": {k: round(sum(v) / len(v), 1) for k, v in split.items() if v},
        "channels": channel_stats,
        "pushes_cut_off_by_kills": tally.cut_off,
        "lag_s": {
            "p50": _pct(lags, 0.5),
            "p99": _pct(lags, 0.99),
            "max": max(lags) if lags else None,
        },
        # the lag less the wait for the feed leader's next poll (up to one cadence): from the first response
        # that carried the ball to APNs accepting it, per token
        "lag_after_poll_s": {
            "p50": _pct(polled_lags, 0.5),
            "p99": _pct(polled_lags, 0.99),
            "max": max(polled_lags) if polled_lags else None,
        },
        # where the time goes, from the daemons' own histograms (bucket bounds)
        "stages_s": stage_quantiles(list(stages.values())),
        # each key event's fan-out, its first token to its 94th percentile: the part of a run's p99 that is
        # not the wait for the poll
        "fanout_s": {
            "p50": _pct([e["fanout_s"] for e in per_event], 0.5),
            "max": max((e["fanout_s"] for e in per_event), default=None),
        },
        # where the tail comes from: the five events whose last token got them latest
        "slowest_events": sorted(per_event, key=lambda e: -e["lag_max_s"])[:5],
        "peak_rss_mb": {k: round(v / 2**20, 1) for k, v in peak_rss.items()},
        "cpu_s": {k: round(v, 1) for k, v in cpu_s.items()},
        "peer_cpu_s": {k: round(v, 1) for k, v in peers.items() if v is not None},
        "harness_cpu_s": round(time.process_time(), 1),
        # the prematch catch-up that ran beside live play (the soak seeds its followers 20 s before the start)
        "prematch_followers": round(sum(prematch.values())),
        "dynamodb_calls_per_tick": round(total_calls / total_ticks, 2) if total_ticks else None,
        # the same over the ticks that wrote something (a new ball); a tick with no change costs none
        "dynamodb_calls_per_changed_tick": round(total_calls / busy_ticks, 2) if busy_ticks else None,
        "sportmonks_requests_by_endpoint": {k: v for k, v in served.items() if k != "control" and v},
        # as the replay server counted them against the plan, per entity (/fixtures and /fixtures/{id} are
        # one): answered and refused with a 429 over the whole run, and answered per hour over the window
        # (the instances up to the cut-off: the start-up's reference syncs left out)
        "sportmonks_budget": _budget_figures(
            budget_calls, budget_at_start, budget_at_cut, window_end - window_start
        ),
        **fleet_figures(
            region_calls=served_end - served_start,
            window_s=window_end - window_start,
            by_instance=_per_slot(sm_at_cut, sm_base),
            cadence_s=cadence_in_use or 1.0,
            single_per_hour=None,
        ),
        "replay": replay_stats
        if isinstance(replay_stats, dict) and len(json.dumps(replay_stats)) < 2000
        else None,
    }


def _budget_figures(
    calls: dict[str, Any], at_start: dict[str, Any], at_cut: dict[str, Any], window_s: float
) -> dict[str, Any]:
    hours = max(window_s, 1e-9) / 3600.0
    start, cut = at_start.get("by_entity") or {}, at_cut.get("by_entity") or {}
    return {
        entity: {
            "answered": row["answered"],
            "refused": row["refused"],
            "limit": row["limit"],
            "answered_per_hour_in_window": round(
                ((cut.get(entity) or {}).get("answered", 0) - (start.get(entity) or {}).get("answered", 0))
                / hours
            ),
        }
        for entity, row in (calls.get("by_entity") or {}).items()
    }


def _shown_backwards(tally: Tally, tapes: list[Any]) -> dict[str, int]:
    """Status flips and withdrawn balls the phones were shown. A tape's phantom deliveries (posted, then
    deleted) and corrections honestly take a ball back, at most once each per phone; withdrawals beyond that
    are what a lagging source caused."""
    explained = {
        str(tape.fixture_id): sum(1 for e in tape.entries if e.op in ("delete", "correct")) for tape in tapes
    }
    shown = tally.shown
    unexplained = 0
    for phone, count in shown.withdrawn.items():
        match = tally.phone_match.get(phone) or tally.token_match.get(phone, "?")
        unexplained += max(0, count - explained.get(match, 0))
    return {
        "phones_judged": len(shown.last_at),
        "status_flips": len(shown.flipped),
        "balls_withdrawn": sum(shown.withdrawn.values()),
        "balls_withdrawn_unexplained": unexplained,
    }


def _first_ball_served_at(tape: Any, replay: Any) -> float | None:
    """When the replay server first served the match's first ball (the match going live)."""
    balls = tape.fixture_at(len(tape)).get("balls") or []
    if not balls:
        return None
    idx = tape.entry_index_of_ball(int(balls[0]["id"]))
    return replay.ball_served_at(str(tape.fixture_id), idx) if idx is not None else None


def _start_delays(cluster: Any, live_at: dict[str, float | None]) -> dict[str, Any] | None:
    """How soon after its match went live (its first ball served) each iOS 18 phone's activity started, on
    either path (a channel, or an update token when the push-to-start named no channel)."""
    if not cluster.channel_phones:
        return None
    delays: list[float] = []
    never = 0
    for match_id, follower in cluster.channel_phones.values():
        key = str(follower.update_token)
        at = cluster.channel_started.get(key, cluster.token_started.get(key))
        live = live_at.get(match_id)
        if at is None or live is None:
            never += 1
            continue
        delays.append(max(0.0, at - live))
    out: dict[str, Any] = {
        "phones": len(cluster.channel_phones),
        "started": len(delays),
        "never": never,
        "p50": _round(_pct(delays, 0.5)),
        "p90": _round(_pct(delays, 0.9)),
        "max": _round(max(delays) if delays else None),
    }
    for n in (5, 10, 20, 30, 60):
        out[f"within_{n}s"] = sum(1 for d in delays if d <= n)
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _standing_wickets(tape: Any, replay: Any) -> list[tuple[str, str, float | None, float | None]]:
    """The wickets that stand at the end of the tape, with when each became visible at the replay server
    (its due time on the tape's clock) and when a poll first got it. A wicket given late, by a correction
    of a ball first posted as something else, becomes visible with that correction, not with the ball."""
    out: list[tuple[str, str, float | None, float | None]] = []
    fixture_id = str(tape.fixture_id)
    for ball in tape.fixture_at(len(tape)).get("balls") or []:
        if (ball.get("score") or {}).get("is_wicket") and ball.get("batsmanout_id"):
            idx = tape.entry_index_of_wicket(int(ball["id"]))
            served = replay.ball_served_at(fixture_id, idx) if idx is not None else None
            polled = replay.ball_polled_at(fixture_id, idx) if idx is not None else None
            out.append(("wicket", f"{ball['scoreboard']}:{ball['batsmanout_id']}", served, polled))
    return out


def cadence_arg(text: str) -> float | None:
    """``--cadence``: seconds (finite, > 0), or ``plan`` (None: derived by the daemons from the plan)."""
    if text == "plan":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds or 'plan': {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return value


def endpoint_lag_arg(text: str) -> tuple[str, float]:
    """``--endpoint-lag livescores:5`` as (endpoint, seconds)."""
    endpoint, _, seconds = text.partition(":")
    if endpoint not in ("livescores", "fixtures"):
        raise argparse.ArgumentTypeError(f"the endpoint is livescores or fixtures, got {endpoint!r}")
    try:
        lag = float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {seconds!r}") from None
    if not (math.isfinite(lag) and lag > 0):
        raise argparse.ArgumentTypeError(f"the lag must be a finite number of seconds > 0, got {seconds!r}")
    return endpoint, lag


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--matches", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--speed", type=float, default=200.0)
    parser.add_argument("--kill-every", type=float, default=0.0, help="seconds between kills (0: none)")
    parser.add_argument("--duration", type=float, default=600.0, help="stop after this many seconds")
    parser.add_argument(
        "--cadence",
        type=cadence_arg,
        default=0.5,
        help="feed cadence in seconds, or 'plan': the fastest the SportMonks plan (--plan) allows, as the "
        "daemons derive it in production",
    )
    parser.add_argument(
        "--plan",
        type=int,
        default=None,
        help="the SportMonks plan's calls an hour per endpoint (the standard plan: 2000), stated to the daemons "
        "and enforced by the replay server with a 429 past it; default: no limit",
    )
    parser.add_argument(
        "--endpoint-lag",
        type=endpoint_lag_arg,
        default=None,
        metavar="ENDPOINT:SECONDS",
        help="one live list answers what was true SECONDS ago all run (livescores, or fixtures for "
        "/fixtures?filter[status]): a CDN or replica behind the other",
    )
    parser.add_argument(
        "--lag-target",
        type=float,
        default=None,
        help="the lag p99 the run must meet (default: the cadence in use + 1 s)",
    )
    parser.add_argument("--lease", type=float, default=3.0, help="lock lease in seconds")
    parser.add_argument("--start-delay", type=float, default=8.0, help="wall seconds before the first ball")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--prematch-settled",
        action="store_true",
        help="seed the follows as notified by the prematch job already (no catch-up beside live play)",
    )
    parser.add_argument(
        "--ios18-share",
        type=float,
        default=0.0,
        help="share of each match's followers on iOS 18, started on broadcast channels",
    )
    parser.add_argument(
        "--format", default="T20", choices=["T20", "T10", "ODI"], help="synthesised match format"
    )
    parser.add_argument(
        "--stagger",
        type=float,
        default=0.0,
        help="wall seconds between match starts (real matches do not bowl in step)",
    )
    parser.add_argument(
        "--drain",
        type=float,
        default=30.0,
        help="after a --duration cut-off: seconds for what happened before it to arrive",
    )
    parser.add_argument(
        "--session-refresh",
        type=float,
        default=10.0,
        help="match.session_refresh_s of the daemons (sessions are seeded before they start)",
    )
    parser.add_argument(
        "--dynamodb", default="moto", choices=["moto", "dynalite"], help="local DynamoDB peer"
    )
    parser.add_argument(
        "--apns",
        default="python",
        choices=["python", "nginx"],
        help="APNs peer: the project's validating server, or nginx recording what it got",
    )
    parser.add_argument(
        "--compare-single",
        action="store_true",
        help="after the run, a companion run with one instance and no kills (same tapes, speed, cadence, "
        "lease, duration, peers) for the single instance's SportMonks calls per hour",
    )
    parser.add_argument(
        "--keep-workdir",
        action="store_true",
        help="keep the run's directory (daemon logs and configurations, the APNs peer's records); by default "
        "it is removed once counted",
    )
    parser.add_argument(
        "--single-tokens",
        type=int,
        default=0,
        help="tokens of the companion run (default: 10 per match; SportMonks calls do not depend on them)",
    )
    args = parser.parse_args(argv)
    if args.cadence is None and args.plan is None:
        parser.error("--cadence plan needs --plan (the calls an hour the cadence is derived from)")

    def _stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # run the finally blocks: stop the daemons and moto, even when killed by timeout

    signal.signal(signal.SIGTERM, _stop)
    result = trio.run(soak, args)
    if args.compare_single:
        companion = single_instance_args(args)
        print(
            f"soak: companion run: 1 instance, no kills, {companion.tokens} tokens, same tapes and duration",
            file=sys.stderr,
        )
        single = trio.run(soak, companion)
        result = with_single_instance(result, single)
    result["targets"] = targets(result)
    print(json.dumps(result))
    return 0


def single_instance_args(args: argparse.Namespace) -> argparse.Namespace:
    """The companion run's options: the main run's, with one instance, no kills and few tokens."""
    return argparse.Namespace(
        **{
            **vars(args),
            "instances": 1,
            "kill_every": 0.0,
            "tokens": args.single_tokens or 10 * args.matches,
            "ios18_share": 0.0,
            "compare_single": False,
        }
    )


def with_single_instance(result: dict[str, Any], single: dict[str, Any]) -> dict[str, Any]:
    """The main run's figures with the companion's single-instance rate and the region's ratio to it."""
    per_hour = single["sportmonks_calls_per_hour_region"]
    out = dict(result)
    out["sportmonks_calls_per_hour_single_instance"] = per_hour
    out["sportmonks_region_vs_single_instance"] = (
        round(result["sportmonks_calls_per_hour_region"] / per_hour, 3) if per_hour else None
    )
    out["single_instance_run"] = {
        key: single.get(key)
        for key in (
            "tokens",
            "seconds",
            "matches_ended",
            "sportmonks_window_s",
            "sportmonks_calls_per_hour_region",
            "sportmonks_requests_by_endpoint",
            "lost",
            "duplicate_alerts",
            "lag_s",
            "lag_after_poll_s",
        )
    }
    return out


if __name__ == "__main__":
    sys.exit(main())
