"""The project's APNs server: real HTTP/2 over TLS (trio + h2) that validates like APNs and scripts faults.

Owns: the stand-in for Apple's push service used by the demo, the sender's tests, the end-to-end tests and
the throughput benchmark. It answers ``POST /3/device/<token>`` the way APNs does (§1 of spec/apns.md),
verifies ES256 provider tokens, follows APNs's stream-limit habits, records every answered request and can
be scripted, in process or over ``/ctl/*`` on the same port, to produce every limit and error of spec §4.

The daemon never imports it; it ships for the demo and ``sightscreen apns-server``.

Layout, the sans-I/O core first (plain functions and small classes tested without sockets), then the trio
shell:

- ``validation``: APNs's request rules, the verdict and its error body.
- ``auth``: provider-token verification and the per-connection token policy.
- ``script``: the fault script and the state that carries it out.
- ``http2``: the server's HTTP/2 settings and the HPACK encoding of its answers.
- ``lean``: a lean HTTP/2 engine for benchmarks (same events and faults as h2, about half the CPU).
- ``connection``: one client connection, moving bytes between a TLS stream and an HTTP/2 engine.
- ``channels``: iOS 18 channels: the channel store, management and broadcast validation, and the simulated
  devices subscribed to channels (what each saw).
- ``app``: ``ApnsTestServer``, which accepts connections and holds records, statistics and faults. Its
  ``serve_management`` is the channel-management host (its own listener); broadcasts
  (``POST /4/broadcasts/apps/{bundle}``) are answered on the push listener(s), recorded with ``channel_id``
  and ``devices`` (how many subscribed devices it reached), and fanned out to ``subscribe``-d devices
  (``seen_by``; ``POST /ctl/subscribe``, ``GET /ctl/seen``, ``GET /ctl/channels`` over the control plane).

HPACK and frame helpers shared with the sender's connection are in ``daemon.apns.wire``; the h2, hpack
and trio internals both sides reach into are in ``daemon.apns.internals``.

Scripting (``ApnsTestServer.script(**fields)`` in process, or ``POST /ctl/script`` with the same fields as a
JSON body; see ``FaultScript``): per-token status/reason/count/delay, 5xx storms (count or duration),
GOAWAY (after N answers or now, graceful or not), dropped TCP connections, connections left open but dead
(``freeze``: silent for good, as behind a NAT that dropped the flow), REFUSED_STREAM for N streams,
delays, a small flow-control window with late WINDOW_UPDATEs, the stream limits and their drop to 1 after
a rejection, the token-churn interval, key pinning and an idle timeout. Other control endpoints on the same
port: ``POST /ctl/reset[?records=1]``, ``GET /ctl/records[?since=K&limit=M]``, ``GET /ctl/stats``,
``GET /ctl/wait?records=N&timeout=S``. Control requests are not pushes: no records, no limit changes.

Records (``server.records``, and one JSON line each in ``record_path``): ``time``, ``connection_id``,
``stream_id``, ``token``, ``headers`` (authorization shown as ``bearer <kid=.. iat=..>``), ``payload`` (parsed
JSON; None with ``fast``), ``payload_bytes``, ``status``, ``reason``, ``apns_id``, and ``detail`` (why a
request was refused) / ``timestamp_ms`` (410) when they apply. Refused or dropped streams are not answered,
so they are counted in ``stats()`` instead. ``on_answer`` (in-process callers only), when set, is called with
each record once its answer is queued, before it is flushed: a test stops a client at an exact request.

Choices where APNs is silent or where h2 forces one (see also tests/apns/test_server*.py):
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

from daemon.apns.server.app import ApnsTestServer
from daemon.apns.server.auth import ConnectionAuth, ProviderTokenVerifier, TokenCheck, redact_authorization
from daemon.apns.server.connection import ApnsIds
from daemon.apns.server.http2 import ResponseEncoder
from daemon.apns.server.lean import LeanH2Connection
from daemon.apns.server.script import (
    DelayFault,
    DropFault,
    FaultScript,
    FaultState,
    GoawayFault,
    StormFault,
    TokenFault,
    WindowFault,
)
from daemon.apns.server.validation import (
    ACCEPTED,
    DEFAULT_REASON_BY_STATUS,
    LIVE_ACTIVITY_EVENTS,
    MAX_COLLAPSE_ID_BYTES,
    PAYLOAD_LIMIT_BY_PUSH_TYPE,
    PAYLOAD_LIMIT_DEFAULT,
    PROVIDER_TOKEN_MAX_AGE_S,
    TOKEN_UPDATE_INTERVAL_S,
    TOPIC_SUFFIX_BY_PUSH_TYPE,
    VALID_PRIORITIES,
    Verdict,
    error_body,
    headers_to_dict,
    normalize_topics,
    validate_headers,
    validate_live_activity,
    validate_payload,
    validate_target,
)

__all__ = [
    "ACCEPTED",
    "DEFAULT_REASON_BY_STATUS",
    "LIVE_ACTIVITY_EVENTS",
    "MAX_COLLAPSE_ID_BYTES",
    "PAYLOAD_LIMIT_BY_PUSH_TYPE",
    "PAYLOAD_LIMIT_DEFAULT",
    "PROVIDER_TOKEN_MAX_AGE_S",
    "TOKEN_UPDATE_INTERVAL_S",
    "TOPIC_SUFFIX_BY_PUSH_TYPE",
    "VALID_PRIORITIES",
    "ApnsIds",
    "ApnsTestServer",
    "ConnectionAuth",
    "DelayFault",
    "DropFault",
    "FaultScript",
    "FaultState",
    "GoawayFault",
    "LeanH2Connection",
    "ProviderTokenVerifier",
    "ResponseEncoder",
    "StormFault",
    "TokenCheck",
    "TokenFault",
    "Verdict",
    "WindowFault",
    "error_body",
    "headers_to_dict",
    "normalize_topics",
    "redact_authorization",
    "validate_headers",
    "validate_live_activity",
    "validate_payload",
    "validate_target",
]
