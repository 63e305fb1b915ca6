"""A hot match's fan-outs shared by the region's engines, in one process: the owner (a ``MatchActor`` whose
match's per-token audience is above ``[fanout].share_above``) and helpers (``ShareWorker``), each with its own
sender (``FakeSender``: what it was handed is what it pushed), on moto's DynamoDB.

- a routine tick and an alerting tick of a hot match reach every session exactly once, delivered by the owner
  and a helper together; the alert intent records its work item and is removed at the end;
- a helper "killed" mid-shard (its sender and its lock calls hang for good, as after ``kill -9``: nothing more
  is pushed, its shard's lease is not renewed and not released) leaves its shard to be taken up from its
  watermark once its lease runs out: every session gets the wicket, none its alert twice, at most one chunk
  without it;
- an owner killed mid-shard while a helper works: its successor continues the same work item (recorded with
  the intent), and the helper stops delivering for the dead owner at its lease's end;
- a helper gives way to its own instance's key events; a round of push-to-starts of a hot match is shared
  too, each follower started once; a match below the threshold is fanned out by its owner alone.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from actors.livework import LiveWork
from actors.match import MatchActor
from actors.settings import FanoutSettings, MatchActorSettings
from actors.shard import ShardAbandoned, ShardJob
from actors.share import Sharing
from actors.share_worker import ShareWorker
from daemon.apns.types import Push
from daemon.cricket.share import TickWork
from daemon.metrics import REGISTRY, SHARE_WAIT_CADENCES
from daemon.replay.synth import synthesise
from daemon.store.locks import match_lock_key
from tests.actors.match_helpers import make_match_actor, take_lease
from tests.doubles import FakeSender, SilencedLocks, WithLocks, sample, update

SESSIONS = 60
CHUNKS = {"alert_chunk_first": 4, "alert_chunk_max": 8}
FANOUT = FanoutSettings(
    share_above=10,
    shard_size=10,
    board_poll_s=0.02,
    hot_list_poll_s=0.1,
    shard_lease_s=2.0,
    shard_renew_every_s=0.4,
)
SHARING = Sharing(region="t", settings=FANOUT, cadence_s=lambda marquee: 1.0)
TOKENS = {f"{i:064x}" for i in range(SESSIONS)}
LEASE_S = 4.0  # the match lease where an owner dies: short, yet renewed in time on a loaded machine


def _aps(push: Push) -> dict[str, Any]:
    return dict(json.loads(push.payload)["aps"])


def _events(push: Push) -> set[tuple[str, str]]:
    return {(e["type"], e["subject"]) for e in _aps(push)["content-state"].get("events") or []}


async def _world(repos: Any, *, sessions: int = SESSIONS) -> tuple[Any, str]:
    tape = synthesise("T10", seed=3)
    match_id = str(tape.fixture_id)
    assert await repos.active_matches.register_active_match(match_id, "owner-a#1")
    await repos.live_activities.import_items(
        [
            {
                "matchId": match_id,
                "visitorKey": f"u{i:03d}#d",
                "userId": f"u{i:03d}",
                "deviceId": "d",
                "updateToken": f"{i:064x}",
                "status": "active",
            }
            for i in range(sessions)
        ]
    )
    return tape, match_id


async def _owner(
    repos: Any, match_id: str, sender: FakeSender, *, owner: str = "owner-a#1", epoch: int = 1, **kw: Any
) -> MatchActor:
    actor = make_match_actor(
        match_id, repos, sender, owner=owner, epoch=epoch, sharing=SHARING, **CHUNKS, **kw
    )
    await take_lease(actor)
    await actor.audience.refresh()
    return actor


def _helper(stores: Any, sender: FakeSender, owner: str, live: LiveWork | None = None) -> ShareWorker:
    return ShareWorker(
        region="t",
        owner_id=owner,
        stores=stores,
        sender=sender,
        live=live or LiveWork(),
        topic="app.test",
        match_settings=MatchActorSettings(**CHUNKS),
        settings=FANOUT,
        claim_hold_s=10.0,
        clock_skew_bound_s=0.5,
    )


def _first_wicket(tape: Any) -> int:
    for entry in range(len(tape)):
        if any((b.get("score") or {}).get("is_wicket") for b in tape.fixture_at(entry).get("balls") or []):
            return entry
    raise AssertionError("the tape has no wicket")


async def _tick_until(
    actor: MatchActor, tape: Any, match_id: str, entries: range, done: Callable[[], bool]
) -> None:
    for entry in entries:
        await actor.handle(update(match_id, tape.fixture_at(entry)))
        if done():
            return
    raise AssertionError("the tape ran out first")


async def _through_first_wicket(
    actor: MatchActor, tape: Any, match_id: str, done: Callable[[], bool]
) -> None:
    """Tick from three entries before the tape's first wicket until ``done`` (within 60 s)."""
    with trio.fail_after(60):
        await _tick_until(actor, tape, match_id, range(max(0, _first_wicket(tape) - 3), len(tape)), done)


