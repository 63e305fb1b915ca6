"""Pure cores of iOS 18 broadcasts: request builders, answer parsing, and the outcome of every reason Apple
documents for broadcasts and channel management (apns.md §2.6, §8), decided in the same rule table as the
per-token reasons."""

from __future__ import annotations

import json

import pytest

from daemon.apns import broadcast
from daemon.apns.rules import BROADCAST_REASONS, Action, check_push, classify
from daemon.apns.settings import ApnsSettings
from daemon.apns.types import Push

BUNDLE = "com.sightscreen.app"
CHANNEL = "dHN1LMUT8eIXOOaqdvUt5HwhDrIJCxT7AAAAAAAAAAA="

# Apple's documented reasons (apns.md §2.6 table) and the one observed by a TypeScript library.
DOCUMENTED = {
    400: [
        "FeatureNotEnabled",
        "MissingChannelId",
        "BadChannelId",
        "ChannelNotRegistered",
        "BadRequestParams",
        "BadRequestPayload",
        "PayloadEmpty",
        "BadMessageId",
        "MissingPushType",
        "InvalidPushType",
        "CannotCreateChannelConfig",
        "BadExpirationDate",
        "TopicDisallowed",
        "BadPriority",
        "MissingChannelQueueSize",
    ],
    403: [
        "BadCertificate",
        "BadCertificateEnvironment",
        "TopicMismatch",
        "MissingProviderToken",
        "ExpiredProviderToken",
        "InvalidProviderToken",
    ],
    404: ["BadPath"],
    405: ["MethodNotAllowed"],
    413: ["PayloadTooLarge"],
    429: ["TooManyRequests", "TooManyProviderTokenUpdates"],
    500: ["InternalServerError"],
    503: ["ServiceUnavailable", "Service Unavailable", "Shutdown"],
}


def test_every_documented_broadcast_reason_has_a_decided_outcome() -> None:
    documented = {(status, reason) for status, reasons in DOCUMENTED.items() for reason in reasons}
    assert documented == set(BROADCAST_REASONS)


@pytest.mark.parametrize(("status", "reason"), sorted(BROADCAST_REASONS))
def test_classify_applies_the_broadcast_outcome_table(status: int, reason: str) -> None:
    assert classify(status, reason).action is BROADCAST_REASONS[(status, reason)]


@pytest.mark.parametrize(
    ("status", "reason", "action"),
    [
        (400, "ChannelNotRegistered", Action.RECREATE_CHANNEL),
        (400, "BadChannelId", Action.RECREATE_CHANNEL),
        (400, "CannotCreateChannelConfig", Action.CHANNEL_LIMIT),
        (400, "FeatureNotEnabled", Action.CONFIGURATION),
        (403, "TopicMismatch", Action.CONFIGURATION),
        (429, "TooManyRequests", Action.RETRY),
        (503, "Shutdown", Action.RETRY_NEW_CONNECTION),
        (400, "BadExpirationDate", Action.BUG),
        (201, None, Action.ACCEPTED),
        (204, None, Action.ACCEPTED),
    ],
)
def test_key_broadcast_outcomes(status: int, reason: str | None, action: Action) -> None:
    assert classify(status, reason).action is action


def test_per_token_reasons_keep_their_outcomes() -> None:
    assert classify(410, "Unregistered").action is Action.DEAD_TOKEN
    assert classify(400, "BadDeviceToken").action is Action.DEAD_TOKEN
    assert classify(403, "InvalidProviderToken").action is Action.CONFIGURATION


def test_create_request_has_apples_path_and_body() -> None:
    req = broadcast.create_channel(BUNDLE)
    assert (req.method, req.path) == ("POST", "/1/apps/com.sightscreen.app/channels")
    assert json.loads(req.body) == {"message-storage-policy": 0, "push-type": "LiveActivity"}
    assert dict(req.headers) == {}
    with pytest.raises(ValueError, match="message-storage-policy"):
        broadcast.create_channel(BUNDLE, policy=2)


