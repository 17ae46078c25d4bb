"""The exception hierarchy: one ``PantoError`` subclass per error kind of the core.

The core has one error type with a kind; this module gives each kind its class. The
classes live in Python (not in the native module) so they carry attributes, pickle, and
can also derive from the standard exceptions a caller may already catch
(``APITimeoutError`` is a ``TimeoutError``, ``ConfigError`` a ``ValueError``).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Type

__all__ = [
    "PantoError",
    "ConfigError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "BadRequestError",
    "RateLimitError",
    "ServerError",
    "APIConnectionError",
    "APITimeoutError",
    "ProtocolError",
    "ProviderError",
    "StreamCancelledError",
    "BusyError",
    "ToolError",
    "IncompleteStreamError",
    "InternalError",
    "ERROR_CLASSES",
]


def _rebuild(
    cls: "Type[PantoError]",
    message: str,
    kind: str,
    status: int,
    retryable: bool,
    provider_code: Optional[str],
) -> "PantoError":
    return cls(
        message,
        kind=kind,
        status=status,
        retryable=retryable,
        provider_code=provider_code,
    )


class PantoError(Exception):
    """A failure reported by panto.

    Attributes:
        kind: the core's error kind (``"rate_limited"``, ``"timeout"``, …).
        message: the human-readable message (never contains the API key).
        status: the HTTP status, 0 when there was none.
        retryable: whether repeating the same request could succeed.
        provider_code: the provider's own error type or code, if it sent one.
    """

    kind: str = "internal"

    def __init__(
        self,
        message: str = "",
        *,
        kind: Optional[str] = None,
        status: int = 0,
        retryable: bool = False,
        provider_code: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if kind is not None:
            self.kind = kind
        self.status = status
        self.retryable = retryable
        self.provider_code = provider_code

    def __str__(self) -> str:
        text = f"{self.kind}: {self.message}"
        if self.status:
            text += f" (HTTP {self.status})"
        if self.provider_code:
            text += f" [{self.provider_code}]"
        return text

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, kind={self.kind!r}, "
            f"status={self.status!r}, retryable={self.retryable!r}, "
            f"provider_code={self.provider_code!r})"
        )

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        # Keyword-only fields do not survive the default exception pickling.
        return (
            _rebuild,
            (
                type(self),
                self.message,
                self.kind,
                self.status,
                self.retryable,
                self.provider_code,
            ),
        )


class ConfigError(PantoError, ValueError):
    """A bad configuration value; the message starts with the key's name."""

    kind = "config"


class AuthenticationError(PantoError):
    """The provider rejected the credentials (HTTP 401)."""

    kind = "authentication"


class PermissionDeniedError(PantoError):
    """The credentials may not do this (HTTP 402/403)."""

    kind = "permission"


class NotFoundError(PantoError):
    """The endpoint or model does not exist (HTTP 404)."""

    kind = "not_found"


class BadRequestError(PantoError):
    """The provider rejected the request (HTTP 400/413/422)."""

    kind = "bad_request"


class RateLimitError(PantoError):
    """Too many requests (HTTP 429), after the configured retries."""

    kind = "rate_limited"


class ServerError(PantoError):
    """The provider failed (5xx, overloaded), after the configured retries."""

    kind = "server"


class APIConnectionError(PantoError):
    """The provider could not be reached, or the connection broke."""

    kind = "connection"


class APITimeoutError(PantoError, TimeoutError):
    """A time limit passed (connect, idle or request). Also a ``TimeoutError``."""

    kind = "timeout"


class ProtocolError(PantoError):
    """The provider sent malformed stream data (bad JSON, an oversized event, …)."""

    kind = "protocol"


class ProviderError(PantoError):
    """The provider sent an error inside a successful (200) stream."""

    kind = "provider"


class StreamCancelledError(PantoError):
    """The turn was cancelled (``cancel()``, ``close()``, Ctrl-C, task cancellation)."""

    kind = "cancelled"


class BusyError(PantoError):
    """The agent already has an active stream; finish, cancel or close it first."""

    kind = "busy"


class ToolError(PantoError):
    """Host-tool misuse, such as a result for an unknown or already answered call id."""

    kind = "tool"


class IncompleteStreamError(PantoError):
    """The response or the turn ended before the provider said it had finished."""

    kind = "incomplete"


class InternalError(PantoError):
    """A bug in panto (a panic, reported instead of aborting)."""

    kind = "internal"


#: The class of each error kind, in the core's order (``ErrorKind::ALL``).
ERROR_CLASSES: Dict[str, Type[PantoError]] = {
    cls.kind: cls
    for cls in (
        ConfigError,
        AuthenticationError,
        PermissionDeniedError,
        NotFoundError,
        BadRequestError,
        RateLimitError,
        ServerError,
        APIConnectionError,
        APITimeoutError,
        ProtocolError,
        ProviderError,
        StreamCancelledError,
        BusyError,
        ToolError,
        IncompleteStreamError,
        InternalError,
    )
}


def _from_native(
    kind: str,
    message: str,
    status: int,
    retryable: bool,
    provider_code: Optional[str],
) -> PantoError:
    """Builds the exception for a core error (called by the native module)."""
    # A kind this package does not know yet (a newer core) is still a PantoError.
    cls = ERROR_CLASSES.get(kind, PantoError)
    return cls(
        message,
        kind=kind,
        status=status,
        retryable=retryable,
        provider_code=provider_code,
    )

# Shown (and pickled) as panto.X: the package re-exports every class.
for _cls in (PantoError, *ERROR_CLASSES.values()):
    _cls.__module__ = "panto"
del _cls
