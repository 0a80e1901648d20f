"""A small labelled PNG, drawn in pure Python (``zlib`` and a built-in 5×7 bitmap font): what the simulated
provider returns for an image generation, so the demo works offline with no imaging library.

The image is a palette PNG (colour type 3, 8 bits per pixel): a background colour derived from the text
(the same prompt always gives the same picture), a frame, and the text lines centred in a dark ink, each
glyph scaled up by a whole factor so it stays crisp. Characters outside the font are drawn as a box;
lower case is drawn as upper case. Only uniform rows are shared, so a 1024×1024 image costs a few
milliseconds (most rows are the background row, which zlib compresses to almost nothing).
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Sequence
from typing import Final

__all__ = ["GLYPH_H", "GLYPH_W", "PNG_SIGNATURE", "label_png"]

PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
GLYPH_W: Final = 5
GLYPH_H: Final = 7
_BOX: Final = (0x1F, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1F)
_BG, _INK, _FRAME = 0, 1, 2  # palette indices

# Each glyph is 7 rows of 5 bits (most significant bit on the left).
_FONT_HEX: Final = {
    " ": "00 00 00 00 00 00 00", "!": "04 04 04 04 04 00 04", '"': "0A 0A 00 00 00 00 00",
    "#": "0A 0A 1F 0A 1F 0A 0A", "$": "04 0F 14 0E 05 1E 04", "%": "18 19 02 04 08 13 03",
    "&": "0C 12 14 08 15 12 0D", "'": "04 04 00 00 00 00 00", "(": "02 04 08 08 08 04 02",
    ")": "08 04 02 02 02 04 08", "*": "00 04 15 0E 15 04 00", "+": "00 04 04 1F 04 04 00",
    ",": "00 00 00 00 0C 04 08", "-": "00 00 00 1F 00 00 00", ".": "00 00 00 00 00 0C 0C",
    "/": "00 01 02 04 08 10 00", "0": "0E 11 13 15 19 11 0E", "1": "04 0C 04 04 04 04 0E",
    "2": "0E 11 01 02 04 08 1F", "3": "1F 02 04 02 01 11 0E", "4": "02 06 0A 12 1F 02 02",
    "5": "1F 10 1E 01 01 11 0E", "6": "06 08 10 1E 11 11 0E", "7": "1F 01 02 04 08 08 08",
    "8": "0E 11 11 0E 11 11 0E", "9": "0E 11 11 0F 01 02 0C", ":": "00 0C 0C 00 0C 0C 00",
    ";": "00 0C 0C 00 0C 04 08", "<": "02 04 08 10 08 04 02", "=": "00 00 1F 00 1F 00 00",
    ">": "08 04 02 01 02 04 08", "?": "0E 11 01 02 04 00 04", "@": "0E 11 01 0D 15 15 0E",
    "A": "0E 11 11 11 1F 11 11", "B": "1E 11 11 1E 11 11 1E", "C": "0E 11 10 10 10 11 0E",
    "D": "1C 12 11 11 11 12 1C", "E": "1F 10 10 1E 10 10 1F", "F": "1F 10 10 1E 10 10 10",
    "G": "0E 11 10 17 11 11 0F", "H": "11 11 11 1F 11 11 11", "I": "0E 04 04 04 04 04 0E",
    "J": "07 02 02 02 02 12 0C", "K": "11 12 14 18 14 12 11", "L": "10 10 10 10 10 10 1F",
    "M": "11 1B 15 15 11 11 11", "N": "11 11 19 15 13 11 11", "O": "0E 11 11 11 11 11 0E",
    "P": "1E 11 11 1E 10 10 10", "Q": "0E 11 11 11 15 12 0D", "R": "1E 11 11 1E 14 12 11",
    "S": "0F 10 10 0E 01 01 1E", "T": "1F 04 04 04 04 04 04", "U": "11 11 11 11 11 11 0E",
    "V": "11 11 11 11 11 0A 04", "W": "11 11 11 15 15 15 0A", "X": "11 11 0A 04 0A 11 11",
    "Y": "11 11 11 0A 04 04 04", "Z": "1F 01 02 04 08 10 1F", "[": "0E 08 08 08 08 08 0E",
    "]": "0E 02 02 02 02 02 0E", "_": "00 00 00 00 00 00 1F",
}
FONT: Final[dict[str, tuple[int, ...]]] = {ch: tuple(int(v, 16) for v in rows.split())
                                           for ch, rows in _FONT_HEX.items()}


def glyph(ch: str) -> tuple[int, ...]:
    """The 7 row bitmasks of ``ch`` (upper-cased; a box for anything outside the font)."""
    return FONT.get(ch.upper(), _BOX)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _palette(text: str) -> bytes:
    """A light background from the text's digest, dark ink, a mid-tone frame."""
    d = hashlib.sha256(text.encode()).digest()
    bg = bytes(160 + v % 90 for v in d[:3])
    return bg + b"\x1e\x1e\x28" + bytes(v // 2 for v in bg)


def _fit(lines: Sequence[str], width: int, height: int) -> int:
    """The largest whole glyph scale at which every line fits within 90 % of the width and 80 % of the height."""
    cols = max((len(line) for line in lines), default=1) or 1
    by_width = (width * 9 // 10) // (cols * (GLYPH_W + 1))
    by_height = (height * 8 // 10) // (len(lines) * (GLYPH_H + 2)) if lines else by_width
    return max(1, min(by_width, by_height))


def label_png(lines: Sequence[str], *, width: int, height: int) -> bytes:
    """A ``width`` × ``height`` PNG showing ``lines`` centred; lines that do not fit are cut off."""
    if not (0 < width <= 8192 and 0 < height <= 8192):
        raise ValueError("width and height must be within 1..8192")
    scale = _fit(lines, width, height)
    line_h = (GLYPH_H + 2) * scale
    shown = list(lines)[: max(1, height // line_h)]
    frame = max(1, min(width, height) // 128)
    blank = bytearray(b"\x00" + bytes([_BG]) * width)
    blank[1:1 + frame] = bytes([_FRAME]) * frame
    blank[1 + width - frame:] = bytes([_FRAME]) * frame
    edge = b"\x00" + bytes([_FRAME]) * width
    rows: list[bytes] = [bytes(blank)] * height
    for y in range(min(frame, height)):
        rows[y] = rows[height - 1 - y] = edge
    ink = bytes([_INK]) * scale
    top = (height - len(shown) * line_h) // 2 + scale
    for i, line in enumerate(shown):
        left = (width - len(line) * (GLYPH_W + 1) * scale + scale) // 2
        for gy in range(GLYPH_H):
            y0 = top + i * line_h + gy * scale
            if y0 < 0 or y0 + scale > height:
                continue
            row = bytearray(rows[y0])
            lit = False
            for ci, ch in enumerate(line):
                bits = glyph(ch)[gy]
                for gx in range(GLYPH_W):
                    if bits & (0x10 >> gx):
                        x = left + (ci * (GLYPH_W + 1) + gx) * scale
                        if 0 <= x and x + scale <= width:
                            row[1 + x:1 + x + scale] = ink
                            lit = True
            if lit:
                for dy in range(scale):
                    rows[y0 + dy] = bytes(row)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0)
    return b"".join((PNG_SIGNATURE, _chunk(b"IHDR", ihdr), _chunk(b"PLTE", _palette("\n".join(lines))),
                     _chunk(b"IDAT", zlib.compress(b"".join(rows), 6)), _chunk(b"IEND", b"")))
