"""Apple's rules for APNs answers, as pure functions: what a status and reason mean for the push.

Owns: the verdict for each (status, reason) pair (apns.md §1.4 and §0.5), the request checks APNs would
otherwise answer with a 4xx (so our own bugs show up before a request). Must not touch: I/O, connections, the token cache; the sender actor applies the verdicts.
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass
from typing import Final

from daemon.apns.types import KINDS, PUSH_TYPES, Push


class Action(enum.Enum):
    ACCEPTED = "accepted"
    DEAD_TOKEN = "dead_token"  # final for the token: report to the janitor, never push it again
    RETRY = "retry"  # transient: retry after a backoff, up to the retry bound
    RETRY_NEW_CONNECTION = "retry_new_connection"  # transient, but this connection is unusable: replace it
    REFRESH_PROVIDER_TOKEN = "refresh_provider_token"  # ExpiredProviderToken: new JWT, retry once
    CONFIGURATION = "configuration"  # credentials/topic wrong: stop the sender loudly
    PAYLOAD_BUG = "payload_bug"  # 413: our payload builder produced an oversize body
    BUG = "bug"  # other 4xx: our request was malformed; retrying cannot help


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    reason: str | None


# Final for the token (apns.md §0.5 "never retry", §1.4 table, §2.3 410 on expired LA update tokens).
DEAD_TOKEN_REASONS: Final = frozenset({"BadDeviceToken", "Unregistered", "DeviceTokenNotForTopic", "ExpiredToken"})
# Nothing but a human can fix these; spinning would only get the connection dropped.
CONFIGURATION_REASONS: Final = frozenset(
    {
        "InvalidProviderToken",
        "Forbidden",
        "MissingProviderToken",  # we always send one; its absence means no key was configured
        "BadEnvironmentKeyIdInToken",
        "BadEnvironmentKeyInToken",  # APNSwift's spelling, apns.md §5
        "UnrelatedKeyIdInToken",  # one key per sender: a mismatch is a configuration mix-up
        "BadCertificate",
        "BadCertificateEnvironment",
        "TopicDisallowed",
        "BadTopic",
    }
)
# Transient, and the connection itself should be replaced (apns.md §1.4: IdleTimeout, Shutdown,
# TooManyProviderTokenUpdates leaves the connection unusable for a while).
NEW_CONNECTION_REASONS: Final = frozenset({"IdleTimeout", "Shutdown", "TooManyProviderTokenUpdates"})

MAX_PAYLOAD: Final = 4096
MAX_PAYLOAD_VOIP: Final = 5120
MAX_COLLAPSE_ID: Final = 64
_HEX = re.compile(r"[0-9a-fA-F]+")
_TOPIC = re.compile(r"[A-Za-z0-9._-]+")
# Header values go on the wire without h2's validation (it is switched off for speed), so anything that
# could make the server drop the whole connection (control characters) is refused here, per push.
_VISIBLE_ASCII = re.compile(r"[\x20-\x7e]*")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def classify(status: int, reason: str | None) -> Verdict:
    """What to do with APNs's answer ``status`` / ``reason`` for one push."""
    if status == 200:
        return Verdict(Action.ACCEPTED, None)
    if status == 410 or reason in DEAD_TOKEN_REASONS:
        return Verdict(Action.DEAD_TOKEN, reason or "Unregistered")
    if reason == "ExpiredProviderToken":
        return Verdict(Action.REFRESH_PROVIDER_TOKEN, reason)
    if reason in CONFIGURATION_REASONS:
        return Verdict(Action.CONFIGURATION, reason)
    if reason in NEW_CONNECTION_REASONS:
        return Verdict(Action.RETRY_NEW_CONNECTION, reason)
    if status == 413:
        return Verdict(Action.PAYLOAD_BUG, reason or "PayloadTooLarge")
    if status == 429 or status >= 500:
        return Verdict(Action.RETRY, reason or f"HTTP{status}")
    if status == 403:
        # An unknown 403 is still an authentication problem: stopping beats hammering APNs with it.
        return Verdict(Action.CONFIGURATION, reason or "HTTP403")
    return Verdict(Action.BUG, reason or f"HTTP{status}")


@functools.lru_cache(maxsize=256)
def _topic_is_valid(topic: str) -> bool:
    # a process pushes to a handful of topics; this runs per push
    return _TOPIC.fullmatch(topic) is not None


def check_push(push: Push) -> str | None:
    """The reason APNs would refuse ``push`` outright (named like APNs's own reasons), or None if it is sendable."""
    if not push.token or not _HEX.fullmatch(push.token):
        return "BadDeviceToken"  # a token that is not hex can never be delivered
    if push.push_type not in PUSH_TYPES:
        return "InvalidPushType"
    if not push.topic:
        return "MissingTopic"
    if not _topic_is_valid(push.topic):
        return "BadTopic"
    if push.priority not in (10, 5, 1):
        return "BadPriority"
    if push.push_type == "background" and push.priority == 10:
        return "BadPriority"  # apns.md §1.3: background pushes must use priority 5
    if not push.payload:
        return "PayloadEmpty"
    limit = MAX_PAYLOAD_VOIP if push.push_type == "voip" else MAX_PAYLOAD
    if len(push.payload) > limit:
        return "PayloadTooLarge"
    if push.collapse_id is not None and len(push.collapse_id.encode()) > MAX_COLLAPSE_ID:
        return "BadCollapseId"
    if push.collapse_id is not None and not _VISIBLE_ASCII.fullmatch(push.collapse_id):
        return "BadCollapseId"
    if push.apns_id is not None and not _UUID.fullmatch(push.apns_id):
        return "BadMessageId"
    if push.expiration is not None and push.expiration < 0:
        return "BadExpirationDate"
    if push.kind not in KINDS:
        return "InvalidKind"  # ours, not Apple's: the metrics label must stay bounded
    return None
