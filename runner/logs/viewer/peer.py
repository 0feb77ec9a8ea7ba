"""Who is on the other end of a loopback connection: the user that made its socket.

A viewer (or `runner mcp --http`) on loopback needs no token, but loopback is every local
user's: on a shared machine another user could read the whole log, files included. The
kernel's socket table (/proc/net/tcp and tcp6) says which user made each socket; the
guard lets through the user who started the server, and root, and turns everyone else
away. A connection the table does not show (a non-Linux kernel) is turned away too.
"""

from __future__ import annotations

import os

__all__ = ["peer_uid", "same_user"]

_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
_ESTABLISHED = "01"


def peer_uid(client_port: int, server_port: int) -> int | None:
    """The uid of the process that made the socket of the connection from `client_port`
    to `server_port` on this machine (None when the table has no such connection, or it
    is not one user's)."""
    found: set[int] = set()
    for table in _TABLES:
        try:
            with open(table, encoding="ascii") as lines:
                next(lines, None)  # the header
                for line in lines:
                    fields = line.split()
                    if len(fields) < 8 or fields[3] != _ESTABLISHED:
                        continue
                    local, remote = fields[1], fields[2]
                    if _port(local) == client_port and _port(remote) == server_port:
                        found.add(int(fields[7]))
        except (OSError, ValueError):
            continue
    return found.pop() if len(found) == 1 else None


def same_user(client_port: int, server_port: int) -> bool:
    """Whether the connection is this process's user's (or root's)."""
    uid = peer_uid(client_port, server_port)
    return uid is not None and uid in (os.geteuid(), 0)


def _port(address: str) -> int:
    return int(address.rpartition(":")[2], 16)
