"""The runtime's error root: ``DaemonRuntimeError`` (the admin socket's server, client and protocol). The whole
tree of the daemon's errors is in docs/architecture.md ("Errors")."""

from __future__ import annotations


class DaemonRuntimeError(Exception):
    """The running process could not be served or asked: the admin socket, its requests, its answers."""
