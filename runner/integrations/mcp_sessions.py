"""The MCP server's sessions: held under unguessable handles, closed when the client
connection that opened them ends (where the protocol has one) or when idle too long.

A session holds a sandbox process, so one that outlives its client is a leak: a client
that opened sessions and went away used to fill the server's table until every client
was refused. Here:

- a session's handle (`session_id` to the client) is a random token given only to the
  client that opened it, never the session's id in the log (which the server's
  resources show), so no other client can find or guess it: holding it is owning it;
- a session opened over a connection that lasts (an MCP handshake: older clients over
  stdio or streamable HTTP with a session) belongs to it: `list_sessions` shows that
  connection's sessions, and its teardown calls `close_owner`. The current protocol is
  one exchange per request, with no connection to end: those clients keep the handles
  they are given, and the idle rule frees what they leave;
- a sweeper thread closes sessions with no block for `idle_s`; a call that names one is
  told so, with the fix.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from ..errors import ConfigurationError, NotFoundError
from ..session import Session

__all__ = ["DEFAULT_IDLE_S", "MAX_SESSIONS", "OwnedSessions"]

MAX_SESSIONS = 16  # open at once, over all clients (stdlib and runner only: the CLI reads these)
DEFAULT_IDLE_S = 900.0  # a session nobody used for 15 minutes is closed
_REMEMBERED = 256  # closed-for-idleness ids remembered, to say why they are gone


@dataclass
class _Held:
    session: Session
    owner: str | None  # the connection that opened it, if one lasts
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0  # blocks running now: a session in use is never idle


class OwnedSessions:
    """The open sessions by id, each with its owner; thread-safe."""

    def __init__(self, *, max_sessions: int, idle_s: float = DEFAULT_IDLE_S) -> None:
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self._held: dict[str, _Held] = {}
        self._expired: OrderedDict[str, None] = OrderedDict()  # handles closed for idleness
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

    def add(self, owner: str | None, session: Session) -> str:
        """Hold `session` (for `owner`, if any); its handle. ConfigurationError when the
        table is full (the session is closed then)."""
        with self._lock:
            if len(self._held) >= self.max_sessions:
                full = len(self._held)
            else:
                session_id = secrets.token_urlsafe(18)
                self._held[session_id] = _Held(session, owner)
                self._start_sweeper()
                return session_id
        session.close()
        raise ConfigurationError(f"{full} sessions are open, the most this server keeps",
                                 fix="close one of yours with close_session (list_sessions "
                                     "shows them); idle sessions close by themselves")

    def use(self, session_id: str) -> Session:
        """The session under this handle, marked busy until `done`; NotFoundError otherwise."""
        with self._lock:
            held = self._held.get(session_id)
            if held is None:
                raise self._unknown(session_id)
            held.busy += 1
            held.last_used = time.monotonic()
            return held.session

    def done(self, session_id: str) -> None:
        with self._lock:
            held = self._held.get(session_id)
            if held is not None:
                held.busy = max(0, held.busy - 1)
                held.last_used = time.monotonic()

    def close(self, session_id: str) -> Session:
        """Close the session under this handle; the closed session (for its counts)."""
        with self._lock:
            held = self._held.pop(session_id, None)
            if held is None:
                raise self._unknown(session_id)
        held.session.close()
        return held.session

    def listed(self, owner: str | None) -> list[dict[str, object]]:
        """The owner's open sessions, oldest first (none without an owner)."""
        if owner is None:
            return []
        now = time.monotonic()
        with self._lock:
            mine = [(session_id, held) for session_id, held in self._held.items()
                    if held.owner == owner]
        return [{"session_id": session_id, "blocks": held.session.blocks,
                 "packages": list(held.session.packages),
                 "limits": held.session.limits.model_dump(),
                 "idle_s": 0.0 if held.busy else round(now - held.last_used, 1),
                 "closes_when_idle_for_s": self.idle_s} for session_id, held in mine]

    def close_owner(self, owner: str) -> int:
        """Close every session of `owner` (its connection ended); how many."""
        with self._lock:
            gone = [session_id for session_id, held in self._held.items() if held.owner == owner]
            closing = [self._held.pop(session_id).session for session_id in gone]
        for session in closing:
            session.close()
        return len(closing)

    def close_all(self) -> None:
        self._stop.set()
        with self._lock:
            closing = [held.session for held in self._held.values()]
            self._held.clear()
        for session in closing:
            session.close()

    def sweep(self) -> int:
        """Close the sessions idle for `idle_s` or more; how many."""
        now = time.monotonic()
        with self._lock:
            stale = [session_id for session_id, held in self._held.items()
                     if not held.busy and now - held.last_used >= self.idle_s]
            closing = []
            for session_id in stale:
                held = self._held.pop(session_id)
                closing.append(held.session)
                self._expired[session_id] = None
                while len(self._expired) > _REMEMBERED:
                    self._expired.popitem(last=False)
        for session in closing:
            session.close()
        return len(closing)

    def _start_sweeper(self) -> None:
        # (under the lock) one daemon thread for the server's life, started with the
        # first session
        if self._sweeper is not None:
            return
        every = max(0.05, min(30.0, self.idle_s / 4))

        def loop() -> None:
            while not self._stop.wait(every):
                self.sweep()

        self._sweeper = threading.Thread(target=loop, name="runner-mcp-idle-sessions", daemon=True)
        self._sweeper.start()

    def _unknown(self, session_id: str) -> NotFoundError:
        if session_id in self._expired:
            return NotFoundError(f"session {session_id!r} was closed after {self.idle_s:g} s "
                                 "without a block, and its state with it",
                                 fix="open_session gives a new one; run the blocks it needs again")
        return NotFoundError(f"no open session {session_id[:80]!r}",
                             fix="open_session gives one; list_sessions shows yours")
