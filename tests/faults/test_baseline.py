"""The control run: no fault, every seeded token gets every standing wicket and one end. The fault tests
make the same checks after a fault; this one shows the checks pass only when delivery is whole."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.faults.checks import SHORT_OVERS

pytestmark = pytest.mark.slow


async def test_without_faults_every_token_gets_every_wicket_and_one_end(make_rig: Any) -> None:
    async with make_rig(seed=1, overs=SHORT_OVERS) as rig:
        with trio.fail_after(90):
            assert await rig.wait_ended(90)
        assert rig.missing_wickets() == {}
        assert set(rig.ends_by_token().values()) == {1}
        for stamps in rig.timestamps_by_token().values():
            assert stamps == sorted(stamps) and len(stamps) > 5
