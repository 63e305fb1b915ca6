"""cricket-locks: acquire / extend / release / get, and 16 clients racing for one lock."""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio

from daemon.store import Dynamo, DynamoSettings, LockRepository, Repositories, match_lock_key

T0 = 1_800_000_000.0


async def test_acquire_free_lock_then_others_are_refused_until_it_expires(repos: Repositories):
    locks = repos.locks
    key = match_lock_key("71344")
    assert key == "match:71344"
    assert await locks.acquire(key, "inst-a", 10, now=T0) is True
    assert await locks.acquire(key, "inst-b", 10, now=T0 + 5) is False
    held = await locks.get(key, now=T0 + 5)
    assert held is not None and held["owner"] == "inst-a" and held["expiresAt"] == T0 + 10
    # the lease ran out: the lock is free for anyone, and reads no longer show it
    assert await locks.get(key, now=T0 + 11) is None
    assert await locks.acquire(key, "inst-b", 10, now=T0 + 11) is True
    assert (await locks.get(key, now=T0 + 12))["owner"] == "inst-b"


async def test_acquire_is_idempotent_for_the_owner(repos: Repositories):
    key = match_lock_key("1")
    assert await repos.locks.acquire(key, "inst-a", 10, now=T0)
    # e.g. botocore retried a PutItem whose first answer was lost: still ours, lease renewed
    assert await repos.locks.acquire(key, "inst-a", 10, now=T0 + 1)
    assert (await repos.locks.get(key, now=T0 + 2))["expiresAt"] == T0 + 11


async def test_extend_and_release_only_by_the_owner(repos: Repositories):
    locks = repos.locks
    key = match_lock_key("2")
    assert await locks.extend(key, "inst-a", 10, now=T0) is False  # no lock yet
    assert await locks.release(key, "inst-a") is False
    assert await locks.acquire(key, "inst-a", 10, now=T0)
    assert await locks.extend(key, "inst-b", 10, now=T0 + 1) is False
    assert await locks.release(key, "inst-b") is False
    assert await locks.extend(key, "inst-a", 30, now=T0 + 5) is True
    assert (await locks.get(key, now=T0 + 6))["expiresAt"] == T0 + 35
    assert await locks.acquire(key, "inst-b", 10, now=T0 + 20) is False  # extended lease still runs
    assert await locks.release(key, "inst-a") is True
    assert await locks.get(key, now=T0 + 21) is None
    assert await locks.release(key, "inst-a") is False


async def test_former_owner_cannot_extend_or_release_after_takeover(repos: Repositories):
    locks = repos.locks
    key = match_lock_key("3")
    assert await locks.acquire(key, "inst-a", 10, now=T0)
    assert await locks.acquire(key, "inst-b", 10, now=T0 + 15)  # a's lease lapsed
    assert await locks.extend(key, "inst-a", 10, now=T0 + 16) is False
    assert await locks.release(key, "inst-a") is False
    assert (await locks.get(key, now=T0 + 16))["owner"] == "inst-b"


async def test_sixteen_clients_racing_for_one_lock_have_exactly_one_winner_each_round(
    moto_server, table_prefix, dynamo
):
    # 16 independent clients (own boto3 client, own threads), all hitting the same lock key each round;
    # every round the previous lease has expired, so all 16 conditions could pass in isolation.
    clients = [
        Dynamo(DynamoSettings(endpoint_url=moto_server.url, table_prefix=table_prefix, max_attempts=1))
        for _ in range(16)
    ]
    repos = [LockRepository(c) for c in clients]
    key = match_lock_key("race")
    rng = random.Random(7)
    previous = None
    for rnd in range(12):
        now = T0 + rnd * 100
        results: dict[int, bool] = {}

        async def contend(i: int, now: float = now, results: dict[int, bool] = results) -> None:
            results[i] = await repos[i].acquire(key, f"inst-{i}", 10, now=now)

        async with trio.open_nursery() as n:
            for i in range(16):
                n.start_soon(contend, i)
        winners = [i for i, won in results.items() if won]
        assert len(winners) == 1, f"round {rnd}: winners {winners}"
        winner = winners[0]
        held = await repos[0].get(key, now=now + 1)
        assert held is not None and held["owner"] == f"inst-{winner}"
        # non-owners (including last round's winner) can neither extend nor release
        losers = rng.sample([i for i in range(16) if i != winner], 1)
        if previous is not None and previous != winner:
            losers.append(previous)
        for i in losers:
            assert await repos[i].extend(key, f"inst-{i}", 10, now=now + 1) is False
            assert await repos[i].release(key, f"inst-{i}") is False
        assert await repos[winner].extend(key, f"inst-{winner}", 10, now=now + 1) is True
        previous = winner
    for c in clients:
        c.close()


