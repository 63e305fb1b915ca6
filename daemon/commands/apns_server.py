"""``sightscreen apns-server``: run the project's APNs server in its own process.

Owns: argument parsing, the one JSON line that tells the caller where the server is, and a clean exit on
SIGINT/SIGTERM. Must not touch: server behaviour (``daemon.apns.server``). Tests and the demo script a
server in another process through ``/ctl/*`` on the same port (see ``ApnsTestServer``).

Without ``--key-id``/``--public-key`` the command makes a signing key pair and prints where its private key
is, so a benchmark or a demo can sign provider tokens the server accepts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey

from daemon.apns import certs
from daemon.apns.server import ApnsTestServer
from daemon.logs import configure, get_logger

log = get_logger("apns.server")

DEFAULT_TEAM_ID = "TEAM000001"
DEFAULT_TOPIC = "com.sightscreen.app"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sightscreen apns-server",
        description="Run the project's HTTP/2 TLS APNs server. Prints one JSON line with host, port and "
        "ca_file, then serves until SIGINT/SIGTERM.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port (default 0: any free port)")
    p.add_argument("--record", metavar="FILE", help="append one JSON line per answered request")
    p.add_argument(
        "--team-id", default=DEFAULT_TEAM_ID, help=f"the team id tokens must carry ({DEFAULT_TEAM_ID})"
    )
    p.add_argument(
        "--key-id", action="append", default=[], help="a key id (repeat, paired with --public-key)"
    )
    p.add_argument(
        "--public-key",
        action="append",
        default=[],
        metavar="FILE",
        help="PEM public key for the matching --key-id (a .p8 private key is accepted too)",
    )
    p.add_argument(
        "--topic", action="append", default=[], help=f"allowed bundle id (repeat; {DEFAULT_TOPIC})"
    )
    p.add_argument(
        "--max-streams", type=int, default=1000, help="MAX_CONCURRENT_STREAMS after the first accept"
    )
    p.add_argument("--initial-streams", type=int, default=1, help="limit until the first accept (0: none)")
    p.add_argument(
        "--fast",
        action="store_true",
        help="benchmarks: don't parse payloads (size still checked) and use the lean HTTP/2 engine",
    )
    p.add_argument(
        "--engine",
        choices=["h2", "lean"],
        default=None,
        help="HTTP/2 engine: h2 (reference, default) or lean (about half the CPU; default with --fast)",
    )
    p.add_argument("--production", action="store_true", help="no apns-unique-id header (sandbox has it)")
    p.add_argument("--keep-records", type=int, default=None, help="keep about this many records in memory")
    p.add_argument("--script", metavar="JSON", help="a fault script applied at start (as POST /ctl/script)")
    p.add_argument("--log-level", default="warning", help="log level for stderr (default warning)")
    return p


def _public_pem(path: Path) -> str:
    text = path.read_text()
    if "PRIVATE KEY" not in text:
        return text
    key = serialization.load_pem_private_key(text.encode(), password=None)
    if not isinstance(key, EllipticCurvePrivateKey):
        raise ValueError(f"{path}: not an EC private key")
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    configure(args.log_level)
    if len(args.key_id) != len(args.public_key):
        print("apns-server: give one --public-key per --key-id", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="sightscreen-apns-server-"))
    info: dict[str, Any] = {
        "host": args.host,
        "team_id": args.team_id,
        "engine": args.engine or ("lean" if args.fast else "h2"),
    }
    try:
        keys: dict[str, str] = {}
        try:
            for kid, path in zip(args.key_id, args.public_key, strict=True):
                keys[kid] = _public_pem(Path(path))
        except (OSError, ValueError) as exc:
            print(f"apns-server: --public-key: {exc}", file=sys.stderr)
            return 2
        if not keys:
            pair = certs.generate_signing_key()
            private_path, _ = certs.write_key_files(pair, workdir)
            keys[pair.key_id] = pair.public_pem
            info.update(key_id=pair.key_id, private_key_file=str(private_path))
        topics = args.topic or [DEFAULT_TOPIC]
        info["topics"] = topics
        try:
            server = ApnsTestServer(
                team_id=args.team_id,
                keys=keys,
                topics=topics,
                record_path=args.record,
                max_concurrent_streams=args.max_streams,
                initial_streams=args.initial_streams or None,
                fast=args.fast,
                sandbox=not args.production,
                keep_records=args.keep_records,
                engine=args.engine or ("lean" if args.fast else "h2"),
            )
            if args.script:
                server.script(**json.loads(args.script))
        except (ValueError, json.JSONDecodeError) as exc:
            print(f"apns-server: {exc}", file=sys.stderr)
            return 2
        trio.run(_serve, server, args.host, args.port, info, workdir)
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def _serve(server: ApnsTestServer, host: str, port: int, info: dict[str, Any], workdir: Path) -> None:
    ca_file = certs.write_ca_pem(server.ca, workdir / "ca.pem")
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(server.serve, host, port)
            info.update(port=bound, ca_file=str(ca_file), url=f"https://{host}:{bound}")
            sys.stdout.write(json.dumps({"apns_server": info}) + "\n")
            sys.stdout.flush()
            async for signum in signals:
                log.info("apns_server_stopping", signal=signal.Signals(signum).name)
                break
            nursery.cancel_scope.cancel()
    server.flush_records()
