"""``sightscreen ctl watch``: a live terminal view of one instance, for an operator without Grafana.

Every ``--interval`` seconds (1 by default) it asks the admin socket for ``status``, ``matches``, ``apns`` and
``feed`` and redraws: the matches this instance owns (phase, last tick, lag, tokens), pushes per second by
outcome (from the difference between two refreshes), the APNs connections and latency, the SportMonks
breaker and the hourly budget left per endpoint. Until Ctrl-C, or ``--count`` refreshes (scripts, tests).

``render`` is a pure function of two samples (this one and the previous) and the wall time; ``collect`` is
the only I/O and ``run`` the loop around them. On a terminal each refresh clears the screen (ANSI); when
stdout is not a TTY each refresh is printed as plain lines followed by a blank line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from daemon.commands.common import finite
from daemon.runtime.admin.client import EXIT_OK, EXIT_UNREACHABLE, Unreachable, request

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen: understood by every terminal emulator in use
OUTCOMES = ("accepted", "rejected", "failed")


@dataclass(frozen=True)
class Sample:
    """One refresh's answers (``at``: monotonic seconds, for rates), or the reason the daemon did not answer."""

    at: float
    status: dict[str, Any] = field(default_factory=dict)
    matches: list[dict[str, Any]] = field(default_factory=list)
    apns: dict[str, Any] = field(default_factory=dict)
    feed: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def collect(path: str, *, timeout_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> Sample:
    """Ask the daemon at ``path`` for what ``render`` shows; a daemon that does not answer gives ``error``."""
    at = clock()
    answers: dict[str, Any] = {}
    try:
        for cmd in ("status", "matches", "apns", "feed"):
            answer = request(path, cmd, [], timeout_s=timeout_s)
            if not answer["ok"]:
                return Sample(at, error=f"{cmd}: {answer.get('error', 'error')}")
            answers[cmd] = answer.get("result")
    except Unreachable as exc:
        return Sample(at, error=str(exc))
    return Sample(
        at,
        status=answers["status"] if isinstance(answers["status"], dict) else {},
        matches=[m for m in answers["matches"] or [] if isinstance(m, dict)],
        apns=answers["apns"] if isinstance(answers["apns"], dict) else {},
        feed=answers["feed"] if isinstance(answers["feed"], dict) else {},
    )


# --- rendering (pure) ----------------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _epoch(value: Any) -> float | None:
    """A time the admin socket gives as epoch seconds or an ISO-8601 string, as epoch seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str) and value:
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        return parsed.timestamp()
    return None


def _ago(value: Any, now: float) -> str:
    at = _epoch(value)
    return "-" if at is None else f"{_duration(now - at)} ago"


def _seconds(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return f"{value:.2f}s"
    return "-"


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "-"


def push_rates(sample: Sample, previous: Sample | None) -> dict[str, float] | None:
    """Pushes per second by outcome between two samples; None without a usable previous sample."""
    if previous is None or previous.error or sample.error:
        return None
    elapsed = sample.at - previous.at
    now, before = sample.apns.get("pushes") or {}, previous.apns.get("pushes") or {}
    if elapsed <= 0:
        return None
    rates = {}
    for outcome in OUTCOMES:
        delta = float(now.get(outcome, 0)) - float(before.get(outcome, 0))
        rates[outcome] = max(0.0, delta) / elapsed  # a restarted daemon's counters start again from 0
    return rates


def render(sample: Sample, previous: Sample | None, *, now: float, width: int = 120) -> str:
    """The screen for ``sample`` (rates against ``previous``) at wall time ``now``, lines cut to ``width``."""
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if sample.error is not None:
        lines = [
            f"sightscreen watch  {stamp}",
            "",
            f"daemon not answering: {sample.error}",
            "retrying every refresh",
        ]
        return "\n".join(line[:width] for line in lines)

    status = sample.status
    instance = str(status.get("instance_id", "?"))
    head = f"sightscreen watch  {instance}  v{status.get('version', '?')}"
    uptime = status.get("uptime_s")
    if isinstance(uptime, int | float):
        head += f"  up {_duration(uptime)}"
    if status.get("draining"):
        head += "  DRAINING"
    lines = [f"{head}  {stamp}", ""]

    # A match's owner is the process's lock identity ({instance id}#{nonce}), not the configured id: a
    # match held by an earlier process started from the same configuration is not this one's.
    owner = str(status.get("owner") or instance)
    owned = [m for m in sample.matches if m.get("owner") == owner]
    owned.sort(key=lambda m: str(m.get("match_id")))
    lines.append(f"Owned matches: {len(owned)}")
    if owned:
        lines.append(f"  {'MATCH':<12} {'PHASE':<16} {'LAST TICK':<12} {'LAG':>8} {'TOKENS':>9} {'EPOCH':>6}")
        for m in owned:
            lines.append(
                f"  {str(m.get('match_id')):<12} {str(m.get('phase') or '-'):<16} "
                f"{_ago(m.get('last_tick_at'), now):<12} {_seconds(m.get('lag_s')):>8} "
                f"{_count(m.get('tokens')):>9} {str(m.get('epoch') if m.get('epoch') is not None else '-'):>6}"
            )
    others = len(sample.matches) - len(owned)
    if others:
        lines.append(f"  (+{others} active match(es) owned elsewhere or idle)")
    lines.append("")

    rates = push_rates(sample, previous)
    if rates is None:
        lines.append("Pushes/s: measuring (needs two refreshes)")
    else:
        lines.append("Pushes/s: " + "  ".join(f"{o} {rates[o]:.1f}" for o in OUTCOMES))
    totals = sample.apns.get("pushes") or {}
    lines.append("  total:  " + "  ".join(f"{o} {_count(totals.get(o, 0))}" for o in OUTCOMES))
    latency = sample.apns.get("latency_ms") or {}
    p50, p99 = latency.get("p50"), latency.get("p99")
    lat = f"latency p50 {p50} ms, p99 {p99} ms" if p50 is not None else "latency -"
    lines.append(
        f"APNs: {_count(sample.apns.get('connections'))} connection(s), "
        f"{_count(sample.apns.get('streams_in_flight'))} stream(s) in flight, {lat}"
    )
    lines.append("")

    breaker = sample.feed.get("breaker", "?")
    lines.append(f"SportMonks: breaker {breaker}" + ("  <- scores frozen" if breaker == "open" else ""))
    budget = sample.feed.get("budget") or {}
    if budget:
        lines.append("  budget left this hour:")
        for endpoint, b in sorted(budget.items()):
            limit, remaining = b.get("limit"), b.get("remaining")
            share = (
                f"{100 * remaining / limit:.0f}%"
                if isinstance(limit, int) and limit and isinstance(remaining, int)
                else "-"
            )
            skipped = b.get("skipped") or 0
            note = f"  ({skipped} skipped)" if skipped else ""
            lines.append(f"    {endpoint:<14} {_count(remaining):>12} / {_count(limit):<12} {share:>5}{note}")
    else:
        lines.append("  budget left this hour: no call made yet")
    return "\n".join(line[:width] for line in lines)


# --- the loop ------------------------------------------------------------------------------------------------


def run(
    path: str,
    *,
    interval_s: float = 1.0,
    count: int | None = None,
    out: TextIO | None = None,
    tty: bool | None = None,
    timeout_s: float = 5.0,
) -> int:
    """Refresh every ``interval_s`` until Ctrl-C or ``count`` refreshes. Exit 2 if the last refresh failed."""
    out = out or sys.stdout
    tty = out.isatty() if tty is None else tty
    previous: Sample | None = None
    done = 0
    try:
        while count is None or done < count:
            sample = collect(path, timeout_s=timeout_s)
            width = shutil.get_terminal_size((120, 40)).columns if tty else 1000
            screen = render(sample, previous, now=time.time(), width=width)
            out.write(CLEAR + screen + "\n" if tty else screen + "\n\n")
            out.flush()
            previous = sample if sample.error is None else previous
            done += 1
            if count is not None and done >= count:
                return EXIT_UNREACHABLE if sample.error else EXIT_OK
            time.sleep(interval_s)
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def main(argv: list[str], *, socket_path: str, timeout_s: float) -> int:
    parser = argparse.ArgumentParser(
        prog="sightscreen ctl watch",
        description="A live view of the instance: owned matches, pushes/s by outcome, SportMonks budget. Ctrl-C stops.",
    )
    parser.add_argument(
        "--interval", type=finite(), default=1.0, help="seconds between refreshes (default 1)"
    )
    parser.add_argument(
        "--count", type=int, default=None, help="stop after N refreshes (default: until Ctrl-C)"
    )
    opts = parser.parse_args(argv)
    if opts.count is not None and opts.count < 1:
        parser.error("--count must be >= 1")
    return run(socket_path, interval_s=opts.interval, count=opts.count, timeout_s=timeout_s)
