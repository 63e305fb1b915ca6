"""active-matches: registration, takeover with a fencing epoch, fenced state writes, deactivation."""

from __future__ import annotations

import pytest
import trio

from daemon.store import ActiveMatchRepository, Dynamo, DynamoSettings, Repositories
from tests.store import faults

T0 = 1_800_000_000.0


async def test_register_is_conditional_and_a_normal_false_when_already_active(repos: Repositories):
    am = repos.active_matches
    assert await am.register_active_match("71344", "inst-a", fields={"matchPhase": "live"}, now=T0) is True
    assert await am.register_active_match("71344", "inst-b", now=T0) is False
    rec = await am.get_active_match_state("71344")
    assert rec["instanceId"] == "inst-a" and rec["ownerEpoch"] == 1 and rec["status"] == "active"
    assert rec["matchPhase"] == "live" and rec["registeredAt"] == "2027-01-15T08:00:00.000Z"
    # the same instance registering again (a retried PutItem) is still a success
    assert await am.register_active_match("71344", "inst-a", now=T0) is True


async def test_register_succeeds_over_an_idle_record(repos: Repositories):
    am = repos.active_matches
    await am.dynamo.call(
        "active-matches",
        "put_item",
        Item={"matchId": {"S": "9"}, "status": {"S": "idle"}, "instanceId": {"S": "old"}},
    )
    assert await am.register_active_match("9", "inst-b") is True
    assert (await am.get_active_match_state("9"))["instanceId"] == "inst-b"


async def test_register_refuses_fence_attributes_in_fields(repos: Repositories):
    with pytest.raises(ValueError, match="fields.ownerEpoch"):
        await repos.active_matches.register_active_match("1", "a", fields={"ownerEpoch": 5})


async def test_claim_moves_ownership_and_fences_out_the_former_owner(repos: Repositories):
    am = repos.active_matches
    assert await am.claim_active_match("404", "inst-b") is None  # nothing registered
    await am.register_active_match("1", "inst-a")
    assert await am.update_match_state("1", "inst-a", 1, {"previousBallId": "b1"}, now=T0)
    assert await am.claim_active_match("1", "inst-b") == 2
    # the paused former owner wakes up and tries to write: refused
    assert await am.update_match_state("1", "inst-a", 1, {"previousBallId": "stale"}) is False
    assert await am.update_cooldowns("1", "inst-a", 1, {"fifty:7": T0}) is False
    assert await am.deactivate_match("1", "inst-a", 1) is False
    # right instance, stale epoch: refused too
    assert await am.update_match_state("1", "inst-b", 1, {"previousBallId": "x"}) is False
    assert await am.update_match_state("1", "inst-b", 2, {"previousBallId": "b2"}, now=T0 + 5) is True
    rec = await am.get_active_match_state("1")
    assert rec["previousBallId"] == "b2" and rec["instanceId"] == "inst-b" and rec["ownerEpoch"] == 2
    assert rec["lastTickAt"] == "2027-01-15T08:00:05.000Z"


async def test_update_match_state_writes_nested_state_and_none_removes(repos: Repositories):
    am = repos.active_matches
    await am.register_active_match("5", "a")
    state = {
        "previousScore": {"runs": 154, "wickets": 3, "overs": 17.2, "rr": 8.91},
        "last30Balls": [{"id": "b1", "score": "4"}, {"id": "b2", "score": "W"}],
        "matchPhase": "second_innings",
    }
    assert await am.update_match_state("5", "a", 1, state)
    assert await am.update_match_state("5", "a", 1, {"matchPhase": None})
    rec = await am.get_active_match_state("5")
    assert rec["previousScore"] == {"runs": 154, "wickets": 3, "overs": 17.2, "rr": 8.91}
    assert rec["last30Balls"][1] == {"id": "b2", "score": "W"}
    assert "matchPhase" not in rec


@pytest.mark.parametrize("attr", ["matchId", "instanceId", "ownerEpoch", "status", "lastTickAt"])
async def test_update_match_state_refuses_key_and_fence_attributes(repos: Repositories, attr):
    await repos.active_matches.register_active_match("5", "a")
    with pytest.raises(ValueError, match=f"state.{attr}"):
        await repos.active_matches.update_match_state("5", "a", 1, {attr: "x"})


async def test_cooldowns_deactivate_and_ttl_filtering(repos: Repositories):
    am = repos.active_matches
    await am.register_active_match("7", "a")
    assert await am.update_cooldowns("7", "a", 1, {"six:b12": T0 + 30.5, "wicket": T0 + 60})
    assert (await am.get_active_match_state("7", now=T0))["cooldowns"] == {
        "six:b12": T0 + 30.5,
        "wicket": T0 + 60,
    }
    assert await am.deactivate_match("7", "a", 1, ttl_s=3600, now=T0)
    rec = await am.get_active_match_state("7", now=T0 + 10)
    assert rec["status"] == "ended" and rec["ttl"] == int(T0 + 3600) and rec["endedAt"]
    # ended: no more state writes, not re-registrable, no takeover
    assert await am.update_match_state("7", "a", 1, {"x": 1}) is False
    assert await am.register_active_match("7", "b") is False
    assert await am.claim_active_match("7", "b") is None
    # past its ttl the record is invisible even though DynamoDB has not deleted it yet
    assert await am.get_active_match_state("7", now=T0 + 3601) is None
    assert [r["matchId"] for r in await am.get_all_active_matches(now=T0 + 3601)] == []
    assert [r["matchId"] for r in await am.get_all_active_matches(now=T0 + 10)] == ["7"]
    await am.delete_active_match("7")
    assert await am.get_active_match_state("7", now=T0) is None


async def test_get_all_active_matches_pages_past_one_page(repos: Repositories):
    am = repos.active_matches
    for i in range(9):
        await am.register_active_match(str(i), "a")
    faults.page_size(am.dynamo.client, 2)
    assert sorted(r["matchId"] for r in await am.get_all_active_matches()) == [str(i) for i in range(9)]


async def test_concurrent_claims_get_distinct_epochs_and_only_the_last_can_write(
    moto_server, table_prefix, repos: Repositories
):
    await repos.active_matches.register_active_match("m", "inst-0")
    clients = [
        Dynamo(DynamoSettings(endpoint_url=moto_server.url, table_prefix=table_prefix)) for _ in range(8)
    ]
    ams = [ActiveMatchRepository(c) for c in clients]
    epochs: dict[int, int | None] = {}

    async def claim(i: int) -> None:
        epochs[i] = await ams[i].claim_active_match("m", f"inst-{i + 1}")

    async with trio.open_nursery() as n:
        for i in range(8):
            n.start_soon(claim, i)
    assert sorted(epochs.values()) == list(range(2, 10))
    last = max(epochs, key=lambda i: epochs[i] or 0)
    results = {
        i: await ams[i].update_match_state("m", f"inst-{i + 1}", epochs[i], {"x": i}) for i in range(8)
    }
    assert [i for i, ok in results.items() if ok] == [last]
    for c in clients:
        c.close()
