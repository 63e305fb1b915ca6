"""The project's APNs server: real HTTP/2 over TLS (trio + h2) that validates like APNs and scripts faults.

Owns: the stand-in for Apple's push service used by the demo, the sender's tests, the end-to-end tests and
the throughput benchmark. It answers ``POST /3/device/<token>`` the way APNs does (§1 of spec/apns.md),
verifies ES256 provider tokens, follows APNs's stream-limit habits, records every answered request and can
be scripted, in process or over ``/ctl/*`` on the same port, to produce every limit and error of spec §4.

Must not touch: the sender (``daemon/apns`` client modules belong to the sender's owner); nothing here is
imported by production code paths.

Layout: the top half is the sans-I/O core (request validation, provider-token checks, the per-connection
token policy, the fault script) as plain functions and small classes tested without sockets; the bottom half
is the trio shell (``_ServerConnection`` moves bytes between a TLS stream and an ``h2`` state machine,
``ApnsTestServer`` accepts connections and holds records and faults).

Scripting (``ApnsTestServer.script(**fields)`` in process, or ``POST /ctl/script`` with the same fields as a
JSON body; see ``FaultScript``): per-token status/reason/count/delay, 5xx storms (count or duration),
GOAWAY (after N answers or now, graceful or not), dropped TCP connections, REFUSED_STREAM for N streams,
delays, a small flow-control window with late WINDOW_UPDATEs, the stream limits and their drop to 1 after
a rejection, the token-churn interval, key pinning and an idle timeout. Other control endpoints on the same
port: ``POST /ctl/reset[?records=1]``, ``GET /ctl/records[?since=K&limit=M]``, ``GET /ctl/stats``,
``GET /ctl/wait?records=N&timeout=S``. Control requests are not pushes: no records, no limit changes.

Records (``server.records``, and one JSON line each in ``record_path``): ``time``, ``connection_id``,
``stream_id``, ``token``, ``headers`` (authorization shown as ``bearer <kid=.. iat=..>``), ``payload`` (parsed
JSON; None with ``fast``), ``payload_bytes``, ``status``, ``reason``, ``apns_id``, and ``detail`` (why a
request was refused) / ``timestamp_ms`` (410) when they apply. Refused or dropped streams are not answered,
so they are counted in ``stats()`` instead.

Choices where APNs is silent or where h2 forces one (see also the module's tests):
- An ``h2`` client cannot read a response after it received GOAWAY (its state machine rejects HEADERS in
  the CLOSED state). A scripted GOAWAY is therefore *graceful* by default: every stream at or below
  ``last_stream_id`` is answered first, then GOAWAY (with the JSON reason), then the TCP close. With
  ``graceful=False`` the GOAWAY goes out at once and the remaining answers follow it (RFC-legal).
- A connection adopts a provider token at the first request whose token verifies. Changing to another
  valid token sooner than ``token_update_interval_s`` after the last adoption answers 429
  ``TooManyProviderTokenUpdates`` and poisons the connection (every later request gets the same 429), as
  Apple's engineer describes. A token that failed verification was never adopted, so replacing an expired
  token is not churn.
- The key ID is pinned per connection (``UnrelatedKeyIdInToken`` for another kid).
- Scripted outcomes apply only to requests that pass validation; order: 5xx storm, then per-token status.
- A "rejection" (for the stream-limit drop) is any 4xx other than 410, which Apple says is not an error.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import re
import shutil
import ssl
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import hpack
import hpack.hpack
import jwt
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
from hyperframe.frame import Frame, GoAwayFrame, RstStreamFrame
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from daemon.apns import certs
from daemon.logs import get_logger, short_token

if TYPE_CHECKING:
    import trustme

log = get_logger("apns.server")

# --------------------------------------------------------------------------------------------------------
# Constants from spec/apns.md
# --------------------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------------------
# Sans-I/O core: verdicts and request validation
# --------------------------------------------------------------------------------------------------------


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
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


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


# --------------------------------------------------------------------------------------------------------
# Sans-I/O core: provider tokens
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenCheck:
    """What a provider token says, and why it is refused if it is (``reason`` None means valid)."""

    token: str
    kid: str | None = None
    iat: int | None = None
    reason: str | None = None

    @property
    def valid(self) -> bool:
        return self.reason is None


class ProviderTokenVerifier:
    """Verifies ``authorization: bearer <JWT>`` once per distinct token (the signature is the costly part)."""

    # A sender mints about one token per key per 50 minutes; the cap only guards against a runaway client.
    CACHE_LIMIT = 10_000

    def __init__(self, team_id: str, keys: Mapping[str, str | bytes]) -> None:
        self.team_id = team_id
        self._keys: dict[str, EllipticCurvePublicKey] = {}
        for kid, pem in keys.items():
            key = serialization.load_pem_public_key(pem.encode() if isinstance(pem, str) else pem)
            if not isinstance(key, EllipticCurvePublicKey):
                raise ValueError(f"key {kid!r} is not an EC (P-256) public key")
            self._keys[kid] = key
        self._cache: dict[str, TokenCheck] = {}

    def check(self, authorization: str | None, now: float) -> TokenCheck:
        """The token's identity and, if refused, the APNs reason (403 for all of them)."""
        if authorization is None:
            return TokenCheck("", reason="MissingProviderToken")
        cached = self._cache.get(authorization)
        if cached is None:
            cached = self._verify(authorization)
            if len(self._cache) >= self.CACHE_LIMIT:
                self._cache.clear()
            self._cache[authorization] = cached
        if cached.reason is None and cached.iat is not None and now - cached.iat > PROVIDER_TOKEN_MAX_AGE_S:
            return TokenCheck(cached.token, cached.kid, cached.iat, "ExpiredProviderToken")
        return cached

    def _verify(self, authorization: str) -> TokenCheck:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return TokenCheck(authorization, reason="MissingProviderToken")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return TokenCheck(token, reason="InvalidProviderToken")
        kid = header.get("kid")
        if header.get("alg") != "ES256" or not isinstance(kid, str):
            return TokenCheck(token, kid if isinstance(kid, str) else None, reason="InvalidProviderToken")
        key = self._keys.get(kid)
        if key is None:
            return TokenCheck(token, kid, reason="InvalidProviderToken")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=["ES256"],
                # iat's age is checked at every use (the cached answer outlives the hour); the rest is ours.
                options={"verify_iat": False, "verify_exp": False, "verify_nbf": False, "verify_aud": False},
            )
        except jwt.PyJWTError:
            return TokenCheck(token, kid, reason="InvalidProviderToken")
        iat = claims.get("iat")
        if not isinstance(iat, int) or isinstance(iat, bool):
            return TokenCheck(token, kid, reason="InvalidProviderToken")
        if claims.get("iss") != self.team_id:
            return TokenCheck(token, kid, iat, reason="InvalidProviderToken")
        return TokenCheck(token, kid, iat)


@dataclass
class ConnectionAuth:
    """One connection's provider-token state (§1.5): the adopted token, its kid, and churn poisoning."""

    token: str | None = None
    kid: str | None = None
    adopted_at: float = 0.0
    poisoned: bool = False
    adoptions: int = 0

    def admit(self, check: TokenCheck, now: float, *, min_interval_s: float, pin_key: bool) -> Verdict | None:
        if self.poisoned:
            return Verdict(429, "TooManyProviderTokenUpdates", "connection is unusable after token churn")
        if check.reason is not None:
            return Verdict(403, check.reason)
        if check.token == self.token:
            return None
        if self.token is not None:
            if pin_key and check.kid != self.kid:
                return Verdict(403, "UnrelatedKeyIdInToken", f"connection is bound to kid {self.kid!r}")
            if now - self.adopted_at < min_interval_s:
                self.poisoned = True
                return Verdict(429, "TooManyProviderTokenUpdates", "provider token changed too soon")
        self.token, self.kid, self.adopted_at = check.token, check.kid, now
        self.adoptions += 1
        return None


# --------------------------------------------------------------------------------------------------------
# Sans-I/O core: the fault script (pydantic at the edge: /ctl/script bodies are untrusted)
# --------------------------------------------------------------------------------------------------------


class _ScriptModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TokenFault(_ScriptModel):
    status: int = Field(410, ge=400, le=599, description="HTTP status for this device token")
    reason: str | None = Field(None, description="APNs reason; default by status (410 Unregistered ...)")
    count: int | None = Field(None, ge=1, description="answer this way N times, then normally; None = always")
    timestamp_ms: int | None = Field(None, ge=0, description="410 timestamp (ms); default: now")
    delay_s: float = Field(0.0, ge=0, description="extra delay before answering this token")


class StormFault(_ScriptModel):
    status: Literal[500, 503] = 500
    reason: str | None = Field(None, description="InternalServerError / ServiceUnavailable by default")
    count: int | None = Field(None, ge=1, description="the next N valid requests")
    duration_s: float | None = Field(None, gt=0, description="for this long")


class GoawayFault(_ScriptModel):
    after: int = Field(0, ge=0, description="the connection that answers the Nth next request (server-wide) "
                       "sends it; 0 = every connection now")
    reason: str = Field("Shutdown", description="GOAWAY debug data is {\"reason\": ...}")
    error_code: int = Field(0, ge=0, description="HTTP/2 error code (0 NO_ERROR)")
    graceful: bool = Field(True, description="answer streams <= last_stream_id before sending GOAWAY")


