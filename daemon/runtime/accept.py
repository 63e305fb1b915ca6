"""What the daemon's listeners (the admin socket, the metrics endpoint) do when ``accept()`` fails: the rule
is ``daemon.descriptors``'s, shared with the API's listener."""

from __future__ import annotations

from daemon.descriptors import ACCEPT_RETRY_S, ACCEPT_TRANSIENT

__all__ = ["ACCEPT_RETRY_S", "ACCEPT_TRANSIENT"]
