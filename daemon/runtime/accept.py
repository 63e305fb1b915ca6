"""What the daemon's listeners (the admin socket, the metrics endpoint) do when ``accept()`` fails."""

from __future__ import annotations

import errno

# accept() failures that mean "out of file descriptors/memory right now": wait and retry rather than die
# (trio's serve_listeners treats them the same way).
ACCEPT_TRANSIENT = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_RETRY_S = 0.1