def test_an_owner_identity_keeps_the_configured_id_for_people_and_is_unique_per_process() -> None:
    from daemon.store.locks import instance_of, owner_identity

    a, b = owner_identity("sightscreen-eu-1"), owner_identity("sightscreen-eu-1")
    assert a != b and instance_of(a) == instance_of(b) == "sightscreen-eu-1"
    assert owner_identity("i1", "abc") == "i1#abc" and instance_of("legacy-owner") == "legacy-owner"
    with pytest.raises(ValueError):
        owner_identity("bad#id")


async def test_two_processes_from_one_configuration_never_share_a_lease(repos: Any) -> None:
    from daemon.store.locks import owner_identity

    first, restarted = owner_identity("sightscreen-eu-1"), owner_identity("sightscreen-eu-1")
    assert await repos.locks.acquire("match:9", first, 30.0)
    assert not await repos.locks.acquire("match:9", restarted, 30.0), "not the same owner: refused"
    assert not await repos.locks.extend("match:9", restarted, 30.0)
    assert not await repos.locks.release("match:9", restarted)
    assert (await repos.locks.get("match:9") or {})["owner"] == first


async def test_push_to_start_claims_hold_for_their_interval_whoever_wrote_them_and_force_overrides(
    repos: Repositories,
) -> None:
    locks = repos.locks
    users = [f"u{n:03d}" for n in range(130)]  # more than one BatchGetItem and several BatchWriteItems
    assert await locks.claim_push_to_starts("9", users, owner="a", hold_s=600, now=T0) == users
    held = await locks.get("start:9:u042", now=T0 + 1)
    assert held is not None and held["owner"] == "a" and held["expiresAt"] == T0 + 600
    # a successor (or this owner again) within the interval: nobody is started twice
    late = ["u129", "new1", "u000", "new2"]
    assert await locks.claim_push_to_starts("9", late, owner="b", hold_s=600, now=T0 + 599) == [
        "new1",
        "new2",
    ]
    # forced (a recreated channel re-announced): claimed whatever the claim says, and held again
    assert await locks.claim_push_to_starts(
        "9", ["u000"], owner="b", hold_s=600, now=T0 + 10, force={"u000"}
    ) == ["u000"]
    # the claims are per match, and they run out with their interval
    assert await locks.claim_push_to_starts("10", ["u001"], owner="b", hold_s=600, now=T0 + 1) == ["u001"]
    assert await locks.claim_push_to_starts("9", ["u001", "u000"], owner="b", hold_s=600, now=T0 + 601) == [
        "u001"
    ]
    assert await locks.claim_push_to_starts("9", [], owner="b", hold_s=600, now=T0) == []
    with pytest.raises(ValueError):
        await locks.claim_push_to_starts("9", ["x"], owner="b", hold_s=-1, now=T0)


async def test_a_push_to_start_claim_taken_between_the_read_and_the_write_is_not_overwritten(
    repos: Repositories,
) -> None:
    locks = repos.locks
    # the prematch job claims u5 after the owner read the claims (none) and before it writes them: the
    # owner's conditional transaction is cancelled for u5 alone, and written again without it
    assert await locks.claim_push_to_starts("11", ["u5"], owner="prematch", hold_s=600, now=T0) == ["u5"]
    assert await locks._claim_chunk("11", ["u4", "u5", "u6"], "owner-a", 600, T0 + 1, set()) == ["u4", "u6"]
    assert (await locks.get("start:11:u5", now=T0 + 2) or {})["owner"] == "prematch"
    assert (await locks.get("start:11:u4", now=T0 + 2) or {})["owner"] == "owner-a"
    # every claim taken: nothing written, nothing claimed
    assert await locks._claim_chunk("11", ["u4", "u5"], "owner-b", 600, T0 + 3, set()) == []
    assert (await locks.get("start:11:u4", now=T0 + 4) or {})["owner"] == "owner-a"
    # forced: written whatever the claim says
    assert await locks._claim_chunk("11", ["u5"], "owner-b", 600, T0 + 5, {"u5"}) == ["u5"]
    assert (await locks.get("start:11:u5", now=T0 + 6) or {})["owner"] == "owner-b"