async def _helper_following(worker: ShareWorker, match_id: str) -> None:
    with trio.fail_after(10):
        while match_id not in worker.followed or not worker.followed[match_id].audience.loaded.is_set():
            await trio.sleep(0.02)


def _alerting(pushes: list[Push]) -> list[Push]:
    return [p for p in pushes if "alert" in _aps(p)]


async def _hot_and_followed(repos: Any, actor: MatchActor, worker: ShareWorker, match_id: str) -> None:
    """List the match as hot as its owner does with its first shared work item, and let the helper follow it
    before the ticks that matter (a helper joins a match at most a hot list poll after it is listed)."""
    assert actor.share.update_hot(), "60 sessions over a threshold of 10: hot"
    assert actor.lease.epoch is not None
    await repos.locks.put_hot_match("t", match_id, owner=actor.instance_id, epoch=actor.lease.epoch)
    await _helper_following(worker, match_id)


# --- delivered together ------------------------------------------------------------------------------------


async def test_a_hot_matchs_routine_and_alerting_ticks_reach_every_session_once_from_owner_and_helper(
    repos: Any,
) -> None:
    tape, match_id = await _world(repos)
    owner_sender = FakeSender(answer_after_s=0.004)  # the owner pushes slowly: the helper takes shards too
    helper_sender = FakeSender()
    before = _share_pushes_accepted()
    async with trio.open_nursery() as nursery:
        owner_sender.nursery = nursery
        actor = await _owner(repos, match_id, owner_sender)
        worker = _helper(repos, helper_sender, "helper-b#1")
        await nursery.start(worker.run)
        await _hot_and_followed(repos, actor, worker, match_id)
        await _through_first_wicket(
            actor, tape, match_id, lambda: bool(_alerting([*owner_sender.pushes, *helper_sender.pushes]))
        )
        nursery.cancel_scope.cancel()
    pushes = [*owner_sender.pushes, *helper_sender.pushes]
    assert helper_sender.pushes, "the helper delivered shards"
    assert owner_sender.pushes, "the owner delivered its share"
    per_tick = Counter((p.token, _aps(p)["timestamp"]) for p in pushes)
    assert max(per_tick.values()) == 1, "no session got one tick twice"
    alerted = Counter(p.token for p in _alerting(pushes))
    assert set(alerted) == TOKENS and max(alerted.values()) == 1, "every session got the alert, once"
    routine = [p for p in pushes if p.priority == 5]
    assert routine and {p.token for p in routine} == TOKENS, "a routine tick reached every session"
    assert all(p.collapse_id for p in _alerting(pushes))
    item = await repos.active_matches.get_active_match_state(match_id)
    assert item is not None and "alertIntent" not in item, "the intent was removed once every shard was done"
    assert actor.share.last["tick"]["shards"] == 6 and actor.share.last["tick"]["accepted"] == SESSIONS
    counted = {role: n - before[role] for role, n in _share_pushes_accepted().items()}
    assert counted["owner"] > 0 and counted["helper"] > 0, "each side's answers reach the metric"
    assert 2 * SESSIONS <= sum(counted.values()) <= len(pushes), "every answer of both ticks counted once"


