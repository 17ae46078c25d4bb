"""The exception hierarchy's roots — ``PantoError``, ``APIError``, ``APIStatusError`` —
and how the native module raises an error.

The core has one error type with a kind; every kind has its own ``PantoError``
subclass, generated from the core's vocabulary into ``_vocab`` (``ERROR_CLASSES``), and
some HTTP statuses a narrower class (``STATUS_CLASSES``). The tree is openai-python's:
``APIError`` is the base of what the provider or the network caused; under it,
``APIStatusError`` (``.status_code``) is the base of every HTTP error status's class, and
the connection kind's class is the base of the timeout kind's. The classes of the kinds
and their bases are the generator's (``scripts/gen/python.py``); docs/errors.md
has the whole tree and the status table.

The classes live in Python (not in the native module) so they carry attributes, pickle,
and can also derive from the standard exceptions a caller may already catch.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Tuple, Type

__all__ = ["PantoError", "APIError", "APIStatusError"]


def _rebuild(
    cls: "Type[PantoError]",
    message: str,
    kind: str,
    status: int,
    retryable: bool,
    provider_code: Optional[str],
    retry_after: Optional[float] = None,
    request_id: Optional[str] = None,
    headers: Optional[Dict[str, str]] = None,
    output: Optional[str] = None,
) -> "PantoError":
    return cls(
        message,
        kind=kind,
        status=status,
        retryable=retryable,
        provider_code=provider_code,
        retry_after=retry_after,
        request_id=request_id,
        headers=headers,
        output=output,
    )


class PantoError(Exception):
    """A failure reported by panto.

    Attributes:
        kind: the core's error kind (``"config"``, …).
        message: the human-readable message (never contains the API key).
        status: the HTTP status, 0 when there was none.
        retryable: whether repeating the same request could succeed.
        provider_code: the provider's own error type or code, if it sent one.
        retry_after: the wait, in seconds, that the failed response asked for before a
            retry (``retry-after-ms`` or ``retry-after``); ``None`` if it named none. A
            wait longer than ``retry={"max_retry_after_ms": …}`` (default 60 s) is not
            waited for: the stream fails at once with it here.
        request_id: the provider's id of the request (its ``x-request-id`` or
            ``request-id`` response header), when the response carried one — an HTTP
            error response, or a stream that failed after a 200.
        headers: the failed HTTP response's headers, names in lower case (a repeated
            header's values joined with ``", "``); empty when the error was not an HTTP
            error status. At most 64 headers of 1 KiB each, redacted like the message.
        output: the model's raw final answer, for the structured-output kinds
            (``OutputInvalidError``: the text that did not match the schema;
            ``OutputRefusedError``: the refusal; ``OutputTruncatedError``: the text cut
            at ``max_tokens``); ``None`` for every other error. Bounded by
            ``max_message_bytes``, redacted like the message.
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
        request_id: Optional[str] = None,
        headers: Optional[Dict[str, str]] = None,
        output: Optional[str] = None,
    ) -> None:
        """Makes the error with the attributes the class lists; panto raises these
        itself, and a caller makes one only to test its own handling (a subclass's
        ``kind`` is its class's unless ``kind`` is given)."""
        super().__init__(message)
        self.message = message
        if kind is not None:
            self.kind = kind
        self.status = status
        self.retryable = retryable
        self.provider_code = provider_code
        self.retry_after = retry_after
        self.request_id = request_id
        self.headers: Dict[str, str] = dict(headers) if headers else {}
        self.output = output

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
                self.request_id,
                self.headers,
                self.output,
            ),
        )


class APIError(PantoError):
    """A failure the provider or the network caused (as openai-python's ``APIError``):
    an HTTP error status (``APIStatusError``), a connection that failed or timed out
    (``APIConnectionError``), a malformed or unfinished response, an error inside one."""


class APIStatusError(APIError):
    """The provider answered with an HTTP error status (``status_code``; ``status`` is the
    same). Its class says which (docs/errors.md has the table). An error of
    such a kind that came inside a stream, not as a status, has ``status_code`` 0."""

    @property
    def status_code(self) -> int:
        """The HTTP status (``status``), as openai-python names it."""
        return self.status


def _from_native(
    kind: str,
    message: str,
    status: int,
    retryable: bool,
    provider_code: Optional[str],
    retry_after_ms: Optional[int] = None,
    request_id: Optional[str] = None,
    headers: Iterable[Tuple[str, str]] = (),
    output: Optional[str] = None,
) -> PantoError:
    """Builds the exception for a core error (called by the native module): the class of
    its HTTP status if it has a narrower one, else its kind's."""
    # Imported here: the generated module defines its classes on top of this one.
    from ._vocab import ERROR_CLASSES, STATUS_CLASSES

    cls: Optional[Type[PantoError]] = None
    if status:
        cls = STATUS_CLASSES.get((kind, status)) or STATUS_CLASSES.get((kind, None))
    if cls is None:
        # A kind this package does not know yet (a newer core) is still a PantoError.
        cls = ERROR_CLASSES.get(kind, PantoError)
    joined: Dict[str, str] = {}
    for name, value in headers:
        joined[name] = f"{joined[name]}, {value}" if name in joined else value
    return cls(
        message,
        kind=kind,
        status=status,
        retryable=retryable,
        provider_code=provider_code,
        retry_after=None if retry_after_ms is None else retry_after_ms / 1000,
        request_id=request_id,
        headers=joined,
        output=output,
    )


# Shown (and pickled) as panto.X: the package re-exports them (and `_vocab` does the
# same for the classes of the kinds).
for _cls in (PantoError, APIError, APIStatusError):
    _cls.__module__ = "panto"
del _cls
