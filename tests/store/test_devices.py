"""cricket-devices: single-device registration, tokens, deletion, TTL filtering."""

from __future__ import annotations

import pytest
import trio

from daemon.store import Repositories, alert_token

T0 = 1_800_000_000.0


async def test_register_device_keeps_one_device_per_user(repos: Repositories):
    dev = repos.devices
    await dev.register_device("u1", "tok-old", os_version="18.2", app_version="2.0.0", now=T0)
    await dev.register_device("u2", "tok-other", now=T0)
    await dev.register_device("u1", "tok-new", os_version="18.3.1", push_to_start_token="p2s", now=T0 + 5)
    assert [d["deviceToken"] for d in await dev.get_devices_for_user("u1", now=T0 + 6)] == ["tok-new"]
    d = await dev.get_device_for_user("u1", now=T0 + 6)
    assert d["osVersion"] == "18.3.1" and d["pushToStartToken"] == "p2s" and d["platform"] == "ios"
    assert d["ttl"] == int(T0 + 5 + 90 * 24 * 3600)
    assert (await dev.get_device_for_user("u2", now=T0 + 6))["deviceToken"] == "tok-other"


async def test_re_registering_keeps_fields_not_given(repos: Repositories):
    dev = repos.devices
    await dev.register_device("u1", "tok", os_version="18.2", apns_token="apns-1", push_to_start_token="p2s")
    await dev.register_device("u1", "tok", app_version="2.1.0")
    d = await dev.get_device_for_user("u1")
    assert (d["osVersion"], d["appVersion"], d["apnsToken"], d["pushToStartToken"]) == (
        "18.2",
        "2.1.0",
        "apns-1",
        "p2s",
    )


async def test_get_device_skips_expired_records(repos: Repositories):
    dev = repos.devices
    await dev.register_device("u1", "tok", ttl=int(T0 - 1))
    assert await dev.get_device_for_user("u1", now=T0) is None
    # a record with a later key but alive is still found although Limit 1 hits the expired one first
    await dev.dynamo.call(
        "cricket-devices",
        "put_item",
        Item={"userId": {"S": "u1"}, "deviceToken": {"S": "zzz"}, "ttl": {"N": str(int(T0 + 100))}},
    )
    assert (await dev.get_device_for_user("u1", now=T0))["deviceToken"] == "zzz"


async def test_push_to_start_token_update_and_clear(repos: Repositories):
    dev = repos.devices
    assert await dev.update_push_to_start_token("u1", "tok", "p2s-1") is False  # not registered
    await dev.register_device("u1", "tok")
    assert await dev.update_push_to_start_token("u1", "tok", "p2s-1") is True
    # APNs rejected p2s-0, but the app already rotated to p2s-1: keep the new one
    assert await dev.clear_push_to_start_token("u1", "tok", expected_token="p2s-0") is False
    assert (await dev.get_device_for_user("u1"))["pushToStartToken"] == "p2s-1"
    assert await dev.clear_push_to_start_token("u1", "tok", expected_token="p2s-1") is True
    assert "pushToStartToken" not in await dev.get_device_for_user("u1")
    assert await dev.clear_push_to_start_token("u9", "tok") is False


async def test_delete_device_returns_the_old_record(repos: Repositories):
    dev = repos.devices
    assert await dev.delete_device("u1", "tok") is None
    await dev.register_device("u1", "tok", os_version="18")
    old = await dev.delete_device("u1", "tok")
    assert old["deviceToken"] == "tok" and old["osVersion"] == "18"
    assert await dev.get_device_for_user("u1") is None


def test_alert_token_prefers_apns_token_over_device_token():
    assert alert_token({"deviceToken": "d", "apnsToken": "a"}) == "a"
    assert alert_token({"deviceToken": "d"}) == "d"
    assert alert_token({}) is None


