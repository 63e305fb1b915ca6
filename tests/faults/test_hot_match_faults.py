"""A hot match shared by three engines (``sightscreen run`` processes), faults injected mid-shard.

The match has 300 per-token followers over a ``[fanout].share_above`` of 100, in shards of 50, so each of its
fan-outs is delivered by every engine: its owner and two helpers. The project's APNs server answers every push
10 ms late, so an alerting shard's chunks (each handed over only once the one before is answered) take long
enough for a fault to land in the middle of one. Each process signs its provider tokens with a key of its own:
the APNs server's record says who pushed what, and its ``on_answer`` hook fires the fault at an exact accepted
push (the ``nth`` alert of one wicket pushed by the process in question, once the helpers follow the match):

- ``kill -9`` of the owner mid-shard, and of a helper mid-shard;
- a helper cut from DynamoDB mid-shard (it reaches DynamoDB through a fault proxy, cut): it pushes
  nothing past its fence, and its shard is taken up by another engine;
- a helper stopped (``SIGSTOP``) mid-shard with pushes queued, resumed once another engine delivered its shard:
  none of its pushes to that shard's sessions is accepted after the lease it held ran out;
- a takeover while helpers work: the owner stopped mid-shard, a successor takes the match over and continues
  the work item (recorded with the alert intent), the old owner resumed: it pushes nothing more of it.

The match is then played to its end, and judged per token as the ownership tests are (``tests.harness.records``,
``check_deliveries``): every wicket standing on the tape reached every token, every token got the end, no
token was shown an alert twice (every accepted push with an alert counts); the fault's wicket was pushed by more
than one process (it was shared), and the tokens that got it without its alert are at most one chunk of one
shard: the chunk the faulted process had in flight.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from daemon.cricket.share import TICK, Board, TickWork, shard_index, shard_keys
from daemon.replay.synth import synthesise
from daemon.store.locks import instance_of, shard_key
from tests.harness.cluster import Cluster, Instance, admin_request, check_deliveries, metric_sum
from tests.harness.fault_proxy import FaultProxy
from tests.harness.records import Alert, alerts_shown_twice, aps, event_ids, record_kid

pytestmark = pytest.mark.slow

FOLLOWERS = 300
FANOUT = {
    "share_above": 100,
    "shard_size": 50,
    "board_poll_s": 0.2,
    "hot_list_poll_s": 1.0,
    "shard_lease_s": 4.0,
    "shard_renew_every_s": 1.0,
}
MATCH = {"alert_chunk_first": 8, "alert_chunk_max": 32, "session_refresh_s": 30.0}
LEASE_S = 8.0  # the match lease: long enough that moto (one thread) on a loaded machine does not churn owners
INSTANCES = 3
NTH = 12  # the fault lands at a process's 12th accepted alert of a wicket: its shard's second chunk


def _headline(record: dict[str, Any]) -> tuple[str, str]:
    events = (aps(record).get("content-state") or {}).get("events") or [{}]
    return str(events[0].get("type")), str(events[0].get("subject"))


def _wicket_alert(record: dict[str, Any]) -> bool:
    a = aps(record)
    return "alert" in a and a.get("event") == "update" and _headline(record)[0] == "wicket"


class HotMatch:
    """The cluster, its match, and what the faults need to know about it."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.match_id = str(cluster.tapes[0].fixture_id)
        self.tokens = cluster.matches[self.match_id].tokens  # update token -> visitor key
        self.fault_at: dict[str, Any] | None = None
        self.fault_kid: str | None = None
        self.fault_wicket: tuple[str, str] | None = None
        self.fault_board: Board | None = None  # the tick item the fault landed in

    async def owner_slot(self) -> int:
        with trio.fail_after(60):
            while True:
                item = await self.cluster.repos.active_matches.get_active_match_state(self.match_id)
                if item and item.get("instanceId"):
                    slot = self.cluster.slot_of(instance_id=instance_of(str(item["instanceId"])))
                    if slot is not None:
                        return slot
                await trio.sleep(0.2)

    async def helpers_follow(self, slots: list[int]) -> None:
        """Every helper follows the hot match with the whole audience read."""
        with trio.fail_after(90):
            for slot in slots:
                path = self.cluster.admin_socket(self.cluster.instances[slot])
                while True:
                    view = await admin_request(path, "shares") or {}
                    followed = ((view.get("helping_here") or {}).get("followed") or {}).get(self.match_id)
                    if followed and followed.get("sessions") == FOLLOWERS:
                        break
                    await trio.sleep(0.3)

    def arm(self, kid: str, fault: Callable[[dict[str, Any]], None], nth: int = NTH) -> trio.Event:
        """Fire ``fault`` at the ``nth`` accepted alert of one wicket that the process signing with ``kid``
        pushed (counted from now; a wicket it pushed fewer of does not count)."""
        fired = trio.Event()
        counted: list[dict[str, Any]] = []

        def on_answer(record: dict[str, Any]) -> None:
            if fired.is_set() or record.get("status") != 200 or record_kid(record) != kid:
                return
            if record.get("token") not in self.tokens or not _wicket_alert(record):
                return
            if counted and _headline(record) != _headline(counted[0]):
                counted.clear()  # a later wicket: count afresh
            counted.append(record)
            if len(counted) >= nth:
                self.fault_at, self.fault_kid, self.fault_wicket = record, kid, _headline(record)
                fault(record)
                fired.set()

        self.cluster.apns.on_answer = on_answer
        return fired

    async def fired(self, event: trio.Event) -> None:
        """Wait for the fault; note the work item it landed in."""
        with trio.fail_after(120):
            await event.wait()
        boards = await self.cluster.repos.locks.get_share_boards([self.match_id], [TICK])
        self.fault_board = Board.from_item(boards[(self.match_id, TICK)])
        assert isinstance(self.fault_board.work, TickWork)
        assert self.fault_board.work.stamp == aps(self.fault_at or {}).get("timestamp"), "the fault's item"

    async def fault_shards(self) -> dict[int, dict[str, Any]]:
        """The records of the fault's work item's shards, by index."""
        assert self.fault_board is not None
        work = self.fault_board.work
        keys = [shard_key(self.match_id, TICK, work.seq, i) for i in range(work.shards)]
        found = await self.cluster.repos.locks.get_shards(keys)
        return {i: found[k] for i, k in enumerate(keys) if k in found}

    async def resumed_shards(self) -> int:
        """Shards of the fault's work item taken up from another holder (their lease's epoch above 1)."""
        return sum(1 for item in (await self.fault_shards()).values() if int(item.get("epoch", 0)) > 1)

    async def held_shard(self, instance_id: str) -> tuple[int, set[str], float, Board]:
        """The shard of the fault's tick item ``instance_id`` holds: its index, the session keys in it, its
        lease's expiry (epoch seconds) and the board."""
        assert self.fault_board is not None
        board = self.fault_board
        for i, item in (await self.fault_shards()).items():
            if instance_of(str(item["owner"])) == instance_id and item.get("doneAt") is None:
                return (
                    i,
                    set(shard_keys(self.tokens.values(), board.work.bounds, i)),
                    float(item["expiresAt"]),
                    board,
                )
        raise AssertionError(f"{instance_id} holds no shard of the fault's item")

    async def shard_done(self, board: Board, index: int) -> None:
        """Wait until another engine has delivered the shard (its record settled)."""
        key = shard_key(self.match_id, TICK, board.work.seq, index)
        record: dict[str, Any] = {}
        with trio.move_on_after(120):
            while (record := (await self.cluster.repos.locks.get_shards([key])).get(key, {})).get(
                "doneAt"
            ) is None:
                await trio.sleep(0.5)
            return
        raise AssertionError(f"shard {index} of the fault's item was not delivered: {record}")

    async def owner_is(self, inst: Instance) -> bool:
        item = await self.cluster.repos.active_matches.get_active_match_state(self.match_id)
        return item is not None and instance_of(str(item.get("instanceId"))) == inst.instance_id

    def stale(self, kid: str, sessions: set[str], after: float) -> list[dict[str, Any]]:
        """Accepted pushes by ``kid`` after ``after`` to ``sessions`` of the fault's work item (the alert's
        timestamp): what the process had queued for the shard it held."""
        assert self.fault_at is not None
        stamp = aps(self.fault_at).get("timestamp")
        return [
            r
            for r in self.cluster.apns.records
            if r.get("status") == 200
            and record_kid(r) == kid
            and r["time"] > after
            and self.tokens.get(r["token"]) in sessions
            and aps(r).get("timestamp") == stamp
        ]

    async def play_to_end(self) -> None:
        with trio.fail_after(300):
            while not await self.cluster.wait_all_ended(5.0):
                pass

    def judge(self) -> None:
        """Per token: every standing wicket and the end reached it, no alert was shown to it twice. The fault's
        wicket was pushed by more than one process, and the tokens it reached without its alert lie in one
        chunk of one shard (the faulted process's chunk in flight)."""
        check_deliveries(self.cluster)
        by_token = self.cluster.deliveries()
        for token in self.tokens:
            alerts: list[Alert] = []
            for n, r in enumerate(by_token.get(token, [])):
                if "alert" in aps(r):
                    events = (aps(r).get("content-state") or {}).get("events") or [{}]
                    ball = events[0].get("ballId")
                    alerts.append((*_headline(r), None if ball is None else str(ball), n))
            assert alerts_shown_twice(alerts) == [], f"{self.tokens[token]} was shown an alert twice"
        wicket = self.fault_wicket
        assert wicket is not None and self.fault_board is not None
        accepted = [
            r for r in self.cluster.apns.records if r.get("status") == 200 and r["token"] in self.tokens
        ]
        pushers = {record_kid(r) for r in accepted if "alert" in aps(r) and _headline(r) == wicket}
        assert len(pushers) >= 2, f"the wicket's fan-out was not shared: {pushers}"
        reached = {r["token"] for r in accepted if wicket in event_ids(r)}
        alerted = {r["token"] for r in accepted if "alert" in aps(r) and _headline(r) == wicket}
        assert reached == set(self.tokens), "the fault's wicket reached every token"
        quiet = sorted(self.tokens[t] for t in reached - alerted)
        bounds = self.fault_board.work.bounds
        assert len(quiet) <= MATCH["alert_chunk_max"], f"{len(quiet)} tokens missed the alert: {quiet}"
        assert len({shard_index(k, bounds) for k in quiet}) <= 1, (
            f"missed alerts over several shards: {quiet}"
        )


