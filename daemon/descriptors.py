"""File descriptors: the process's limit, and what a listener does when ``accept()`` runs out of them.

Every socket, file and pipe of the process takes a descriptor from one budget, ``RLIMIT_NOFILE``: the API's
client connections and the engine's own outbound connections (DynamoDB, APNs, SportMonks) alike. At
start-up ``raise_nofile_limit`` lifts the soft limit to the hard one (a process may do that unprivileged;
systemd's ``LimitNOFILE`` or the container's ``--ulimit nofile`` sets the hard limit), and the API sizes
its connection cap from what it got, leaving a reserve for the rest of the daemon (``daemon.api.transport``).
"""

from __future__ import annotations

import errno
import resource

# accept() failures that mean "out of file descriptors/memory right now": wait and retry rather than die
# (trio's serve_listeners treats them the same way).
ACCEPT_TRANSIENT = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_RETRY_S = 0.1


def nofile_limit() -> int:
    """The soft ``RLIMIT_NOFILE`` now (unlimited read as a large finite number)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def raise_nofile_limit() -> tuple[int, int]:
    """Lift the soft ``RLIMIT_NOFILE`` to the hard limit; (soft, hard) afterwards. A refusal (a sandbox that
    forbids it) keeps the soft limit as it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):
            return soft, hard
    return resource.getrlimit(resource.RLIMIT_NOFILE)
