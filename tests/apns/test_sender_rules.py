"""Apple's answer table (apns.md §1.4) as verdicts, and the local request checks."""

from __future__ import annotations

import pytest

from daemon.apns.rules import Action, check_push, classify
from daemon.apns.types import Push


@pytest.mark.parametrize(
    ("status", "reason", "action"),
    [
        (200, None, Action.ACCEPTED),
        (410, "Unregistered", Action.DEAD_TOKEN),
        (410, "ExpiredToken", Action.DEAD_TOKEN),
        (400, "BadDeviceToken", Action.DEAD_TOKEN),
        (400, "DeviceTokenNotForTopic", Action.DEAD_TOKEN),
        (403, "ExpiredProviderToken", Action.REFRESH_PROVIDER_TOKEN),
        (403, "InvalidProviderToken", Action.CONFIGURATION),
        (403, "BadEnvironmentKeyInToken", Action.CONFIGURATION),
        (403, "SomethingNew", Action.CONFIGURATION),
        (400, "TopicDisallowed", Action.CONFIGURATION),
        (429, "TooManyRequests", Action.RETRY),
        (429, "TooManyProviderTokenUpdates", Action.RETRY_NEW_CONNECTION),
        (500, "InternalServerError", Action.RETRY),
        (503, "ServiceUnavailable", Action.RETRY),
        (503, "Shutdown", Action.RETRY_NEW_CONNECTION),
        (400, "IdleTimeout", Action.RETRY_NEW_CONNECTION),
        (413, "PayloadTooLarge", Action.PAYLOAD_BUG),
        (400, "BadCollapseId", Action.BUG),
        (404, "BadPath", Action.BUG),
        (0, None, Action.BUG),
    ],
)
def test_classify_follows_apples_table(status: int, reason: str | None, action: Action) -> None:
    assert classify(status, reason).action is action


def push(**kw: object) -> Push:
    base: dict[str, object] = {"token": "ab" * 32, "push_type": "alert", "topic": "com.x", "payload": b"{}"}
    base.update(kw)
    return Push(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({}, None),
        ({"token": "not-hex"}, "BadDeviceToken"),
        ({"push_type": "weird"}, "InvalidPushType"),
        ({"topic": ""}, "MissingTopic"),
        ({"topic": "com.x\r\nevil: 1"}, "BadTopic"),
        ({"priority": 7}, "BadPriority"),
        ({"push_type": "background", "priority": 10}, "BadPriority"),
        ({"payload": b""}, "PayloadEmpty"),
        ({"payload": b"x" * 4097}, "PayloadTooLarge"),
        ({"push_type": "voip", "payload": b"x" * 5000}, None),
        ({"collapse_id": "c" * 65}, "BadCollapseId"),
        ({"collapse_id": "a\nb"}, "BadCollapseId"),
        ({"apns_id": "NOT-A-UUID"}, "BadMessageId"),
        ({"expiration": -1}, "BadExpirationDate"),
        ({"kind": "celebration"}, "InvalidKind"),
    ],
)
def test_check_push_names_the_problem_like_apns_would(kw: dict[str, object], reason: str | None) -> None:
    assert check_push(push(**kw)) == reason


def test_liveactivity_topic_gets_its_suffix_once() -> None:
    assert push(push_type="liveactivity").wire_topic == "com.x.push-type.liveactivity"
    assert (
        push(push_type="liveactivity", topic="com.x.push-type.liveactivity").wire_topic.count("push-type")
        == 1
    )
    assert push(push_type="alert").wire_topic == "com.x"