def _share_pushes_accepted() -> dict[str, float]:
    return {
        role: REGISTRY.get_sample_value(
            "sightscreen_share_pushes_total", {"role": role, "outcome": "accepted"}
        )
        or 0.0
        for role in ("owner", "helper")
    }


async def test_an_engine_delivers_two_routine_shards_at_once_and_an_alerting_items_one_at_a_time(
    repos: Any,
) -> None:
    """``shards_at_once`` (2): the owner and a helper each keep two shards of a routine tick going (the next
    claimed while the last one's answers come back), and one of an alerting tick (a process that dies had
    one alert chunk in flight). Sampled every millisecond while every push waits 4 ms for its answer."""
    assert FANOUT.shards_at_once == 2
    tape, match_id = await _world(repos)
    owner_sender = FakeSender(answer_after_s=0.004)
    helper_sender = FakeSender(answer_after_s=0.004)
    seen: dict[str, Counter[tuple[bool, int]]] = {"owner": Counter(), "helper": Counter()}

    async with trio.open_nursery() as nursery:
        owner_sender.nursery = helper_sender.nursery = nursery
        actor = await _owner(repos, match_id, owner_sender)
        worker = _helper(repos, helper_sender, "helper-b#1")
        await nursery.start(worker.run)
        await _hot_and_followed(repos, actor, worker, match_id)

        async def watch() -> None:
            while True:
                current = actor.share.current.get("tick")
                if current is not None:
                    alert, seq = bool(current["alert"]), int(current["seq"])
                    seen["owner"][(alert, len(current["delivering"]))] += 1
                    mine = [k for k in worker.working_on if k.split(":")[3] == str(seq)]
                    seen["helper"][(alert, len(mine))] += 1
                await trio.sleep(0.001)

        nursery.start_soon(watch)
        await _through_first_wicket(
            actor,
            tape,
            match_id,
            lambda: (
                bool(_alerting([*owner_sender.pushes, *helper_sender.pushes])) and not actor.share.current
            ),
        )
        nursery.cancel_scope.cancel()
    for who, counts in seen.items():
        assert max(n for (alert, n) in counts if not alert) == 2, (
            f"the {who} never had two routine shards going"
        )
        assert max(n for (alert, n) in counts if alert) == 1, f"the {who} had two alerting shards going"
    pushes = [*owner_sender.pushes, *helper_sender.pushes]
    per_tick = Counter((p.token, _aps(p)["timestamp"]) for p in pushes)
    assert max(per_tick.values()) == 1, "no session got one tick twice"


class CountedShardReads:
    """The lock table, counting the reads of shard records (an owner's progress polls)."""

    def __init__(self, locks: Any) -> None:
        self._locks = locks
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._locks, name)

    async def get_shards(self, keys: list[str]) -> Any:
        self.reads += 1
        return await self._locks.get_shards(keys)