def test_read_delete_and_list_requests() -> None:
    read = broadcast.read_channel(BUNDLE, CHANNEL)
    assert (read.method, read.path, dict(read.headers)) == (
        "GET",
        "/1/apps/com.sightscreen.app/channels",
        {"apns-channel-id": CHANNEL},
    )
    delete = broadcast.delete_channel(BUNDLE, CHANNEL)
    assert (delete.method, delete.path, dict(delete.headers), delete.body) == (
        "DELETE",
        "/1/apps/com.sightscreen.app/channels",
        {"apns-channel-id": CHANNEL},
        b"",
    )
    listing = broadcast.list_channels(BUNDLE)
    assert (listing.method, listing.path) == ("GET", "/1/apps/com.sightscreen.app/all-channels")
    assert broadcast.broadcast_path(BUNDLE) == "/4/broadcasts/apps/com.sightscreen.app"


def test_parse_answers() -> None:
    assert broadcast.parse_answer("create", 201, None, CHANNEL, None) == CHANNEL
    assert broadcast.parse_answer("delete", 204, None, None, None) is None
    assert broadcast.parse_answer("list", 200, None, None, b'{"channels":["a","b"]}') == ["a", "b"]
    info = broadcast.parse_answer(
        "read", 200, None, None, b'{"message-storage-policy":0,"push-type":"LiveActivity"}'
    )
    assert info == broadcast.ChannelInfo(0, "LiveActivity")


def test_parse_errors_carry_the_decided_outcome() -> None:
    with pytest.raises(broadcast.ChannelError) as info:
        broadcast.parse_answer("create", 400, None, None, b'{"reason":"CannotCreateChannelConfig"}')
    assert info.value.action is Action.CHANNEL_LIMIT
    with pytest.raises(broadcast.ChannelError) as info:
        broadcast.parse_answer("delete", 400, "ChannelNotRegistered", None, None)
    assert info.value.action is Action.RECREATE_CHANNEL
    with pytest.raises(broadcast.ChannelError) as info:  # 201 without the id header: APNs broke its contract
        broadcast.parse_answer("create", 201, None, None, None)
    assert info.value.action is Action.BUG
    with pytest.raises(broadcast.ChannelError):
        broadcast.parse_answer("list", 200, None, None, b'{"nope":1}')


def _bcast(**kw: object) -> Push:
    fields: dict[str, object] = dict(
        token="",
        push_type="liveactivity",
        topic=BUNDLE,
        payload=b'{"aps":{}}',
        priority=5,
        kind="update",
        expiration=0,
        channel_id=CHANNEL,
    )
    fields.update(kw)
    return Push(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({}, None),
        ({"channel_id": "not base64!"}, "BadChannelId"),
        ({"channel_id": "abc"}, "BadChannelId"),
        ({"push_type": "alert"}, "InvalidPushType"),
        ({"topic": BUNDLE + ".push-type.liveactivity"}, "TopicDisallowed"),
        ({"priority": 7}, "BadPriority"),
        ({"expiration": None}, "BadExpirationDate"),
        ({"payload": b""}, "PayloadEmpty"),
        ({"payload": b"x" * 5120}, None),
        ({"payload": b"x" * 5121}, "PayloadTooLarge"),
        ({"kind": "start"}, "InvalidKind"),
        ({"apns_id": "nope"}, "BadMessageId"),
    ],
)
def test_broadcast_checks_before_sending(fields: dict[str, object], reason: str | None) -> None:
    assert check_push(_bcast(**fields)) == reason


def test_broadcasts_may_be_bigger_than_token_pushes() -> None:
    token_push = Push("ab" * 32, "liveactivity", BUNDLE, b"x" * 4097, 5, "update")
    assert check_push(token_push) == "PayloadTooLarge"
    assert check_push(_bcast(payload=b"x" * 4097)) is None


def test_management_address_defaults_per_environment() -> None:
    sandbox = ApnsSettings(url="https://api.sandbox.push.apple.com")
    production = ApnsSettings(url="https://api.push.apple.com")
    assert sandbox.management_address() == ("api-manage-broadcast.sandbox.push.apple.com", 2195)
    assert production.management_address() == ("api-manage-broadcast.push.apple.com", 2196)
    local = ApnsSettings(url="https://127.0.0.1:9000", management_host="127.0.0.1", management_port=9001)
    assert local.management_address() == ("127.0.0.1", 9001)
