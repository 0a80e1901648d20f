"""Structured JSON logs with the request id bound to every line, and secret scrubbing.

Secrets are never passed to the logger on purpose; :func:`scrub_secrets` is the second line of
defence: any string value that looks like a bearer token or provider key is masked before output.
"""

from __future__ import annotations

import logging
import re
import sys
from contextvars import ContextVar
from typing import Any

import orjson
import structlog

request_id_var: ContextVar[str | None] = ContextVar("hearth_request_id", default=None)

_SECRET_PATTERNS = re.compile(
    r"(sk-[A-Za-z0-9_\-]{6,}|sk-ant-[A-Za-z0-9_\-]{6,}|(?i:bearer)\s+[A-Za-z0-9_\-\.=]{8,}|hearth-[A-Za-z0-9_\-]{6,})"
)


def mask_secret(value: str) -> str:
    """``sk-abcdef1234567890`` → ``sk-****7890``; short values are masked entirely."""
    if len(value) <= 8:
        return "****"
    head = value[:3] if value.startswith("sk-") else value[:2]
    return f"{head}****{value[-4:]}"


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return _SECRET_PATTERNS.sub(lambda m: mask_secret(m.group(0).split()[-1]), value)
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def scrub_secrets(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    return {k: _scrub(v) for k, v in event_dict.items()}


def add_request_id(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    rid = request_id_var.get()
    if rid is not None and "request_id" not in event_dict:
        event_dict["request_id"] = rid
    return event_dict


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr; stdlib loggers (uvicorn, sqlalchemy) are routed through the same format."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        add_request_id,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        scrub_secrets,
        structlog.processors.JSONRenderer(serializer=orjson.dumps),
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.BytesLoggerFactory(sys.stderr.buffer),
        cache_logger_on_first_use=True,
    )

    class _StdlibBridge(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            log = structlog.get_logger(record.name)
            msg = record.getMessage()
            if record.levelno >= logging.ERROR:
                log.error(msg, exc_info=record.exc_info)
            elif record.levelno >= logging.WARNING:
                log.warning(msg)
            else:
                log.info(msg)

    root = logging.getLogger()
    root.handlers = [_StdlibBridge()]
    root.setLevel(max(numeric, logging.INFO))
    for noisy in ("uvicorn.access",):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
