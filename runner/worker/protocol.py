"""Framed JSON messages between the host and a worker process.

Each message is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON.
Stdlib only: this file is copied into sandbox images as part of the worker program.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

HEADER = struct.Struct(">I")
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed frame."""


def encode(message: dict[str, Any]) -> bytes:
    # errors="replace": text from user code may hold lone surrogates, which UTF-8 cannot
    # carry; they arrive as "?" rather than failing the whole message.
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", errors="replace")
    if len(body) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(body)} bytes exceeds {MAX_MESSAGE_BYTES}")
    return HEADER.pack(len(body)) + body


def write_message(fd: int, message: dict[str, Any]) -> None:
    data = memoryview(encode(message))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def read_exact(fd: int, size: int) -> bytes | None:
    """Read exactly `size` bytes; None on a clean end of file before the first byte."""
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            if remaining == size:
                return None
            raise ProtocolError("stream ended in the middle of a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_message(fd: int) -> dict[str, Any] | None:
    """The next message, or None at end of file."""
    header = read_exact(fd, HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"frame of {size} bytes exceeds {MAX_MESSAGE_BYTES}")
    body = read_exact(fd, size)
    if body is None:
        raise ProtocolError("stream ended after a frame header")
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"frame is not UTF-8 JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object")
    return message
