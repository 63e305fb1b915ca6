"""The nemesis: a seeded random schedule, over a whole season, of every fault the fault tests inject one at a
time, applied to a running region (``tests/harness/region.py`` started with ``links`` and ``clock_offsets``).

``plan`` is pure: from a seed, the season's span and the number of engines it draws a schedule of ``Fault``
(when, which kind, which engine slot where the kind has one, for how long), every kind at least once when
the span holds them, the next fault drawn once the last has cleared plus a quiet gap, so each fault's outcome
is its own. ``Nemesis`` applies a schedule to a region and records, per fault, what happened: whether the
engines' readiness went false while it lasted (``degraded``), how soon after it cleared every engine was
ready again (``healthy_after_s``) against its bound (a lease and a cadence, plus an engine's start-up where
the fault replaced one), and the exit code of any engine it stopped. A fault of ``DEGRADING_KINDS`` must have
made some engine not ready while it lasted. ``window_holding`` names the fault
whose window (its span and the lease after it) held a moment, so a judge can charge a missing key event to
the fault that was on when its ball came.

The kinds, what they do and where the suite tests each one alone (the documented outcome of all of them is
that nothing is lost: docs/testing.md, "The fault matrix"; the multi-instance rows for the process faults):

- engine process: ``kill9`` (SIGKILL, a fresh engine started in its slot a second later), ``sigstop``
  (SIGSTOP for the fault's span, then SIGCONT), ``sigterm`` (SIGTERM while its matches fan out; it must exit
  0, and a fresh engine takes the slot);
- APNs: ``apns_dead`` (every open connection frozen at the server: open, silent, no FIN), ``apns_blackhole``,
  ``apns_slow`` (500 ms each way) and ``apns_reset`` (RST of every connection) on the engine's link,
  ``apns_goaway`` (every connection told to go away), ``apns_429`` and ``apns_500`` (every per-token push
  answered so for the span at nginx, which then reloads: a GOAWAY too; a 500 storm at the project's server
  for its broadcasts; without nginx a 429 is answered per token, as APNs answers a token pushed too often);
- DynamoDB, on the engine's link: ``dynamodb_latency`` (300 ms each way), ``dynamodb_throttle`` (half the
  requests throttled), ``dynamodb_cut`` (connections reset and new ones refused for the span);
- SportMonks, at the replay server for every engine: ``sportmonks_5xx``, ``sportmonks_429``,
  ``sportmonks_lag`` (``/livescores`` behind ``/fixtures`` by 5 s), ``sportmonks_bad_body`` (malformed JSON),
  ``sportmonks_wrong_status`` (valid bodies with a wrong match status);
- ``clock_skew``: the engine's wall clock 3 s ahead or behind the others (libfaketime) for the span.

Nothing here is imported by production code.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import trio

# kind -> (what it targets, its span in seconds as (low, high), where the suite tests it alone)
KINDS: dict[str, tuple[str, tuple[float, float], str]] = {
    "kill9": ("engine", (1.0, 1.0), "tests/e2e/test_multi_instance.py (kill -9 mid-match loses no wicket)"),
    "sigstop": ("engine", (4.0, 12.0), "tests/e2e/test_multi_instance.py (a paused instance)"),
    "sigterm": ("engine", (1.0, 1.0), "tests/e2e/test_multi_instance.py (SIGTERM releases every lock)"),
    "apns_dead": ("apns", (0.0, 0.0), "tests/faults/test_apns_dead_connections.py"),
    "apns_blackhole": ("engine", (3.0, 10.0), "tests/faults/test_link_faults.py"),
    "apns_slow": ("engine", (5.0, 15.0), "tests/faults/test_link_faults.py"),
    "apns_reset": ("engine", (0.0, 0.0), "tests/faults/test_link_faults.py"),
    "apns_goaway": ("apns", (0.0, 0.0), "tests/faults/test_apns_faults.py"),
    "apns_429": ("apns", (2.0, 6.0), "tests/faults/test_apns_faults.py"),
    "apns_500": ("apns", (2.0, 6.0), "tests/faults/test_apns_faults.py"),
    "dynamodb_latency": ("engine", (5.0, 15.0), "tests/faults/test_dynamodb_faults.py"),
    "dynamodb_throttle": ("engine", (5.0, 15.0), "tests/faults/test_dynamodb_faults.py"),
    "dynamodb_cut": ("engine", (3.0, 12.0), "tests/faults/test_dynamodb_faults.py"),
    "sportmonks_5xx": ("sportmonks", (3.0, 10.0), "tests/faults/test_sportmonks_faults.py"),
    "sportmonks_429": ("sportmonks", (3.0, 10.0), "tests/faults/test_sportmonks_faults.py"),
    "sportmonks_lag": ("sportmonks", (5.0, 15.0), "tests/faults/test_feed_order_faults.py"),
    "sportmonks_bad_body": ("sportmonks", (3.0, 10.0), "tests/faults/test_sportmonks_faults.py"),
    "sportmonks_wrong_status": ("sportmonks", (3.0, 10.0), "tests/faults/test_sportmonks_faults.py"),
    "clock_skew": ("engine", (10.0, 30.0), "tests/faults/test_dynamodb_faults.py (skew bound)"),
}
# faults that stop or replace an engine process: its health bound adds a process's start-up
PROCESS_KINDS = frozenset({"kill9", "sigstop", "sigterm"})
# faults that take away, for their whole span, something readiness reports (the process answering, DynamoDB
# reachable, the SportMonks breaker closed): an engine must say so while they last. The others may pass
# without a check failing (a slow or throttled link within its deadlines, a skew within its bound, a burst
# the retries absorb, a connection replaced before it is missed), and that is the better outcome.
DEGRADING_KINDS = PROCESS_KINDS | {"dynamodb_cut", "sportmonks_5xx"}
CLOCK_SKEW_S = 3.0


@dataclass(frozen=True)
class Fault:
    """One fault of a schedule: ``at_s`` after the season's start, its ``kind``, the engine ``slot`` it hits
    (None for a shared peer), how long it lasts, and the clock offset of a ``clock_skew``."""

    at_s: float
    kind: str
    slot: int | None
    duration_s: float
    offset_s: float = 0.0


@dataclass
class Outcome:
    """What a fault did: its window (seconds from the season's start), readiness during and after, the exit
    code of an engine it stopped, and the key events charged to it."""

    at_s: float
    kind: str
    slot: int | None
    duration_s: float
    cleared_at_s: float = 0.0
    degraded: bool = False
    healthy_after_s: float | None = None
    health_bound_s: float = 0.0
    exit_code: int | None = None
    offset_s: float = 0.0  # a clock skew's offset
    lost: int = 0
    tested_alone_in: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        healthy = self.healthy_after_s is not None and self.healthy_after_s <= self.health_bound_s
        said_so = self.degraded or self.kind not in DEGRADING_KINDS
        exited_well = self.kind != "sigterm" or self.exit_code == 0
        return healthy and said_so and exited_well and self.lost == 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "outcome": "ok" if self.ok else "failed"}


def plan(seed: int, *, span_s: float, engines: int, gap_s: float = 8.0, start_s: float = 20.0) -> list[Fault]:
    """A seeded schedule over ``span_s`` seconds: faults one after another, each ``gap_s`` (give or take
    half) after the last cleared, from ``start_s`` on, kinds drawn in shuffled rounds so each comes once
    before any comes twice. The same seed, span and engine count give the same schedule."""
    if engines < 1:
        raise ValueError("engines: at least one")
    rng = random.Random(seed)
    out: list[Fault] = []
    at = start_s
    deck: list[str] = []
    while True:
        if not deck:
            deck = sorted(KINDS)
            rng.shuffle(deck)
        kind = deck.pop()
        target, (low, high) = KINDS[kind][0], KINDS[kind][1]
        duration = round(rng.uniform(low, high), 1)
        if at + duration > span_s:
            return out
        slot = rng.randrange(engines) if target == "engine" else None
        offset = rng.choice((-CLOCK_SKEW_S, CLOCK_SKEW_S)) if kind == "clock_skew" else 0.0
        out.append(Fault(round(at, 1), kind, slot, duration, offset))
        at += duration + gap_s * rng.uniform(0.5, 1.5)


def window_holding(outcomes: Sequence[Outcome], at_s: float, after_s: float) -> Outcome | None:
    """The fault whose window (from its start to ``after_s`` past its clearing) holds ``at_s``; the latest
    such one, or None."""
    held = [o for o in outcomes if o.at_s <= at_s <= o.cleared_at_s + after_s]
    return max(held, key=lambda o: o.at_s) if held else None


class Nemesis:
    """Applies a schedule to a started ``Region`` (see the module doc); ``outcomes`` as the faults clear."""

    def __init__(self, region: Any, schedule: Sequence[Fault], *, startup_s: float = 30.0) -> None:
        if not region.links or not region.clock_offsets:
            raise ValueError("the nemesis needs a region started with links and clock_offsets")
        self.region = region
        self.schedule = list(schedule)
        self.startup_s = startup_s
        self.outcomes: list[Outcome] = []
        self.t0 = time.monotonic()
        self.stopping = False
        self.done = trio.Event()

    def now_s(self) -> float:
        return round(time.monotonic() - self.t0, 2)

    async def run(self, *, t0: float | None = None) -> None:
        """Apply every fault at its time from ``t0`` (``time.monotonic``; default now), until the schedule
        or ``stop`` ends it; ``done`` is set once no fault is on."""
        if t0 is not None:
            self.t0 = t0
        try:
            for fault in self.schedule:
                while not self.stopping and self.now_s() < fault.at_s:
                    await trio.sleep(min(0.5, fault.at_s - self.now_s()))
                if self.stopping:
                    return
                self.outcomes.append(await self.apply(fault))
        finally:
            self.done.set()

    async def stop(self) -> None:
        """No fault after the one on now, which is seen through to its outcome."""
        self.stopping = True
        await self.done.wait()

    def health_bound(self, fault: Fault) -> float:
        region = self.region
        bound = region.lease_s + region.cadence_s + 5.0
        return bound + self.startup_s if fault.kind in PROCESS_KINDS else bound

    async def apply(self, fault: Fault) -> Outcome:
        outcome = Outcome(
            self.now_s(),
            fault.kind,
            fault.slot,
            fault.duration_s,
            health_bound_s=self.health_bound(fault),
            offset_s=fault.offset_s,
            tested_alone_in=KINDS[fault.kind][2],
        )
        async with trio.open_nursery() as watch:
            degraded: list[bool] = []
            watch.start_soon(self._watch_degraded, degraded)
            await self._inflict(fault, outcome)
            watch.cancel_scope.cancel()
        outcome.degraded = bool(degraded)
        outcome.cleared_at_s = self.now_s()
        outcome.healthy_after_s = await self._healthy_after(outcome.health_bound_s * 2, outcome.notes)
        return outcome

    async def _watch_degraded(self, seen: list[bool]) -> None:
        while True:
            for engine in list(self.region.engines.values()):
                answer = await self.region.ready(engine)
                if answer is None or not answer.get("ready"):
                    seen.append(True)
            await trio.sleep(0.5)

    async def _healthy_after(self, limit_s: float, notes: list[str]) -> float | None:
        """Seconds until every engine answers ready (None past ``limit_s``). While any does not, what it
        answered last is noted (which engine, which checks failed and why), so a fault over its bound names
        the check that held it."""
        start = time.monotonic()
        unready: dict[str, str] = {}
        try:
            while time.monotonic() - start < limit_s:
                answers = [
                    (e.instance_id, await self.region.ready(e)) for e in list(self.region.engines.values())
                ]
                if all(a is not None and a.get("ready") for _, a in answers):
                    return round(time.monotonic() - start, 2)
                for name, answer in answers:
                    if answer is None:
                        unready[name] = "no answer on its admin socket"
                    elif not answer.get("ready"):
                        failed = {k: v for k, v in answer.get("checks", {}).items() if v is not True}
                        unready[name] = f"{failed or 'stopping'} at {round(time.monotonic() - start, 1)} s"
                await trio.sleep(0.25)
            return None
        finally:
            notes.extend(
                f"not ready after it cleared: {name}: {why}" for name, why in sorted(unready.items())
            )

    async def _apns_burst(self, status: int, seconds: float) -> None:
        """Every push answered ``status`` for ``seconds``: at nginx when it takes the per-token pushes; at the
        project's server, a 500 storm (its broadcasts and channel management too), and a 429 per token (APNs
        answers TooManyRequests to a device token pushed too often) to the tokens its phones have."""
        region = self.region
        if region.apns_peer is not None:
            region.apns_peer.storm(status)
        if status == 500:
            region.apns.storm(500, duration_s=seconds)
        elif region.apns_peer is None:
            for crowd in region.crowds.values():
                for phone in crowd.iphones.phones:
                    for token in (phone.device_token, phone.update_token):
                        if token:
                            region.apns.set_token_status(token, 429, "TooManyRequests", count=2)
        try:
            await trio.sleep(seconds)
        finally:
            if region.apns_peer is not None:
                region.apns_peer.storm(None)

    async def _inflict(self, fault: Fault, outcome: Outcome) -> None:
        region = self.region
        kind, d = fault.kind, fault.duration_s
        links = region.proxies.get(fault.slot, {}) if fault.slot is not None else {}
        if kind in ("kill9", "sigterm"):
            assert fault.slot is not None
            region.signal(fault.slot, signal.SIGKILL if kind == "kill9" else signal.SIGTERM)
            code = await region.wait_exit(fault.slot, timeout=region.lease_s + 30.0)
            outcome.exit_code = code
            if code is None:
                outcome.notes.append("did not exit; killed")
                region.signal(fault.slot, signal.SIGKILL)
                await region.wait_exit(fault.slot, timeout=10.0)
            await trio.sleep(d)
            region.spawn(fault.slot)
        elif kind == "sigstop":
            assert fault.slot is not None
            region.signal(fault.slot, signal.SIGSTOP)
            try:
                await trio.sleep(d)
            finally:
                region.signal(fault.slot, signal.SIGCONT)
        elif kind == "apns_dead":
            region.apns.freeze_connections()
        elif kind == "apns_goaway":
            region.apns.goaway()
            if region.apns_peer is not None:
                region.apns_peer.reload()
        elif kind in ("apns_429", "apns_500"):
            await self._apns_burst(int(kind[-3:]), d)
        elif kind == "apns_reset":
            outcome.notes.append(f"{links['apns'].reset()} connections reset")
        elif kind in ("apns_blackhole", "apns_slow", "dynamodb_latency", "dynamodb_cut"):
            proxy = links["apns" if kind.startswith("apns") else "dynamodb"]
            if kind == "apns_blackhole":
                proxy.set(blackhole=True)
            elif kind == "dynamodb_cut":
                proxy.set(refuse=True)
                proxy.reset()
            else:
                proxy.set(latency_s=0.5 if kind == "apns_slow" else 0.3)
            try:
                await trio.sleep(d)
            finally:
                proxy.clear()
        elif kind == "dynamodb_throttle":
            links["throttle"].set(share=0.5)
            try:
                await trio.sleep(d)
            finally:
                links["throttle"].clear()
        elif kind.startswith("sportmonks_"):
            modes: dict[str, tuple[str, dict[str, Any]]] = {
                "sportmonks_5xx": ("5xx", {}),
                "sportmonks_429": ("429", {"retry_after": 1}),
                "sportmonks_lag": ("lag", {"endpoint": "livescores", "lag_s": 5.0}),
                "sportmonks_bad_body": ("malformed", {}),
                "sportmonks_wrong_status": ("wrong_status", {}),
            }
            mode = modes[kind]
            region.replay.inject(mode[0], duration_s=d, **mode[1])
            await trio.sleep(d)
        elif kind == "clock_skew":
            assert fault.slot is not None
            region.set_clock_offset(fault.slot, fault.offset_s)
            try:
                await trio.sleep(d)
            finally:
                region.set_clock_offset(fault.slot, 0.0)
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
