"""What the end-to-end tests share: a region rig on the test's own DynamoDB peer, table prefix and socket
directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.harness.region import Region, mixed_crowd


@pytest.fixture
def make_region(tmp_path: Path, sock_dir: Path, moto_server: Any, table_prefix: str) -> Callable[..., Region]:
    """``make_region(tapes=..., engines=..., **more)``: a ``Region`` on this test's moto server, with the mixed
    crowd (every path a region serves) at 200x unless told otherwise."""

    def make(**kwargs: Any) -> Region:
        options: dict[str, Any] = {"crowd": mixed_crowd(), "speed": 200.0, **kwargs}
        return Region(
            tmp_path, moto_url=moto_server.url, table_prefix=table_prefix, sock_dir=sock_dir, **options
        )

    return make