async def test_devices_named_by_user_and_token_are_read_in_batches_and_a_replaced_one_is_absent(
    repos: Repositories,
) -> None:
    pairs = [(f"u{n}", f"{n:064x}") for n in range(150)]  # two BatchGetItems
    await repos.devices.import_items(
        {"userId": u, "deviceToken": t, "osVersion": "18.1", "pushToStartToken": f"p{u[1:]}"}
        for u, t in pairs
    )
    await repos.devices.register_device("u7", "f" * 64)  # u7 registered another device: the named one is gone
    found = await repos.devices.get_devices([*pairs, ("nobody", "e" * 64)])
    assert len(found) == 149 and "u7" not in found and "nobody" not in found
    assert found["u149"]["pushToStartToken"] == "p149" and found["u0"]["osVersion"] == "18.1"
    assert await repos.devices.get_devices([]) == {}


async def test_the_latest_registration_of_a_device_token_owns_it(repos: Repositories) -> None:
    """A phone signed out of one account and into another: the token is the second account's, and the first
    account's record of it is gone in the same transaction (its follows no longer reach that phone)."""
    dev = repos.devices
    phone = "ab" * 32
    await dev.register_device("alice", phone, os_version="18.2", push_to_start_token="p-alice", now=T0)
    assert await dev.token_owner(phone) == "alice"
    await dev.register_device("bob", phone, os_version="18.2", now=T0 + 5)
    assert await dev.get_devices_for_user("alice", now=T0 + 6) == []
    bobs = await dev.get_device_for_user("bob", now=T0 + 6)
    assert bobs["deviceToken"] == phone and "pushToStartToken" not in bobs  # nothing of alice's carried over
    assert await dev.token_owner(phone) == "bob"
    # a follow of alice's naming the phone no longer finds it
    assert await dev.get_devices([("alice", phone)]) == {}
    # and alice signing in again takes it back
    await dev.register_device("alice", phone, now=T0 + 10)
    assert await dev.get_devices_for_user("bob", now=T0 + 11) == []
    assert await dev.token_owner(phone) == "alice"


async def test_racing_registrations_of_one_token_leave_exactly_one_owner(repos: Repositories) -> None:
    dev = repos.devices
    phone = "cd" * 32
    await dev.register_device("first", phone, now=T0)
    users = [f"racer{i}" for i in range(6)]
    async with trio.open_nursery() as nursery:
        for u in users:
            nursery.start_soon(lambda u=u: dev.register_device(u, phone, now=T0 + 1))
    holders = [u for u in ["first", *users] if await dev.get_devices_for_user(u, now=T0 + 2)]
    assert len(holders) == 1
    assert await dev.token_owner(phone) == holders[0]


async def test_a_user_moving_to_a_new_phone_releases_the_old_token(repos: Repositories) -> None:
    dev = repos.devices
    old, new = "01" * 32, "02" * 32
    await dev.register_device("carol", old, now=T0)
    await dev.register_device("carol", new, now=T0 + 1)
    assert await dev.token_owner(old) is None and await dev.token_owner(new) == "carol"
    # a later owner of the old phone takes it without touching carol's new record
    await dev.register_device("dave", old, now=T0 + 2)
    assert (await dev.get_device_for_user("carol", now=T0 + 3))["deviceToken"] == new


async def test_deleting_a_device_releases_its_token_only_for_its_owner(repos: Repositories) -> None:
    dev = repos.devices
    phone = "ef" * 32
    await dev.register_device("erin", phone, now=T0)
    await dev.register_device("frank", phone, now=T0 + 1)
    assert await dev.delete_device("erin", phone) is None  # erin's record went with the transfer
    assert await dev.token_owner(phone) == "frank"  # and erin's delete leaves frank's claim alone
    assert (await dev.delete_device("frank", phone))["deviceToken"] == phone
    assert await dev.token_owner(phone) is None


async def test_a_user_id_in_the_claims_partition_is_refused(repos: Repositories) -> None:
    with pytest.raises(ValueError):
        await repos.devices.register_device("TOKEN#x", "aa" * 32)
