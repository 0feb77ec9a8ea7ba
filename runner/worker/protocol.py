"""Framed JSON messages: the byte format of every channel in wire.py.

Each message is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON,
always an object, never NaN or Infinity (the result must be valid JSON wherever it goes).
A message may carry binary attachments (the files handed to a run and the files it made):
its BLOBS entry, a list of bytes, travels after the JSON text as raw bytes, the JSON
holding only their sizes. A frame with attachments is the JSON text, one newline (which
JSON text as written here never holds: its strings escape it), then the attachments one
after another; their sizes must add up to exactly what follows the newline. So a file
crosses each hop as one copy of its bytes, never as base64 inside JSON that every hop
would parse and write again. `FrameReader` is the one decoder: the host reading a worker,
the supervisor reading a child's reports, and blocking reads all go through it. Stdlib
only: this file is copied into sandbox images as part of the worker program.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import struct
from typing import Any

HEADER = struct.Struct(">I")
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
BLOBS = "blobs"  # a message's binary attachments (a list of bytes), carried after its JSON


# A pipe holds 64 KB unless asked for more; an unprivileged process may ask for up to
# /proc/sys/fs/pipe-max-size (1 MB by default), within its user's allowance.
PIPE_DEFAULT_BYTES = 1 << 16
PIPE_MOST_BYTES = 1 << 20
_F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def make_room(fd: int, needed: int) -> None:
    """A frame of `needed` more bytes is coming through the pipe `fd`: let the pipe hold
    it (up to PIPE_MOST_BYTES), so that it crosses in a few large writes rather than one
    wake-up of both sides per 64 KB. Past the user's allowance the pipe stays as it is."""
    if needed <= PIPE_DEFAULT_BYTES:
        return
    wanted = min(needed, PIPE_MOST_BYTES)
    with contextlib.suppress(OSError):
        if fcntl.fcntl(fd, _F_GETPIPE_SZ) < wanted:
            fcntl.fcntl(fd, _F_SETPIPE_SZ, wanted)


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed frame."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class FrameTooLarge(ValueError):
    """A message larger than the channel carries."""


def encode(message: dict[str, Any], limit: int = MAX_MESSAGE_BYTES) -> bytes:
    """One frame: the header, the JSON text, then the attachments (if any), joined in one
    copy. TypeError, ValueError or RecursionError for a message JSON cannot carry;
    FrameTooLarge past `limit` bytes."""
    blobs = message.get(BLOBS)
    if blobs:
        message = {**message, BLOBS: [len(blob) for blob in blobs]}
    # errors="replace": text from user code may hold lone surrogates, which UTF-8 cannot
    # carry; they arrive as "?" rather than failing the whole message.
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode("utf-8", errors="replace")
    parts = [text, b"\n", *blobs] if blobs else [text]
    size = sum(len(part) for part in parts)
    if size > limit:
        raise FrameTooLarge(f"a message of {size} bytes exceeds the {limit} this channel carries")
    return b"".join([HEADER.pack(size), *parts])


def decode(body: bytes | bytearray) -> dict[str, Any]:
    """The message in one frame's body, its attachments (BLOBS) as views of `body`
    (nothing copied); ProtocolError for anything but a JSON object with exactly the
    attachments it names."""
    view = memoryview(body)
    cut = body.find(b"\n")
    try:
        message = json.loads(str(view if cut < 0 else view[:cut], "utf-8"),
                             parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError, MemoryError) as exc:
        raise ProtocolError(f"frame is not UTF-8 JSON: {type(exc).__name__}: "
                            f"{str(exc)[:200]}") from None
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object")
    sizes = message.get(BLOBS)
    if cut < 0:
        if sizes is not None:
            raise ProtocolError("frame names attachments it does not carry")
        return message
    if not (isinstance(sizes, list) and all(type(size) is int and size >= 0 for size in sizes)
            and sum(sizes) == len(view) - cut - 1):
        raise ProtocolError("frame's attachments are not the sizes it names")
    start = cut + 1
    blobs = []
    for size in sizes:
        blobs.append(view[start:start + size])
        start += size
    message[BLOBS] = blobs
    return message


def write_message(fd: int, message: dict[str, Any]) -> None:
    """Write one frame; ProtocolError for a message the channel cannot carry."""
    try:
        data = memoryview(encode(message))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"message cannot be sent: {exc}") from None
    make_room(fd, len(data))
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
        with memoryview(self._buffer) as view:
            body = bytes(view[HEADER.size:end])  # the one copy out of the stream's buffer
        del self._buffer[:end]
        return decode(body)


def read_message(fd: int) -> dict[str, Any] | None:
    """Blocking read of the next message, or None at a clean end of file. The body is
    read straight into one buffer of its size (a request may carry megabytes of files)."""
    header = _read_exactly(fd, HEADER.size, at_start=True)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"frame of {size} bytes exceeds {MAX_MESSAGE_BYTES}")
    body = bytearray(size)
    with memoryview(body) as view:
        done = 0
        while done < size:
            count = os.readv(fd, [view[done:]])
            if count == 0:
                raise ProtocolError("stream ended in the middle of a frame")
            done += count
    return decode(body)


def _read_exactly(fd: int, size: int, *, at_start: bool) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            if at_start and not data:
                return None
            raise ProtocolError("stream ended in the middle of a frame")
        data += chunk
    return data
