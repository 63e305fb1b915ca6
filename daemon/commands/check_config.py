"""``sightscreen check-config``: validate a configuration file, or print the annotated example."""

from __future__ import annotations

import argparse
import json
import os
import sys

import trio

from daemon.config import Config, ConfigError, ConfigProblem, load_config, render_example
from daemon.config.credentials import credential_problems
from daemon.runtime.bindings import binding_problems


def build_problems(config: Config) -> list[ConfigProblem]:
    """Build the daemon exactly as ``run`` does (DynamoDB, SportMonks and APNs clients, actors; nothing is
    started and nothing connects): what ``run`` would die of, worded by the part that refused."""
    from daemon.runtime.assembly import Daemon

    try:
        daemon = Daemon(config)
    except Exception as exc:
        return [ConfigProblem("(start-up)", f"the daemon cannot be built: {exc}")]
    trio.run(daemon.client.aclose)
    return []


def main(argv: list[str]) -> int:
    """``sightscreen check-config FILE``: exit 0 with one line, or exit 2 naming each wrong key and why.

    Beyond the models, every part ``run`` builds is built (``credential_problems``): OK means ``run`` starts."""
    parser = argparse.ArgumentParser(
        prog="sightscreen check-config",
        description="Validate a configuration file (with the SIGHTSCREEN_* environment overrides applied).",
    )
    parser.add_argument("file", nargs="?", help="the TOML file to check")
    parser.add_argument(
        "--show", action="store_true", help="also print the effective configuration (secrets hidden)"
    )
    parser.add_argument("--example", action="store_true", help="print the annotated example configuration")
    args = parser.parse_args(argv)
    if args.example:
        sys.stdout.write(render_example())
        return 0
    if not args.file:
        parser.error("FILE is required (or --example)")
    try:
        config = load_config(args.file, os.environ)
        problems = credential_problems(config, os.environ) or build_problems(config)
        problems += trio.run(binding_problems, config)
        if problems:
            raise ConfigError(args.file, problems)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(
        f"OK: {args.file} is valid (instance {config.instance.id}, admin socket {config.admin.socket_path})"
    )
    if args.show:
        print(json.dumps(config.redacted(), indent=2, sort_keys=False))
    return 0
