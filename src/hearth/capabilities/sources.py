"""The input of a capability call (summarize, extract) as text: inline, a file under a root, or a URL.

A payload names its input in one of four fields, taken in this priority: ``text``, ``ocr_text``, then
``file_id`` (a relative path inside :attr:`SourceLimits.file_root`), then ``file_url`` (http/https,
through the :class:`~hearth.capabilities.address_guard.AddressGuard`). Everything a caller could use
to read what it should not — a path out of the root, a URL into the operator's network, a redirect
there, a huge or binary body, a server that never answers — is refused with its own catalog code.

Error messages never carry file contents or the URL (a presigned URL's query is a credential); the
``details`` say which rule refused, and ``param`` names the payload field.

The same guarded readers also hand out raw bytes (:func:`read_file_bytes`, :func:`fetch_url_bytes`) for
callers that judge the content themselves (documents sniff PDF, images and text from the bytes): every
rule above holds except the text ones (extension, declared content type, charset), which are theirs.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import stat
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar
from urllib.parse import unquote

import aiohttp
from yarl import URL

from hearth.capabilities.address_guard import AddressGuard, CheckedTarget
from hearth.errors import HearthError

SourceKind = Literal["text", "ocr_text", "file_id", "file_url"]
FIELDS: tuple[SourceKind, ...] = ("text", "ocr_text", "file_id", "file_url")
DEFAULT_TYPES = ("text/plain", "text/markdown", "text/csv", "application/json")
EXTENSION_TYPES = {".txt": "text/plain", ".md": "text/markdown", ".csv": "text/csv", ".json": "application/json"}
FILE_ENCODINGS = ("utf-8-sig", "gb18030")  # utf-8-sig reads UTF-8 with or without a BOM
SNIFF_BYTES = 8192
REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024
_NAME_CHARS = 255
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SourceLimits:
    """What the operator allows. ``file_root`` None disables ``file_id``; ``allowed_types`` are media
    types (parameters such as ``charset`` are ignored when matching); ``url_allow`` feeds the
    :class:`AddressGuard` (CIDRs and exact host names that may be fetched although not public)."""

    file_root: Path | None = None
    max_bytes: int = 5 * 1024 * 1024
    timeout_s: float = 10.0
    allowed_types: tuple[str, ...] = DEFAULT_TYPES
    max_redirects: int = 3
    url_allow: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_bytes <= 0 or self.timeout_s <= 0 or self.max_redirects < 0:
            raise ValueError("max_bytes and timeout_s must be positive, max_redirects not negative")

    def media_types(self) -> frozenset[str]:
        return frozenset(_media_type(t) for t in self.allowed_types)


@dataclass(frozen=True, slots=True)
class SourceText:
    """The input as text. ``bytes`` is its size as received (inline: UTF-8); ``content_type`` the media
    type it was accepted as (None for inline text)."""

    text: str
    source: SourceKind
    bytes: int
    content_type: str | None


@dataclass(frozen=True, slots=True)
class SourceBytes:
    """A file's or URL's content as bytes, unjudged. ``content_type`` is what the server declared (its
    media type, None for a file or when absent): a claim, not a check. ``name`` is the file's base name
    or the URL path's last segment (None if it has none), for display only."""

    data: bytes
    source: Literal["file_id", "file_url"]
    content_type: str | None
    name: str | None


