"""What ``run`` needs of this machine before it starts: the admin socket's path free to serve (short enough,
not taken by a file or another daemon) and the listen ports free. ``sightscreen check-config`` reports these
with the configuration's problems, so that OK means ``run`` starts, and ``run`` refuses to start on them with
the same words instead of failing inside its supervisor.
"""

from __future__ import annotations

import errno
import socket

from daemon.config import Config, ConfigProblem
from daemon.config.models import parse_listen
from daemon.runtime.admin.server import socket_path_problem


def port_problem(where: str, listen: str) -> ConfigProblem | None:
    """Why ``listen`` (``HOST:PORT``) cannot be bound now, or None."""
    host, port = parse_listen(listen, any_port=True)
    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is fine
        probe.bind((host, port))
    except OSError as exc:
        why = (
            "is taken by another process"
            if exc.errno == errno.EADDRINUSE
            else f"cannot be bound: {exc.strerror}"
        )
        return ConfigProblem(where, f"{listen} {why}")
    finally:
        probe.close()
    return None


async def binding_problems(config: Config) -> list[ConfigProblem]:
    """Every local resource ``run`` would fail to take, worded for the operator."""
    problems: list[ConfigProblem] = []
    if config.admin.socket_path:
        problem = await socket_path_problem(config.admin.socket_path)
        if problem is not None:
            problems.append(ConfigProblem("admin.socket_path", problem))
    listens = [("metrics.listen", config.metrics.listen)]
    if config.runs("api"):
        listens.append(("api.listen", config.api.listen))
    for where, listen in listens:
        if listen:
            found = port_problem(where, listen)
            if found is not None:
                problems.append(found)
    return problems
