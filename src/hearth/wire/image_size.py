"""Image sizes as OpenAI's images API writes them: ``"WIDTHxHEIGHT"`` in pixels (``"1024x1024"``), or ``"auto"``."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["AUTO", "MAX_SIDE", "parse_size"]

AUTO: Final = "auto"
MAX_SIDE: Final = 4096  # the largest side Hearth accepts in a request (OpenAI's models draw at most 1792)
_SIZE: Final = re.compile(r"([1-9][0-9]{0,4})x([1-9][0-9]{0,4})")


def parse_size(size: str) -> tuple[int, int] | None:
    """(width, height) of ``"WxH"``; None when ``size`` is not of that form or a side exceeds :data:`MAX_SIDE`."""
    match = _SIZE.fullmatch(size)
    if match is None:
        return None
    width, height = int(match[1]), int(match[2])
    return (width, height) if width <= MAX_SIDE and height <= MAX_SIDE else None