async def test_an_owner_delivering_a_shard_reads_the_records_when_it_ends_not_every_board_poll(
    repos: Any,
) -> None:
    """While a shard of its own is in delivery the owner reads its shards' records when one of its own ends
    (or once a renewal period, to find a holder that died), not every ``board_poll_s``: those reads cost a
    hot match's owner CPU its pushes need. The owner alone, 60 sessions in 6 shards of 10, each push
    answered 30 ms after the one before: about a second of delivery, in which reads every board poll (20 ms)
    would number about fifty; a read as each shard is taken and as each ends make about a dozen."""
    tape, match_id = await _world(repos)
    spy = CountedShardReads(repos.locks)
    sender = FakeSender(answer_after_s=0.03)
    async with trio.open_nursery() as nursery:
        sender.nursery = nursery
        actor = await _owner(WithLocks(repos, spy), match_id, sender)
        assert actor.share.update_hot()
        with trio.fail_after(60):
            await _tick_until(
                actor,
                tape,
                match_id,
                range(len(tape)),
                lambda: len(sender.pushes) >= SESSIONS and not actor.share.current,
            )
        nursery.cancel_scope.cancel()
    shards = SESSIONS // FANOUT.shard_size
    assert actor.share.last["tick"]["shards"] == shards and actor.share.last["tick"]["pushes"] == SESSIONS
    assert spy.reads <= 3 * shards, f"{spy.reads} reads of the shards' records for {shards} shards"


async def test_every_taker_of_a_helper_wakes_for_new_work_even_after_finding_none(repos: Any) -> None:
    """A helper's ``shards_at_once`` takers wait for the same wake-up; one that found nothing to take must not
    wait on a wake-up nobody will give (the board poll wakes whoever waits on the newest)."""
    worker = _helper(repos, FakeSender(), "helper-b#1")
    looked: list[Any] = []

    async def found_none() -> bool:
        looked.append(trio.lowlevel.current_task())
        return False  # at once, without waiting on anything

    worker.help_once = found_none  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker._claim_loop)
        for _ in range(3):
            await trio.testing.wait_all_tasks_blocked()
            worker._wake.set()  # what a board poll with work on it does
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert len(set(looked)) == FANOUT.shards_at_once == 2
    assert len(looked) == 6, "a taker missed a wake-up"


async def test_a_match_below_the_threshold_is_fanned_out_by_its_owner_alone(repos: Any) -> None:
    tape, match_id = await _world(repos, sessions=8)
    sender = FakeSender()
    async with trio.open_nursery() as nursery:
        actor = await _owner(repos, match_id, sender)
        worker = _helper(repos, FakeSender(), "helper-b#1")
        await nursery.start(worker.run)
        with trio.fail_after(30):
            await _tick_until(actor, tape, match_id, range(len(tape)), lambda: len(sender.pushes) >= 16)
        nursery.cancel_scope.cancel()
    assert not actor.share.hot
    assert (await repos.locks.get_hot_list("t")).matches == {}, "never listed"
    assert await repos.locks.get_share_boards([match_id], ["tick", "start"]) == {}, "nothing published"
    assert worker.followed == {} and worker.runner.delivered == 0


async def _until(what: Callable[[], bool], why: str, within_s: float = 10.0) -> None:
    with trio.fail_after(within_s):
        while not what():
            await trio.sleep(0.02)
    assert what(), why


