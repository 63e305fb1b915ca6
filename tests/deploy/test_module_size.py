"""The shipped modules stay small enough to read: one concern each, none over 1,000 lines."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOST_LINES = 1_000


def test_no_shipped_module_is_over_a_thousand_lines() -> None:
    modules = [p for package in ("daemon", "actors") for p in (ROOT / package).rglob("*.py")]
    assert len(modules) > 50  # the packages were found
    too_long = {
        str(p.relative_to(ROOT)): n for p in modules if (n := len(p.read_text().splitlines())) > MOST_LINES
    }
    assert too_long == {}, f"split these by concern: {too_long}"
