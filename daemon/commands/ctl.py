"""``sightscreen ctl [--socket PATH] COMMAND [ARGS...]``: the admin socket's command-line client.

It owns nothing but the client side of the protocol in ``daemon.runtime.admin.server``: send one JSON request line, read
one answer line, print it. Plain blocking sockets: a one-shot client needs no event loop.

``watch`` is the one command answered here rather than by the daemon: a live view refreshed every second,
built from ``status``, ``matches``, ``apns`` and ``feed`` (``daemon.commands.watch``).

Output: the result as indented JSON, or verbatim when it is text (``metrics`` is Prometheus text). Exit
status: 0 for an ok answer, 1 for an error answer (the error on stderr), 2 when the daemon cannot be
reached or answers something that is not the protocol (with what to check).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from daemon.commands.common import finite
from daemon.runtime.admin.client import (
    DEFAULT_SOCKET,
    EXIT_ERROR_ANSWER,
    EXIT_OK,
    EXIT_UNREACHABLE,
    SOCKET_ENV,
    Unreachable,
    request,
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="sightscreen ctl",
        description="Ask a running daemon over its admin socket. 'sightscreen ctl help' lists the commands.",
        epilog="exit status: 0 ok, 1 the daemon answered with an error, 2 the daemon could not be reached",
    )
    parser.add_argument(
        "--socket",
        default=os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET,
        help=f"admin socket path (default: ${SOCKET_ENV} or {DEFAULT_SOCKET})",
    )
    parser.add_argument(
        "--timeout", type=finite(), default=10.0, help="seconds to wait for the answer (default 10)"
    )
    parser.add_argument("--raw", action="store_true", help="print the answer line as received (JSON)")
    parser.add_argument(
        "command",
        help="health, ready, status, matches, match ID, shares, apns, metrics, drain, help...; "
        "watch [--interval S] [--count N] for a live view",
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the command's arguments")
    opts = parser.parse_args(argv)
    if opts.command == "watch":  # a client-side view built from several commands, not a daemon command
        from daemon.commands.watch import main as watch_main

        return watch_main(list(opts.args), socket_path=opts.socket, timeout_s=opts.timeout)
    try:
        answer = request(opts.socket, opts.command, list(opts.args), timeout_s=opts.timeout)
    except Unreachable as exc:
        print(f"sightscreen ctl: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if opts.raw:
        print(json.dumps(answer, ensure_ascii=False))
        return EXIT_OK if answer["ok"] else EXIT_ERROR_ANSWER
    if not answer["ok"]:
        print(f"error: {answer.get('error', 'unknown error')}", file=sys.stderr)
        return EXIT_ERROR_ANSWER
    result = answer.get("result")
    if (
        opts.command == "help"
        and isinstance(result, dict)
        and all(isinstance(v, str) for v in result.values())
    ):
        width = max((len(name) for name in result), default=0)
        for name, summary in result.items():
            print(f"{name.ljust(width)}  {summary}".rstrip())
    elif isinstance(result, str):
        sys.stdout.write(result if result.endswith("\n") else result + "\n")
    else:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    return EXIT_OK
