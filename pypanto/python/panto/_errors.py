"""The exception hierarchy's root, ``PantoError``, and how the native module raises it.

The core has one error type with a kind; every kind has its own ``PantoError``
subclass, generated from the core's vocabulary into ``_vocab`` (``ERROR_CLASSES``). The
classes live in Python (not in the native module) so they carry attributes, pickle, and
can also derive from the standard exceptions a caller may already catch (the timeout
kind's class is a ``TimeoutError``, the config kind's a ``ValueError``).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple, Type

__all__ = ["PantoError"]


def _rebuild(
    cls: "Type[PantoError]",
    message: str,
    kind: str,
    status: int,
    retryable: bool,
    provider_code: Optional[str],
    retry_after: Optional[float] = None,
) -> "PantoError":
    return cls(
        message,
        kind=kind,
        status=status,
        retryable=retryable,
        provider_code=provider_code,
        retry_after=retry_after,
    )


class PantoError(Exception):
    """A failure reported by panto.

    Attributes:
        kind: the core's error kind (``"rate_limited"``, ``"timeout"``, …).
        message: the human-readable message (never contains the API key).
        status: the HTTP status, 0 when there was none.
        retryable: whether repeating the same request could succeed.
        provider_code: the provider's own error type or code, if it sent one.
        retry_after: the wait, in seconds, that the failed response asked for before a
            retry (``retry-after-ms`` or ``retry-after``); ``None`` if it named none. A
            wait longer than ``retry={"max_retry_after_ms": …}`` (default 60 s) is not
            waited for: the stream fails at once with it here.
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
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if kind is not None:
            self.kind = kind
        self.status = status
        self.retryable = retryable
        self.provider_code = provider_code
        self.retry_after = retry_after

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
                self.retry_after,
            ),
        )


def _from_native(
    kind: str,
    message: str,
    status: int,
    retryable: bool,
    provider_code: Optional[str],
    retry_after_ms: Optional[int] = None,
) -> PantoError:
    """Builds the exception for a core error (called by the native module)."""
    # Imported here: the generated module defines its classes on top of this one.
    from ._vocab import ERROR_CLASSES

    # A kind this package does not know yet (a newer core) is still a PantoError.
    cls = ERROR_CLASSES.get(kind, PantoError)
    return cls(
        message,
        kind=kind,
        status=status,
        retryable=retryable,
        provider_code=provider_code,
        retry_after=None if retry_after_ms is None else retry_after_ms / 1000,
    )


# Shown (and pickled) as panto.PantoError: the package re-exports it (and `_vocab` does
# the same for the classes of the kinds).
PantoError.__module__ = "panto"