async def _run(
    tmp_path: Path,
    moto_url: str,
    seed: int,
    scenario: Callable[[HotMatch, trio.Nursery], Any],
    *,
    slot_config: dict[int, dict[str, dict[str, Any]]] | None = None,
    owner_first: bool = False,
    apns_max_streams: int = 1000,
) -> HotMatch:
    """Play the match on three engines through ``scenario`` to its end, then judge it. ``owner_first``: slot 0
    alone until it owns the match, then the helpers (so a fault meant for a helper can be set up for a slot
    that does not own the match)."""
    tape = synthesise("T10", seed=seed)
    cluster = Cluster(
        tmp_path,
        moto_url=moto_url,
        tapes=[tape],
        table_prefix=f"hot{seed}-",
        speed=100.0,
        followers_per_match=FOLLOWERS,
        lease_s=LEASE_S,
        cadence_s=0.25,
        cycle_s=1.0,
        innings_break_s=600.0,
        extra_config={"fanout": FANOUT, "match": MATCH},
        slot_config=slot_config,
        apns_max_streams=apns_max_streams,
    )
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery, instances=1 if owner_first else INSTANCES)
        cluster.apns.delay(0.01)  # every answer 10 ms late: an alerting shard's chunks take a while
        hot = HotMatch(cluster)
        try:
            if owner_first:
                assert await hot.owner_slot() == 0
                for slot in range(1, INSTANCES):
                    cluster.spawn(slot)
                await cluster.wait_healthy(timeout=120)
            await scenario(hot, nursery)
            await hot.play_to_end()
        finally:
            await cluster.stop_all()
            nursery.cancel_scope.cancel()
    hot.judge()
    return hot


