"""The walking skeleton end to end: the demo's whole pipeline, on real local parts.

The first test runs the demo in-process at high speed to the end of the match and checks what the project's
APNs server received. The second runs ``sightscreen demo`` as a user would and interrupts it mid-match.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
import trio

from daemon.demo.world import DemoRun

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _demo_args(**overrides: object) -> argparse.Namespace:
    values = dict(
        followers=6,
        speed=2000.0,
        tape=None,
        exit_at_end=True,
        admin_socket=None,
        quiet=False,
        json_lines=True,
    )
    values.update(overrides)
    return argparse.Namespace(**values)


@pytest.mark.slow
async def test_demo_runs_a_match_to_its_end_and_every_device_gets_the_whole_lifecycle() -> None:
    out = io.StringIO()
    demo = DemoRun(_demo_args(), out=out)
    with trio.fail_after(240):
        code = await demo.run()
    assert code == 0
    lines = out.getvalue().strip().splitlines()
    summary = json.loads(lines[-1])["summary"]
    records = [r for r in demo.apns.records if r.get("status") == 200]

    starts = [r for r in records if (r["payload"].get("aps") or {}).get("event") == "start"]
    updates = [r for r in records if (r["payload"].get("aps") or {}).get("event") == "update"]
    ends = [r for r in records if (r["payload"].get("aps") or {}).get("event") == "end"]

    # a push-to-start reached every follower's device
    assert len({r["token"] for r in starts}) == 6
    # updates, per Live Activity token, in order with strictly increasing timestamps
    per_token: dict[str, list[int]] = defaultdict(list)
    for r in updates:
        per_token[r["token"]].append(int(r["payload"]["aps"]["timestamp"]))
    assert len(per_token) == 6
    for stamps in per_token.values():
        assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    # every update carries the display strings and an event field
    for r in updates:
        aps = r["payload"]["aps"]
        assert "content-state" in aps and aps["content-state"]
    # the key events include at least one wicket and one boundary
    kinds = set(summary["key_events"])
    assert "wicket" in kinds
    assert kinds & {"four", "six"}
    # one end with a dismissal-date per session
    end_tokens = [r["token"] for r in ends]
    assert sorted(end_tokens) == sorted(per_token)
    assert all("dismissal-date" in r["payload"]["aps"] for r in ends)
    assert summary["pushes_accepted"]["end"] == 6
    assert summary["ended"] is True


def _nothing_listens_on(port: int) -> bool:
    # A connect, not a bind: a port in TIME_WAIT after a clean close cannot be bound for a while, but
    # nothing answers on it any more.
    with socket.socket() as s:
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
    return False


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


@pytest.mark.slow
def test_ctrl_c_mid_match_leaves_no_process_or_port_behind(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon", "demo", "--speed", "20", "--followers", "3", "--json-lines"],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert "sightscreen demo" in banner, banner
        ports = [int(p) for p in re.findall(r":(\d+)", banner)]
        assert len(ports) == 3, banner  # DynamoDB, replay, APNs
        # wait for the match to be under way: the first delivery line
        deadline = time.monotonic() + 120
        first = ""
        while time.monotonic() < deadline:
            first = proc.stdout.readline()
            if first.startswith('{"delivery"'):
                break
        assert first.startswith('{"delivery"'), first
        children = _children(proc.pid)
        assert children, "the demo should have started moto's server as a child process"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    for child in children:
        with pytest.raises(ProcessLookupError):
            os.kill(child, 0)
    for port in ports:
        assert _nothing_listens_on(port)
