"""``sightscreen run --config FILE``: the production daemon (``daemon.runtime.assembly``) until a signal."""

from __future__ import annotations

import argparse
import sys

import trio

from daemon.descriptors import raise_nofile_limit
from daemon.logs import get_logger
from daemon.runtime import gctune
from daemon.runtime.assembly import Daemon, serve
from daemon.runtime.bindings import binding_problems


def main(argv: list[str]) -> int:
    from daemon.config import ConfigError, load_config
    from daemon.logs import configure_from
    from daemon.runtime.sdnotify import SdNotifier

    parser = argparse.ArgumentParser(prog="sightscreen run", description="Run the Sightscreen daemon.")
    parser.add_argument("--config", required=True, help="TOML configuration file")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"sightscreen: bad configuration in {args.config}:\n{exc}", file=sys.stderr)
        return 2
    # before any thread allocates: the arenas it would make are what the cap is for (daemon/runtime/gctune.py)
    arenas_capped = gctune.limit_malloc_arenas(config.instance.malloc_arenas)
    local = trio.run(binding_problems, config)
    if local:  # the admin socket's path or a port this machine will not give: say which, no traceback
        lines = "\n".join(f"  {p}" for p in local)
        print(f"sightscreen: cannot start with {args.config}:\n{lines}", file=sys.stderr)
        return 2
    configure_from(config.logging, instance_id=config.instance.id)
    # every connection takes a descriptor: the soft limit up to the hard one (LimitNOFILE, --ulimit nofile)
    soft, hard = raise_nofile_limit()
    get_logger("daemon").info("descriptor_limit", soft=soft, hard=hard)
    gctune.configure(config.instance.gc_young_threshold)
    get_logger("daemon").info(
        "malloc_arenas", most=config.instance.malloc_arenas if arenas_capped else "glibc's default"
    )
    try:
        daemon = Daemon(config, notifier=SdNotifier())
    except (
        Exception
    ) as exc:  # a part that cannot be built (a key that is not P-256 PEM): say which, no traceback
        print(
            f"sightscreen: cannot start with {args.config}: {exc}\n"
            f"(sightscreen check-config {args.config} lists every problem)",
            file=sys.stderr,
        )
        return 2
    try:
        trio.run(serve, daemon)
    except KeyboardInterrupt:
        pass
    return daemon.exit_code