class DropFault(_ScriptModel):
    after: int = Field(0, ge=0, description="answer N more requests server-wide, then close the TCP "
                       "connection that receives the next one; 0 = close every connection now")


class DelayFault(_ScriptModel):
    seconds: float = Field(..., ge=0, description="delay before answering")
    count: int | None = Field(None, ge=1, description="the next N requests; None = all")


class WindowFault(_ScriptModel):
    initial_window_size: int = Field(..., ge=1, le=2**31 - 1, description="SETTINGS_INITIAL_WINDOW_SIZE "
                                     "advertised to new connections (stream receive window)")
    connection_window: int | None = Field(None, ge=1, le=2**31 - 1, description="connection receive window "
                                          "of new connections (HTTP/2 starts it at 65535)")
    update_delay_s: float = Field(0.0, ge=0, description="delay every WINDOW_UPDATE by this long")


class FaultScript(_ScriptModel):
    """One ``script(...)`` call or one ``POST /ctl/script`` body; absent fields leave a setting alone."""

    tokens: dict[str, TokenFault] | None = Field(None, description="per-device-token answers")
    clear_tokens: list[str] | None = Field(None, description="forget these tokens' scripted answers")
    storm: StormFault | None = None
    goaway: GoawayFault | None = None
    drop: DropFault | None = None
    refuse_streams: int | None = Field(None, ge=0, description="RST_STREAM REFUSED_STREAM the next N")
    delay: DelayFault | None = None
    window: WindowFault | None = None
    max_concurrent_streams: int | None = Field(None, ge=1, description="the limit after the first accept")
    initial_streams: int | None = Field(None, ge=0, description="limit until the first accept; 0 = none")
    drop_streams_on_rejection: bool | None = Field(None, description="limit falls to 1 after a 4xx")
    token_update_interval_s: float | None = Field(None, ge=0, description="min time between token switches")
    pin_key_id: bool | None = Field(None, description="UnrelatedKeyIdInToken for a second kid")
    idle_timeout_s: float | None = Field(None, ge=0, description="GOAWAY IdleTimeout after this long without "
                                         "a request; 0 = never")

    @model_validator(mode="after")
    def _tokens_are_named(self) -> FaultScript:
        for token in self.tokens or {}:
            if not token:
                raise ValueError("tokens: empty device token")
        return self


@dataclass
class _TokenRule:
    status: int
    reason: str
    remaining: int | None
    timestamp_ms: int | None
    delay_s: float


@dataclass
class FaultState:
    """The server-wide scripted behaviour; mutated only by ``apply`` and by consuming a fault."""

    tokens: dict[str, _TokenRule] = field(default_factory=dict)
    storm_status: int = 0
    storm_reason: str = ""
    storm_remaining: int | None = None
    storm_until: float | None = None
    goaway: GoawayFault | None = None
    goaway_remaining: int = 0
    drop_after: int | None = None
    refuse_remaining: int = 0
    delay_s: float = 0.0
    delay_remaining: int | None = None
    window: WindowFault | None = None
    max_concurrent_streams: int = 1000
    initial_streams: int | None = 1
    drop_streams_on_rejection: bool = False
    token_update_interval_s: float = TOKEN_UPDATE_INTERVAL_S
    pin_key_id: bool = True
    idle_timeout_s: float = 0.0

    def apply(self, script: FaultScript, now: float) -> None:
        for token in script.clear_tokens or []:
            self.tokens.pop(token, None)
        for token, fault in (script.tokens or {}).items():
            reason = fault.reason or DEFAULT_REASON_BY_STATUS.get(fault.status, "InternalServerError")
            self.tokens[token] = _TokenRule(fault.status, reason, fault.count, fault.timestamp_ms, fault.delay_s)
        if script.storm is not None:
            storm = script.storm
            self.storm_status = storm.status
            self.storm_reason = storm.reason or DEFAULT_REASON_BY_STATUS[storm.status]
            self.storm_remaining = storm.count
            self.storm_until = now + storm.duration_s if storm.duration_s is not None else None
        if script.goaway is not None:
            self.goaway = script.goaway
            self.goaway_remaining = script.goaway.after
        if script.drop is not None:
            self.drop_after = script.drop.after
        if script.refuse_streams is not None:
            self.refuse_remaining = script.refuse_streams
        if script.delay is not None:
            self.delay_s = script.delay.seconds
            self.delay_remaining = script.delay.count
        if script.window is not None:
            self.window = script.window
        if script.max_concurrent_streams is not None:
            self.max_concurrent_streams = script.max_concurrent_streams
        if script.initial_streams is not None:
            self.initial_streams = script.initial_streams or None
        if script.drop_streams_on_rejection is not None:
            self.drop_streams_on_rejection = script.drop_streams_on_rejection
        if script.token_update_interval_s is not None:
            self.token_update_interval_s = script.token_update_interval_s
        if script.pin_key_id is not None:
            self.pin_key_id = script.pin_key_id
        if script.idle_timeout_s is not None:
            self.idle_timeout_s = script.idle_timeout_s

    def storm_verdict(self, now: float) -> Verdict | None:
        """Consume one request of a 5xx storm, if one is running."""
        if not self.storm_status:
            return None
        if self.storm_until is not None and now >= self.storm_until:
            self.storm_status = 0
            return None
        verdict = Verdict(self.storm_status, self.storm_reason, "scripted 5xx storm")
        if self.storm_remaining is not None:
            self.storm_remaining -= 1
            if self.storm_remaining <= 0:
                self.storm_status = 0  # this request was the storm's last
        return verdict

    def token_rule(self, token: str) -> _TokenRule | None:
        """Consume one use of this token's scripted answer, if any."""
        rule = self.tokens.get(token)
        if rule is None:
            return None
        if rule.remaining is not None:
            rule.remaining -= 1
            if rule.remaining <= 0:
                del self.tokens[token]
        return rule

    def take_delay(self) -> float:
        if self.delay_s <= 0:
            return 0.0
        delay = self.delay_s
        if self.delay_remaining is not None:
            self.delay_remaining -= 1
            if self.delay_remaining <= 0:
                self.delay_s, self.delay_remaining = 0.0, None
        return delay

    def take_refusal(self) -> bool:
        if self.refuse_remaining <= 0:
            return False
        self.refuse_remaining -= 1
        return True


def error_body(verdict: Verdict, *, timestamp_ms: int | None = None) -> bytes:
    """APNs error JSON: ``{"reason": ...}`` plus ``timestamp`` (ms) on 410 only."""
    body: dict[str, Any] = {"reason": verdict.reason}
    if verdict.status == 410:
        body["timestamp"] = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
    return json.dumps(body, separators=(",", ":")).encode()


def redact_authorization(check: TokenCheck | None, raw: str | None) -> str | None:
    """Records keep which token was used (kid, iat), never the token itself."""
    if raw is None:
        return None
    if check is None or check.kid is None:
        return "bearer <unverifiable>"
    return f"bearer <kid={check.kid} iat={check.iat}>"


# --------------------------------------------------------------------------------------------------------
# Trio shell: one HTTP/2 connection
# --------------------------------------------------------------------------------------------------------

_H2_CONFIG = h2.config.H2Configuration(
    client_side=False,
    header_encoding=None,
    # APNs clients send plain lowercase headers; h2's per-header validation and normalisation are the
    # largest cost per request after HPACK, and validation here is ours (DuplicateHeaders etc.).
    validate_inbound_headers=False,
    normalize_inbound_headers=False,
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
)

# §1.6, observed APNs SETTINGS: HEADER_TABLE_SIZE 4096, INITIAL_WINDOW_SIZE 65535, MAX_FRAME_SIZE 16384,
# MAX_HEADER_LIST_SIZE 8000.
_MAX_HEADER_LIST_SIZE = 8000
# The connection receive window: HTTP/2 starts it at 65535 and APNs's value is unobserved; we open it to
# 1 MiB by default so the server is never the benchmark's bottleneck (a scripted window narrows it).
_DEFAULT_CONNECTION_WINDOW = 1 << 20
_READ_SIZE = 1 << 16
_TLS_HANDSHAKE_TIMEOUT_S = 10.0
# How long a connection stays open after its GOAWAY once every stream it kept is answered.
_GOAWAY_LINGER_S = 1.0


class _ServerH2Connection(h2.connection.H2Connection):
    """h2's server connection without its O(open streams) walk on every new stream.

    h2 counts open inbound streams by walking every stream each time a HEADERS frame opens one; with 1000
    streams in flight that walk costs more than the rest of the request. The server enforces
    MAX_CONCURRENT_STREAMS itself, in event order (``_ServerConnection._dispatch``), answering an excess
    stream with RST_STREAM REFUSED_STREAM as RFC 9113 §5.1.2 allows; h2 only has to forget closed streams
    now and then, which the sweep below keeps amortised.
    """

    _SWEEP_EVERY = 512
    _new_streams = 0

    def _receive_frame(self, frame: Frame) -> list[h2.events.Event]:
        # h2's version starts with ``logger.trace("Received frame: %s", repr(frame))``: the repr is built
        # for every frame even with no logger (~15 us a frame, two frames a push). The rest mirrors h2 4.x:
        # a frame on a stream closed by RST_STREAM gets RST_STREAM back; anything else is a connection error.
        events: list[h2.events.Event]
        try:
            frames, events = self._frame_dispatch_table[frame.__class__](frame)
        except h2.exceptions.StreamClosedError as exc:
            if not self._stream_is_closed_by_reset(exc.stream_id):
                raise
            reset = RstStreamFrame(exc.stream_id)
            reset.error_code = exc.error_code
            self._prepare_for_sending([reset])
            events = exc._events
            return events
        except h2.exceptions.StreamIDTooLowError as exc:
            if self._stream_is_closed_by_reset(exc.stream_id):
                reset = RstStreamFrame(exc.stream_id)
                reset.error_code = h2.errors.ErrorCodes.STREAM_CLOSED
                self._prepare_for_sending([reset])
                return []
            if self._stream_is_closed_by_end(exc.stream_id):
                raise h2.exceptions.StreamClosedError(exc.stream_id) from exc
            raise
        self._prepare_for_sending(frames)
        return events

    @property
    def open_inbound_streams(self) -> int:
        self._new_streams += 1
        if self._new_streams >= self._SWEEP_EVERY:
            self._new_streams = 0
            self._open_streams(1)  # drops closed streams from self.streams
        return 0