async def read_input(payload: Mapping[str, Any], limits: SourceLimits, *,
                     session: aiohttp.ClientSession | None = None, guard: AddressGuard | None = None) -> SourceText:
    """The payload's input as text, or a :class:`HearthError`.

    A field that is present (not None) but not a string is ``invalid_request``, even if a field of
    higher priority is usable; a blank string counts as absent. ``session`` is used for ``file_url``
    (any session works: the request goes to a vetted address literal, so its resolver is never
    asked); without one a private session is made for the call (no cookies, no proxy from the
    environment). A caller's session with a proxy (``trust_env``) hands the proxy the pinned address
    URL, so the proxy connects to the vetted address too. ``guard`` defaults to
    ``AddressGuard(limits.url_allow)``."""
    for field in FIELDS:
        value = payload.get(field)
        if value is not None and not isinstance(value, str):
            raise HearthError("invalid_request", f"`{field}` must be a string.", param=field)
    given = {f: v for f in FIELDS if isinstance(v := payload.get(f), str) and v.strip()}
    for field in ("text", "ocr_text"):
        if field in given:
            return _inline(given[field], field, limits)
    if "file_id" in given:
        return await asyncio.to_thread(_read_file, given["file_id"], limits)
    if "file_url" in given:
        return await _read_url(given["file_url"], limits, session=session,
                               guard=guard or AddressGuard(limits.url_allow), reader=_body)
    raise HearthError("input_missing")


def _inline(text: str, field: SourceKind, limits: SourceLimits) -> SourceText:
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise HearthError("invalid_request", f"`{field}` is not valid Unicode text.", param=field) from exc
    if size > limits.max_bytes:
        raise HearthError("invalid_request", f"`{field}` is larger than allowed.", param=field,
                          details={"reason": "text_too_large", "bytes": size, "max_bytes": limits.max_bytes})
    return SourceText(text, field, size, None)


# ---- file_id --------------------------------------------------------------------------------------

def _read_file(file_id: str, limits: SourceLimits) -> SourceText:
    """Blocking (run in a thread): the file as text of a type its extension names and the operator allows."""
    path, size = _checked_file(file_id, limits)
    media = EXTENSION_TYPES.get(path.suffix.lower())
    if media is None or media not in limits.media_types():
        raise _file_error("file_type_unsupported", "The file type is not supported.", "extension",
                          allowed=sorted(EXTENSION_TYPES))
    if size > limits.max_bytes:
        raise _file_error("file_too_large", "The file is larger than allowed.", "size", max_bytes=limits.max_bytes)
    data = _read_bounded(path, limits.max_bytes)
    if b"\x00" in data[:SNIFF_BYTES]:
        raise _file_error("file_type_unsupported", "The file is not text.", "binary")
    for encoding in FILE_ENCODINGS:
        try:
            return SourceText(data.decode(encoding), "file_id", len(data), media)
        except UnicodeDecodeError:
            continue
    raise _file_error("file_type_unsupported", "The file is not UTF-8 (or GB18030) text.", "encoding")


async def read_file_bytes(file_id: str, limits: SourceLimits) -> SourceBytes:
    """The bytes of the file ``file_id`` names under ``limits.file_root``, with every path rule of
    ``file_id`` text inputs and the size limit (``file_too_large``), but no type rule: the caller judges
    the bytes. Errors carry ``param="file_id"``."""
    return await asyncio.to_thread(_read_file_bytes, file_id, limits)


def _read_file_bytes(file_id: str, limits: SourceLimits) -> SourceBytes:
    path, size = _checked_file(file_id, limits)
    if size > limits.max_bytes:
        raise _file_error("file_too_large", "The file is larger than allowed.", "size", max_bytes=limits.max_bytes)
    return SourceBytes(_read_bounded(path, limits.max_bytes), "file_id", None, path.name[:_NAME_CHARS] or None)


