"""``sightscreen demo``: the whole daemon end to end on embedded local parts (``daemon.demo.world``)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import trio

from daemon import extras
from daemon.commands.common import finite
from daemon.demo.world import DemoRun


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="sightscreen demo", description="Run the whole daemon end to end on embedded local parts."
    )
    parser.add_argument("--followers", type=int, default=25, help="users following the match (default 25)")
    parser.add_argument("--speed", type=finite(), default=50.0, help="tape speed multiplier (default 50)")
    parser.add_argument("--tape", type=Path, default=None, help="tape file (default: the shipped T20 tape)")
    parser.add_argument(
        "--exit-at-end", action="store_true", help="exit once the match's end push is delivered"
    )
    parser.add_argument(
        "--ios18-share",
        type=float,
        default=0.5,
        metavar="F",
        help="share of the simulated iPhones on iOS 18, started on broadcast channels (default 0.5)",
    )
    parser.add_argument("--admin-socket", default=None, help="admin socket path (default: in a temp dir)")
    parser.add_argument(
        "--metrics-listen",
        default="",
        metavar="HOST:PORT",
        help="serve Prometheus metrics over HTTP there, as [metrics].listen does (default: admin socket only)",
    )
    parser.add_argument(
        "--api-listen",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="where the app's API listens (default: a free port on loopback, printed at start)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where the local issuer's key is left for `sightscreen api-token` (default: "
        "$SIGHTSCREEN_DEMO_STATE or ~/.local/state/sightscreen/demo)",
    )
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    parser.add_argument("--json-lines", action="store_true", help="print deliveries as JSON lines")
    args = parser.parse_args(argv)
    if args.followers < 0:
        parser.error("--followers must be >= 0")
    if not 0.0 <= args.ios18_share <= 1.0:
        parser.error("--ios18-share must be between 0 and 1")
    if args.metrics_listen:
        from daemon.config.models import parse_listen

        try:
            parse_listen(args.metrics_listen)
        except ValueError as exc:
            parser.error(f"--metrics-listen: {exc}")
    return args


async def _main_async(args: argparse.Namespace) -> int:
    demo = DemoRun(args)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        result: list[int] = []
        async with trio.open_nursery() as nursery:

            async def run_demo() -> None:
                result.append(await demo.run())
                nursery.cancel_scope.cancel()

            async def on_signal() -> None:
                async for _ in signals:
                    if not args.quiet:
                        print("sightscreen demo: stopping", file=sys.stderr, flush=True)
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(run_demo)
            nursery.start_soon(on_signal)
    return result[0] if result else 0


def main(argv: list[str]) -> int:
    from daemon.logs import configure

    args = parse_args(argv)
    extras.check_installed(extras.DEMO_MODULES, purpose="the demo")
    configure(os.environ.get("SIGHTSCREEN_LOG_LEVEL", "warning"), json=False)
    try:
        return trio.run(_main_async, args)
    except KeyboardInterrupt:
        return 0
