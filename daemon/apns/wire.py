"""HTTP/2 wire helpers shared by the APNs client connection and the APNs test server.

HPACK integers and raw string literals (RFC 7541 §5.1, §5.2) and HTTP/2 frame headers (RFC 9113 §4.1),
written straight as bytes: both sides build their frames by hand on their fast paths instead of going
through h2's frame objects.
"""

from __future__ import annotations

import struct
from typing import Final

import h2.exceptions

# Frame types (RFC 9113 §6) and flags.
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    range(10)
)
END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY_FLAG: Final = 0x20

# A frame header (RFC 9113 §4.1): its 24-bit length as (high 16, low 8), type, flags, stream id. Hot paths pack it
# themselves (``FRAME_HEADER.pack(length >> 8, length & 0xFF, ...)``); the rest call ``frame_header``.
FRAME_HEADER: Final = struct.Struct(">HBBBL")


def frame_header(length: int, frame_type: int, flags: int, stream_id: int) -> bytes:
    """The 9-byte header of a frame whose payload is ``length`` bytes."""
    return FRAME_HEADER.pack(length >> 8, length & 0xFF, frame_type, flags, stream_id)


def frame(frame_type: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """A whole frame: header and payload."""
    return frame_header(len(payload), frame_type, flags, stream_id) + payload


def hpack_int(value: int, prefix_bits: int, first_byte: int) -> bytes:
    """RFC 7541 §5.1 integer with an N-bit prefix, OR-ed into ``first_byte``."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first_byte | value,))
    out = bytearray((first_byte | limit,))
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_str(data: bytes) -> bytes:
    """A raw string literal (no Huffman): Huffman would save ~20% of a few bytes at a real CPU cost."""
    return hpack_int(len(data), 7, 0x00) + data


def read_hpack_int(data: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    """Decode an RFC 7541 §5.1 integer at ``data[pos]``; (value, position after it)."""
    limit = (1 << prefix_bits) - 1
    value = data[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        if pos >= len(data):
            raise h2.exceptions.ProtocolError("HPACK: truncated integer")
        byte = data[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos
        if shift > 28:
            raise h2.exceptions.ProtocolError("HPACK: integer too large")
