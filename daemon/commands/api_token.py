"""``sightscreen api-token --sub USER [--admin]``: a token from the running demo's local issuer."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from daemon.commands.common import finite
from daemon.demo.issuer import LocalIssuer, default_state_dir


def main(argv: list[str]) -> int:
    """``sightscreen api-token --sub USER [--admin]``: a token from the running demo's issuer."""
    parser = argparse.ArgumentParser(
        prog="sightscreen api-token",
        description="Print an access token from the demo's local issuer, for trying the demo's API with curl.",
    )
    parser.add_argument("--sub", required=True, help="the user id (the token's sub)")
    parser.add_argument("--admin", action="store_true", help="put the user in the admin group")
    parser.add_argument("--group", default="admin", help="the admin group's name (default: admin)")
    parser.add_argument("--ttl", type=finite(), default=3600.0, help="lifetime in seconds (default 3600)")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"where the demo wrote its issuer (default: {default_state_dir()})",
    )
    args = parser.parse_args(argv)
    if not args.sub or "#" in args.sub:
        parser.error("--sub: must be non-empty and free of '#'")
    state_dir = args.state_dir or default_state_dir()
    try:
        issuer, state = LocalIssuer.load(state_dir)
    except ValueError as exc:
        print(f"sightscreen api-token: {exc} (is `sightscreen demo` running?)", file=sys.stderr)
        return 2
    print(issuer.mint(args.sub, groups=[args.group] if args.admin else [], ttl_s=args.ttl))
    if state.get("api_url") and sys.stderr.isatty():
        print(f'# curl -H "Authorization: Bearer $TOKEN" {state["api_url"]}/user/activities', file=sys.stderr)
    return 0
