"""``ctl shares``' reading of the region's hot matches from cricket-locks (moto's server): the hot list and
the engines that said they help, each board's work item, and each shard waiting, held (by whom, its
watermark, its lease left) or done (its counts)."""

from __future__ import annotations

import time
from typing import Any

from daemon.cricket.share import TICK, Board, TickWork
from daemon.runtime.share_view import region_shares
from daemon.store.locks import shard_key


async def test_shares_show_each_hot_matchs_work_item_and_its_shards(repos: Any) -> None:
    locks = repos.locks
    now = time.time()
    work = TickWork(
        seq=42,
        kind="update",
        priority=10,
        payloads={"neutral": b'{"aps":{"timestamp":1,"alert":{"title":"W"}}}'},
        alert=True,
        bounds=("k3", "k6"),
        published_at=now - 1.0,
    )
    board = Board("77", TICK, owner="i1#aa", lease_epoch=3, owner_epoch=2, work=work)
    assert await locks.put_hot_match("eu", "77", owner="i1#aa", epoch=3)
    assert await locks.publish_share_board("77", TICK, board.to_item(), lease_epoch=3, ttl_s=600)
    held, _ = await locks.acquire_fenced(shard_key("77", TICK, 42, 1), "i2#bb", 30.0)
    assert held is not None and await locks.extend_fenced(held, 30.0, fields={"handed": "k5"})
    done, _ = await locks.acquire_fenced(shard_key("77", TICK, 42, 2), "i1#aa", 30.0)
    assert done is not None
    assert await locks.extend_fenced(done, 600.0, fields={"doneAt": now, "accepted": 3, "total": 3})
    view = await region_shares(locks, "eu", now=time.time())
    assert view["hot"]["77"]["owner"] == "i1" and view["hot"]["77"]["epoch"] == 3
    tick = view["boards"]["77"]["tick"]
    assert (tick["owner"], tick["seq"], tick["kind"], tick["shards"], tick["done"]) == (
        "i1",
        42,
        "update (alert)",
        3,
        1,
    )
    assert tick["helpers"] == ["i1", "i2"]
    waiting, holding, finished = tick["shard_list"]
    assert waiting == {"shard": 0, "state": "waiting"}
    assert holding["state"] == "held" and holding["holder"] == "i2" and holding["handed"] == "k5"
    assert 0 < holding["lease_left_s"] <= 30
    assert finished["state"] == "done" and finished["accepted"] == 3 and finished["total"] == 3
    assert view["helpers"] == {}
    assert await locks.say_helping("eu", "i2#bb", until=now + 30)
    assert (await region_shares(locks, "eu", now=now))["helpers"] == {"i2": 30.0}
    assert await region_shares(locks, "us", now=time.time()) == {"hot": {}, "helpers": {}, "boards": {}}
