"""What the commands share: the one error line and exit status, and logs to stderr."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable


def fail(message: str) -> int:
    """Print ``message`` as the command's error and return its exit status (2)."""
    print(f"sightscreen: {message}", file=sys.stderr)
    return 2


def log_to_stderr() -> None:
    """Structured logs at info on stderr: stdout carries only the command's JSON result."""
    from daemon.logs import configure

    configure(level="info", stream=sys.stderr)


def finite(*, minimum: float = 0.0, inclusive: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite number above ``minimum`` (at or above it with ``inclusive``). NaN and
    infinities are refused by name rather than reaching a server that would answer 500 to them."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
        if value < minimum or (value == minimum and not inclusive):
            bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text!r}")
        return value

    return parse
