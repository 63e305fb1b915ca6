"""The stand-ins for remote services run ahead of the processes under test on the test machine's CPU.

In production DynamoDB has machines of its own: it answers at its pace whatever the engines' CPU does. On the
test machine's two shared cores, the single-threaded moto server ran at the same priority as the daemons of
four pytest workers; under that load it fell seconds behind, leases ran out for want of its answers, and a
fleet spent minutes taking matches it could not keep. That measured the machine, not the daemon. So the peer
runs at a higher priority (a lower nice value) than the daemons it serves. Raising a priority needs
CAP_SYS_NICE (root has it); without it the peer runs as before and nothing else changes.
"""

from __future__ import annotations

import os

PEER_NICE = -10  # about nine times the CPU weight of a process at nice 0 when both want the CPU


def ahead_of_the_rig(pid: int = 0) -> bool:
    """Give process ``pid`` (0: this one) the peers' priority; False where the OS does not allow it."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, PEER_NICE)
    except OSError:
        return False
    return True
