"""The demo with iOS 18 phones: half the simulated iPhones start on broadcast channels, the rest on update
tokens; every device, on either path, sees every key event sent while its activity runs, and the match's
channels are created once and deleted at its end."""

from __future__ import annotations

import argparse
import io
import json

import pytest
import trio

from daemon.demo.world import DemoRun


@pytest.mark.slow
async def test_demo_with_ios18_phones_reaches_every_device_on_either_path() -> None:
    args = argparse.Namespace(
        followers=8,
        speed=2000.0,
        tape=None,
        exit_at_end=True,
        admin_socket=None,
        quiet=True,
        json_lines=False,
        ios18_share=0.5,
    )
    out = io.StringIO()
    demo = DemoRun(args, out=out)
    with trio.fail_after(240):
        assert await demo.run() == 0
    summary = json.loads(out.getvalue().strip().splitlines()[-1])["summary"]
    assert summary["errors"] == 0 and summary["ended"]
    assert summary["devices"] == {"ios18": 4, "on_channels": 4, "on_tokens": 4}
    assert summary["every_device_saw_every_key_event"] and summary["devices_missing_key_events"] == 0
    # one broadcast per perspective with channel sessions per tick: far fewer than the devices reached
    assert summary["broadcasts"]["update"] > 0 and summary["broadcasts"]["end"] == 2
    assert summary["devices_reached"]["update"]["channel"] > summary["broadcasts"]["update"]
    assert summary["channels"]["created"] == summary["channels"]["deleted"] == 3
    assert demo.apns.channels.count() == 0
    # token pushes went only to the iOS 17 phones' update tokens
    tokens = {p.update_token for p in demo.iphones.phones if not p.channel_id}
    pushed = {
        r["token"]
        for r in demo.apns.records
        if r.get("status") == 200
        and not r.get("channel_id")
        and (r.get("payload") or {}).get("aps", {}).get("event") == "update"
    }
    assert pushed == tokens
