"""Apple's rules for APNs answers, as pure functions: what an answer (or its absence) means for the request,
and whether, when and how it goes again.

Owns: the verdict for each (status, reason) pair (apns.md §1.4 and §0.5; broadcasts and channel management:
§2.6 and §8, in the same table); the next step after an answer or a silence (``after_answer``,
``after_silence``: the result now, or the request again after a backoff, at once, on a new connection or a
fresh provider token, within which budget), the retry delay (``retry_delay``); what a push's final result
means for its producer (``resend``: settled, re-sent as it was, or re-sent without its alert) and the wait
between a producer's re-send rounds (``resend_delay``); the request checks APNs would otherwise answer with a
4xx (so our own bugs show up before a request). Used by the sender (``actors.sender``), channel management
(``actors.channel_management``) and the fan-out (``actors.fanout``), which apply the steps. Must not touch:
I/O, connections, the token cache.
"""

from __future__ import annotations

import base64
import binascii
import enum
import functools
import random
import re
from dataclasses import dataclass
from typing import Final

from daemon.apns.types import KINDS, LIVEACTIVITY_TOPIC_SUFFIX, PUSH_TYPES, Push, PushResult
from daemon.backoff import backoff_delay


class Action(enum.Enum):
    ACCEPTED = "accepted"
    DEAD_TOKEN = "dead_token"  # final for the token: report to the janitor, never push it again
    RETRY = "retry"  # transient: retry after a backoff, up to the retry bound
    RETRY_NEW_CONNECTION = "retry_new_connection"  # transient, but this connection is unusable: replace it
    REFRESH_PROVIDER_TOKEN = "refresh_provider_token"  # ExpiredProviderToken: new JWT, retry once
    CONFIGURATION = "configuration"  # credentials/topic wrong: stop the sender loudly
    PAYLOAD_BUG = "payload_bug"  # 413: our payload builder produced an oversize body
    BUG = "bug"  # other 4xx: our request was malformed; retrying cannot help: dropped and logged
    RECREATE_CHANNEL = "recreate_channel"  # the broadcast's channel is gone: create a new one, re-announce it
    CHANNEL_LIMIT = "channel_limit"  # 10,000 channels: sweep leaked ones, then fall back to tokens


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    reason: str | None


# Final for the token (apns.md §0.5 "never retry", §1.4 table, §2.3 410 on expired LA update tokens).
DEAD_TOKEN_REASONS: Final = frozenset(
    {"BadDeviceToken", "Unregistered", "DeviceTokenNotForTopic", "ExpiredToken"}
)
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
        "TopicMismatch",  # broadcast/management: the key does not cover the path's bundle id
        "FeatureNotEnabled",  # the app id's Broadcast Capability is off (switching it off deleted every channel)
    }
)
# Broadcast: the channel does not exist (deleted, leaked-then-swept, other environment) or its id is not one.
CHANNEL_GONE_REASONS: Final = frozenset({"ChannelNotRegistered", "BadChannelId"})
# Transient, and the connection itself should be replaced (apns.md §1.4: IdleTimeout, Shutdown,
# TooManyProviderTokenUpdates leaves the connection unusable for a while).
NEW_CONNECTION_REASONS: Final = frozenset({"IdleTimeout", "Shutdown", "TooManyProviderTokenUpdates"})

# Every reason Apple documents for broadcasts and channel management (apns.md §2.6, §8, plus the undocumented
# MissingChannelQueueSize), with the outcome ``classify`` decides. The tests hold ``classify`` to it.
BROADCAST_REASONS: Final[dict[tuple[int, str], Action]] = {
    (400, "FeatureNotEnabled"): Action.CONFIGURATION,
    (400, "MissingChannelId"): Action.BUG,
    (400, "BadChannelId"): Action.RECREATE_CHANNEL,
    (400, "ChannelNotRegistered"): Action.RECREATE_CHANNEL,
    (400, "BadRequestParams"): Action.BUG,
    (400, "BadRequestPayload"): Action.BUG,
    (400, "PayloadEmpty"): Action.BUG,
    (400, "BadMessageId"): Action.BUG,
    (400, "MissingPushType"): Action.BUG,
    (400, "InvalidPushType"): Action.BUG,
    (400, "CannotCreateChannelConfig"): Action.CHANNEL_LIMIT,
    (400, "BadExpirationDate"): Action.BUG,
    (400, "TopicDisallowed"): Action.CONFIGURATION,
    (400, "BadPriority"): Action.BUG,
    (400, "MissingChannelQueueSize"): Action.BUG,
    (403, "BadCertificate"): Action.CONFIGURATION,
    (403, "BadCertificateEnvironment"): Action.CONFIGURATION,
    (403, "TopicMismatch"): Action.CONFIGURATION,
    (403, "MissingProviderToken"): Action.CONFIGURATION,
    (403, "ExpiredProviderToken"): Action.REFRESH_PROVIDER_TOKEN,
    (403, "InvalidProviderToken"): Action.CONFIGURATION,
    (404, "BadPath"): Action.BUG,
    (405, "MethodNotAllowed"): Action.BUG,
    (413, "PayloadTooLarge"): Action.PAYLOAD_BUG,
    (429, "TooManyRequests"): Action.RETRY,
    (429, "TooManyProviderTokenUpdates"): Action.RETRY_NEW_CONNECTION,
    (500, "InternalServerError"): Action.RETRY,
    (503, "ServiceUnavailable"): Action.RETRY,
    (503, "Service Unavailable"): Action.RETRY,  # Apple's spelling in one table
    (503, "Shutdown"): Action.RETRY_NEW_CONNECTION,
}