async def _pushes_failed(cluster: Cluster, inst: Instance) -> float:
    """The pushes ``inst``'s sender failed (``sightscreen_pushes`` with outcome ``failed``), from its metrics."""
    text = await admin_request(cluster.admin_socket(inst), "metrics")
    return metric_sum(str(text), "sightscreen_pushes_total", outcome="failed")


def _kill(cluster: Cluster, slot: int) -> Callable[[dict[str, Any]], None]:
    inst = cluster.instances[slot]
    return lambda record: inst.proc.send_signal(signal.SIGKILL)


async def test_the_owner_killed_mid_shard_loses_nothing_and_shows_no_alert_twice(
    tmp_path: Path, moto_server: Any
) -> None:
    async def scenario(hot: HotMatch, nursery: trio.Nursery) -> None:
        owner = await hot.owner_slot()
        await hot.helpers_follow([s for s in hot.cluster.instances if s != owner])
        await hot.fired(hot.arm(hot.cluster.instances[owner].key_id, _kill(hot.cluster, owner)))

    hot = await _run(tmp_path, moto_server.url, 61, scenario)
    assert await hot.resumed_shards() >= 1, "the dead owner's shard was taken up from its watermark"


async def test_a_helper_killed_mid_shard_loses_nothing_and_shows_no_alert_twice(
    tmp_path: Path, moto_server: Any
) -> None:
    async def scenario(hot: HotMatch, nursery: trio.Nursery) -> None:
        owner = await hot.owner_slot()
        helpers = [s for s in hot.cluster.instances if s != owner]
        await hot.helpers_follow(helpers)
        await hot.fired(hot.arm(hot.cluster.instances[helpers[0]].key_id, _kill(hot.cluster, helpers[0])))

    hot = await _run(tmp_path, moto_server.url, 62, scenario)
    assert await hot.resumed_shards() >= 1, "the dead helper's shard was taken up from its watermark"


