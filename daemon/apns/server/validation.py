"""Request validation as APNs does it (spec/apns.md §1-§4): path, headers, payload; the verdict and its error body."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

# Constants from spec/apns.md

# §1.3: the topic suffix each push type requires after the bundle id. mdm is absent on purpose: its topic is
# the UID of an MDM certificate, which token connections cannot have.
TOPIC_SUFFIX_BY_PUSH_TYPE: dict[str, str] = {
    "alert": "",
    "background": "",
    "liveactivity": ".push-type.liveactivity",
    "voip": ".voip",
    "location": ".location-query",
    "complication": ".complication",
    "fileprovider": ".pushkit.fileprovider",
    "pushtotalk": ".voip-ptt",
    "widgets": ".push-type.widgets",
    "controls": ".push-type.controls",
}
_KNOWN_SUFFIXES = sorted({s for s in TOPIC_SUFFIX_BY_PUSH_TYPE.values() if s}, key=len, reverse=True)

# §1.2: 4096 bytes, VoIP 5120.
PAYLOAD_LIMIT_DEFAULT = 4096
PAYLOAD_LIMIT_BY_PUSH_TYPE = {"voip": 5120}

# §1.2: 10, 5 and 1 are Apple's documented priorities (the brief's "5|10" plus Apple's power-saving 1).
VALID_PRIORITIES = frozenset({"10", "5", "1"})
MAX_COLLAPSE_ID_BYTES = 64
# §1.5: a provider token is accepted for one hour after its iat.
PROVIDER_TOKEN_MAX_AGE_S = 3600
# §1.5: a connection may switch tokens at most once per 20 minutes.
TOKEN_UPDATE_INTERVAL_S = 20 * 60
LIVE_ACTIVITY_EVENTS = frozenset({"start", "update", "end"})

# The reason APNs gives for a status when a script names only the status.
DEFAULT_REASON_BY_STATUS: dict[int, str] = {
    400: "BadDeviceToken",
    403: "Forbidden",
    404: "BadPath",
    405: "MethodNotAllowed",
    410: "Unregistered",
    413: "PayloadTooLarge",
    429: "TooManyRequests",
    500: "InternalServerError",
    503: "ServiceUnavailable",
}

_HEX_TOKEN = re.compile(r"[0-9A-Fa-f]+")
# §1.2: canonical 8-4-4-4-12 UUID; APNs documents lowercase, we accept either case like Pushy's mock.
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_DEVICE_PREFIX = "/3/device/"


# Sans-I/O core: verdicts and request validation


@dataclass(frozen=True, slots=True)
class Verdict:
    """How the server answers one request. ``detail`` never leaves the server (records and logs only)."""

    status: int
    reason: str | None = None
    detail: str = ""

    @property
    def accepted(self) -> bool:
        return self.status == 200

    @property
    def is_rejection(self) -> bool:
        """A 4xx that APNs counts against the connection (410 is not an error per Apple)."""
        return 400 <= self.status < 500 and self.status != 410


ACCEPTED = Verdict(200)


def _bundle_of(topic: str) -> str:
    for suffix in _KNOWN_SUFFIXES:
        if topic.endswith(suffix):
            return topic[: -len(suffix)]
    return topic


def normalize_topics(topics: Collection[str]) -> frozenset[str]:
    """The bundle ids a server allows; a topic given with a push-type suffix counts as its bundle."""
    return frozenset(_bundle_of(t) for t in topics)


def validate_target(method: str, path: str) -> tuple[str, Verdict | None]:
    """Check ``:method`` and ``:path``; returns the device token (possibly empty) and a verdict if refused."""
    if not path.startswith(_DEVICE_PREFIX):
        return "", Verdict(404, "BadPath", f"path {path!r} is not /3/device/<token>")
    if method != "POST":
        return "", Verdict(405, "MethodNotAllowed", f"method {method!r} is not POST")
    token = path[len(_DEVICE_PREFIX) :]
    if "?" in token:
        token = token.split("?", 1)[0]
    if not token:
        return "", Verdict(400, "MissingDeviceToken", "no token in :path")
    if "/" in token:
        return token, Verdict(404, "BadPath", f"path {path!r} has extra segments")
    # §1.2: don't assume a length (Live Activity tokens are 160 hex), but a token is bytes in hex.
    if len(token) % 2 or _HEX_TOKEN.fullmatch(token) is None:
        return token, Verdict(400, "BadDeviceToken", "device token is not an even-length hex string")
    return token, None


def validate_headers(headers: Mapping[str, str], topics: frozenset[str]) -> Verdict | None:
    """APNs header rules of §1.2/§1.3 (everything except authorization, checked per connection)."""
    apns_id = headers.get("apns-id")
    if apns_id is not None and _UUID.fullmatch(apns_id) is None:
        return Verdict(400, "BadMessageId", "apns-id is not a canonical UUID")
    push_type = headers.get("apns-push-type")
    if push_type is None:
        # Required on watchOS and for every type whose topic carries a suffix; we insist like APNs should.
        return Verdict(400, "InvalidPushType", "apns-push-type is missing")
    if push_type not in TOPIC_SUFFIX_BY_PUSH_TYPE:
        return Verdict(400, "InvalidPushType", f"apns-push-type {push_type!r} is unknown")
    topic = headers.get("apns-topic")
    if not topic:
        return Verdict(400, "MissingTopic", "apns-topic is missing")
    expected_suffix = TOPIC_SUFFIX_BY_PUSH_TYPE[push_type]
    bundle = _bundle_of(topic)
    if bundle not in topics:
        return Verdict(400, "TopicDisallowed", f"topic {topic!r} is not allowed for this team/key")
    if topic != bundle + expected_suffix:
        # §1.2: a liveactivity push without the .push-type.liveactivity suffix gets DeviceTokenNotForTopic.
        return Verdict(
            400,
            "DeviceTokenNotForTopic",
            f"push type {push_type!r} needs topic {bundle + expected_suffix!r}, got {topic!r}",
        )
    priority = headers.get("apns-priority")
    if priority is not None:
        if priority not in VALID_PRIORITIES:
            return Verdict(400, "BadPriority", f"apns-priority {priority!r} is not 10, 5 or 1")
        if push_type == "background" and priority == "10":
            return Verdict(400, "BadPriority", "background pushes must use priority 5")
    expiration = headers.get("apns-expiration")
    if expiration is not None and not expiration.isdigit():
        return Verdict(400, "BadExpirationDate", "apns-expiration is not epoch seconds")
    collapse_id = headers.get("apns-collapse-id")
    if collapse_id is not None and len(collapse_id.encode()) > MAX_COLLAPSE_ID_BYTES:
        return Verdict(400, "BadCollapseId", "apns-collapse-id is over 64 bytes")
    return None


def _is_epoch_number(value: Any) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    )


def validate_live_activity(aps: Mapping[str, Any]) -> Verdict | None:
    """§2.2: timestamp, event and content-state on every Live Activity push; start needs more."""
    if not _is_epoch_number(aps.get("timestamp")):
        return Verdict(400, "BadPayload", "aps.timestamp must be epoch seconds")
    event = aps.get("event")
    if event not in LIVE_ACTIVITY_EVENTS:
        return Verdict(400, "BadPayload", f"aps.event must be start, update or end, got {event!r}")
    if not isinstance(aps.get("content-state"), dict):
        return Verdict(400, "BadPayload", "aps.content-state must be a JSON object")
    if event == "start":
        for key in ("attributes-type", "attributes", "alert"):
            if key not in aps:
                return Verdict(400, "BadPayload", f"aps.{key} is required for event start")
    for key in ("stale-date", "dismissal-date"):
        if key in aps and not _is_epoch_number(aps[key]):
            return Verdict(400, "BadPayload", f"aps.{key} must be epoch seconds")
    return None


def validate_payload(push_type: str, body: bytes | bytearray, *, parse: bool) -> tuple[Any, Verdict | None]:
    """Size (413), emptiness and JSON shape. With ``parse=False`` only emptiness and size are checked."""
    if not body:
        return None, Verdict(400, "PayloadEmpty", "request has no body")
    limit = PAYLOAD_LIMIT_BY_PUSH_TYPE.get(push_type, PAYLOAD_LIMIT_DEFAULT)
    if len(body) > limit:
        return None, Verdict(413, "PayloadTooLarge", f"payload is {len(body)} bytes, limit {limit}")
    if not parse:
        return None, None
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        return None, Verdict(400, "BadPayload", f"payload is not JSON: {exc}")
    if not isinstance(payload, dict):
        return payload, Verdict(400, "BadPayload", "payload is not a JSON object")
    aps = payload.get("aps")
    if push_type == "liveactivity":
        if not isinstance(aps, dict):
            return payload, Verdict(400, "BadPayload", "payload has no aps object")
        return payload, validate_live_activity(aps)
    if aps is not None and not isinstance(aps, dict):
        return payload, Verdict(400, "BadPayload", "aps is not a JSON object")
    return payload, None


def headers_to_dict(raw: list[tuple[bytes, bytes]]) -> tuple[dict[str, str], str | None]:
    """h2's raw header list as a dict, plus the first duplicated name (APNs: 400 DuplicateHeaders)."""
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw}
    if len(headers) == len(raw):
        return headers, None
    seen: set[str] = set()
    for k, _ in raw:
        name = k.decode("latin-1")
        if name in seen:
            return headers, name
        seen.add(name)
    return headers, None  # pragma: no cover - unreachable: sizes differ only with a duplicate


def error_body(verdict: Verdict, *, timestamp_ms: int | None = None) -> bytes:
    """APNs error JSON: ``{"reason": ...}`` plus ``timestamp`` (ms) on 410 only."""
    body: dict[str, Any] = {"reason": verdict.reason}
    if verdict.status == 410:
        body["timestamp"] = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
    return json.dumps(body, separators=(",", ":")).encode()