MAX_PAYLOAD: Final = 4096
MAX_PAYLOAD_VOIP: Final = 5120
MAX_COLLAPSE_ID: Final = 64
MAX_BROADCAST_PAYLOAD: Final = 5120  # apns.md §8: "5 KB"
_BASE64: Final = re.compile(r"[A-Za-z0-9+/]+={0,2}")
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
    if status in (201, 204):  # channel management: created, deleted
        return Verdict(Action.ACCEPTED, None)
    if reason in CHANNEL_GONE_REASONS:
        return Verdict(Action.RECREATE_CHANNEL, reason)
    if reason == "CannotCreateChannelConfig":
        return Verdict(Action.CHANNEL_LIMIT, reason)
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


# --- what happens next ------------------------------------------------------------------------------------

# Re-sending a request APNs never processed (REFUSED_STREAM, above GOAWAY's last stream) is free of side
# effects, so it does not use the retry budget; this bound only stops a server that refuses forever.
MAX_REQUEUES: Final = 50
# A producer's re-send rounds (a push that failed past the sender's retries, or whose result never came) wait
# this long before the first, doubling each round up to the producer's cap.
RESEND_BASE_S: Final = 0.5
# The verdict on a request no connection took within the connect timeout (channel management): transient.
NO_CONNECTION: Final = Verdict(Action.RETRY, "NoConnection")


class Again(enum.Enum):
    """Whether a request goes again, and which budget that spends."""

    NO = "no"  # final: settle it with the step's outcome
    AFTER_BACKOFF = "after_backoff"  # after ``retry_delay``; spends a retry
    AT_ONCE = "at_once"  # now; spends a retry (it may have been processed)
    REQUEUE = "requeue"  # now; APNs never processed it, so it spends a requeue (up to ``MAX_REQUEUES``)
    FRESH_TOKEN = "fresh_token"  # now, on a fresh provider token; once per request


@dataclass(frozen=True, slots=True)
class Step:
    """What the sender of a request does next. ``outcome`` is the request's result when final ("accepted",
    "rejected" or "failed"), else None and ``again`` says how it goes again. ``new_connection``: retire the
    connection that carried it; ``new_provider_token``: invalidate that connection's provider token.
    ``may_have_arrived``: it went out and no answer came, so a re-send must not show its alert again.
    ``exhausted``: failed because its budget is spent (not because of what APNs said)."""

    verdict: Verdict
    reason: str
    outcome: str | None = None
    again: Again = Again.NO
    new_connection: bool = False
    new_provider_token: bool = False
    may_have_arrived: bool = False
    exhausted: bool = False


_REJECTED: Final = frozenset({Action.DEAD_TOKEN, Action.RECREATE_CHANNEL, Action.CHANNEL_LIMIT})


def after_answer(verdict: Verdict, *, retries: int, max_retries: int, fresh_token_used: bool) -> Step:
    """The next step after APNs answered with ``verdict`` (``classify``), given the retries already spent and
    whether the request already went once on a fresh provider token.

    Accepted is final. A dead token, a channel gone and the channel limit are final for that token or channel
    ("rejected": the producer replaces it). A configuration error, an oversize payload and a malformed request
    fail at once: retrying cannot help. A transient error goes again after a backoff while retries last (on a
    new connection where APNs said the connection is unusable). ExpiredProviderToken goes again at once, once,
    on a new connection with a fresh token: Pushy found a connection wedged after it, and a fresh connection
    adopts the fresh token without counting as a token switch."""
    action = verdict.action
    reason = verdict.reason or ""
    if action is Action.ACCEPTED:
        return Step(verdict, reason, outcome="accepted")
    if action in _REJECTED:
        return Step(verdict, reason, outcome="rejected")
    if action is Action.REFRESH_PROVIDER_TOKEN:
        if fresh_token_used:
            return Step(verdict, reason, outcome="failed", new_connection=True, new_provider_token=True)
        return Step(verdict, reason, again=Again.FRESH_TOKEN, new_connection=True, new_provider_token=True)
    if action is Action.RETRY or action is Action.RETRY_NEW_CONNECTION:
        recycle = action is Action.RETRY_NEW_CONNECTION
        if retries >= max_retries:
            return Step(verdict, reason, outcome="failed", new_connection=recycle, exhausted=True)
        return Step(verdict, reason, again=Again.AFTER_BACKOFF, new_connection=recycle)
    return Step(verdict, reason, outcome="failed")  # CONFIGURATION, PAYLOAD_BUG, BUG