async def test_a_helper_cut_from_dynamodb_mid_shard_stops_at_its_fence_and_its_shard_is_taken_up(
    tmp_path: Path, moto_server: Any
) -> None:
    """A helper reaches DynamoDB through a fault proxy (the owner, slot 0, starts alone and takes the match
    first; the helpers join it), cut at its 12th alert of a wicket (nothing passes, its connections reset and
    refused) and restored once its shard was delivered by another engine (at least 10 s later). Cut off, the helper can neither renew its shard's lease
    nor confirm the owner on the match lock: its pushes stop at the earlier of the two, at most a shard lease
    after its last answered call (had the match moved to it meanwhile, at most a match lease: its own match's
    fence), and another engine takes its shard up from its watermark once its lease runs out."""
    host, port = moto_server.url.split("//", 1)[1].split(":")
    proxy = FaultProxy(host, int(port))

    async def scenario(hot: HotMatch, nursery: trio.Nursery) -> None:
        await hot.helpers_follow([1, 2])
        target = hot.cluster.instances[1]
        cut_at: list[float] = []

        def cut_off(record: dict[str, Any]) -> None:
            # the link goes down: nothing more passes, new connections are refused and the open ones reset (a
            # request held half-sent by a silent blackhole would hang moto, one thread, for every engine)
            proxy.set(blackhole=True, refuse=True)
            proxy.reset()
            cut_at.append(time.time())

        await hot.fired(hot.arm(target.key_id, cut_off))
        bound = LEASE_S if await hot.owner_is(target) else FANOUT["shard_lease_s"]
        index, _, _, board = await hot.held_shard(target.instance_id)
        await hot.shard_done(board, index)  # taken up by another engine while the helper is cut off
        await trio.sleep(max(0.0, cut_at[0] + 10.0 - time.time()))
        restored_at = time.time()
        proxy.clear()
        fence = cut_at[0] + bound + 0.5  # its last answered renewal came before the cut
        late = [
            r
            for r in hot.cluster.apns.records
            if r.get("status") == 200 and record_kid(r) == target.key_id and fence < r["time"] < restored_at
        ]
        assert late == [], f"the cut-off helper still pushed {len(late)} times past its fence"

    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        slots = {1: {"dynamodb": {"endpoint_url": f"http://127.0.0.1:{proxy.port}"}}}
        hot = await _run(tmp_path, moto_server.url, 63, scenario, slot_config=slots, owner_first=True)
        nursery.cancel_scope.cancel()
    assert await hot.resumed_shards() >= 1, "the cut-off helper's shard was taken up from its watermark"