async def test_a_hot_match_no_other_engine_helps_goes_alone_until_one_says_it_helps(repos: Any) -> None:
    """The owner's own engine's share worker reads the hot list (it follows no match of its own); while no
    other engine's word is there, the owner fans out alone: every push its own, no board published, the match
    listed all the same. A helper that starts follows the listed match and says it helps; the owner shares
    its next fan-outs; the helper stopped takes its word back and the owner goes alone again."""
    tape, match_id = await _world(repos)
    owner_sender = FakeSender(answer_after_s=0.004)  # slow enough that a helper takes shards
    helper_sender = FakeSender()
    own_worker = _helper(repos, FakeSender(), "owner-a#1")
    sharing = Sharing(region="t", settings=FANOUT, cadence_s=lambda marquee: 1.0, helpers=own_worker.helpers)
    entries = iter(range(len(tape)))

    async def tick_until(done: Callable[[], bool]) -> None:
        with trio.fail_after(60):
            for entry in entries:
                await actor.handle(update(match_id, tape.fixture_at(entry)))
                if done():
                    return
        raise AssertionError("the tape ran out first")

    async with trio.open_nursery() as nursery:
        owner_sender.nursery = nursery
        actor = make_match_actor(match_id, repos, owner_sender, owner="owner-a#1", sharing=sharing, **CHUNKS)
        await take_lease(actor)
        await actor.audience.refresh()
        await nursery.start(own_worker.run)
        await tick_until(lambda: len(owner_sender.pushes) >= 2 * SESSIONS)
        assert actor.share.hot and not actor.share.shared and actor.share.describe()["alone"]
        assert match_id in (await repos.locks.get_hot_list("t")).matches, "listed for helpers to find"
        assert await repos.locks.get_share_boards([match_id], ["tick"]) == {}, "nothing published"
        assert own_worker.helpers() == 0 and not own_worker.followed, "its own match is not followed"

        helper_scope = trio.CancelScope()

        async def helper_runs() -> None:
            with helper_scope:
                await worker.run()

        worker = _helper(repos, helper_sender, "helper-b#1")
        nursery.start_soon(helper_runs)
        await _helper_following(worker, match_id)
        await _until(lambda: own_worker.helpers() == 1, "the owner's engine read the helper's word")
        assert actor.share.shared
        await tick_until(lambda: len(helper_sender.pushes) > 0)
        assert await repos.locks.get_share_boards([match_id], ["tick"]), "published once helped"

        helper_scope.cancel()
        await _until(lambda: own_worker.helpers() == 0, "the stopped helper took its word back")
        assert (await repos.locks.get_hot_list("t")).helpers == {}
        helped = len(helper_sender.pushes)
        alone_from = len(owner_sender.pushes)
        SHARE_WAIT_CADENCES.labels(match_id).set(3.0)  # as a shared item whose shards waited leaves it
        await tick_until(lambda: len(owner_sender.pushes) >= alone_from + 2 * SESSIONS)
        nursery.cancel_scope.cancel()
    assert not actor.share.shared and len(helper_sender.pushes) == helped
    waiting = sample("sightscreen_share_shard_wait_cadences", {"match_id": match_id})
    assert waiting == 0, "no shard waits while the owner goes alone: the alert's gauge says so"
    per_tick = Counter((p.token, _aps(p)["timestamp"]) for p in [*owner_sender.pushes, *helper_sender.pushes])
    assert max(per_tick.values()) == 1, "no session got one tick twice, alone or shared"


# --- a helper dies -------------------------------------------------------------------------------------------


class KillAfter:
    """A ``before_each`` hook: after ``n`` alerting pushes handed over, the process "dies": its lock calls hang
    for good (no renewal, no release) and so does the push being handed (nothing more goes out)."""

    def __init__(self, n: int, locks: SilencedLocks | None = None) -> None:
        self.n = n
        self.locks = locks
        self.alerting = 0
        self.dead = trio.Event()

    async def __call__(self, push: Push) -> None:
        if self.dead.is_set():
            await trio.sleep_forever()
        if "alert" in _aps(push):
            if self.alerting >= self.n:
                if self.locks is not None:
                    self.locks.silent = True
                self.dead.set()
                await trio.sleep_forever()
            self.alerting += 1


