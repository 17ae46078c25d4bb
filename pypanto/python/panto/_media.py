"""Attachments of a turn's input: ``panto.Image`` and ``panto.Document``.

``agent.stream(["What is in this picture?", panto.Image.from_path("cat.png")])`` sends
the text and the image in that order. An attachment is bytes (its media type sniffed
from them by the core when not given: PNG, JPEG, GIF, WebP, PDF) or a URL the provider
fetches. Whatever is wrong with one (no known type, larger than ``max_message_bytes``,
a PDF by URL for OpenAI chat) is a ``ConfigError`` when the turn starts, before anything
is sent; an unreadable file (or a FIFO, a device, one past ``max_bytes``) is a
``ConfigError`` naming the path at ``from_path``.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Tuple, Type, TypeVar, Union

from ._native import _read_attachment
from ._vocab import ConfigError

__all__ = ["Image", "Document", "Part", "Input"]

#: The default ``max_message_bytes`` (32 MiB): ``from_path``'s default limit.
DEFAULT_MAX_MESSAGE_BYTES = 32 << 20

M = TypeVar("M", bound="_Media")


class _Media:
    """An attachment: ``data`` (bytes) or ``url``, with an optional ``media_type`` and
    ``name`` (a file name)."""

    __slots__ = ("data", "url", "media_type", "name")
    _kind = ""

    def __init__(
        self,
        *,
        data: Optional[bytes] = None,
        url: Optional[str] = None,
        media_type: Optional[str] = None,
        name: Optional[str] = None,
    ) -> None:
        if (data is None) == (url is None):
            raise ConfigError(f"{type(self).__name__}: give exactly one of data and url", kind="config")
        if data is not None and not isinstance(data, (bytes, bytearray, memoryview)):
            raise ConfigError(f"{type(self).__name__}: data must be bytes", kind="config")
        self.data = bytes(data) if data is not None else None
        self.url = url
        self.media_type = media_type
        self.name = name

    @classmethod
    def from_bytes(cls: Type[M], data: bytes, media_type: Optional[str] = None, name: Optional[str] = None) -> M:
        """The attachment of ``data``; its type is sniffed when ``media_type`` is None."""
        return cls(data=data, media_type=media_type, name=name)

    @classmethod
    def from_url(cls: Type[M], url: str, media_type: Optional[str] = None) -> M:
        """An attachment the provider fetches from ``url``."""
        return cls(url=url, media_type=media_type)

    @classmethod
    def from_path(
        cls: Type[M], path: Union[str, "os.PathLike[str]"], *, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ) -> M:
        """Reads the file at ``path`` (its type is sniffed from its bytes), at most
        ``max_bytes`` of it (default: the default ``max_message_bytes``, 32 MiB; give
        your agent's when it is larger). A file that cannot be read, one that is not a
        regular file (a FIFO, a device such as ``/dev/zero``, a directory) and one
        larger than ``max_bytes`` are a ``ConfigError`` naming the path; the size is
        known by reading at most ``max_bytes + 1`` bytes, whatever the file system
        reports."""
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ConfigError("from_path: max_bytes must be a non-negative int", kind="config")
        data = _read_attachment(os.fspath(path), max_bytes)
        return cls(data=data, name=os.path.basename(os.fspath(path)))

    def _native(self) -> Tuple[str, Optional[bytes], Optional[str], Optional[str], Optional[str]]:
        return (self._kind, self.data, self.url, self.media_type, self.name)

    def __repr__(self) -> str:
        what = f"url={self.url!r}" if self.url is not None else f"{len(self.data or b'')} bytes"
        return f"panto.{type(self).__name__}({what}, media_type={self.media_type!r}, name={self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Media) and type(other) is type(self) and other._native() == self._native()

    def __hash__(self) -> int:
        return hash(self._native())


class Image(_Media):
    """An image: PNG, JPEG, GIF or WebP bytes, or a URL."""

    __slots__ = ()
    _kind = "image"


class Document(_Media):
    """A document: PDF bytes, or a URL (Anthropic; OpenAI chat takes PDFs as bytes only)."""

    __slots__ = ()
    _kind = "document"


#: One part of a turn's input.
Part = Union[str, Image, Document]
#: A turn's input: text, or text and attachments in order.
Input = Union[str, Sequence[Part]]
Part.__doc__ = """One part of a turn's input: text (``str``), a ``panto.Image`` or a
``panto.Document``."""
Input.__doc__ = """A turn's input (``Agent.stream``, ``astream``, ``run``, ``arun``): text, or a list
of text and attachments in the order the model reads them (``["What is this?",
panto.Image.from_path("cat.png")]``)."""


def native_parts(prompt: Input) -> Optional[List[Any]]:
    """``None`` for plain text, else the parts as the native layer takes them."""
    if isinstance(prompt, str):
        return None
    parts: List[Any] = []
    for i, p in enumerate(prompt):
        if isinstance(p, str):
            parts.append(p)
        elif isinstance(p, _Media):
            parts.append(p._native())
        else:
            raise ConfigError(
                f"input[{i}]: a part is a str, a panto.Image or a panto.Document (got {type(p).__name__})",
                kind="config",
            )
    return parts