async def test_a_helper_stopped_past_its_shards_lease_pushes_nothing_of_it_when_resumed(
    tmp_path: Path, moto_server: Any
) -> None:
    """A helper is stopped mid-shard with pushes queued in its sender, past its shard's lease, then resumed
    once another engine has delivered that shard: its sender finds the queued pushes past their fence, and none
    of them is accepted. The APNs server lets each connection have two streams open, so most of the chunk in
    hand waits in the helper's sender when it is stopped (with APNs' own limit of a thousand, the whole chunk
    is on the wire at once and the fence is never put to the test)."""

    async def scenario(hot: HotMatch, nursery: trio.Nursery) -> None:
        owner = await hot.owner_slot()
        helpers = [s for s in hot.cluster.instances if s != owner]
        await hot.helpers_follow(helpers)
        target = hot.cluster.instances[helpers[0]]
        failed_before = await _pushes_failed(hot.cluster, target)
        await hot.fired(hot.arm(target.key_id, lambda record: target.proc.send_signal(signal.SIGSTOP)))
        index, sessions, expires_at, board = await hot.held_shard(target.instance_id)
        await hot.shard_done(board, index)  # taken up from its watermark once its lease ran out
        target.proc.send_signal(signal.SIGCONT)
        await trio.sleep(3.0)
        late = hot.stale(target.key_id, sessions, expires_at)
        assert late == [], f"{len(late)} of its queued pushes went out after its lease ran out"
        # the fence was put to the test: pushes were waiting in its sender, and were never sent
        assert await _pushes_failed(hot.cluster, target) > failed_before, "no push of it waited at the stop"

    hot = await _run(tmp_path, moto_server.url, 64, scenario, apns_max_streams=2)
    assert await hot.resumed_shards() >= 1, "the stopped helper's shard was taken up from its watermark"


async def test_a_takeover_while_helpers_work_continues_the_work_item_and_the_old_owner_pushes_nothing_more(
    tmp_path: Path, moto_server: Any
) -> None:
    """The owner is stopped mid-shard while the helpers work on the same wicket; a successor takes the match
    over once its lease ran out and continues the very work item (the intent records it: every shard of that
    item is delivered, the old owner's taken up from its watermark, every alert of the wicket with the
    intent's timestamp). The old owner, resumed once its shard was delivered by another engine, pushes
    nothing of it: the pushes it had queued (two streams a connection, as in the stopped helper's case) fail
    at its fence."""

    async def scenario(hot: HotMatch, nursery: trio.Nursery) -> None:
        owner = await hot.owner_slot()
        await hot.helpers_follow([s for s in hot.cluster.instances if s != owner])
        old = hot.cluster.instances[owner]
        failed_before = await _pushes_failed(hot.cluster, old)
        await hot.fired(hot.arm(old.key_id, lambda record: old.proc.send_signal(signal.SIGSTOP)))
        index, sessions, expires_at, board = await hot.held_shard(old.instance_id)
        with trio.fail_after(60):
            while True:
                item = await hot.cluster.repos.active_matches.get_active_match_state(hot.match_id)
                if item and instance_of(str(item["instanceId"])) != old.instance_id:
                    break
                await trio.sleep(0.2)
        await hot.shard_done(board, index)
        old.proc.send_signal(signal.SIGCONT)
        await trio.sleep(3.0)
        late = hot.stale(old.key_id, sessions, expires_at)
        assert late == [], f"the old owner pushed {len(late)} of its shard after the takeover"
        assert await _pushes_failed(hot.cluster, old) > failed_before, "no push of it waited at the stop"

    hot = await _run(tmp_path, moto_server.url, 65, scenario, apns_max_streams=2)
    assert hot.fault_board is not None and hot.fault_wicket is not None
    assert isinstance(hot.fault_board.work, TickWork)
    shards = await hot.fault_shards()
    assert sorted(shards) == list(range(hot.fault_board.work.shards)), "every shard of the item was taken"
    assert all(item.get("doneAt") is not None for item in shards.values()), "the item was completed"
    assert await hot.resumed_shards() >= 1, "the old owner's shard was taken up from its watermark"
    stamps = {
        aps(r).get("timestamp")
        for r in hot.cluster.apns.records
        if r.get("status") == 200 and "alert" in aps(r) and _headline(r) == hot.fault_wicket
    }
    assert stamps == {hot.fault_board.work.stamp}, "the successor completed the very same update"
