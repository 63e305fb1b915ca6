"""The `sightscreen` command: one entry point, routing each subcommand to its module in ``daemon.commands``.

Each command module exposes ``main(argv: list[str]) -> int``; this module only routes, so that importing the
CLI stays cheap (a subcommand's dependencies load only when it runs). Nothing imports ``daemon.commands``.
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module, function, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("daemon.commands.run", "main", "run the production daemon (--config FILE)"),
    "demo": ("daemon.commands.demo", "main", "run the whole daemon end to end on embedded local parts"),
    "tables": ("daemon.commands.tables", "main", "create or check the DynamoDB tables (create|check)"),
    "tape": ("daemon.commands.tape", "main", "make tapes (synth|from-fixture|record)"),
    "replay": ("daemon.commands.replay", "main", "serve tapes as a SportMonks-compatible API (serve)"),
    "events": ("daemon.commands.events", "main", "replay a tape through the match engine, print key events"),
    "apns-server": ("daemon.commands.apns_server", "main", "run the project's HTTP/2 TLS APNs server"),
    "ctl": ("daemon.commands.ctl", "main", "talk to a running daemon over its admin socket"),
    "api-token": ("daemon.commands.api_token", "main", "print an access token from the demo's local issuer"),
    "check-config": ("daemon.commands.check_config", "main", "validate a configuration file"),
}


def _usage() -> str:
    lines = ["usage: sightscreen COMMAND [ARGS...]", "", "commands:"]
    width = max(len(name) for name in COMMANDS)
    for name, (_, _, text) in COMMANDS.items():
        lines.append(f"  {name.ljust(width)}  {text}")
    lines.append("")
    lines.append("Run 'sightscreen COMMAND --help' for a command's options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    if args[0] == "--version":
        from daemon import __version__

        print(__version__)
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"sightscreen: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, func_name, _ = COMMANDS[name]
    from daemon.extras import MissingExtra

    try:
        func = getattr(importlib.import_module(module_name), func_name)
        result = func(rest)
    except MissingExtra as exc:  # a demo tool run where its extra is not installed (the production image)
        print(f"sightscreen {name}: {exc}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
