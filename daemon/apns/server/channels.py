"""iOS 18 channels as APNs keeps them: the channel store, management and broadcast validation, and the
simulated devices subscribed to channels (sans I/O; the server's ``app`` wires it to its listeners).

Apple's rules (spec/apns.md §2.6 and §8): channel management is ``/1/apps/{bundle}/channels`` (POST create with
``{"message-storage-policy": 0|1, "push-type": "LiveActivity"}`` -> 201 and ``apns-channel-id``; GET read and
DELETE with ``apns-channel-id`` -> 200 / 204) and ``GET /1/apps/{bundle}/all-channels``, on its own host; at
most 10,000 channels per app (``CannotCreateChannelConfig``). A broadcast is ``POST /4/broadcasts/apps/{bundle}``
with ``apns-channel-id``, ``apns-push-type: liveactivity``, ``apns-priority``, ``apns-expiration`` (0 on a
policy-0 channel, else ``BadExpirationDate``), no ``apns-topic``, a payload of at most 5,120 bytes.

Choices where Apple is silent: channel ids are 16 random bytes in base64 (Apple: "make no assumption about the
length"); an ``apns-topic`` header on a broadcast is refused as ``TopicDisallowed``; a missing or invalid
``message-storage-policy`` is ``MissingChannelQueueSize`` (what a TypeScript library observed); a broadcast
carrying ``event: start`` is ``BadRequestPayload`` (a channel cannot start an activity); the path's bundle id
with a ``.push-type.*`` suffix is ``TopicDisallowed`` and another team's bundle ``TopicMismatch``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from daemon.apns.server.validation import Verdict, validate_live_activity

MAX_CHANNELS = 10_000
BROADCAST_PAYLOAD_LIMIT = 5120
_MANAGEMENT = re.compile(r"/1/apps/([^/?]+)/(channels|all-channels)")
_BROADCAST = re.compile(r"/4/broadcasts/apps/([^/?]+)")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_CREATE_FIELDS = frozenset({"message-storage-policy", "push-type"})


def _valid_channel_id(value: str) -> bool:
    if not value or len(value) % 4:
        return False
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


@dataclass
class ChannelStore:
    """Every channel per bundle id, with its policy; ``limit`` is Apple's 10,000 (smaller in tests)."""

    limit: int = MAX_CHANNELS
    channels: dict[str, dict[str, int]] = field(default_factory=dict)  # bundle -> channel id -> policy
    created: int = 0
    deleted: int = 0

    def create(self, bundle: str, policy: int) -> str | None:
        held = self.channels.setdefault(bundle, {})
        if len(held) >= self.limit:
            return None
        channel_id = base64.b64encode(os.urandom(16)).decode()
        held[channel_id] = policy
        self.created += 1
        return channel_id

    def policy(self, bundle: str, channel_id: str) -> int | None:
        return self.channels.get(bundle, {}).get(channel_id)

    def delete(self, bundle: str, channel_id: str) -> bool:
        if self.channels.get(bundle, {}).pop(channel_id, None) is None:
            return False
        self.deleted += 1
        return True

    def all(self, bundle: str) -> list[str]:
        return list(self.channels.get(bundle, {}))

    def count(self) -> int:
        return sum(len(held) for held in self.channels.values())


@dataclass
class Subscriptions:
    """Simulated iOS 18 devices: which channels each listens to, and every broadcast each one saw."""

    by_channel: dict[str, set[str]] = field(default_factory=dict)
    seen: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # device -> the aps of each broadcast

    def subscribe(self, device: str, channel_id: str) -> None:
        self.by_channel.setdefault(channel_id, set()).add(device)
        self.seen.setdefault(device, [])

    def unsubscribe(self, device: str, channel_id: str | None = None) -> None:
        for channel, devices in self.by_channel.items():
            if channel_id is None or channel == channel_id:
                devices.discard(device)

    def deliver(self, channel_id: str, aps: dict[str, Any]) -> int:
        """Fan a broadcast out to the devices on ``channel_id``; returns how many it reached."""
        devices = self.by_channel.get(channel_id, ())
        for device in devices:
            self.seen.setdefault(device, []).append(aps)
        return len(devices)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A management or broadcast request's verdict, and what a success answers with."""

    verdict: Verdict
    op: str  # create | read | delete | list | broadcast | "" (refused before the operation was known)
    bundle: str = ""
    channel_id: str = ""
    headers: tuple[tuple[bytes, bytes], ...] = ()
    body: bytes = b""
    payload: Any = None


