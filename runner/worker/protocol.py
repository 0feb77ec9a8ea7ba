"""Framed JSON messages: the byte format of every channel in wire.py.

Each message is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON,
always an object, never NaN or Infinity (the result must be valid JSON wherever it goes).
`FrameReader` is the one decoder: the host reading a worker, the supervisor reading a
child's reports, and blocking reads all go through it. Stdlib only: this file is copied
into sandbox images as part of the worker program.
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


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def encode(message: dict[str, Any]) -> bytes:
    """One frame. Raises ProtocolError for a message JSON cannot carry (NaN, too large)."""
    try:
        # errors="replace": text from user code may hold lone surrogates, which UTF-8
        # cannot carry; they arrive as "?" rather than failing the whole message.
        body = json.dumps(message, ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False).encode("utf-8", errors="replace")
    except (TypeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"message cannot be sent as JSON: {exc}") from None
    if len(body) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(body)} bytes exceeds {MAX_MESSAGE_BYTES}")
    return HEADER.pack(len(body)) + body


def decode(body: bytes) -> dict[str, Any]:
    """The message in one frame's body; ProtocolError for anything but a JSON object."""
    try:
        message = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError, MemoryError) as exc:
        raise ProtocolError(f"frame is not UTF-8 JSON: {type(exc).__name__}: "
                            f"{str(exc)[:200]}") from None
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object")
    return message


def write_message(fd: int, message: dict[str, Any]) -> None:
    data = memoryview(encode(message))
    while data:
        written = os.write(fd, data)
        data = data[written:]


class FrameReader:
    """Cuts a byte stream into messages, however the bytes arrive."""

    def __init__(self, limit: int = MAX_MESSAGE_BYTES) -> None:
        self.limit = limit
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    @property
    def pending(self) -> int:
        """Bytes received that do not yet make a whole frame."""
        return len(self._buffer)

    def needed(self) -> int:
        """How many more bytes the frame being read needs (at least 1)."""
        if len(self._buffer) < HEADER.size:
            return HEADER.size - len(self._buffer)
        (size,) = HEADER.unpack_from(self._buffer)
        return max(1, HEADER.size + int(size) - len(self._buffer))

    def next(self) -> dict[str, Any] | None:
        """The next complete message, or None until more bytes arrive."""
        if len(self._buffer) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(self._buffer)
        if size > self.limit:
            raise ProtocolError(f"frame of {size} bytes exceeds {self.limit}")
        end = HEADER.size + size
        if len(self._buffer) < end:
            return None
        body = bytes(self._buffer[HEADER.size:end])
        del self._buffer[:end]
        return decode(body)


def read_message(fd: int) -> dict[str, Any] | None:
    """Blocking read of the next message, or None at a clean end of file."""
    reader = FrameReader()
    while True:
        message = reader.next()
        if message is not None:
            return message
        chunk = os.read(fd, min(reader.needed(), 1 << 20))
        if not chunk:
            if reader.pending == 0:
                return None
            raise ProtocolError("stream ended in the middle of a frame")
        reader.feed(chunk)
