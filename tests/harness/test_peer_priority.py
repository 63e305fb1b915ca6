"""The AWS peer runs ahead of the daemons it serves where the OS allows it (``tests.harness.peer_priority``)."""

from __future__ import annotations

import os

from tests.harness.aws_peer import AwsPeer
from tests.harness.peer_priority import PEER_NICE, ahead_of_the_rig


def test_the_aws_peer_runs_at_the_peers_priority_where_it_may() -> None:
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    with AwsPeer() as peer:
        assert peer.proc is not None
        may = ahead_of_the_rig(os.getpid())  # can this process raise a priority at all?
        os.setpriority(os.PRIO_PROCESS, 0, mine)  # and put its own back
        assert os.getpriority(os.PRIO_PROCESS, peer.proc.pid) == (PEER_NICE if may else mine)