@pytest.mark.parametrize("killed_after", [0, 3, 9])
async def test_a_helper_killed_mid_shard_is_taken_up_from_its_watermark_without_a_double_alert(
    repos: Any, killed_after: int
) -> None:
    tape, match_id = await _world(repos)
    silenced = SilencedLocks(repos.locks)
    kill = KillAfter(killed_after, silenced)
    owner_sender = FakeSender(answer_after_s=0.01)
    helper_sender = FakeSender(before_each=kill)
    resumed_before = sample("sightscreen_share_shards_total", {"role": "owner", "event": "resumed"})
    async with trio.open_nursery() as nursery:
        owner_sender.nursery = nursery
        actor = await _owner(repos, match_id, owner_sender)
        worker = _helper(WithLocks(repos, silenced), helper_sender, "helper-b#1")
        await nursery.start(worker.run)
        await _hot_and_followed(repos, actor, worker, match_id)
        wicket_at = _first_wicket(tape)
        with trio.fail_after(60):
            await _tick_until(
                actor,
                tape,
                match_id,
                range(max(0, wicket_at - 2), len(tape)),
                lambda: bool(_alerting(owner_sender.pushes)) and not actor.share.current,
            )
        nursery.cancel_scope.cancel()
    assert kill.dead.is_set(), "the helper died mid-shard"
    pushes = [*owner_sender.pushes, *helper_sender.pushes]
    wicket = next(e for p in _alerting(pushes) for e in _events(p) if e[0] == "wicket")
    reached = {p.token for p in pushes if wicket in _events(p)}
    assert reached == TOKENS, "every session got the wicket"
    alerted = Counter(p.token for p in _alerting(pushes) if wicket in _events(p))
    assert max(alerted.values()) == 1, "no session was shown the alert twice"
    assert len(TOKENS - set(alerted)) <= CHUNKS["alert_chunk_max"], "at most the chunk in flight"
    resumed = sample("sightscreen_share_shards_total", {"role": "owner", "event": "resumed"}) - resumed_before
    assert resumed >= 1, "the dead helper's shard was taken up from its watermark"


# --- the owner dies ------------------------------------------------------------------------------------------


async def test_an_owner_killed_while_a_helper_works_is_succeeded_on_the_same_work_item(repos: Any) -> None:
    """The owner dies mid-shard with a helper working; the match lease is short (4 s, renewed as the actor's run loop does until the owner dies) so it
    runs out. Its
    successor finds the intent with its work item and continues it; the helper stops delivering for the dead
    owner at that owner's lease's end (it confirms the owner on the match lock) and takes up the successor's
    shards. Every session gets the wicket, none its alert twice."""
    tape, match_id = await _world(repos)
    silenced = SilencedLocks(repos.locks)
    kill = KillAfter(6, silenced)
    first_sender = FakeSender(before_each=kill)
    helper_sender = FakeSender(answer_after_s=0.02)
    second_sender = FakeSender()
    async with trio.open_nursery() as nursery:
        helper_sender.nursery = nursery
        first = make_match_actor(
            match_id,
            WithLocks(repos, silenced),
            first_sender,
            owner="owner-a#1",
            epoch=1,
            sharing=SHARING,
            lease_s=LEASE_S,
            **CHUNKS,
        )
        await take_lease(first)
        await first.audience.refresh()
        worker = _helper(repos, helper_sender, "helper-b#1")
        await nursery.start(worker.run)
        await _hot_and_followed(repos, first, worker, match_id)
        wicket_at = _first_wicket(tape)
        with trio.fail_after(60):
            async with trio.open_nursery() as owner_nursery:

                async def tick_first() -> None:
                    for entry in range(max(0, wicket_at - 2), len(tape)):
                        await first.handle(update(match_id, tape.fixture_at(entry)))

                owner_nursery.start_soon(first.lease.keep)  # as its run loop would, until it dies
                owner_nursery.start_soon(tick_first)
                await kill.dead.wait()
                owner_nursery.cancel_scope.cancel()  # the dead owner's tasks are gone
            item = await repos.active_matches.get_active_match_state(match_id)
            assert item is not None and item["alertIntent"]["share"]["seq"] > 0, "the intent names its item"
            # the successor takes the match once the dead owner's lease ran out
            while True:
                taken, _ = await repos.locks.acquire_fenced(match_lock_key(match_id), "owner-c#3", LEASE_S)
                if taken is not None:
                    break
                await trio.sleep(0.1)
            await repos.locks.release_fenced(taken)  # handed to the successor's actor, which takes it afresh
            epoch = await repos.active_matches.claim_active_match(match_id, "owner-c#3")
            assert epoch == 2
            second = make_match_actor(
                match_id,
                repos,
                second_sender,
                owner="owner-c#3",
                epoch=epoch,
                sharing=SHARING,
                lease_s=LEASE_S,
                **CHUNKS,
            )
            async with trio.open_nursery() as successor:
                await successor.start(second.run)
                while True:
                    item = await repos.active_matches.get_active_match_state(match_id)
                    if item is not None and "alertIntent" not in item:
                        break
                    await trio.sleep(0.05)
                successor.cancel_scope.cancel()
        nursery.cancel_scope.cancel()
    pushes = [*first_sender.pushes, *helper_sender.pushes, *second_sender.pushes]
    wicket = next(e for p in _alerting(pushes) for e in _events(p) if e[0] == "wicket")
    assert {p.token for p in pushes if wicket in _events(p)} == TOKENS, "every session got the wicket"
    alerted = Counter(p.token for p in _alerting(pushes) if wicket in _events(p))
    assert max(alerted.values()) == 1, "no session was shown the alert twice"
    assert len(TOKENS - set(alerted)) <= CHUNKS["alert_chunk_max"], "at most the dead owner's chunk in flight"
    stamps = {_aps(p)["timestamp"] for p in pushes if wicket in _events(p)}
    assert len(stamps) == 1, "the successor completed the very same update"


