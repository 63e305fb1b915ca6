"""The token janitor: acts on tokens APNs rejected for good, so they are never pushed again.

The APNs sender reports every "rejected" result (410, ``BadDeviceToken``, ``Unregistered``,
``DeviceTokenNotForTopic``...) on the janitor's channel exactly once. What to clean depends on what the token
was, which the producer of the push recorded in ``Push.context`` as a ``TokenRef``:

- ``la``: a Live Activity update token -> the session is suspended (``suspend_la_session``); the match actor
  drops it from memory, and self-healing sends a push-to-start later.
- ``push_to_start``: the device's push-to-start token is removed (``clear_push_to_start_token``), the device
  record (and its alert token) stays.
- ``device``: the device's alert token -> the device record is deleted (``delete_device``), as the data
  model's device lifecycle says.

Database errors are retried with backoff a bounded number of times; a cleanup that still fails is logged
loudly (the sender already remembers the token as dead, so no push goes to it from this process).
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from actors.ports import TokenCleanup
from daemon.apns.types import PushResult
from daemon.backoff import backoff_delay
from daemon.logs import get_logger, short_token

log = get_logger("janitor")

# A failed cleanup is tried again after 0.2 s, doubling up to 5 s (``attempts`` tries in all).
RETRY_BASE_S = 0.2
RETRY_MAX_S = 5.0


@dataclass(frozen=True, slots=True)
class TokenRef:
    """What a pushed token belongs to; carried in ``Push.context`` and read back by the janitor."""

    kind: str  # "la" | "push_to_start" | "device"
    match_id: str | None = None
    visitor_key: str | None = None
    user_id: str | None = None
    device_token: str | None = None


class Janitor:
    def __init__(self, repos: TokenCleanup, *, inbox_size: int = 10_000, attempts: int = 5) -> None:
        self._repos = repos
        self._attempts = attempts
        self.send_channel, self._receive = trio.open_memory_channel[PushResult](inbox_size)
        self.cleaned: dict[str, int] = {"la": 0, "push_to_start": 0, "device": 0, "unknown": 0, "failed": 0}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async for result in self._receive:
            await self.handle(result)

    async def handle(self, result: PushResult) -> None:
        ref = result.push.context
        if not isinstance(ref, TokenRef):
            self.cleaned["unknown"] += 1
            log.warning(
                "dead_token_without_context", token=short_token(result.push.token), reason=result.reason
            )
            return
        for attempt in range(self._attempts):
            try:
                await self._clean(ref)
                self.cleaned[ref.kind] = self.cleaned.get(ref.kind, 0) + 1
                log.info(
                    "dead_token_cleaned",
                    kind=ref.kind,
                    match_id=ref.match_id,
                    token=short_token(result.push.token),
                    reason=result.reason,
                )
                return
            except Exception as exc:  # a DynamoDB hiccup must not lose the cleanup
                log.warning("dead_token_cleanup_retry", kind=ref.kind, attempt=attempt + 1, error=repr(exc))
                await trio.sleep(backoff_delay(attempt + 1, base_s=RETRY_BASE_S, cap_s=RETRY_MAX_S))
        self.cleaned["failed"] += 1
        log.error("dead_token_cleanup_failed", kind=ref.kind, match_id=ref.match_id, user_id=ref.user_id)

    async def _clean(self, ref: TokenRef) -> None:
        if ref.kind == "la" and ref.match_id and ref.visitor_key:
            await self._repos.live_activities.suspend_la_session(ref.match_id, ref.visitor_key)
        elif ref.kind == "push_to_start" and ref.user_id and ref.device_token:
            await self._repos.devices.clear_push_to_start_token(ref.user_id, ref.device_token)
        elif ref.kind == "device" and ref.user_id and ref.device_token:
            await self._repos.devices.delete_device(ref.user_id, ref.device_token)
        else:
            raise ValueError(f"incomplete token reference {ref!r}")
