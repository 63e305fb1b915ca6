"""What the commands share: the one error line and exit status, and logs to stderr."""

from __future__ import annotations

import sys


def fail(message: str) -> int:
    """Print ``message`` as the command's error and return its exit status (2)."""
    print(f"sightscreen: {message}", file=sys.stderr)
    return 2


def log_to_stderr() -> None:
    """Structured logs at info on stderr: stdout carries only the command's JSON result."""
    from daemon.logs import configure

    configure(level="info", stream=sys.stderr)
