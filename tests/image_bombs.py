"""Decompression bombs for the pixel-limit tests, made in memory: small files that announce (and would decode to)
huge images."""

from __future__ import annotations

import struct
import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb_png(width: int, height: int) -> bytes:
    """A valid single-colour (black) 1-bit greyscale PNG of width x height: 20000x20000 is a ~50 KB file that
    `tf.io.decode_image(..., channels=3)` would expand to 1.2 GB (and serving's float32 copy to 4.8 GB)."""
    row = b"\x00" * (1 + (width + 7) // 8)  # filter byte 0, then the packed 1-bit pixels
    compressor = zlib.compressobj(9)
    rows_per_piece = max(1, (8 << 20) // len(row))  # compress 8 MB at a time: memory stays small
    pieces, left = [], height
    while left:
        count = min(rows_per_piece, left)
        pieces.append(compressor.compress(row * count))
        left -= count
    pieces.append(compressor.flush())
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # bit depth 1, greyscale
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", b"".join(pieces)) + _chunk(b"IEND", b"")
