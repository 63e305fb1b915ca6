"""iOS 18 broadcast push and channel management, as pure request builders and response parsers.

Owns: Apple's channel-management requests (``/1/apps/{bundle}/channels`` and ``/all-channels`` on the
management host, apns.md §2.6 and §8), the broadcast request's path and limits (``/4/broadcasts/apps/{bundle}``
on the push host or ``[apns].broadcast_url``), the parsing of their answers, and the management hosts Apple
documents per environment (``ApnsSettings.management_address``). Must not touch: I/O, connections, retry policy (the verdict for each reason is in
``daemon.apns.rules``, the same table as for per-token pushes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from daemon.apns.rules import MAX_BROADCAST_PAYLOAD, Action, Verdict, channel_id_is_valid, classify
from daemon.apns.types import ApnsError

MAX_CHANNELS: Final = 10_000  # per app and environment
# policy 0: no storage, higher publishing budget, apns-expiration must be 0 (the one we use for scores)
NO_STORAGE: Final = 0
MOST_RECENT: Final = 1


def channels_path(bundle: str) -> str:
    return f"/1/apps/{bundle}/channels"


def all_channels_path(bundle: str) -> str:
    return f"/1/apps/{bundle}/all-channels"


def broadcast_path(bundle: str) -> str:
    return f"/4/broadcasts/apps/{bundle}"


@dataclass(frozen=True, slots=True)
class Request:
    """One channel-management request: the sender's management connection puts it on the wire as is."""

    op: str  # "create" | "read" | "delete" | "list"
    method: str
    path: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""


def create_channel(bundle: str, *, policy: int = NO_STORAGE, request_id: str | None = None) -> Request:
    if policy not in (NO_STORAGE, MOST_RECENT):
        raise ValueError(f"message-storage-policy must be 0 or 1, got {policy!r}")
    body = json.dumps({"message-storage-policy": policy, "push-type": "LiveActivity"}, separators=(",", ":"))
    headers = (("apns-request-id", request_id),) if request_id else ()
    return Request("create", "POST", channels_path(bundle), headers, body.encode())


def read_channel(bundle: str, channel_id: str) -> Request:
    return Request("read", "GET", channels_path(bundle), (("apns-channel-id", channel_id),))


def delete_channel(bundle: str, channel_id: str) -> Request:
    return Request("delete", "DELETE", channels_path(bundle), (("apns-channel-id", channel_id),))


__all__ = ["MAX_BROADCAST_PAYLOAD", "channel_id_is_valid"]


def list_channels(bundle: str) -> Request:
    return Request("list", "GET", all_channels_path(bundle))


SUCCESS_STATUS: Final = {"create": 201, "read": 200, "delete": 204, "list": 200}


class ChannelError(ApnsError):
    """APNs refused a management request; ``verdict`` is the rule table's decision for its reason."""

    def __init__(self, op: str, status: int | None, reason: str | None, verdict: Verdict) -> None:
        self.op = op
        self.status = status
        self.reason = reason
        self.verdict = verdict
        super().__init__(f"channel {op}: APNs answered {status} {reason} ({verdict.action.value})")

    @property
    def action(self) -> Action:
        return self.verdict.action


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    policy: int
    push_type: str


def _json(body: bytes | None) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def parse_answer(op: str, status: int, reason: str | None, channel_id: str | None, body: bytes | None) -> Any:
    """The result of ``op`` from APNs's answer, or ``ChannelError`` with the decided outcome.

    create: the new channel id (from the ``apns-channel-id`` response header); read: ``ChannelInfo``;
    delete: None; list: the channel ids."""
    if status != SUCCESS_STATUS[op]:
        if reason is None:
            parsed = _json(body)
            if isinstance(parsed, dict) and isinstance(parsed.get("reason"), str):
                reason = parsed["reason"]
        raise ChannelError(op, status, reason, classify(status, reason))
    if op == "create":
        if not channel_id or not channel_id_is_valid(channel_id):
            raise ChannelError(op, status, "MissingChannelId", Verdict(Action.BUG, "MissingChannelId"))
        return channel_id
    if op == "delete":
        return None
    parsed = _json(body)
    if op == "list":
        channels = parsed.get("channels") if isinstance(parsed, dict) else None
        if not isinstance(channels, list) or not all(isinstance(c, str) for c in channels):
            raise ChannelError(op, status, "BadResponse", Verdict(Action.BUG, "BadResponse"))
        return list(channels)
    if not isinstance(parsed, dict):
        raise ChannelError(op, status, "BadResponse", Verdict(Action.BUG, "BadResponse"))
    policy = parsed.get("message-storage-policy")
    return ChannelInfo(int(policy) if isinstance(policy, int) else -1, str(parsed.get("push-type", "")))
