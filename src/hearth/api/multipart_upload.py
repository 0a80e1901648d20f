"""Reading one uploaded file from a ``multipart/form-data`` body, as it streams, with a hard cap.

Starlette's form parser spools every file part to disk without a size limit; this reader parses the
stream itself (python-multipart's push parser) and keeps only the part named ``file``, refusing the
request (413 ``document_too_large``) the moment that part passes its limit — or the whole body passes
the limit plus :data:`OVERHEAD_BYTES` for boundaries, headers and small other fields — and at once when
``Content-Length`` declares more. Memory is the file's size (plus the raw body when the caller must
sign: the signature covers the body as sent), never more than the limit.

Malformed bodies (no boundary, a truncated body, no ``file`` part, two of them, too many parts or
headers) are 400 ``invalid_request`` with ``details.reason``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from hearth.api.deps import claim_nonce, runtime
from hearth.auth.internal import check_signature, identify_caller
from hearth.documents.service import too_large
from hearth.errors import HearthError
from hearth.registry.snapshot import Caller

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

FIELD = "file"
OVERHEAD_BYTES = 64 * 1024  # boundaries, part headers and other (ignored) fields together
MAX_PARTS = 16
MAX_FIELD_BYTES = 1024  # a small text field besides the file (``purpose`` of /v1/files): longer is refused
_MAX_LENGTH_DIGITS = 18


@dataclass
class UploadedFile:
    """The ``file`` part: its bytes, the file name and content type the client gave (claims only)."""

    data: bytes
    filename: str | None
    content_type: str | None
    fields: dict[str, str] = field(default_factory=dict)  # the other parts, as text (each ≤ MAX_FIELD_BYTES)


@dataclass
class _State:
    max_file_bytes: int
    parts: int = 0
    header_field: bytearray = field(default_factory=bytearray)
    header_value: bytearray = field(default_factory=bytearray)
    headers: dict[str, bytes] = field(default_factory=dict)
    in_file: bool = False
    file: bytearray | None = None
    filename: str | None = None
    content_type: str | None = None
    ended: bool = False
    field_name: str | None = None  # the text part being read (not the file)
    fields: dict[str, bytearray] = field(default_factory=dict)


async def read_upload(request: Request, *, max_file_bytes: int, keep_raw: bool = False) -> tuple[UploadedFile, bytes]:
    """The uploaded ``file`` and, if ``keep_raw``, the raw body (else ``b""``)."""
    boundary = _boundary(request.headers.get("content-type", ""))
    cap = max_file_bytes + OVERHEAD_BYTES
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and (len(declared) > _MAX_LENGTH_DIGITS or int(declared) > cap):
        raise too_large(max_file_bytes)
    state = _State(max_file_bytes)
    parser = MultipartParser(boundary, _callbacks(state))
    raw: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            if not chunk:
                continue
            size += len(chunk)
            if size > cap:
                raise too_large(max_file_bytes)
            if keep_raw:
                raw.append(chunk)
            parser.write(chunk)
        parser.finalize()
    except MultipartParseError:
        raise _malformed("The multipart body is malformed.", "malformed") from None
    if not state.ended:
        raise _malformed("The multipart body ends before its closing boundary.", "truncated")
    if state.file is None:
        raise _malformed(f"The multipart body has no `{FIELD}` part.", "file_missing")
    fields = {name: value.decode("utf-8", "replace") for name, value in state.fields.items()}
    return UploadedFile(bytes(state.file), state.filename, state.content_type, fields), b"".join(raw)


async def signed_upload(request: Request, *, max_file_bytes: int) -> tuple[Caller, UploadedFile]:
    """The calling application and its uploaded ``file``. A stranger's upload is not even read; a caller that must
    sign signs the multipart body as sent (the raw body is kept for that only), and its nonce is claimed here."""
    rt = runtime(request)
    caller = identify_caller(request.headers, rt.gateway.registry, rt.settings)
    must_sign = caller.require_signature or rt.settings.require_signatures
    upload, raw = await read_upload(request, max_file_bytes=max_file_bytes, keep_raw=must_sign)
    pending = await check_signature(caller, request.scope, raw, rt.settings,
                                    not_before=getattr(rt.state, "lost_at", None))
    await claim_nonce(request, pending)
    return caller, upload


def _boundary(content_type: str) -> bytes:
    media, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if media != b"multipart/form-data" or not boundary or len(boundary) > 200:
        raise _malformed("Send the file as multipart/form-data with a boundary.", "content_type")
    return boundary


def _callbacks(state: _State) -> MultipartCallbacks:
    def on_part_begin() -> None:
        state.parts += 1
        if state.parts > MAX_PARTS:
            raise _malformed(f"The multipart body has more than {MAX_PARTS} parts.", "too_many_parts")
        state.headers = {}
        state.in_file = False

    def on_header_field(data: bytes, start: int, end: int) -> None:
        state.header_field += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        state.header_value += data[start:end]

    def on_header_end() -> None:
        state.headers[bytes(state.header_field).decode("latin-1").lower()] = bytes(state.header_value)
        state.header_field.clear()
        state.header_value.clear()

    def on_headers_finished() -> None:
        disposition, options = parse_options_header(state.headers.get("content-disposition", b""))
        name = options.get(b"name")
        state.field_name = name.decode("utf-8", "replace") if disposition == b"form-data" and name and \
            name != FIELD.encode() and b"filename" not in options else None
        if disposition != b"form-data" or options.get(b"name") != FIELD.encode():
            return
        if state.file is not None:
            raise _malformed(f"The multipart body has more than one `{FIELD}` part.", "duplicate_file")
        state.in_file = True
        state.file = bytearray()
        name = options.get(b"filename")
        state.filename = name.decode("utf-8", "replace") if name else None
        declared = state.headers.get("content-type")
        state.content_type = declared.decode("latin-1").strip()[:200] if declared else None

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if state.in_file and state.file is not None:
            state.file += data[start:end]
            if len(state.file) > state.max_file_bytes:
                raise too_large(state.max_file_bytes)
        elif state.field_name is not None:
            value = state.fields.setdefault(state.field_name, bytearray())
            value += data[start:end]
            if len(value) > MAX_FIELD_BYTES:
                raise _malformed(f"The field `{state.field_name}` is longer than {MAX_FIELD_BYTES} bytes.",
                                 "field_too_long")

    def on_part_end() -> None:
        state.in_file = False
        state.field_name = None

    def on_end() -> None:
        state.ended = True

    return {"on_part_begin": on_part_begin, "on_header_field": on_header_field, "on_header_value": on_header_value,
            "on_header_end": on_header_end, "on_headers_finished": on_headers_finished,
            "on_part_data": on_part_data, "on_part_end": on_part_end, "on_end": on_end}


def _malformed(message: str, reason: str) -> HearthError:
    return HearthError("invalid_request", message, param="file", details={"reason": reason})