def _checked_file(file_id: str, limits: SourceLimits) -> tuple[Path, int]:
    """Blocking. The real path (symlinks followed) of a regular file inside the real root, and its size;
    :func:`_read_bounded` then opens it without following a final symlink and checks the open descriptor
    again, so a file swapped after this check is still a regular file of bounded size."""
    if limits.file_root is None:
        raise _file_error("file_path_refused", "Reading files by id is not enabled.", "disabled")
    if "\x00" in file_id or "\\" in file_id:
        raise _file_error("file_path_refused", "The file id contains a forbidden character.", "forbidden_character")
    relative = PurePosixPath(file_id)
    if relative.is_absolute() or ".." in relative.parts:
        raise _file_error("file_path_refused", "The file id must be a relative path without `..`.", "not_relative")
    root = Path(os.path.realpath(limits.file_root))
    path = Path(os.path.realpath(root / relative))
    if not path.is_relative_to(root):
        raise _file_error("file_path_refused", "The file id points outside the file root.", "outside_root")
    try:
        info = os.stat(path)
    except OSError:
        raise _file_error("file_not_found", "The file does not exist.", "missing") from None
    if not stat.S_ISREG(info.st_mode):
        raise _file_error("file_not_found", "The file id does not name a regular file.", "not_a_file")
    return path, info.st_size


