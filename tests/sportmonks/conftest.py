"""Fixtures for the SportMonks tests: the real fixture payload, loaded once (skips where absent)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def _real_fixture_raw(real_fixture_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(real_fixture_path.read_text())["data"]
    return data


@pytest.fixture
def real_fixture(_real_fixture_raw: dict[str, Any]) -> dict[str, Any]:
    """The real mid-match fixture 71344 (the ``data`` object), a fresh copy per test."""
    return copy.deepcopy(_real_fixture_raw)
