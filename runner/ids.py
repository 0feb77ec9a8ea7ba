"""Sortable unique ids for executions and agent runs.

ULID layout: 48 bits of milliseconds since the epoch, then 80 bits that are random
for the first id of a millisecond and incremented for the next ones, so ids sort by
creation time (also within one process and one millisecond) and never collide.
"""

from __future__ import annotations

import secrets
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32
_lock = threading.Lock()
_last_ms = -1
_last_random = 0


def new_id() -> str:
    """A 26-character id that sorts by creation time."""
    global _last_ms, _last_random
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms <= _last_ms:
            now_ms = _last_ms
            _last_random = (_last_random + 1) & ((1 << 80) - 1)
        else:
            _last_ms = now_ms
            _last_random = secrets.randbits(79)  # headroom for increments
        value = (now_ms << 80) | _last_random
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))