if not all(
    hasattr(h2.connection.H2Connection, name)
    for name in ("_prepare_for_sending", "_stream_is_closed_by_reset", "_stream_is_closed_by_end")
):  # pragma: no cover - an h2 whose internals differ from 4.x keeps its own (slower) _receive_frame
    del _ServerH2Connection._receive_frame


_HUFFMAN_CACHE_MIN = 32
_HUFFMAN_CACHE_LIMIT = 4096


def _install_huffman_cache() -> None:
    """Memoise hpack's Huffman decoding of long literals (process-wide, idempotent).

    h2 (and other APNs clients) send ``authorization`` as a never-indexed literal, so the ~200-byte
    Huffman-coded JWT is decoded on every request although it changes once per ~50 minutes; decoding it is
    the largest single cost of a request in pure-Python hpack. ``decode_huffman`` is a pure function of its
    input, so caching it changes nothing but the time.
    """
    original = hpack.hpack.decode_huffman  # type: ignore[attr-defined]
    if getattr(original, "_sightscreen_cached", False):
        return
    cache: dict[bytes, bytes] = {}

    def decode_huffman(data: bytes) -> bytes:
        if len(data) < _HUFFMAN_CACHE_MIN:
            return original(data)
        decoded = cache.get(data)
        if decoded is None:
            decoded = original(data)
            if len(cache) >= _HUFFMAN_CACHE_LIMIT:
                cache.clear()
            cache[bytes(data)] = decoded
        return decoded

    decode_huffman._sightscreen_cached = True  # type: ignore[attr-defined]
    hpack.hpack.decode_huffman = decode_huffman  # type: ignore[attr-defined,assignment]


