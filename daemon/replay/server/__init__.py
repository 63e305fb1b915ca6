"""The SportMonks-compatible replay server: tapes served as ``/livescores``, ``/fixtures/{id}`` and ``/fixtures``.

Replay mode's HTTP side (trio + h11, HTTP/1.1 keep-alive, bounded requests), the per-fixture clock (see
``cursor.ReplayClock``), the controls (play, pause, seek, speed, stop) in-process and over HTTP, and fault
injection. It knows nothing about the daemon: the daemon talks to it exactly as to SportMonks, with only
the base URL changed. What a fixture looks like at a cursor is ``daemon.replay.tape``'s job.

- ``app``: ``ReplayServer`` (served fixtures, controls, routing, the listener).
- ``state``: one served fixture (cursor, visibility times, rendered-output caches).
- ``query``: SportMonks' query rules (includes, filters, sorting, pagination, reference objects).
- ``faults``: what each fault does to a response or to the feed.
- ``http``: the HTTP/1.1 connection loop and the response type.

Paths are served both at the root and under ``/api/v2.0`` (the production base path). Data endpoints:
``GET /livescores`` (not paginated; fixtures that started and are not finished), ``GET /fixtures/{id}``,
``GET /fixtures`` (Laravel pagination, ``links`` carry only ``page=N`` as the real API does), and the
reference endpoints ``/teams``, ``/leagues``, ``/seasons``, ``/scores`` (with ``/{id}``); each honours
``include`` (comma-separated, dotted sub-includes), ``filter[field]=a,b`` (any-of; ``starts_between``;
``/fixtures?filter[status]=1st Innings,...`` is the live list the feed reads beside ``/livescores``),
``fields[resource]=a,b`` (sparse fieldsets: each object of that ``resource`` keeps those fields, its id and
its included relations), ``sort`` (``-`` for descending) and accepts ``api_token`` (checked only when the
server was given one). Ball ``updated_at`` is the wall time the entry became visible here.

The plan (``hourly_budget``, ``endpoint_budgets``; off by default): SportMonks' hourly limit per entity
(``/fixtures/{id}`` and ``/fixtures`` are one), a window from the first call that resets an hour later, a 429
with ``Retry-After`` past it. ``calls()`` (and ``GET /replay/status``) reports the calls answered and
refused per entity and the requests per endpoint.

Control endpoints (no token): ``GET /replay/status``; ``POST /replay/play|pause[?fixture_id=]``;
``POST /replay/seek?fixture_id=&entry=N`` (first N entries visible) or ``&ball_id=B`` (up to that ball);
``POST /replay/speed?x=[&fixture_id=]``; ``POST /replay/stop`` (the server shuts down);
``GET|POST|DELETE /replay/faults`` (list, inject one fault from a JSON object, clear all).

Faults (``inject``), each for ``count`` requests or ``duration_s`` seconds (or until cleared), on one
endpoint (``livescores``, ``fixture``, ``fixtures``, or a reference endpoint) or all: ``5xx`` (``status``),
``429`` (``retry_after``), ``timeout`` (hold the response ``hold_s`` seconds, then answer), ``disconnect``
(close without answering), ``truncated`` (JSON cut in half), ``malformed`` (invalid JSON, full length),
``missing_field`` / ``wrong_type`` (``field``, a dotted path inside each fixture, e.g. ``status`` or
``balls.score_id``; ``value`` for wrong_type). Valid but wrong data, in every fixture or ``fixture_id``'s:
``wrong_status`` (``status`` set to ``value``, default ``Finished``), ``changed_id`` (``id`` set to
``value``, default 123), ``implausible`` (``field``, default ``runs.score``, set to ``value``, default -5);
``huge_body`` pads the JSON with ``size_bytes`` of whitespace. ``ghost`` lists an extra fixture
``fixture_id`` (a new numeric id) in both live lists (or only ``endpoint``'s) for its ``count`` answers or ``duration_s``: no ball, no
score row, no toss, status ``value`` (default ``1st Innings``), ``starting_at`` (default 30 days back);
``/fixtures/{id}`` answers it until the faults are cleared. ``correct_ball`` / ``delete_ball`` change the feed at once:
a served ball (``ball_id``, default the newest) of ``fixture_id`` is re-sent with another ``score_id`` or
withdrawn. ``stall`` freezes the feed of ``fixture_id`` (default: all) for ``duration_s`` while the match
goes on, then everything missed appears at once (the catch-up bursts of spec §7). ``lag`` makes ``endpoint``
answer with the fixtures as they were ``lag_s`` seconds ago (a CDN or replica behind the other endpoint).
``future_ball`` adds the newest ball copied ``value`` overs ahead (3) with a new id and a catch to each answer
of ``fixture_id`` (default: all); ``unlisted`` leaves ``fixture_id`` out of the live list of ``endpoint``
(``livescores``, or ``fixtures`` for ``/fixtures?filter[status]``; both without one).
"""

from daemon.replay.server.app import ReplayServer
from daemon.replay.server.faults import FaultSpec
from daemon.replay.server.http import ReplayRequestError, encode_json
from daemon.replay.server.query import API_PREFIX, ENDPOINTS

__all__ = ["API_PREFIX", "ENDPOINTS", "FaultSpec", "ReplayRequestError", "ReplayServer", "encode_json"]