def _bundle_verdict(bundle: str, topics: frozenset[str]) -> Verdict | None:
    if ".push-type." in bundle or bundle.endswith((".voip", ".complication")):
        return Verdict(400, "TopicDisallowed", f"bundle id {bundle!r} carries a suffix")
    if bundle not in topics:
        return Verdict(403, "TopicMismatch", f"the provider token does not cover {bundle!r}")
    return None


def _request_id_verdict(headers: Mapping[str, str]) -> Verdict | None:
    request_id = headers.get("apns-request-id")
    if request_id is not None and _UUID.fullmatch(request_id) is None:
        return Verdict(400, "BadMessageId", "apns-request-id is not a canonical UUID")
    return None


def is_management_path(path: str) -> bool:
    return path.startswith("/1/")


def is_broadcast_path(path: str) -> bool:
    return path.startswith("/4/")


def _channel_header(
    headers: Mapping[str, str], store: ChannelStore, bundle: str
) -> tuple[str, int | None, Verdict | None]:
    channel_id = headers.get("apns-channel-id")
    if not channel_id:
        return "", None, Verdict(400, "MissingChannelId", "apns-channel-id is missing")
    if not _valid_channel_id(channel_id):
        return channel_id, None, Verdict(400, "BadChannelId", "apns-channel-id is not base64")
    policy = store.policy(bundle, channel_id)
    if policy is None:
        return channel_id, None, Verdict(400, "ChannelNotRegistered", "no such channel")
    return channel_id, policy, None


def decide_management(
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    store: ChannelStore,
    topics: frozenset[str],
) -> Outcome:
    """Validate and carry out one channel-management request (authorization is checked by the caller)."""
    match = _MANAGEMENT.fullmatch(path.split("?", 1)[0])
    if match is None:
        return Outcome(Verdict(404, "BadPath", f"no management endpoint {path!r}"), "")
    bundle, resource = match.group(1), match.group(2)
    allowed = ("GET",) if resource == "all-channels" else ("POST", "GET", "DELETE")
    if method not in allowed:
        return Outcome(Verdict(405, "MethodNotAllowed", f"{method} on {resource}"), "")
    op = {"POST": "create", "DELETE": "delete"}.get(method, "list" if resource == "all-channels" else "read")
    verdict = _bundle_verdict(bundle, topics) or _request_id_verdict(headers)
    if verdict is not None:
        return Outcome(verdict, op, bundle)
    if op == "list":
        data = json.dumps({"channels": store.all(bundle)}, separators=(",", ":")).encode()
        return Outcome(Verdict(200), op, bundle, body=data)
    if op == "create":
        if not body:
            return Outcome(Verdict(400, "PayloadEmpty", "create needs a JSON body"), op, bundle)
        try:
            parsed = json.loads(body)
        except (UnicodeDecodeError, ValueError) as exc:
            return Outcome(Verdict(400, "BadRequestPayload", f"body is not JSON: {exc}"), op, bundle)
        if not isinstance(parsed, dict):
            return Outcome(Verdict(400, "BadRequestPayload", "body is not a JSON object"), op, bundle)
        unknown = sorted(set(parsed) - _CREATE_FIELDS)
        if unknown:
            return Outcome(Verdict(400, "BadRequestParams", f"unknown attributes {unknown}"), op, bundle)
        if "push-type" not in parsed:
            return Outcome(Verdict(400, "MissingPushType", "push-type is missing"), op, bundle)
        if parsed["push-type"] != "LiveActivity":
            return Outcome(Verdict(400, "InvalidPushType", "only LiveActivity channels exist"), op, bundle)
        policy = parsed.get("message-storage-policy")
        if type(policy) is not int or policy not in (0, 1):
            return Outcome(
                Verdict(400, "MissingChannelQueueSize", "message-storage-policy must be 0 or 1"), op, bundle
            )
        channel_id = store.create(bundle, policy)
        if channel_id is None:
            return Outcome(
                Verdict(400, "CannotCreateChannelConfig", f"channel limit {store.limit} reached"), op, bundle
            )
        return Outcome(Verdict(201), op, bundle, channel_id, ((b"apns-channel-id", channel_id.encode()),))
    channel_id, policy, verdict = _channel_header(headers, store, bundle)
    if verdict is not None:
        return Outcome(verdict, op, bundle, channel_id)
    if op == "read":
        data = json.dumps(
            {"message-storage-policy": policy, "push-type": "LiveActivity"}, separators=(",", ":")
        ).encode()
        return Outcome(Verdict(200), op, bundle, channel_id, body=data)
    store.delete(bundle, channel_id)
    return Outcome(Verdict(204), op, bundle, channel_id)


