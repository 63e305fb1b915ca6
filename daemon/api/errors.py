"""The API package's exceptions, one root for callers that catch by kind.

    ApiException                the root: anything the API package raises on purpose
     ├── ApiError               an answer to the client: HTTP status, error code, message, fields, headers
     ├── AuthError              an access token refused (``reason``: a short word for logs and metrics)
     │    └── UnknownKid        the token names a signing key the JWKS does not have (a refetch may help)
     └── ApiConfigError         the API cannot start with these settings (also a ValueError)

Who raises and who catches: handlers and layers raise ``ApiError`` and the application's error handler
(``daemon.api.app``) or the layer itself answers it in the one error shape; ``daemon.api.auth`` raises
``AuthError`` and the gate (``daemon.api.gate``) turns it into a 401; ``ApiServer`` raises
``ApiConfigError`` before anything starts, and the runtime reports it as a configuration error. What the
data layer raises (botocore's ``ClientError``/``BotoCoreError``, ``daemon.store``'s own) is not wrapped:
the application answers it 503.
"""

from __future__ import annotations

from collections.abc import Mapping


class ApiException(Exception):
    """The root of the API package's exceptions."""


class ApiError(ApiException):
    """An answer to the client in the one error shape: ``status``, ``code``, ``message``, ``fields``
    (``[{"field", "reason"}]``) and extra ``headers``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        fields: list[dict[str, str]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields or []
        self.headers = dict(headers or {})


class AuthError(ApiException):
    """A token was refused; ``reason`` is a short fixed word for logs and metrics."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class UnknownKid(AuthError):
    """The token's header names a ``kid`` the JWKS does not have."""

    def __init__(self, kid: str) -> None:
        super().__init__("unknown_kid", f"kid {kid[:40]!r} is not in the JWKS")
        self.kid = kid


class ApiConfigError(ApiException, ValueError):
    """The API cannot start with these settings (the field and the reason are in the message)."""
