"""What has to be settled before `ray` is imported, and a quick look at a cluster's address.

Ray reads its authentication settings (RAY_AUTH_MODE, RAY_AUTH_TOKEN) when it is imported:
a private local Ray's token set later is not seen by the driver, which then cannot talk to
the Ray it started. So the ray backend's loader (`registry`) calls `prepare` with the
address the caller gave, then imports the backend.

`reachable` asks whether anything listens at a cluster's address before Ray is asked to
connect: Ray itself retries a dead address for minutes (a GCS address) or half a minute
(a `ray://` one); a refused or silent port is reported in seconds instead, naming it.
"""

from __future__ import annotations

import os
import secrets
import socket

from ..errors import BackendUnavailableError

PROBE_TIMEOUT_S = 5.0
_FIX = ("start the cluster (`ray start --head`), check the address (host:port or "
        "ray://host:10001), or leave the address out for a private local Ray")


def target(address: str | None) -> str:
    """What Ray will be asked to connect to: the address, RAY_ADDRESS, or "local"."""
    return address or os.environ.get("RAY_ADDRESS") or "local"


def prepare(address: str | None) -> None:
    """Set the environment Ray reads at import (and its processes inherit) for `address`."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    chosen = target(address)
    if chosen == "local":
        _private_token()
    if chosen == "local" or on_loopback(chosen):
        # Multi-node clusters off: Ray then resolves this node to 127.0.0.1 and binds there.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"


def _private_token() -> None:
    """A private local Ray takes tokens from this process only: Ray's default for a local
    cluster is token authentication with a token it writes to ~/.ray, which every later
    `ray start` on the machine would then pick up; an explicit RAY_AUTH_* setting wins."""
    if any(key in os.environ for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


def on_loopback(address: str) -> bool:
    """Whether `address` (host:port, or ray://host:port) names this machine's loopback."""
    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    return host == "localhost" or host == "::1" or host.startswith("127.")


def reachable(address: str) -> None:
    """A BackendUnavailableError, naming `address`, unless something accepts a connection
    there within a few seconds ("local" and "auto" are Ray's to find)."""
    if address in ("local", "auto"):
        return
    host, _, port_text = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise BackendUnavailableError(f"{address!r} is not a Ray cluster address", fix=_FIX) from None
    try:
        with socket.create_connection((host or "127.0.0.1", port), timeout=PROBE_TIMEOUT_S):
            return
    except OSError as exc:
        reason = f"no answer within {PROBE_TIMEOUT_S:g} s" if isinstance(
            exc, TimeoutError) else (exc.strerror or str(exc))
        raise BackendUnavailableError(f"no Ray cluster at {address} ({reason})", fix=_FIX) from None