def after_silence(cause: str, processed: bool, *, retries: int, requeues: int, max_retries: int) -> Step:
    """The next step for a request that got no answer (``daemon.apns.connection.Unanswered``): one APNs
    certainly did not process goes again at once without spending a retry (up to ``MAX_REQUEUES``); one it
    may have processed (our deadline passed, the connection went away after it left) goes again at once,
    spending a retry, and may have arrived."""
    if not processed:
        verdict = Verdict(Action.RETRY, "Unprocessed")
        if requeues >= MAX_REQUEUES:
            return Step(verdict, "Unprocessed", outcome="failed", exhausted=True)
        return Step(verdict, "Unprocessed", again=Again.REQUEUE)
    reason = "Timeout" if cause == "timeout" else cause.capitalize()
    verdict = Verdict(Action.RETRY, reason)
    if retries >= max_retries:
        return Step(verdict, reason, outcome="failed", may_have_arrived=True, exhausted=True)
    return Step(verdict, reason, again=Again.AT_ONCE, may_have_arrived=True)


def retry_delay(retry: int, *, base_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """Seconds before retry number ``retry`` (1-based) of a request: exponential from ``[apns].retry_backoff_s``
    up to ``retry_backoff_max_s``, half of it jittered (many requests failed together come back spread)."""
    return backoff_delay(retry, base_s=base_s, cap_s=cap_s, jitter=0.5, rng=rng)


class Resend(enum.Enum):
    """What a push's final result means for the producer that is waiting for it."""

    SETTLED = "settled"  # accepted, or rejected for good: nothing more to send
    AS_IS = "as_is"  # failed before it could have arrived (APNs answered an error, or it never left)
    QUIET = "quiet"  # went out and no answer came: it may have arrived, so it goes again without its alert


def resend(result: PushResult) -> Resend:
    if result.outcome != "failed":
        return Resend.SETTLED
    if result.status is None and result.attempts:
        return Resend.QUIET
    return Resend.AS_IS


def resend_delay(round_: int, *, cap_s: float) -> float:
    """Seconds before a producer's re-send round number ``round_`` (1-based)."""
    return backoff_delay(round_, base_s=RESEND_BASE_S, cap_s=cap_s)


@functools.lru_cache(maxsize=256)
def _topic_is_valid(topic: str) -> bool:
    # a process pushes to a handful of topics; this runs per push
    return _TOPIC.fullmatch(topic) is not None


def channel_id_is_valid(channel_id: str) -> bool:
    """A channel id is base64 (its length is not fixed: only the encoding is checked)."""
    if not channel_id or len(channel_id) % 4 or _BASE64.fullmatch(channel_id) is None:
        return False
    try:
        base64.b64decode(channel_id, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def check_broadcast(push: Push) -> str | None:
    """The reason APNs would refuse the broadcast ``push`` outright, or None if it is sendable."""
    assert push.channel_id is not None
    if not channel_id_is_valid(push.channel_id):
        return "BadChannelId"
    if push.push_type != "liveactivity":
        return "InvalidPushType"  # broadcasts carry Live Activity updates only
    if not push.topic:
        return "BadPath"
    if push.topic.endswith(LIVEACTIVITY_TOPIC_SUFFIX) or not _topic_is_valid(push.topic):
        return "TopicDisallowed"  # the path takes the bare bundle id
    if push.priority not in (10, 5, 1):
        return "BadPriority"
    if push.expiration is None or push.expiration < 0:
        return "BadExpirationDate"  # required on broadcasts (0 on a no-storage channel)
    if not push.payload:
        return "PayloadEmpty"
    if len(push.payload) > MAX_BROADCAST_PAYLOAD:
        return "PayloadTooLarge"
    if push.apns_id is not None and not _UUID.fullmatch(push.apns_id):
        return "BadMessageId"
    if push.kind not in KINDS or push.kind == "start":
        return "InvalidKind"  # a channel cannot start an activity
    return None


def check_push(push: Push) -> str | None:
    """The reason APNs would refuse ``push`` outright (named like APNs's own reasons), or None if it is sendable."""
    if push.channel_id is not None:
        return check_broadcast(push)
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
