"""Errors raised by the SportMonks client.

Owns the exception hierarchy callers catch; it must not hold secrets: no message built here (or by the client)
ever contains the API token, because these messages end up in logs and in the admin socket's output.

    SportMonksError
    ├── MalformedPayload      the response parsed but does not match the models (names the field path)
    ├── SportMonksHTTPError   a non-2xx answer that was not retried away (``status``, ``retry_after``)
    ├── SportMonksUnavailable no answer at all: timeout or transport error after the retries
    ├── ResponseTooLarge      the body grew past ``max_body_bytes``; reading stopped there (not retried)
    ├── BudgetExhausted       the hourly call budget for the endpoint has no room within the allowed wait
    └── BreakerOpen           the circuit breaker refuses calls until ``retry_in`` seconds have passed
"""

from __future__ import annotations


class SportMonksError(Exception):
    """Base class of everything the SportMonks client raises on purpose."""


class MalformedPayload(SportMonksError):
    """A response whose JSON does not match the response models.

    ``problems`` lists one ``"<field path>: <what was wrong>"`` string per problem, for example
    ``"data[0].runs[1].score: expected integer, got string '12'"``; ``field_path`` is the first problem's path.
    """

    def __init__(self, problems: list[str], *, source: str = "") -> None:
        self.problems = list(problems) or ["payload: invalid"]
        self.source = source
        self.field_path = self.problems[0].split(":", 1)[0]
        shown = "; ".join(self.problems[:3])
        more = f" (+{len(self.problems) - 3} more)" if len(self.problems) > 3 else ""
        prefix = (
            f"malformed SportMonks payload from {source}: " if source else "malformed SportMonks payload: "
        )
        super().__init__(prefix + shown + more)


class SportMonksHTTPError(SportMonksError):
    """A non-2xx status: 4xx at once (not retried), 429/5xx once the retries are spent."""

    def __init__(self, status: int, message: str = "", *, source: str = "", retry_after: float | None = None):
        self.status = status
        self.retry_after = retry_after
        self.source = source
        text = f"SportMonks answered HTTP {status}"
        if source:
            text += f" for {source}"
        if message:
            text += f": {message}"
        if retry_after is not None:
            text += f" (retry after {retry_after:g} s)"
        super().__init__(text)


class SportMonksUnavailable(SportMonksError):
    """No usable answer: the call timed out or the connection failed, on every attempt."""


class ResponseTooLarge(SportMonksError):
    """A response body past the configured cap; the client stopped reading it."""

    def __init__(self, source: str, max_bytes: int, *, declared: int | None = None) -> None:
        self.source = source
        self.max_bytes = max_bytes
        size = f"declares {declared} bytes," if declared is not None else "is"
        super().__init__(
            f"{source}: response body {size} more than max_body_bytes={max_bytes}; not read further"
        )


class BudgetExhausted(SportMonksError):
    """The endpoint's hourly budget has no room soon enough; the call was skipped, never sent."""

    def __init__(self, endpoint: str, retry_in: float) -> None:
        self.endpoint = endpoint
        self.retry_in = retry_in
        super().__init__(
            f"hourly SportMonks budget for {endpoint!r} exhausted; next slot in {retry_in:.1f} s"
        )


class BreakerOpen(SportMonksError):
    """The circuit breaker is open (or half-open with its one trial call already in flight)."""

    def __init__(self, retry_in: float) -> None:
        self.retry_in = retry_in
        super().__init__(f"SportMonks circuit breaker is open; next trial call in {retry_in:.1f} s")
