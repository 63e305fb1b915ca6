"""The sender's vocabulary: a push request, its one result, and the error that stops the sender.

Owns: ``Push`` (what producers hand the sender), ``PushResult`` (what the sender hands back, exactly once per
push), ``Fence`` (the moving not-after time a producer tags its pushes with), ``ApnsConfigurationError``.
Must not touch: I/O, HTTP/2, provider tokens (see ``connection`` and ``token``), payload building
(``daemon.cricket.payloads``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import trio

_T = TypeVar("_T")


def slot_init(cls: type[_T]) -> type[_T]:
    """Give a frozen, slotted dataclass an ``__init__`` that stores each field through its slot's descriptor.

    The dataclass's own ``__init__`` stores every field with ``object.__setattr__`` (the frozen class's
    ``__setattr__`` refuses): a lookup of the field by name per store, about twice the cost of the store
    itself. A push, its result and its answer are built once each per push, 20-30 fields in all. This one
    takes the same parameters (names, order, defaults, keyword-only fields) and stores the same values; the
    instances stay frozen (``__setattr__`` still refuses) and everything else about the class is unchanged.
    """
    params = dataclasses.fields(cls)  # type: ignore[arg-type]
    if not getattr(cls, "__slots__", None) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"slot_init: {cls.__name__} is not a frozen, slotted dataclass")
    scope: dict[str, Any] = {}
    signature: list[str] = []
    keyword_only: list[str] = []
    body: list[str] = []
    for i, f in enumerate(params):
        if not f.init:
            raise TypeError(f"slot_init: {cls.__name__}.{f.name} is not set by __init__")
        if f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"slot_init: {cls.__name__}.{f.name} has a default factory")
        scope[f"_set{i}"] = cls.__dict__[f.name].__set__
        spec = f.name
        if f.default is not dataclasses.MISSING:
            scope[f"_default{i}"] = f.default
            spec += f"=_default{i}"
        (keyword_only if f.kw_only else signature).append(spec)
        body.append(f"    _set{i}(self, {f.name})")
    if keyword_only:
        signature += ["*", *keyword_only]
    source = f"def __init__(self, {', '.join(signature)}):\n" + "\n".join(body or ["    pass"]) + "\n"
    exec(source, scope)  # noqa: S102 - the source is built above from the class's own field names
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


PUSH_TYPES: Final = frozenset(
    {
        "liveactivity",
        "alert",
        "background",
        "voip",
        "location",
        "complication",
        "fileprovider",
        "mdm",
        "pushtotalk",
        "widgets",
        "controls",
    }
)
KINDS: Final = frozenset({"start", "update", "end", "alert"})
OUTCOMES: Final = ("accepted", "rejected", "failed")

# apns.md §1.3: Live Activity pushes go to the bundle's ".push-type.liveactivity" topic.
LIVEACTIVITY_TOPIC_SUFFIX: Final = ".push-type.liveactivity"


class Fence:
    """The ``trio.current_time()`` after which a producer's pushes must not go out, moved by the producer.

    A match actor moves ``until`` to its new lease end each time it renews the lease and to -inf when it
    stops, and every push it makes carries the same ``Fence``. A push waiting in the sender's queue therefore
    goes out for as long as, and only while, its producer still holds the authority to push: a paused or
    cut-off owner's pushes fail with reason "NotAfterPassed", while a busy owner's pushes do not expire in a
    long queue (a fixed lease end copied into each push would fail a 10,000-push tick that waits longer than
    one lease, and its re-sending would wait again)."""

    __slots__ = ("until",)

    def __init__(self, until: float = math.inf) -> None:
        self.until = until

    def __repr__(self) -> str:
        return f"Fence(until={self.until!r})"


@slot_init
@dataclass(frozen=True, slots=True)
class Push:
    """One notification request. ``context`` is opaque to the sender and comes back in the result."""

    token: str
    push_type: str
    topic: str
    payload: bytes
    priority: int = 10
    kind: str = "alert"
    expiration: int | None = None
    collapse_id: str | None = None
    apns_id: str | None = None
    # set for a broadcast (iOS 18 channel): the request goes to /4/broadcasts/apps/{topic} with this
    # ``apns-channel-id`` and no device token (``token`` is then empty) and no ``apns-topic``
    channel_id: str | None = None
    context: Any = None
    # what to send instead when this push is sent again after a request that may have been delivered (its
    # deadline passed, or the connection was lost, after it went out): the same update without its alert, so
    # a device never shows an alert twice; None: the same bytes again
    resend_payload: bytes | None = field(default=None, compare=False, repr=False)
    # a producer that was paused or cut off past its authority never pushes late: once trio.current_time()
    # is past ``fence.until`` the push fails with reason "NotAfterPassed" (see ``Fence``)
    fence: Fence | None = field(default=None, compare=False)
    reply_to: trio.MemorySendChannel[PushResult] | None = field(default=None, compare=False, repr=False)

    @property
    def is_broadcast(self) -> bool:
        return self.channel_id is not None

    @property
    def wire_topic(self) -> str:
        """The ``apns-topic`` actually sent: Live Activity pushes get their suffix when the caller left it off."""
        if self.push_type == "liveactivity" and not self.topic.endswith(LIVEACTIVITY_TOPIC_SUFFIX):
            return self.topic + LIVEACTIVITY_TOPIC_SUFFIX
        return self.topic


@slot_init
@dataclass(frozen=True, slots=True)
class PushResult:
    """The one answer for a push.

    ``outcome``: "accepted" (APNs took it), "rejected" (final for this token: 410, BadDeviceToken, ...), or
    "failed" (our bug, a configuration error, or retries exhausted). ``status`` is None when no HTTP answer
    was had (deadline, connection lost, refused before sending). ``attempts`` counts requests put on the wire.
    ``apns_id``: APNs's echo for rejections; for accepted pushes the one the push carried (None if it had
    none), since decoding every accepted answer's id costs more than it is worth.
    """

    push: Push
    outcome: str
    status: int | None
    reason: str | None
    apns_id: str | None
    attempts: int
    latency_s: float

    @property
    def token(self) -> str:
        return self.push.token


class ApnsError(Exception):
    """The APNs package's error root: an answer, a connection or a configuration APNs would not work with."""


class ApnsConfigurationError(ApnsError):
    """APNs refused our credentials or topic (403 class): retrying cannot help, so the sender stops."""

    def __init__(self, reason: str, status: int | None = None, detail: str = "") -> None:
        self.reason = reason
        self.status = status
        message = f"APNs configuration error: {reason}"
        if status is not None:
            message += f" (HTTP {status})"
        if detail:
            message += f": {detail}"
        super().__init__(message)
