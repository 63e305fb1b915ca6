"""A wall clock that runs ahead or behind, for an engine the region rig starts with ``clock_offsets``
(``tests/harness/region.py``): Python imports this ``sitecustomize`` at start-up, before any of the daemon,
when its folder is on ``PYTHONPATH``.

``time.time`` and ``time.time_ns`` return the real wall clock plus the seconds written in the file
``SIGHTSCREEN_CLOCK_OFFSET_FILE`` names ("+3.000s", "-2.5s"; read at most once a second); the monotonic
clock is untouched, as a host's NTP-skewed wall clock leaves it. The daemon's wall-clock decisions (leases,
claims, cooldowns, TTLs) all read ``time.time``. libfaketime is not used: with the monotonic clock excluded
it turns Python 3.11's ``time.sleep`` (``clock_nanosleep`` with an absolute monotonic deadline) into EINVAL,
and without the exclusion timed lock waits hang.

Nothing here is imported by production code.
"""

from __future__ import annotations

import os
import time

_PATH = os.environ.get("SIGHTSCREEN_CLOCK_OFFSET_FILE")


def read_offset(text: str) -> float:
    """The offset in seconds of a clock file's text ("+3.000s"); 0 for an empty file."""
    value = text.strip().removesuffix("s")
    return float(value) if value else 0.0


if _PATH:
    _real_time, _real_time_ns, _monotonic = time.time, time.time_ns, time.monotonic
    _state = [0.0, float("-inf")]  # the offset, and when (monotonic) the file was read

    def _offset() -> float:
        now = _monotonic()
        if now - _state[1] >= 1.0:
            _state[1] = now
            try:
                with open(_PATH, encoding="ascii") as f:
                    _state[0] = read_offset(f.read())
            except (OSError, ValueError):
                pass  # being replaced, or half-written: the last offset read holds
        return _state[0]

    def _skewed_time() -> float:
        return _real_time() + _offset()

    def _skewed_time_ns() -> int:
        return _real_time_ns() + int(_offset() * 1e9)

    time.time = _skewed_time
    time.time_ns = _skewed_time_ns
