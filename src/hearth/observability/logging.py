"""Structured JSON logs on the standard library, with the request id on every line and secrets scrubbed.

``get_logger(name).info("event_name", key=value, ...)`` writes one JSON object per line to stderr:
``{"timestamp", "level", "logger", "event", "request_id", ...fields}``. Records from other
libraries (uvicorn, SQLAlchemy) go through the same formatter.

Why not structlog (named in DESIGN.md): importing it (it pulls in rich) cost about 14 MB of
resident memory in a served process — a seventh of the idle-RSS budget — for features this
~100-line module covers. Measured with ``/proc/self/status`` before and after the import.

Secrets are never passed to the logger on purpose; :func:`scrub` is the second line of defence:
any string that looks like a bearer token or a provider key is masked before output.
"""

from __future__ import annotations

import logging
import re
import sys
import traceback
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import orjson

request_id_var: ContextVar[str | None] = ContextVar("hearth_request_id", default=None)

_SECRET_PATTERNS = re.compile(
    r"(sk-ant-[A-Za-z0-9_\-]{6,}|sk-[A-Za-z0-9_\-]{6,}|(?i:bearer)\s+[A-Za-z0-9_\-\.=]{8,}|hk-[A-Za-z0-9_\-]{12,}"
    r"|hearth-[A-Za-z0-9_\-]{6,})"
)


def mask_secret(value: str) -> str:
    """``sk-abcdef1234567890`` → ``sk-****7890``; short values are masked entirely."""
    if len(value) <= 8:
        return "****"
    head = value[:3] if value.startswith("sk-") else value[:2]
    return f"{head}****{value[-4:]}"


def scrub(value: Any) -> Any:
    if isinstance(value, str):
        return _SECRET_PATTERNS.sub(lambda m: mask_secret(m.group(0).split()[-1]), value)
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        rid = request_id_var.get()
        if rid is not None:
            entry["request_id"] = rid
        fields = getattr(record, "hearth_fields", None)
        if fields:
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = "".join(traceback.format_exception(*record.exc_info))
        return orjson.dumps(scrub(entry), default=str).decode()


class EventLogger:
    """A logger whose messages are event names and whose details are keyword fields."""

    __slots__ = ("_logger",)

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)

    def _log(self, level: int, event: str, exc_info: Any, fields: dict[str, Any]) -> None:
        if self._logger.isEnabledFor(level):
            self._logger.log(level, event, exc_info=exc_info, extra={"hearth_fields": fields}, stacklevel=3)

    def debug(self, event: str, *, exc_info: Any = None, **fields: Any) -> None:
        self._log(logging.DEBUG, event, exc_info, fields)

    def info(self, event: str, *, exc_info: Any = None, **fields: Any) -> None:
        self._log(logging.INFO, event, exc_info, fields)

    def warning(self, event: str, *, exc_info: Any = None, **fields: Any) -> None:
        self._log(logging.WARNING, event, exc_info, fields)

    def error(self, event: str, *, exc_info: Any = None, **fields: Any) -> None:
        self._log(logging.ERROR, event, exc_info, fields)


def get_logger(name: str) -> EventLogger:
    return EventLogger(name)


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr for Hearth and every library that logs through the standard library."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lib = logging.getLogger(name)
        lib.handlers = []
        lib.propagate = True
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    # Library chatter at debug would drown the gateway's own events.
    for noisy in ("aiosqlite", "asyncio", "alembic.runtime.migration"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.INFO))