class EndingAuthority:
    """An owner whose lease is running out: ``confirm`` answers its end (``left_s`` from creation) until that
    passes, then gives the shard back, as ``OwnerOnLock`` does for a dead owner. ``renew_after_s``: the owner
    renews then after all (a late renewal), its authority lasting ``LEASE_S`` more from there."""

    def __init__(self, left_s: float, renew_after_s: float | None = None) -> None:
        start = trio.current_time()
        self.until = start + left_s
        self.renewed_at = None if renew_after_s is None else start + renew_after_s
        self.confirms = 0

    async def confirm(self) -> float:
        self.confirms += 1
        now = trio.current_time()
        if self.renewed_at is not None and now >= self.renewed_at:
            self.until, self.renewed_at = self.renewed_at + LEASE_S, None
        if now >= self.until:
            raise ShardAbandoned("the owner's lease on the match has run out")
        return self.until


def _wicket_item(match_id: str) -> TickWork:
    payload = {
        "aps": {
            "timestamp": 1_700_000_000,
            "event": "update",
            "content-state": {"events": [{"type": "wicket", "subject": "W1"}]},
            "alert": {"title": "Wicket", "body": "W1 out"},
        }
    }
    return TickWork(
        seq=1,
        kind="update",
        priority=10,
        payloads={"neutral": json.dumps(payload, separators=(",", ":")).encode()},
        alert=True,
        bounds=(),
        published_at=time.time(),
        collapse_id=f"{match_id}:alert",
        stamp=1_700_000_000,
    )


async def _deliver_under(
    repos: Any, authority: Callable[[], EndingAuthority]
) -> tuple[Any, list[Push], dict[str, Any] | None]:
    """One alerting shard (every session of the match) delivered by a helper's runner for the owner's
    ``authority`` (made as the delivery starts): the result, the pushes handed over and the shard's record."""
    _, match_id = await _world(repos)
    sender = FakeSender()
    actor = await _owner(repos, match_id, FakeSender())
    worker = _helper(repos, sender, "helper-b#1")
    job = ShardJob(match_id, "tick", _wicket_item(match_id), 0)
    with trio.fail_after(30):
        result = await worker.runner.run(job, actor.audience, authority())
    record = (await repos.locks.get_shards([job.key])).get(job.key)
    return result, sender.pushes, record


async def test_an_alerting_chunk_is_not_started_when_the_owners_lease_ends_before_a_renewal_period(
    repos: Any,
) -> None:
    """The owner died (its lease ends in 0.1 s, under the 0.4 s shard renewal period): the helper writes no
    watermark and hands no chunk, so the owner's successor alerts every session of the shard. A chunk started
    there would stop at the fence with its watermark written: its sessions never alerted."""
    made: list[EndingAuthority] = []

    def authority() -> EndingAuthority:
        made.append(EndingAuthority(left_s=0.1))
        return made[0]

    result, pushes, record = await _deliver_under(repos, authority)
    assert result is None, "the shard was given back"
    assert not _alerting(pushes), "no alert handed over under an owner about to lose the match"
    assert record is None or "handed" not in record, "no watermark: every session is still due its alert"
    assert made[0].confirms >= 2, "confirmed again until the owner's lease ran out"


