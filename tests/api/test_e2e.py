"""End to end: app users who exist only through the API get the engine's pushes.

The demo's simulated iPhones register their devices (with push-to-start tokens), follow the match and,
when the push-to-start reaches them, register their Live Activity sessions, all over HTTP with tokens from
the local issuer; the engine then delivers a wicket to those sessions' update tokens through the project's
APNs server.
"""

from __future__ import annotations

import argparse
import io
import json

import pytest
import trio

from daemon.demo.world import DemoRun


@pytest.mark.slow
async def test_a_session_registered_over_http_receives_a_wicket_from_the_engine() -> None:
    args = argparse.Namespace(
        followers=3,
        # the demo's T20 in ~40 s: the phones sign up, get their push-to-start and register their sessions
        # within its first seconds, and a dozen wickets fall after that
        speed=300.0,
        tape=None,
        exit_at_end=True,
        admin_socket=None,
        quiet=True,
        json_lines=False,
        metrics_listen="",
        api_listen="127.0.0.1:0",
    )
    demo = DemoRun(args, out=io.StringIO())
    with trio.fail_after(240):
        assert await demo.run() == 0
    phones = demo.iphones.phones
    assert demo.iphones.errors == []
    assert all(p.activity_started and p.update_token for p in phones)
    update_tokens = {p.update_token for p in phones}
    accepted = [r for r in demo.apns.records if r.get("status") == 200]
    # the push-to-start went to the token each phone registered over HTTP
    starts = {r["token"] for r in accepted if (r.get("payload") or {}).get("aps", {}).get("event") == "start"}
    assert starts == {p.push_to_start_token for p in phones}
    # and a wicket reached every session the API registered
    wickets = {
        r["token"]
        for r in accepted
        if r["token"] in update_tokens and "WICKET" in json.dumps(r.get("payload") or {})
    }
    assert wickets == update_tokens