def decide_broadcast(
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    store: ChannelStore,
    topics: frozenset[str],
) -> Outcome:
    """Validate one broadcast (authorization is checked by the caller); the payload when accepted."""
    match = _BROADCAST.fullmatch(path.split("?", 1)[0])
    if match is None:
        return Outcome(Verdict(404, "BadPath", f"no broadcast endpoint {path!r}"), "broadcast")
    if method != "POST":
        return Outcome(Verdict(405, "MethodNotAllowed", f"{method} on broadcasts"), "broadcast")
    bundle = match.group(1)
    verdict = _bundle_verdict(bundle, topics) or _request_id_verdict(headers)
    if verdict is None and "apns-topic" in headers:
        verdict = Verdict(
            400, "TopicDisallowed", "broadcasts take no apns-topic (the bundle id is in the path)"
        )
    if verdict is not None:
        return Outcome(verdict, "broadcast", bundle)
    channel_id, policy, verdict = _channel_header(headers, store, bundle)
    if verdict is not None:
        return Outcome(verdict, "broadcast", bundle, channel_id)
    push_type = headers.get("apns-push-type")
    if not push_type:
        return Outcome(
            Verdict(400, "MissingPushType", "apns-push-type is missing"), "broadcast", bundle, channel_id
        )
    if push_type.lower() != "liveactivity":
        return Outcome(
            Verdict(400, "InvalidPushType", f"{push_type!r} is not liveactivity"),
            "broadcast",
            bundle,
            channel_id,
        )
    if headers.get("apns-priority") not in ("10", "5", "1"):
        return Outcome(
            Verdict(400, "BadPriority", "apns-priority must be 10, 5 or 1"), "broadcast", bundle, channel_id
        )
    expiration = headers.get("apns-expiration")
    if expiration is None or not expiration.isdigit():
        return Outcome(
            Verdict(400, "BadExpirationDate", "apns-expiration is required (epoch seconds)"),
            "broadcast",
            bundle,
            channel_id,
        )
    if policy == 0 and expiration != "0":
        return Outcome(
            Verdict(400, "BadExpirationDate", "a no-storage channel takes apns-expiration 0 only"),
            "broadcast",
            bundle,
            channel_id,
        )
    if not body:
        return Outcome(Verdict(400, "PayloadEmpty", "broadcast has no body"), "broadcast", bundle, channel_id)
    if len(body) > BROADCAST_PAYLOAD_LIMIT:
        return Outcome(
            Verdict(413, "PayloadTooLarge", f"payload is {len(body)} bytes, limit 5120"),
            "broadcast",
            bundle,
            channel_id,
        )
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        return Outcome(
            Verdict(400, "BadRequestPayload", f"payload is not JSON: {exc}"), "broadcast", bundle, channel_id
        )
    aps = payload.get("aps") if isinstance(payload, dict) else None
    if not isinstance(aps, dict):
        return Outcome(
            Verdict(400, "BadRequestPayload", "payload has no aps object"), "broadcast", bundle, channel_id
        )
    la = validate_live_activity(aps)
    if la is not None:
        return Outcome(
            Verdict(400, "BadRequestPayload", la.detail), "broadcast", bundle, channel_id, payload=payload
        )
    if aps.get("event") == "start":
        return Outcome(
            Verdict(400, "BadRequestPayload", "a channel cannot start an activity"),
            "broadcast",
            bundle,
            channel_id,
            payload=payload,
        )
    return Outcome(Verdict(200), "broadcast", bundle, channel_id, payload=payload)
