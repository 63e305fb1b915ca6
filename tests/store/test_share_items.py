"""cricket-locks as a hot match's shared fan-out uses it, on moto's server: the region's hot list (an entry per
match, never taken over or off by an owner older than the one that wrote it), the boards (one per match and
lane, never overwritten by a stale owner), and the shards' items read back in one strongly consistent batch,
their leases taken and settled by the one lease's store calls."""

from __future__ import annotations

from daemon.cricket.share import TICK, Board, ShardRecord, TickWork
from daemon.store import Repositories
from daemon.store.locks import shard_key, share_board_key

T0 = 1_800_000_000.0


def _board(owner: str, epoch: int, seq: int) -> dict[str, object]:
    work = TickWork(
        seq=seq,
        kind="update",
        priority=5,
        payloads={"neutral": b'{"aps":{"timestamp":1}}'},
        alert=False,
        bounds=("k5",),
        published_at=T0,
    )
    return Board("77", TICK, owner=owner, lease_epoch=epoch, owner_epoch=1, work=work).to_item()


async def test_the_hot_list_takes_an_entry_per_match_and_only_a_newer_owner_replaces_or_removes_it(
    repos: Repositories,
) -> None:
    locks = repos.locks
    assert (await locks.get_hot_list("eu")).matches == {}
    assert await locks.put_hot_match("eu", "77", owner="a#1", epoch=3, now=T0)
    assert await locks.put_hot_match("eu", "78", owner="b#1", epoch=1, now=T0)
    assert (await locks.get_hot_list("eu")).matches == {
        "77": {"owner": "a#1", "epoch": 3, "since": T0},
        "78": {"owner": "b#1", "epoch": 1, "since": T0},
    }
    # a stale owner (an older epoch) neither replaces nor removes the newer owner's entry
    assert await locks.put_hot_match("eu", "77", owner="c#1", epoch=4, now=T0 + 1)
    assert not await locks.put_hot_match("eu", "77", owner="a#1", epoch=3, now=T0 + 2)
    assert not await locks.remove_hot_match("eu", "77", epoch=3)
    assert (await locks.get_hot_list("eu")).matches["77"]["owner"] == "c#1"
    assert await locks.remove_hot_match("eu", "77", epoch=4)
    assert not await locks.remove_hot_match("eu", "77", epoch=9)  # not listed any more
    assert set((await locks.get_hot_list("eu")).matches) == {"78"}
    assert (await locks.get_hot_list("us")).matches == {}


async def test_helpers_say_they_help_beside_the_hot_matches_and_a_stale_word_goes_only_as_it_was_read(
    repos: Repositories,
) -> None:
    locks = repos.locks
    assert await locks.put_hot_match("eu", "77", owner="a#1", epoch=3, now=T0)
    assert await locks.say_helping("eu", "b#1", until=T0 + 30)
    assert await locks.say_helping("eu", "c#1", until=T0 + 30.5)
    listed = await locks.get_hot_list("eu")
    assert listed.helpers == {"b#1": T0 + 30, "c#1": T0 + 30.5}
    assert set(listed.matches) == {"77"}, "the words are not hot matches"
    # c takes b's word off as read: it goes; a word b said again since stays
    assert await locks.say_helping("eu", "b#1", until=T0 + 60)
    assert not await locks.say_helping("eu", "c#1", until=T0 + 90, stale={"b#1": T0 + 30})
    assert (await locks.get_hot_list("eu")).helpers == {"b#1": T0 + 60, "c#1": T0 + 30.5}, "nothing written"
    assert await locks.say_helping("eu", "c#1", until=T0 + 120, stale={"b#1": T0 + 60})
    assert (await locks.get_hot_list("eu")).helpers == {"c#1": T0 + 120}
    await locks.stop_helping("eu", "c#1")
    await locks.stop_helping("eu", "c#1")  # again: nothing to take off, no error
    listed = await locks.get_hot_list("eu")
    assert listed.helpers == {} and set(listed.matches) == {"77"}
    assert (await locks.get_hot_list("us")).helpers == {}


async def test_a_board_is_never_overwritten_by_an_older_owner_and_lanes_stand_apart(
    repos: Repositories,
) -> None:
    locks = repos.locks
    assert await locks.publish_share_board("77", TICK, _board("a#1", 3, 10), lease_epoch=3, ttl_s=60, now=T0)
    assert await locks.publish_share_board("77", TICK, _board("a#1", 3, 11), lease_epoch=3, ttl_s=60, now=T0)
    assert await locks.publish_share_board("77", TICK, _board("b#1", 4, 12), lease_epoch=4, ttl_s=60, now=T0)
    # the owner before it wakes up and publishes: refused
    assert not await locks.publish_share_board("77", TICK, _board("a#1", 3, 13), lease_epoch=3, ttl_s=60)
    boards = await locks.get_share_boards(["77", "78"], ["tick", "start"])
    assert set(boards) == {("77", "tick")}
    item = boards[("77", "tick")]
    assert item["lockKey"] == share_board_key("77", "tick") and item["expiresAt"] == T0 + 60
    assert Board.from_item(item).work.seq == 12 and Board.from_item(item).owner == "b#1"
    assert not await locks.remove_share_board("77", TICK, lease_epoch=3)
    assert await locks.remove_share_board("77", TICK, lease_epoch=4)
    assert await locks.get_share_boards(["77"], ["tick"]) == {}


async def test_shard_items_are_leases_read_back_in_one_batch(repos: Repositories) -> None:
    locks = repos.locks
    keys = [shard_key("77", TICK, 12, i) for i in range(3)]
    assert await locks.get_shards(keys) == {}
    lease, item = await locks.acquire_fenced(keys[1], "h#1", 5.0, now=T0, fields={"role": "helper"})
    assert lease is not None and item is not None
    assert await locks.extend_fenced(lease, 5.0, now=T0 + 1, fields={"handed": "k3"})
    # the holder died: after its lease another takes the shard up, its watermark with it
    taken, item = await locks.acquire_fenced(keys[1], "h#2", 5.0, now=T0 + 7)
    assert taken is not None and taken.epoch == 2 and item is not None and item["handed"] == "k3"
    assert await locks.extend_fenced(lease, 5.0, now=T0 + 8, fields={"handed": "k9"}) is None  # fenced
    assert await locks.extend_fenced(
        taken, 3600, now=T0 + 9, fields={"doneAt": T0 + 9, "accepted": 4, "total": 4}
    )
    found = await locks.get_shards([*keys, keys[1]])
    assert set(found) == {keys[1]}
    record = ShardRecord.from_item(found[keys[1]])
    assert record.done and record.handed == "k3" and record.counts == {"accepted": 4, "total": 4}
    assert record.owner == "h#2" and record.epoch == 2