def _hpack_int(value: int, prefix_bits: int, first_byte: int) -> bytes:
    """RFC 7541 §5.1 integer with an N-bit prefix, OR-ed into ``first_byte``."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte | value])
    out = bytearray([first_byte | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _hpack_str(data: bytes) -> bytes:
    return _hpack_int(len(data), 7, 0x00) + data  # raw octets, no Huffman: cheaper to make than to shrink


class _ResponseEncoder:
    """HPACK for the server's answers, built from the static table and literals *without indexing*.

    h2's encoder Huffman-codes and table-searches every header; each answer carries two fresh UUIDs, so
    that work buys nothing. Literals without indexing never touch the dynamic table, so the peer's decoder
    stays in step. When the peer changes HEADER_TABLE_SIZE, the next block goes through hpack's own encoder,
    which emits the required table-size update (RFC 7541 §4.2).
    """

    _STATIC_STATUS = {b"200": 8, b"204": 9, b"206": 10, b"304": 11, b"400": 12, b"404": 13, b"500": 14}
    _STATIC_NAME = {b":status": 8, b"content-type": 31}

    def __init__(self) -> None:
        self._inner = hpack.Encoder()
        self._fixed: dict[tuple[bytes, bytes], bytes] = {}
        self._names: dict[bytes, bytes] = {}

    @property
    def header_table_size(self) -> int:
        return self._inner.header_table_size

    @header_table_size.setter
    def header_table_size(self, value: int) -> None:
        self._inner.header_table_size = value

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        if self._inner.header_table.resized:
            return self._inner.encode(headers, huffman)
        out = []
        for name, value in headers:
            if name == b"apns-id" or name == b"apns-unique-id":
                out.append(self._name(name) + _hpack_str(value))
                continue
            fixed = self._fixed.get((name, value))
            if fixed is None:
                index = self._STATIC_STATUS.get(value) if name == b":status" else None
                if index is not None:
                    fixed = bytes([0x80 | index])
                else:
                    fixed = self._name(name) + _hpack_str(value)
                self._fixed[(name, value)] = fixed
            out.append(fixed)
        return b"".join(out)

    def _name(self, name: bytes) -> bytes:
        prefix = self._names.get(name)
        if prefix is None:
            index = self._STATIC_NAME.get(name)
            # Literal without indexing (0000xxxx), indexed name or new name.
            prefix = _hpack_int(index, 4, 0x00) if index is not None else b"\x00" + _hpack_str(name)
            self._names[name] = prefix
        return prefix


# ---- a lean HTTP/2 server engine for benchmarks ------------------------------------------------------

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_F_DATA, _F_HEADERS, _F_PRIORITY, _F_RST, _F_SETTINGS, _F_PUSH, _F_PING, _F_GOAWAY, _F_WINDOW, _F_CONT = range(10)
_FL_END_STREAM, _FL_ACK, _FL_END_HEADERS, _FL_PADDED, _FL_PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
_MAX_WINDOW = 2**31 - 1
_DEFAULT_WINDOW = 65535
_SETTINGS_SENT = (
    h2.settings.SettingCodes.HEADER_TABLE_SIZE,
    h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS,
    h2.settings.SettingCodes.INITIAL_WINDOW_SIZE,
    h2.settings.SettingCodes.MAX_FRAME_SIZE,
    h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE,
)


def _frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return bytes((n >> 16, (n >> 8) & 0xFF, n & 0xFF, ftype, flags)) + sid.to_bytes(4, "big") + payload


@dataclass(slots=True)
class _LeanStream:
    send_window: int
    recv_window: int
    recv_unacked: int = 0
    remote_open: bool = True
    local_open: bool = True


class _LeanH2Connection:
    """The slice of ``h2.connection.H2Connection``'s server API that ``_ServerConnection`` uses, done lean.

    h2 spends more time per request in its frame objects, stream state machines and window managers than
    the server spends on everything else (spec §1.7 asks for the profile; see this module's tests). For
    the throughput benchmark (``fast``), this engine parses frames with plain byte arithmetic, keeps one
    small record per stream and emits the same ``h2.events`` objects, so every fault works on both engines
    and the same tests run against both. HPACK stays ``hpack``'s. Protocol errors raise h2's exceptions
    after queueing a GOAWAY with the matching code, as h2 does.
    """

    def __init__(self) -> None:
        self.local_settings = h2.settings.Settings(client=False)
        self.encoder: Any = _ResponseEncoder()
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = _MAX_HEADER_LIST_SIZE
        self.streams: dict[int, _LeanStream] = {}
        self._closed_streams: dict[int, bool] = {}  # recently closed: True if we reset it (RST is allowed)
        self._out = bytearray()
        self._in = bytearray()
        self._preface_seen = False
        self._highest_inbound = 0
        self._send_conn_window = _DEFAULT_WINDOW
        self._recv_conn_window = _DEFAULT_WINDOW
        self._recv_conn_target = _DEFAULT_WINDOW
        self._recv_conn_unacked = 0
        self._remote_initial_window = _DEFAULT_WINDOW
        self._remote_max_frame = 16384
        self._local_acked_once = False
        self._headers_sid = 0  # stream whose header block continues in CONTINUATION frames
        self._headers_flags = 0
        self._headers_block = bytearray()
        self._closed = False

    # ---- the h2 API the server uses ------------------------------------------------------------------

    @property
    def max_outbound_frame_size(self) -> int:
        return self._remote_max_frame

    def initiate_connection(self) -> None:
        payload = b"".join(
            int(code).to_bytes(2, "big") + self.local_settings[code].to_bytes(4, "big")
            for code in _SETTINGS_SENT
            if self.local_settings.get(code) is not None
        )
        self._out += _frame(_F_SETTINGS, 0, 0, payload)

    def update_settings(self, changes: Mapping[int, int]) -> None:
        for code, value in changes.items():
            self.local_settings[code] = value  # pending until the client acknowledges (h2's Settings)
        payload = b"".join(int(c).to_bytes(2, "big") + v.to_bytes(4, "big") for c, v in changes.items())
        self._out += _frame(_F_SETTINGS, 0, 0, payload)

    def increment_flow_control_window(self, increment: int, stream_id: int | None = None) -> None:
        assert stream_id is None, "the server only widens the connection window"
        self._recv_conn_window += increment
        self._recv_conn_target += increment
        self._out += _frame(_F_WINDOW, 0, 0, increment.to_bytes(4, "big"))

    def local_flow_control_window(self, stream_id: int) -> int:
        stream = self.streams.get(stream_id)
        if stream is None or not stream.local_open:
            raise h2.exceptions.StreamClosedError(stream_id)
        return min(self._send_conn_window, stream.send_window)

    def acknowledge_received_data(self, size: int, stream_id: int) -> None:
        self._recv_conn_unacked += size
        # As h2's WindowManager: hand the window back once half of it was consumed.
        if self._recv_conn_unacked >= self._recv_conn_target // 2:
            self._out += _frame(_F_WINDOW, 0, 0, self._recv_conn_unacked.to_bytes(4, "big"))
            self._recv_conn_window += self._recv_conn_unacked
            self._recv_conn_unacked = 0
        stream = self.streams.get(stream_id)
        if stream is None or not stream.remote_open:
            return  # no point widening a window nobody will send on again
        stream.recv_unacked += size
        target = self.local_settings.initial_window_size
        if stream.recv_unacked >= max(1, target // 2) or stream.recv_window <= 0:
            self._out += _frame(_F_WINDOW, 0, stream_id, stream.recv_unacked.to_bytes(4, "big"))
            stream.recv_window += stream.recv_unacked
            stream.recv_unacked = 0

    def send_headers(self, stream_id: int, headers: list[tuple[bytes, bytes]], end_stream: bool = False) -> None:
        stream = self._sendable(stream_id)
        block = self.encoder.encode(headers)
        limit = self._remote_max_frame
        flags = _FL_END_STREAM if end_stream else 0
        if len(block) <= limit:
            self._out += _frame(_F_HEADERS, flags | _FL_END_HEADERS, stream_id, block)
        else:
            chunks = [block[i : i + limit] for i in range(0, len(block), limit)]
            self._out += _frame(_F_HEADERS, flags, stream_id, chunks[0])
            for i, chunk in enumerate(chunks[1:], 1):
                self._out += _frame(_F_CONT, _FL_END_HEADERS if i == len(chunks) - 1 else 0, stream_id, chunk)
        if end_stream:
            self._end_local(stream_id, stream)

    def send_data(self, stream_id: int, data: bytes, end_stream: bool = False) -> None:
        stream = self._sendable(stream_id)
        if len(data) > min(self._send_conn_window, stream.send_window):
            raise h2.exceptions.FlowControlError("cannot send beyond the flow-control window")
        if len(data) > self._remote_max_frame:
            raise h2.exceptions.FrameTooLargeError("DATA frame larger than the peer's MAX_FRAME_SIZE")
        self._send_conn_window -= len(data)
        stream.send_window -= len(data)
        self._out += _frame(_F_DATA, _FL_END_STREAM if end_stream else 0, stream_id, data)
        if end_stream:
            self._end_local(stream_id, stream)

    def reset_stream(self, stream_id: int, error_code: int = 0) -> None:
        self._out += _frame(_F_RST, 0, stream_id, int(error_code).to_bytes(4, "big"))
        if self.streams.pop(stream_id, None) is not None:
            self._forget(stream_id, reset=True)

    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def receive_data(self, data: bytes) -> list[h2.events.Event]:
        if self._closed:
            return []
        buf = self._in
        buf += data
        events: list[h2.events.Event] = []
        pos = 0
        try:
            if not self._preface_seen:
                if len(buf) < len(_PREFACE):
                    if not _PREFACE.startswith(bytes(buf)):
                        raise h2.exceptions.ProtocolError("invalid HTTP/2 connection preface")
                    return events
                if buf[: len(_PREFACE)] != _PREFACE:
                    raise h2.exceptions.ProtocolError("invalid HTTP/2 connection preface")
                self._preface_seen = True
                pos = len(_PREFACE)
            end = len(buf)
            max_frame = self.local_settings.max_frame_size
            while end - pos >= 9:
                length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]
                if length > max_frame:
                    raise h2.exceptions.FrameTooLargeError(f"frame of {length} bytes exceeds {max_frame}")
                if end - pos - 9 < length:
                    break
                ftype, flags = buf[pos + 3], buf[pos + 4]
                sid = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
                payload = bytes(buf[pos + 9 : pos + 9 + length])
                pos += 9 + length
                self._receive_frame(ftype, flags, sid, payload, events)
        except h2.exceptions.ProtocolError as exc:
            self._goaway(exc.error_code)
            raise
        except hpack.OversizedHeaderListError as exc:
            # As h2: a header list over MAX_HEADER_LIST_SIZE is treated as abuse (ENHANCE_YOUR_CALM).
            self._goaway(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
            raise h2.exceptions.DenialOfServiceError(f"HPACK: {exc}") from exc
        except hpack.HPACKError as exc:
            self._goaway(h2.errors.ErrorCodes.COMPRESSION_ERROR)
            raise h2.exceptions.ProtocolError(f"HPACK: {exc}") from exc
        finally:
            if pos:
                del buf[:pos]
        return events

    # ---- internals --------------------------------------------------------------------------------------

    def _goaway(self, error_code: int) -> None:
        self._closed = True
        payload = self._highest_inbound.to_bytes(4, "big") + int(error_code).to_bytes(4, "big")
        self._out += _frame(_F_GOAWAY, 0, 0, payload)

    def _sendable(self, stream_id: int) -> _LeanStream:
        stream = self.streams.get(stream_id)
        if stream is None or not stream.local_open:
            raise h2.exceptions.StreamClosedError(stream_id)
        return stream

    def _end_local(self, stream_id: int, stream: _LeanStream) -> None:
        stream.local_open = False
        if not stream.remote_open:
            del self.streams[stream_id]
            self._forget(stream_id, reset=False)

    def _forget(self, stream_id: int, *, reset: bool) -> None:
        closed = self._closed_streams
        closed[stream_id] = reset
        if len(closed) > 4096:  # as h2's bounded closed-stream memory: drop the oldest
            for old in list(closed)[:1024]:
                del closed[old]

    def _receive_frame(self, ftype: int, flags: int, sid: int, payload: bytes, events: list[h2.events.Event]) -> None:
        if self._headers_sid and ftype != _F_CONT:
            raise h2.exceptions.ProtocolError("header block interrupted before END_HEADERS")
        if ftype == _F_HEADERS:
            self._receive_headers(flags, sid, payload, events)
        elif ftype == _F_DATA:
            self._receive_body(flags, sid, payload, events)
        elif ftype == _F_CONT:
            if sid != self._headers_sid or not sid:
                raise h2.exceptions.ProtocolError("CONTINUATION without an open header block")
            self._headers_block += payload
            if flags & _FL_END_HEADERS:
                self._headers_sid = 0
                self._finish_headers(sid, self._headers_flags, bytes(self._headers_block), events)
        elif ftype == _F_SETTINGS:
            self._receive_settings(flags, sid, payload, events)
        elif ftype == _F_WINDOW:
            self._receive_window_update(sid, payload, events)
        elif ftype == _F_PING:
            if sid or len(payload) != 8:
                raise h2.exceptions.ProtocolError("malformed PING")
            if not flags & _FL_ACK:
                self._out += _frame(_F_PING, _FL_ACK, 0, payload)
        elif ftype == _F_RST:
            if not sid or len(payload) != 4:
                raise h2.exceptions.ProtocolError("malformed RST_STREAM")
            if self.streams.pop(sid, None) is not None:
                self._forget(sid, reset=True)
                code = int.from_bytes(payload, "big")
                events.append(h2.events.StreamReset(stream_id=sid, error_code=code, remote_reset=True))
        elif ftype == _F_GOAWAY:
            event = h2.events.ConnectionTerminated()
            event.last_stream_id = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            event.error_code = int.from_bytes(payload[4:8], "big")
            event.additional_data = payload[8:]
            events.append(event)
        elif ftype == _F_PUSH:
            raise h2.exceptions.ProtocolError("clients must not send PUSH_PROMISE")
        # PRIORITY and unknown frame types are ignored (RFC 9113 §5.5; APNs ignores PRIORITY).

    def _receive_headers(self, flags: int, sid: int, payload: bytes, events: list[h2.events.Event]) -> None:
        if not sid or not sid % 2:
            raise h2.exceptions.ProtocolError(f"HEADERS on invalid stream {sid}")
        if flags & _FL_PADDED:
            pad = payload[0]
            payload = payload[1 : len(payload) - pad] if pad else payload[1:]
        if flags & _FL_PRIORITY:
            payload = payload[5:]
        if flags & _FL_END_HEADERS:
            self._finish_headers(sid, flags, payload, events)
        else:
            self._headers_sid, self._headers_flags = sid, flags
            self._headers_block = bytearray(payload)

    def _finish_headers(self, sid: int, flags: int, block: bytes, events: list[h2.events.Event]) -> None:
        headers: list[Any] = list(self.decoder.decode(block, raw=True))  # decoded always: HPACK state advances
        stream = self.streams.get(sid)
        if stream is None:
            if sid <= self._highest_inbound:
                raise h2.exceptions.StreamClosedError(sid) if sid in self._closed_streams else \
                    h2.exceptions.ProtocolError(f"stream {sid} is not above {self._highest_inbound}")
            self._highest_inbound = sid
            initial = self.local_settings.initial_window_size
            if not self._local_acked_once:
                initial = max(initial, _DEFAULT_WINDOW)  # the client may not have our SETTINGS yet
            stream = _LeanStream(send_window=self._remote_initial_window, recv_window=initial)
            self.streams[sid] = stream
            events.append(h2.events.RequestReceived(stream_id=sid, headers=headers))
        elif not stream.remote_open:
            raise h2.exceptions.StreamClosedError(sid)
        elif not flags & _FL_END_STREAM:
            raise h2.exceptions.ProtocolError("trailers without END_STREAM")
        if flags & _FL_END_STREAM:
            stream.remote_open = False
            events.append(h2.events.StreamEnded(stream_id=sid))
            if not stream.local_open:
                del self.streams[sid]
                self._forget(sid, reset=False)

    def _receive_body(self, flags: int, sid: int, payload: bytes, events: list[h2.events.Event]) -> None:
        flow_length = len(payload)
        if flow_length > self._recv_conn_window:
            raise h2.exceptions.FlowControlError("DATA beyond the connection window")
        self._recv_conn_window -= flow_length
        stream = self.streams.get(sid)
        if stream is None or not stream.remote_open:
            if sid in self._closed_streams or (stream is not None and not stream.remote_open):
                # A stream we already closed: tell the client, and give the connection window back.
                self._out += _frame(_F_RST, 0, sid, int(h2.errors.ErrorCodes.STREAM_CLOSED).to_bytes(4, "big"))
                self.acknowledge_received_data(flow_length, sid)
                return
            raise h2.exceptions.ProtocolError(f"DATA on idle stream {sid}")
        if flow_length > stream.recv_window:
            raise h2.exceptions.FlowControlError(f"DATA beyond stream {sid}'s window")
        stream.recv_window -= flow_length
        if flags & _FL_PADDED:
            pad = payload[0]
            payload = payload[1 : len(payload) - pad] if pad else payload[1:]
        events.append(h2.events.DataReceived(stream_id=sid, data=payload, flow_controlled_length=flow_length))
        if flags & _FL_END_STREAM:
            stream.remote_open = False
            events.append(h2.events.StreamEnded(stream_id=sid))
            if not stream.local_open:
                del self.streams[sid]
                self._forget(sid, reset=False)

    def _receive_settings(self, flags: int, sid: int, payload: bytes, events: list[h2.events.Event]) -> None:
        if sid:
            raise h2.exceptions.ProtocolError("SETTINGS on a stream")
        if flags & _FL_ACK:
            self.local_settings.acknowledge()
            self._local_acked_once = True
            events.append(h2.events.SettingsAcknowledged())
            return
        if len(payload) % 6:
            raise h2.exceptions.FrameDataMissingError("SETTINGS length is not a multiple of 6")
        codes = h2.settings.SettingCodes
        for i in range(0, len(payload), 6):
            code = int.from_bytes(payload[i : i + 2], "big")
            value = int.from_bytes(payload[i + 2 : i + 6], "big")
            if code == codes.INITIAL_WINDOW_SIZE:
                if value > _MAX_WINDOW:
                    raise h2.exceptions.FlowControlError("INITIAL_WINDOW_SIZE too large")
                delta = value - self._remote_initial_window
                self._remote_initial_window = value
                for stream in self.streams.values():
                    stream.send_window += delta
            elif code == codes.MAX_FRAME_SIZE:
                if not 16384 <= value <= 2**24 - 1:
                    raise h2.exceptions.ProtocolError("MAX_FRAME_SIZE out of range")
                self._remote_max_frame = value
            elif code == codes.HEADER_TABLE_SIZE:
                self.encoder.header_table_size = value
        self._out += _frame(_F_SETTINGS, _FL_ACK, 0)
        events.append(h2.events.RemoteSettingsChanged())

    def _receive_window_update(self, sid: int, payload: bytes, events: list[h2.events.Event]) -> None:
        if len(payload) != 4:
            raise h2.exceptions.FrameDataMissingError("WINDOW_UPDATE payload is not 4 bytes")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if not sid:
            if not increment:
                raise h2.exceptions.ProtocolError("WINDOW_UPDATE of 0 on the connection")
            self._send_conn_window += increment
            if self._send_conn_window > _MAX_WINDOW:
                raise h2.exceptions.FlowControlError("connection window overflow")
        else:
            stream = self.streams.get(sid)
            if stream is None:
                return  # for a closed stream: allowed, ignored
            if not increment:
                self.reset_stream(sid, h2.errors.ErrorCodes.PROTOCOL_ERROR)
                return
            stream.send_window += increment
            if stream.send_window > _MAX_WINDOW:
                self.reset_stream(sid, h2.errors.ErrorCodes.FLOW_CONTROL_ERROR)
                return
        events.append(h2.events.WindowUpdated(stream_id=sid, delta=increment))


class _ApnsIds:
    """Fresh canonical UUIDs (version 4 layout) for apns-id / apns-unique-id, cheaply: random + counter."""

    def __init__(self) -> None:
        raw = uuid.uuid4().hex
        self._prefix = f"{raw[:8]}-{raw[8:12]}-4{raw[13:16]}-a{raw[17:20]}-"
        self._counter = itertools.count(int(raw[20:], 16) & 0xFFFFFFFF)

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter) & 0xFFFFFFFFFFFF:012x}"


@dataclass(slots=True)
class _Request:
    stream_id: int
    headers: list[tuple[bytes, bytes]]
    body: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class _Answer:
    stream_id: int
    status: int
    reason: str | None
    apns_id: str
    record: dict[str, Any] | None
    body: bytes = b""


class _ServerConnection:
    """Drives one TLS stream through an ``h2`` server connection; owned by ``ApnsTestServer``."""

    def __init__(self, server: ApnsTestServer, conn_id: int, stream: trio.SSLStream[trio.SocketStream]) -> None:
        self.server = server
        self.id = conn_id
        self.stream = stream
        self.h2: Any
        if server.engine == "lean":
            self.h2 = _LeanH2Connection()
        else:
            self.h2 = _ServerH2Connection(config=_H2_CONFIG)
            self.h2.encoder = _ResponseEncoder()
        faults = server.faults
        self.max_streams = faults.max_concurrent_streams
        self.advertised_streams = faults.initial_streams or faults.max_concurrent_streams
        self.window = faults.window
        self.auth = ConnectionAuth()
        self.requests: dict[int, _Request] = {}
        self.unanswered: set[int] = set()  # complete requests not yet answered (delays, ctl tasks)
        self.highest_stream = 0  # highest stream whose request was complete (processed or pending)
        self.answered = 0
        self.max_open = 0
        self.goaway_last: int | None = None
        self.goaway_fault: GoawayFault | None = None
        self.goaway_sent = False
        self.closing = False
        self._send_lock = trio.StrictFIFOLock()
        self._out: list[bytes] = []  # frames written outside h2 (crafted GOAWAY), flushed in order
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = itertools.count()
        self._wake = trio.Event()
        self._pending_body: dict[int, memoryview] = {}
        self._closed_unflushed = 0  # streams we ended or reset whose frames are not yet written
        self.last_request_at = 0.0
        self.settings_acked = False
        self._nursery: trio.Nursery | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------

    async def run(self) -> None:
        settings = {
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.advertised_streams,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: _MAX_HEADER_LIST_SIZE,
        }
        if self.window is not None:
            settings[h2.settings.SettingCodes.INITIAL_WINDOW_SIZE] = self.window.initial_window_size
        # initial_values take effect at once locally (no ACK wait): a client that opens a second stream
        # before reading our SETTINGS breaks the rule of §1.7 and is told so.
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values=settings)
        self.h2.initiate_connection()
        connection_window = (
            self.window.connection_window if self.window is not None else _DEFAULT_CONNECTION_WINDOW
        )
        if connection_window is not None and connection_window > 65535:
            self.h2.increment_flow_control_window(connection_window - 65535)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.last_request_at = trio.current_time()
                self.arm_idle_timer()
                nursery.start_soon(self._timer_loop)
                await self._flush()
                await self._read_loop()
                nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError):
            pass
        finally:
            await trio.aclose_forcefully(self.stream)

    async def _read_loop(self) -> None:
        h2conn = self.h2
        while not self.closing:
            try:
                data = await self.stream.receive_some(_READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError):
                return
            if not data:
                return
            try:
                events = h2conn.receive_data(data)
            except h2.exceptions.ProtocolError as exc:
                # h2 has queued a GOAWAY with the matching error code; send it and hang up.
                self.server._protocol_error(self, exc)
                await self._flush()
                return
            for event in events:
                self._dispatch(event)
            await self._flush()

    def _dispatch(self, event: h2.events.Event) -> None:
        kind = type(event)
        if kind is h2.events.RequestReceived:
            sid = event.stream_id  # type: ignore[attr-defined]
            # Streams we closed in this batch still count: the client cannot know before we flush.
            open_now = len(self.requests) + len(self.unanswered) + self._closed_unflushed + 1
            if open_now > self.h2.local_settings.max_concurrent_streams:
                if not self.settings_acked:
                    # Before the client acknowledges our first SETTINGS it may assume HTTP/2's unlimited
                    # default (RFC 9113 §6.5.3); serve, but count it: spec §1.7 says to wait for SETTINGS.
                    self.server._stats_inc("streams_over_limit_before_settings_ack")
                else:
                    # Over a limit the client has acknowledged: refuse (RFC 9113 §5.1.2) and count it.
                    self.server._stream_limit_violation(self, sid, open_now - 1)
                    self.h2.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
                    self._closed_unflushed += 1
                    return
            self.requests[sid] = _Request(sid, event.headers)  # type: ignore[attr-defined]
            if open_now > self.max_open:
                self.max_open = open_now
        elif kind is h2.events.DataReceived:
            sid = event.stream_id  # type: ignore[attr-defined]
            req = self.requests.get(sid)
            if req is not None:
                req.body += event.data  # type: ignore[attr-defined]
            self._ack(event.flow_controlled_length, sid)  # type: ignore[attr-defined]
        elif kind is h2.events.StreamEnded:
            req = self.requests.pop(event.stream_id, None)  # type: ignore[attr-defined]
            if req is not None:
                self._on_request(req)
        elif kind is h2.events.WindowUpdated or kind is h2.events.RemoteSettingsChanged:
            self._resume_bodies()
        elif kind is h2.events.StreamReset:
            sid = event.stream_id  # type: ignore[attr-defined]
            self.requests.pop(sid, None)
            self.unanswered.discard(sid)
            self._pending_body.pop(sid, None)
        elif kind is h2.events.SettingsAcknowledged:
            self.settings_acked = True
        elif kind is h2.events.ConnectionTerminated:
            self.closing = True

    def _ack(self, length: int, stream_id: int) -> None:
        if self.window is not None and self.window.update_delay_s > 0:
            self._call_later(self.window.update_delay_s, lambda: self._ack_now(length, stream_id))
        else:
            self._ack_now(length, stream_id)

    def _ack_now(self, length: int, stream_id: int) -> None:
        try:
            self.h2.acknowledge_received_data(length, stream_id)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            # The stream ended meanwhile; h2 still credits the connection window in that case.
            pass

    async def _flush(self) -> None:
        async with self._send_lock:
            data = self.h2.data_to_send()
            self._closed_unflushed = 0
            if self._out:
                data = b"".join(self._out) + data
                self._out.clear()
            if not data:
                return
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError):
                # The client went away: end this connection (and only it) quietly.
                self.closing = True
                if self._nursery is not None:
                    self._nursery.cancel_scope.cancel()

    # ---- timers: delayed answers, delayed window updates, "now" commands ---------------------------

    def _call_later(self, delay: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (trio.current_time() + delay, next(self._timer_seq), action))
        self._wake.set()

    def call_soon(self, action: Callable[[], None]) -> None:
        """Run ``action`` on this connection's timer task (from any task of the server's trio run)."""
        self._call_later(0.0, action)

    async def _timer_loop(self) -> None:
        while True:
            if self._timers:
                due = self._timers[0][0]
                with trio.move_on_at(due):
                    await self._wake.wait()
            else:
                await self._wake.wait()
            self._wake = trio.Event()
            now = trio.current_time()
            ran = False
            while self._timers and self._timers[0][0] <= now:
                _, _, action = heapq.heappop(self._timers)
                action()
                ran = True
            if ran:
                await self._flush()
                if self.closing and self._nursery is not None:
                    self._nursery.cancel_scope.cancel()
                    return

    # ---- requests ----------------------------------------------------------------------------------

    def arm_idle_timer(self) -> None:
        idle = self.server.faults.idle_timeout_s
        if idle > 0:
            self._call_later(max(0.0, self.last_request_at + idle - trio.current_time()), self._check_idle)

    def _check_idle(self) -> None:
        idle = self.server.faults.idle_timeout_s
        if idle <= 0 or self.goaway_last is not None:
            return
        if trio.current_time() - self.last_request_at >= idle:
            self.server._stats_inc("idle_timeouts")
            self.start_goaway(GoawayFault(after=0, reason="IdleTimeout", error_code=0, graceful=True))
        else:
            self.arm_idle_timer()

    def _on_request(self, req: _Request) -> None:
        sid = req.stream_id
        self.last_request_at = trio.current_time()
        if self.goaway_last is not None and sid > self.goaway_last:
            # Above GOAWAY's last_stream_id: never processed, the client must retry elsewhere (RFC 9113).
            self.server._stats_inc("ignored_after_goaway")
            return
        if sid > self.highest_stream:
            self.highest_stream = sid
        server = self.server
        path = _header_value(req.headers, b":path")
        if path.startswith(b"/ctl/"):
            self.unanswered.add(sid)
            assert self._nursery is not None
            self._nursery.start_soon(server._control, self, req)
            return
        faults = server.faults
        if faults.drop_after is not None:
            if faults.drop_after <= 0:
                faults.drop_after = None
                server._stats_inc("connections_dropped")
                log.info("apns_server_drop", connection_id=self.id, stream_id=sid)
                self._abort()
                return
            faults.drop_after -= 1
        if faults.take_refusal():
            server._stats_inc("refused_streams")
            self.h2.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
            self._closed_unflushed += 1
            return
        self.unanswered.add(sid)
        answer, delay = server._decide(self, req)
        if delay > 0:
            self._call_later(delay, lambda: self._send_answer(answer))
        else:
            self._send_answer(answer)

    def _send_answer(self, answer: _Answer) -> None:
        sid = answer.stream_id
        if self.closing and not self.goaway_sent and self.goaway_last is None:
            return
        status = answer.status
        try:
            if status == 200:
                self.h2.send_headers(
                    sid,
                    [
                        (b":status", b"200"),
                        (b"apns-id", answer.apns_id.encode()),
                        *self.server._unique_id_header(),
                    ],
                    end_stream=True,
                )
            else:
                self.h2.send_headers(
                    sid,
                    [
                        (b":status", str(status).encode()),
                        (b"content-type", b"application/json"),
                        (b"apns-id", answer.apns_id.encode()),
                    ],
                    end_stream=not answer.body,
                )
                if answer.body:
                    self._send_body(sid, answer.body)
        except h2.exceptions.StreamClosedError:
            # The client reset the stream while we held the answer (e.g. its deadline fired).
            self.unanswered.discard(sid)
            self.server._stats_inc("answers_to_closed_streams")
            return
        self.unanswered.discard(sid)
        self._closed_unflushed += 1
        self.answered += 1
        self._adjust_stream_limit(answer.status)
        self.server._answered(self, answer)
        self._maybe_goaway_after_answer(sid)

    def _send_control(self, stream_id: int, status: int, data: bytes) -> None:
        try:
            self.h2.send_headers(
                stream_id,
                [(b":status", str(status).encode()), (b"content-type", b"application/json")],
                end_stream=False,
            )
        except h2.exceptions.StreamClosedError:
            self.unanswered.discard(stream_id)
            return
        self._send_body(stream_id, data)
        self.unanswered.discard(stream_id)
        if self.goaway_last is not None and not self.goaway_sent and not self.unanswered:
            self._emit_goaway()

    def _send_body(self, sid: int, body: bytes) -> None:
        self._pending_body[sid] = memoryview(body)
        self._push_body(sid)

    def _push_body(self, sid: int) -> None:
        view = self._pending_body.get(sid)
        if view is None:
            return
        try:
            while view:
                room = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size, len(view))
                if room <= 0:
                    self._pending_body[sid] = view  # resumed by WindowUpdated / RemoteSettingsChanged
                    return
                chunk, view = view[:room], view[room:]
                self.h2.send_data(sid, bytes(chunk), end_stream=not view)
        except (h2.exceptions.StreamClosedError, h2.exceptions.FlowControlError):
            pass
        self._pending_body.pop(sid, None)

    def _resume_bodies(self) -> None:
        for sid in list(self._pending_body):
            self._push_body(sid)

    def _adjust_stream_limit(self, status: int) -> None:
        if status == 200:
            target = self.max_streams
        elif 400 <= status < 500 and status != 410 and self.server.faults.drop_streams_on_rejection:
            target = 1
        else:
            return
        if target != self.advertised_streams:
            self.advertised_streams = target
            self.h2.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: target})
            self.server._stats_inc("stream_limit_changes")

    # ---- GOAWAY and drops --------------------------------------------------------------------------

    def _maybe_goaway_after_answer(self, sid: int) -> None:
        faults = self.server.faults
        fault = faults.goaway
        if fault is not None and fault.after > 0 and self.goaway_last is None:
            faults.goaway_remaining -= 1
            if faults.goaway_remaining <= 0:
                faults.goaway = None
                # Requests already complete (answered or held) are at or below highest_stream.
                self.start_goaway(fault, last_stream_id=max(sid, self.highest_stream))
        elif self.goaway_last is not None and not self.goaway_sent and not self.unanswered:
            self._emit_goaway()

    def start_goaway(self, fault: GoawayFault, last_stream_id: int | None = None) -> None:
        """Stop taking streams above ``last_stream_id``; GOAWAY now or once the rest is answered."""
        if self.goaway_last is not None:
            return
        self.goaway_fault = fault
        self.goaway_last = self.highest_stream if last_stream_id is None else last_stream_id
        # Requests above last_stream_id whose bodies are still arriving are abandoned with the rest.
        for sid in [s for s in self.requests if s > self.goaway_last]:
            del self.requests[sid]
        if not fault.graceful or not self.unanswered:
            self._emit_goaway()

    def _emit_goaway(self) -> None:
        fault = self.goaway_fault
        assert fault is not None and self.goaway_last is not None
        frame = GoAwayFrame(0)
        frame.last_stream_id = self.goaway_last
        frame.error_code = fault.error_code
        frame.additional_data = json.dumps({"reason": fault.reason}).encode()
        # Crafted outside h2 so its state machine stays open: streams <= last_stream_id may still be
        # answered (h2 refuses to send anything once it has sent GOAWAY itself).
        self._out.append(self.h2.data_to_send())
        self._out.append(frame.serialize())
        self.goaway_sent = True
        self.server._stats_inc("goaways_sent")
        log.info(
            "apns_server_goaway",
            connection_id=self.id,
            last_stream_id=self.goaway_last,
            reason=fault.reason,
            pending=len(self.unanswered),
        )
        self._call_later(self.server.goaway_linger_s, self._close_when_done)

    def _close_when_done(self) -> None:
        # Closing a TCP socket with unread input makes the kernel send RST, which can destroy our GOAWAY
        # before the client reads it; so we linger (reading and ignoring) and let the client close first.
        if not self.unanswered:
            self.closing = True
            self._wake.set()
        else:
            # Non-graceful GOAWAY with answers still pending: check again once they have gone out.
            self._call_later(self.server.goaway_linger_s, self._close_when_done)

    def _abort(self) -> None:
        """Drop the TCP connection without a word (the client sees EOF / a reset)."""
        self.closing = True
        self.unanswered.clear()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()


def _header_value(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes:
    for k, v in headers:
        if k == name:
            return v
    return b""


# --------------------------------------------------------------------------------------------------------
# Trio shell: the server
# --------------------------------------------------------------------------------------------------------


class ApnsTestServer:
    """An APNs look-alike over HTTP/2 + TLS: validates, records and misbehaves on request.

    ``keys`` maps key IDs to PEM public keys (the .p8's public half); ``topics`` are the allowed bundle
    ids (``.push-type.liveactivity`` and other suffixes are implied by the push type). ``fast`` skips JSON
    parsing (payload size is still checked) for benchmarks. ``engine="lean"`` swaps h2's connection object
    for ``_LeanH2Connection`` (same events, same faults, about half the CPU per request); ``"h2"`` is the
    default, the reference implementation.
    """

    def __init__(
        self,
        *,
        team_id: str,
        keys: Mapping[str, str | bytes],
        topics: Collection[str],
        record_path: str | Path | None = None,
        ca: trustme.CA | None = None,
        max_concurrent_streams: int = 1000,
        initial_streams: int | None = 1,
        fast: bool = False,
        sandbox: bool = True,
        hostnames: Collection[str] = certs.DEFAULT_HOSTNAMES,
        keep_records: int | None = None,
        engine: Literal["h2", "lean"] = "h2",
    ) -> None:
        if not topics:
            raise ValueError("topics: at least one bundle id is required")
        self.team_id = team_id
        self.topics = normalize_topics(topics)
        self.verifier = ProviderTokenVerifier(team_id, keys)
        self.ca = ca if ca is not None else certs.make_ca()
        self._hostnames = tuple(hostnames)
        self.faults = FaultState(max_concurrent_streams=max_concurrent_streams, initial_streams=initial_streams)
        self._initial_faults = (max_concurrent_streams, initial_streams)
        self.fast = fast
        if engine not in ("h2", "lean"):
            raise ValueError(f"engine: {engine!r} is not 'h2' or 'lean'")
        self.engine = engine
        self.sandbox = sandbox
        self.record_path = Path(record_path) if record_path is not None else None
        self.keep_records = keep_records
        self.records: list[dict[str, Any]] = []
        self.records_total = 0
        self.port = 0
        self.host = "127.0.0.1"
        self._ca_file: str | None = None
        self._record_file: IO[str] | None = None
        self._record_dirty = False
        self._record_waiters: list[tuple[int, trio.Event]] = []
        self._connections: dict[int, _ServerConnection] = {}
        self._conn_ids = itertools.count(1)
        self._stats: dict[str, int] = {}
        self._statuses: dict[str, int] = {}
        self.protocol_errors: list[str] = []
        # How long a connection stays open after its GOAWAY once every stream it kept was answered.
        self.goaway_linger_s = _GOAWAY_LINGER_S
        self._ids = _ApnsIds()
        _install_huffman_cache()

    # ---- public API --------------------------------------------------------------------------------

    @property
    def ca_file(self) -> str:
        """The CA certificate (PEM) on disk, written on first use into a private temp directory."""
        if self._ca_file is None:
            folder = tempfile.mkdtemp(prefix="sightscreen-apns-ca-")
            self._ca_file = str(certs.write_ca_pem(self.ca, Path(folder) / "ca.pem"))
        return self._ca_file

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def ssl_context_for_clients(self) -> ssl.SSLContext:
        return certs.client_ssl_context(ca=self.ca)

    async def serve(
        self, host: str = "127.0.0.1", port: int = 0, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on ``host:port`` (0 picks a free port) until cancelled; ``started(port)`` once bound."""
        server_ctx = certs.server_ssl_context(self.ca, (*self._hostnames, host))
        listeners = await trio.open_tcp_listeners(port, host=host)
        self.host = host
        self.port = listeners[0].socket.getsockname()[1]
        if self.record_path is not None:
            self.record_path.parent.mkdir(parents=True, exist_ok=True)
            self._record_file = self.record_path.open("a", encoding="utf-8")
        created_ca = self._ca_file is None
        try:
            async with trio.open_nursery() as nursery:
                if self._record_file is not None:
                    nursery.start_soon(self._record_flush_loop)
                log.info("apns_server_listening", host=host, port=self.port)
                task_status.started(self.port)

                async def handler(tcp: trio.SocketStream) -> None:
                    await self._handle_tcp(tcp, server_ctx)

                await trio.serve_listeners(handler, listeners, handler_nursery=nursery)
        finally:
            if self._record_file is not None:
                self._record_file.close()
                self._record_file = None
            if created_ca and self._ca_file is not None:
                # The CA file written for this run's clients goes with the run.
                shutil.rmtree(Path(self._ca_file).parent, ignore_errors=True)
                self._ca_file = None

    def script(self, **faults: Any) -> None:
        """Apply a fault script (the fields of ``FaultScript``); raises ``ValueError`` naming bad fields."""
        try:
            parsed = FaultScript.model_validate(faults)
        except ValidationError as exc:
            raise ValueError(_validation_message(exc)) from exc
        self._apply(parsed)

    def reset(self, *, records: bool = False) -> None:
        """Forget every scripted fault (limits return to the constructor's); optionally the records too."""
        max_streams, initial = self._initial_faults
        self.faults = FaultState(max_concurrent_streams=max_streams, initial_streams=initial)
        if records:
            self.records.clear()

    # Individual fault helpers (thin wrappers over ``script``).

    def set_token_status(
        self, token: str, status: int = 410, reason: str | None = None, *, count: int | None = None,
        timestamp_ms: int | None = None, delay_s: float = 0.0,
    ) -> None:
        self.script(tokens={token: {"status": status, "reason": reason, "count": count,
                                    "timestamp_ms": timestamp_ms, "delay_s": delay_s}})

    def storm(self, status: int = 500, *, count: int | None = None, duration_s: float | None = None,
              reason: str | None = None) -> None:
        self.script(storm={"status": status, "count": count, "duration_s": duration_s, "reason": reason})

    def goaway(self, reason: str = "Shutdown", *, after: int = 0, error_code: int = 0,
               graceful: bool = True) -> None:
        self.script(goaway={"after": after, "reason": reason, "error_code": error_code, "graceful": graceful})

    def drop_connections(self, *, after: int = 0) -> None:
        self.script(drop={"after": after})

    def refuse_streams(self, count: int) -> None:
        self.script(refuse_streams=count)

    def delay(self, seconds: float, *, count: int | None = None) -> None:
        self.script(delay={"seconds": seconds, "count": count})

    def set_window(self, initial_window_size: int, *, connection_window: int | None = None,
                   update_delay_s: float = 0.0) -> None:
        self.script(window={"initial_window_size": initial_window_size,
                            "connection_window": connection_window, "update_delay_s": update_delay_s})

    async def wait_for_records(self, n: int) -> list[dict[str, Any]]:
        """Wait until at least ``n`` requests have been answered in total; returns ``records``."""
        if self.records_total < n:
            event = trio.Event()
            self._record_waiters.append((n, event))
            await event.wait()
        return self.records

    def stats(self) -> dict[str, Any]:
        return {
            **self._stats,
            "connections_open": len(self._connections),
            "records": self.records_total,
            "statuses": dict(self._statuses),
            "max_open_streams": max(
                [self._stats.get("max_open_streams_closed", 0)]
                + [c.max_open for c in self._connections.values()]
            ),
            "protocol_errors": list(self.protocol_errors),
        }

    def flush_records(self) -> None:
        if self._record_file is not None and self._record_dirty:
            self._record_file.flush()
            self._record_dirty = False

    # ---- internals ---------------------------------------------------------------------------------

    def _apply(self, script: FaultScript) -> None:
        # Storm deadlines use time.monotonic: a script may be applied before trio runs (the CLI's --script).
        self.faults.apply(script, time.monotonic())
        log.info("apns_server_script", **_script_summary(script))
        if script.goaway is not None and script.goaway.after == 0:
            fault = script.goaway
            self.faults.goaway = None
            for conn in list(self._connections.values()):
                conn.call_soon(lambda c=conn: c.start_goaway(fault))  # type: ignore[misc]
        if script.drop is not None and script.drop.after == 0:
            self.faults.drop_after = None
            for conn in list(self._connections.values()):
                self._stats_inc("connections_dropped")
                conn._abort()
        if script.idle_timeout_s:
            for conn in self._connections.values():
                conn.arm_idle_timer()
        if script.max_concurrent_streams is not None:
            for conn in self._connections.values():
                conn.max_streams = script.max_concurrent_streams

    def _stats_inc(self, name: str, by: int = 1) -> None:
        self._stats[name] = self._stats.get(name, 0) + by

    def _unique_id_header(self) -> list[tuple[bytes, bytes]]:
        if not self.sandbox:
            return []
        return [(b"apns-unique-id", self._ids.next().encode())]

    async def _handle_tcp(self, tcp: trio.SocketStream, server_ctx: ssl.SSLContext) -> None:
        tls = trio.SSLStream(tcp, server_ctx, server_side=True, https_compatible=True)
        try:
            with trio.fail_after(_TLS_HANDSHAKE_TIMEOUT_S):
                await tls.do_handshake()
        except (trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
            self._stats_inc("tls_failures")
            log.info("apns_server_tls_failed", error=str(exc))
            await trio.aclose_forcefully(tls)
            return
        if tls.selected_alpn_protocol() != "h2":
            self._stats_inc("tls_failures")
            log.info("apns_server_no_h2", alpn=tls.selected_alpn_protocol())
            await trio.aclose_forcefully(tls)
            return
        conn = _ServerConnection(self, next(self._conn_ids), tls)
        self._connections[conn.id] = conn
        self._stats_inc("connections_total")
        log.debug("apns_server_connection_open", connection_id=conn.id)
        try:
            await conn.run()
        except Exception as exc:  # one connection's bug must not stop the server; tests see it in stats
            message = f"connection {conn.id}: internal error: {exc!r}"
            self.protocol_errors.append(message)
            self._stats_inc("internal_errors")
            log.error("apns_server_internal_error", connection_id=conn.id, error=message, exc_info=True)
        finally:
            del self._connections[conn.id]
            self._stats["max_open_streams_closed"] = max(self._stats.get("max_open_streams_closed", 0),
                                                         conn.max_open)
            log.debug("apns_server_connection_closed", connection_id=conn.id, answered=conn.answered)

    def _stream_limit_violation(self, conn: _ServerConnection, stream_id: int, open_streams: int) -> None:
        self._stats_inc("stream_limit_violations")
        limit = conn.h2.local_settings.max_concurrent_streams
        message = f"connection {conn.id}: stream {stream_id} opened with {open_streams} open, limit {limit}"
        self.protocol_errors.append(message)
        log.warning("apns_server_stream_limit_violated", connection_id=conn.id, error=message)

    def _protocol_error(self, conn: _ServerConnection, exc: Exception) -> None:
        name = type(exc).__name__
        if isinstance(exc, h2.exceptions.TooManyStreamsError):
            self._stats_inc("stream_limit_violations")
        elif isinstance(exc, h2.exceptions.FlowControlError):
            self._stats_inc("flow_control_violations")
        message = f"connection {conn.id}: {name}: {exc}"
        self.protocol_errors.append(message)
        log.warning("apns_server_protocol_error", connection_id=conn.id, error=message)

    def _decide(self, conn: _ServerConnection, req: _Request) -> tuple[_Answer, float]:
        """Validate one request and apply the script; returns the answer and how long to hold it."""
        headers, duplicate = headers_to_dict(req.headers)
        apns_id = headers.get("apns-id") or self._ids.next()
        faults = self.faults
        now_wall = time.time()
        check: TokenCheck | None = None
        payload: Any = None
        timestamp_ms: int | None = None
        extra_delay = 0.0
        token, verdict = validate_target(headers.get(":method", ""), headers.get(":path", ""))
        if verdict is None and duplicate is not None:
            verdict = Verdict(400, "DuplicateHeaders", f"header {duplicate!r} appears twice")
        if verdict is None:
            check = self.verifier.check(headers.get("authorization"), now_wall)
            auth = conn.auth
            if check.token != auth.token or auth.poisoned or check.reason is not None:
                verdict = auth.admit(
                    check, time.monotonic(), min_interval_s=faults.token_update_interval_s,
                    pin_key=faults.pin_key_id,
                )
                if verdict is not None and verdict.reason == "TooManyProviderTokenUpdates":
                    self._stats_inc("token_churn_rejections")
        if verdict is None:
            verdict = validate_headers(headers, self.topics)
        if verdict is None:
            payload, verdict = validate_payload(headers.get("apns-push-type", ""), req.body, parse=not self.fast)
        if verdict is None and faults.storm_status:
            verdict = faults.storm_verdict(time.monotonic())
        if verdict is None and faults.tokens:
            rule = faults.token_rule(token)
            if rule is not None:
                extra_delay = rule.delay_s
                if rule.status != 200:
                    verdict = Verdict(rule.status, rule.reason, "scripted for this token")
                    timestamp_ms = rule.timestamp_ms
        if verdict is None:
            verdict = ACCEPTED
        if verdict.status != 200 and payload is None and not self.fast and req.body:
            payload = _try_json(req.body)
        record = self._make_record(
            conn, req.stream_id, token, headers, check, payload, verdict, apns_id, len(req.body)
        )
        body = b"" if verdict.accepted else error_body(verdict, timestamp_ms=timestamp_ms)
        if verdict.status == 410 and record is not None:
            record["timestamp_ms"] = json.loads(body)["timestamp"]
        answer = _Answer(req.stream_id, verdict.status, verdict.reason, apns_id, record, body)
        return answer, faults.take_delay() + extra_delay

    def _make_record(
        self, conn: _ServerConnection, stream_id: int, token: str, headers: dict[str, str],
        check: TokenCheck | None, payload: Any, verdict: Verdict, apns_id: str, payload_bytes: int,
    ) -> dict[str, Any]:
        shown = headers  # a fresh dict per request (headers_to_dict); the record may keep it
        if "authorization" in shown:
            shown["authorization"] = redact_authorization(check, shown["authorization"]) or ""
        record: dict[str, Any] = {
            "connection_id": conn.id,
            "stream_id": stream_id,
            "token": token,
            "headers": shown,
            "payload": payload,
            "payload_bytes": payload_bytes,
            "status": verdict.status,
            "reason": verdict.reason,
            "apns_id": apns_id,
        }
        if verdict.detail:
            record["detail"] = verdict.detail
        return record

    def _answered(self, conn: _ServerConnection, answer: _Answer) -> None:
        key = str(answer.status)
        self._statuses[key] = self._statuses.get(key, 0) + 1
        record = answer.record
        if record is None:
            return
        record["time"] = time.time()
        self.records.append(record)
        self.records_total += 1
        if self.keep_records is not None and len(self.records) > 2 * self.keep_records:
            del self.records[: len(self.records) - self.keep_records]
        if self._record_file is not None:
            self._record_file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._record_dirty = True
        if self._record_waiters:
            still: list[tuple[int, trio.Event]] = []
            for n, event in self._record_waiters:
                if self.records_total >= n:
                    event.set()
                else:
                    still.append((n, event))
            self._record_waiters = still
        if answer.status != 200:
            log.debug("apns_server_rejected", token=short_token(record["token"]), status=answer.status,
                      reason=answer.reason, detail=record.get("detail", ""))

    async def _record_flush_loop(self) -> None:
        while True:
            await trio.sleep(0.1)
            self.flush_records()

    # ---- control endpoint --------------------------------------------------------------------------

    async def _control(self, conn: _ServerConnection, req: _Request) -> None:
        headers, _ = headers_to_dict(req.headers)
        method = headers.get(":method", "")
        path, _, query = headers.get(":path", "").partition("?")
        params = dict(p.partition("=")[::2] for p in query.split("&") if p)
        status: int
        body: dict[str, Any]
        try:
            status, body = await self._control_dispatch(method, path, params, bytes(req.body))
        except Exception as exc:  # the control plane answers every error; it must not kill the connection
            status, body = 500, {"reason": "ControlError", "detail": f"{type(exc).__name__}: {exc}"}
        data = json.dumps(body, separators=(",", ":"), default=str).encode()
        conn.call_soon(lambda: conn._send_control(req.stream_id, status, data))

    async def _control_dispatch(
        self, method: str, path: str, params: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        if path == "/ctl/script" and method == "POST":
            try:
                parsed = FaultScript.model_validate_json(body or b"{}")
            except ValidationError as exc:
                return 400, {"reason": "BadScript", "detail": _validation_message(exc)}
            self._apply(parsed)
            return 200, {"ok": True}
        if path == "/ctl/reset" and method == "POST":
            self.reset(records=params.get("records") in {"1", "true"})
            return 200, {"ok": True}
        if path == "/ctl/records" and method == "GET":
            try:
                since = int(params.get("since", "0"))
                limit = int(params["limit"]) if "limit" in params else None
            except ValueError:
                return 400, {"reason": "BadQuery", "detail": "since and limit must be integers"}
            offset = self.records_total - len(self.records)
            start = max(0, since - offset)
            chosen = self.records[start : start + limit if limit is not None else None]
            return 200, {"total": self.records_total, "since": offset + start, "records": chosen}
        if path == "/ctl/wait" and method == "GET":
            try:
                n = int(params.get("records", "0"))
                timeout = float(params.get("timeout", "10"))
            except ValueError:
                return 400, {"reason": "BadQuery", "detail": "records must be an integer, timeout seconds"}
            with trio.move_on_after(timeout):
                await self.wait_for_records(n)
            return 200, {"total": self.records_total, "reached": self.records_total >= n}
        if path == "/ctl/stats" and method == "GET":
            return 200, self.stats()
        return 404, {"reason": "BadPath", "detail": f"no control endpoint {method} {path}"}


def _try_json(body: bytes | bytearray) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return None


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "script"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def _script_summary(script: FaultScript) -> dict[str, Any]:
    summary = script.model_dump(exclude_none=True)
    if "tokens" in summary:
        summary["tokens"] = {short_token(t): v for t, v in summary["tokens"].items()}
    if "clear_tokens" in summary:
        summary["clear_tokens"] = [short_token(t) for t in summary["clear_tokens"]]
    return summary