async def test_an_alerting_chunk_waits_for_an_owners_late_renewal_and_then_alerts_everyone(
    repos: Any,
) -> None:
    result, pushes, record = await _deliver_under(
        repos, lambda: EndingAuthority(left_s=0.2, renew_after_s=0.15)
    )
    assert result is not None and result.counts["accepted"] == SESSIONS
    alerted = Counter(p.token for p in _alerting(pushes))
    assert set(alerted) == TOKENS and max(alerted.values()) == 1
    assert record is not None and record.get("handed")


# --- giving way, and starts -------------------------------------------------------------------------------------


async def test_a_helper_gives_way_to_its_own_instances_key_events(repos: Any) -> None:
    tape, match_id = await _world(repos)
    owner_sender = FakeSender()
    helper_sender = FakeSender()
    helper_live = LiveWork()
    async with trio.open_nursery() as nursery:
        actor = await _owner(repos, match_id, owner_sender)
        worker = _helper(repos, helper_sender, "helper-b#1", helper_live)
        await nursery.start(worker.run)
        await _hot_and_followed(repos, actor, worker, match_id)
        with helper_live.key_event():  # one of the helper's own matches is alerting all along
            with trio.fail_after(30):
                await _tick_until(
                    actor, tape, match_id, range(len(tape)), lambda: len(owner_sender.pushes) >= 120
                )
        nursery.cancel_scope.cancel()
    assert helper_sender.pushes == [], "no help while its own key event was fanned out"
    assert worker.gave_way_s > 0


async def _followers(repos: Any, match_id: str, n: int) -> set[str]:
    for i in range(n):
        user = f"f{i:03d}"
        await repos.follows.follow_match(match_id, user, "7", 4_000_000_000)
        await repos.devices.register_device(user, f"{user}-device", push_to_start_token=f"{user}-start")
    return {f"f{i:03d}-start" for i in range(n)}


async def test_a_hot_matchs_round_of_push_to_starts_is_shared_and_starts_each_follower_once(
    repos: Any,
) -> None:
    _, match_id = await _world(repos)
    starts = await _followers(repos, match_id, 30)
    owner_sender = FakeSender(answer_after_s=0.01)
    helper_sender = FakeSender()
    async with trio.open_nursery() as nursery:
        owner_sender.nursery = nursery
        actor = await _owner(repos, match_id, owner_sender, heal_chunk=5)
        worker = _helper(repos, helper_sender, "helper-b#1")
        await nursery.start(worker.run)
        await _hot_and_followed(repos, actor, worker, match_id)
        actor.latest.phase = "live"
        actor.latest.display = {"neutral": {"title": "A v B", "subtitle": "live", "score": "1/0"}}
        actor.latest.attributes = {"matchId": match_id}
        with trio.fail_after(30):
            sent = await actor.starts.heal()
            again = await actor.starts.heal()  # tried within the interval: nobody again
        nursery.cancel_scope.cancel()
    pushes = [p for p in [*owner_sender.pushes, *helper_sender.pushes] if p.kind == "start"]
    assert Counter(p.token for p in pushes) == Counter(starts), "every follower started, once"
    assert sent == 30 and again == 0
    assert helper_sender.pushes, "the helper started some"
    assert {p.collapse_id for p in pushes} == {f"{match_id}:start"}
    assert all(_aps(p)["timestamp"] == _aps(pushes[0])["timestamp"] for p in pushes)


Hook = Callable[[Push], Awaitable[None]]
