"""A local web viewer of the log: `runner logs serve`.

Server-rendered pages (Starlette, Jinja2 with autoescaping, Pygments on the server), no
JavaScript, nothing loaded from elsewhere, served by uvicorn on 127.0.0.1 unless told
otherwise; the database is opened read-only. `app.py` says how it is protected, `pages.py`
how to add a page.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Callable
from pathlib import Path

from ...errors import ConfigurationError
from .app import create_app, is_loopback

__all__ = ["bind", "create_app", "is_loopback", "serve"]

DEFAULT_PORT = 8765


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0 picks a free one); a clear error when the address is taken."""
    try:
        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are
        # TCP, and without it a response written in two parts waits for a delayed ACK.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as exc:
        raise ConfigurationError(f"cannot listen on {host}:{port} ({exc.strerror or exc})",
                                 fix="pick another --port (0 picks a free one), or another --host"
                                 ) from exc
    return sock


def serve(db_path: Path | str, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          announce: Callable[[str], None] = print) -> None:
    """Serve the viewer until interrupted. Off loopback, a token is made, announced once
    (in the address), and required on every request."""
    import uvicorn

    token = None if is_loopback(host) else secrets.token_urlsafe(24)
    app = create_app(db_path, token=token)
    sock = bind(host, port)
    actual_port = sock.getsockname()[1]
    shown_host = f"[{host.strip('[]')}]" if ":" in host else host
    url = f"http://{shown_host}:{actual_port}/"
    if token is None:
        announce(f"runner logs viewer: {url} (read-only; Ctrl-C stops it)")
    else:
        announce(f"runner logs viewer: {url}?token={token}")
        announce(f"it listens on {host}, not loopback: every request needs this token (shown "
                 "once; a new one is made each start). Anyone who can reach this address and "
                 "has the token can read the whole log. Ctrl-C stops it.")
    config = uvicorn.Config(app, log_level="warning", server_header=False, date_header=False,
                            proxy_headers=False, access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