def _read_bounded(path: Path, max_bytes: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        raise _file_error("file_not_found", "The file cannot be opened.", "unreadable") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _file_error("file_not_found", "The file id does not name a regular file.", "not_a_file")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes and (chunk := os.read(fd, min(_CHUNK, max_bytes + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > max_bytes:
        raise _file_error("file_too_large", "The file is larger than allowed.", "size", max_bytes=max_bytes)
    return b"".join(chunks)


def _file_error(code: str, message: str, reason: str, **details: Any) -> HearthError:
    return HearthError(code, message, details={"reason": reason, **details}, param="file_id")


# ---- file_url -------------------------------------------------------------------------------------

async def fetch_url_bytes(url: str, limits: SourceLimits, *, session: aiohttp.ClientSession | None = None,
                          guard: AddressGuard | None = None) -> SourceBytes:
    """The body of ``url`` as bytes, through the same guard, pinning, redirect, size and time rules as a
    ``file_url`` text input, but no type or charset rule: the caller judges the bytes (the server's
    declared type comes along as a claim). ``session`` and ``guard`` as for :func:`read_input`. Errors
    carry ``param="file_url"``."""
    return await _read_url(url, limits, session=session, guard=guard or AddressGuard(limits.url_allow),
                           reader=_raw_body)


async def _read_url(url: str, limits: SourceLimits, *, session: aiohttp.ClientSession | None,
                    guard: AddressGuard, reader: Callable[[aiohttp.ClientResponse, SourceLimits], Awaitable[T]],
                    ) -> T:
    """Everything — resolving, every redirect, the body — within ``limits.timeout_s``."""
    own = session is None
    client = session or aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(), trust_env=False)
    try:
        async with asyncio.timeout(limits.timeout_s):
            return await _follow(url, limits, client, guard, reader=reader)
    except TimeoutError:
        raise HearthError("file_url_timeout", "The file URL did not answer in time.", param="file_url",
                          details={"timeout_s": limits.timeout_s}) from None
    except HearthError as exc:
        exc.param = exc.param or "file_url"
        raise
    finally:
        if own:
            await client.close()


async def _follow(url: str, limits: SourceLimits, session: aiohttp.ClientSession, guard: AddressGuard, *,
                  reader: Callable[[aiohttp.ClientResponse, SourceLimits], Awaitable[T]]) -> T:
    """Redirects by hand: each Location is checked by the guard before anything connects to it."""
    current = url
    for hop in range(limits.max_redirects + 1):
        target = await guard.check_url(current)
        try:
            async with await _connect(session, target, limits) as resp:
                if resp.status in REDIRECTS:
                    current = _location(resp, target)
                    continue
                if not 200 <= resp.status < 300:
                    raise _fetch_failed("status", "The file URL answered with an error status.", status=resp.status)
                return await reader(resp, limits)
        except TimeoutError:
            raise
        except aiohttp.ClientError as exc:
            raise _fetch_failed("connection", "The file URL could not be fetched.", error=type(exc).__name__,
                                redirects=hop) from None
    raise _fetch_failed("too_many_redirects", "The file URL redirected too many times.",
                        max_redirects=limits.max_redirects)


async def _connect(session: aiohttp.ClientSession, target: CheckedTarget,
                   limits: SourceLimits) -> aiohttp.ClientResponse:
    """A response from one of the vetted addresses, tried in order while connecting fails. The URL's
    host is the address literal (nothing is resolved again); Host header and TLS server name (SNI
    and certificate check) are the original host name."""
    headers = {"Host": target.host_header, "Accept": ", ".join(sorted(limits.media_types())),
               "Accept-Encoding": "identity"}
    failure: aiohttp.ClientConnectorError | None = None
    for address in target.addresses:
        try:
            return await session.get(target.pinned_url(address), headers=headers, allow_redirects=False,
                                     raise_for_status=False, server_hostname=target.server_hostname,
                                     timeout=aiohttp.ClientTimeout(total=limits.timeout_s))
        except aiohttp.ClientConnectorError as exc:
            failure = exc
    assert failure is not None
    raise failure


def _location(resp: aiohttp.ClientResponse, target: CheckedTarget) -> str:
    location = resp.headers.get("Location")
    if not location:
        raise _fetch_failed("redirect_without_location", "The file URL redirected nowhere.", status=resp.status)
    try:
        return str(target.url.join(URL(location)))
    except ValueError:
        raise _fetch_failed("bad_redirect", "The file URL redirected to an invalid URL.") from None


async def _body(resp: aiohttp.ClientResponse, limits: SourceLimits) -> SourceText:
    media = resp.content_type.lower()
    if media not in limits.media_types():
        raise HearthError("file_type_unsupported", "The file URL's content type is not supported.",
                          details={"reason": "content_type", "content_type": media[:100],
                                   "allowed": sorted(limits.media_types())})
    data = await _bounded_body(resp, limits)
    text = _decode_charset(data, resp.charset)
    return SourceText(text, "file_url", len(data), media)


async def _raw_body(resp: aiohttp.ClientResponse, limits: SourceLimits) -> SourceBytes:
    declared = resp.headers.get("Content-Type")
    data = await _bounded_body(resp, limits)
    name = unquote(resp.url.path.rsplit("/", 1)[-1])[:_NAME_CHARS]
    return SourceBytes(data, "file_url", _media_type(declared)[:100] if declared else None, name or None)


async def _bounded_body(resp: aiohttp.ClientResponse, limits: SourceLimits) -> bytes:
    """The body, refused (``file_too_large``) on a declared length above the limit before reading, and
    as soon as the bytes read pass it."""
    if resp.content_length is not None and resp.content_length > limits.max_bytes:
        raise HearthError("file_too_large", "The file URL's content is larger than allowed.",
                          details={"reason": "content_length", "max_bytes": limits.max_bytes})
    data = bytearray()
    async for chunk in resp.content.iter_chunked(_CHUNK):
        data += chunk
        if len(data) > limits.max_bytes:
            raise HearthError("file_too_large", "The file URL's content is larger than allowed.",
                              details={"reason": "body", "max_bytes": limits.max_bytes})
    return bytes(data)


def _decode_charset(data: bytes, charset: str | None) -> str:
    try:
        encoding = codecs.lookup(charset or "utf-8").name
        text = data.decode("utf-8-sig" if encoding == "utf-8" else encoding)
    except (LookupError, UnicodeDecodeError):
        raise HearthError("file_type_unsupported", "The file URL's content is not text in its declared charset.",
                          details={"reason": "encoding", "charset": (charset or "utf-8")[:40]}) from None
    if "\x00" in text[:SNIFF_BYTES]:
        raise HearthError("file_type_unsupported", "The file URL's content is not text.", details={"reason": "binary"})
    return text


def _fetch_failed(reason: str, message: str, **details: Any) -> HearthError:
    return HearthError("file_url_fetch_failed", message, details={"reason": reason, **details})


def _media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()
