"""A Ray cluster of several nodes on this machine's loopback interface.

What the ray backend's tests and benchmark run on: a head node and worker nodes, each a
`ray start --block` in a session of its own, so that stopping the cluster ends exactly
its processes (by session id: never `ray stop`, which ends every Ray process of the user
on the machine) and a test can kill one node's raylet as a lost machine would.

Everything binds to 127.0.0.1 and talks to 127.0.0.1: Ray resolves "127.0.0.1" to the
machine's network address unless multi-node clusters are switched off, and with them off
`ray start` refuses to add a worker node. So each node starts through a small launcher
that keeps its address on loopback, and passes the switch on to the processes it starts.
Usage statistics are off and every file lives under the given temporary directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ..errors import BackendUnavailableError

LOOPBACK = "127.0.0.1"
# Run as `python -c LAUNCHER start ...`: the `ray` command, with its node address kept on
# loopback (the resolution is patched in this process; the environment switch reaches
# every Ray process the node starts).
LAUNCHER = """
import sys
from ray._private import ray_constants, services
ray_constants.ENABLE_RAY_CLUSTER = True  # lets `ray start` add a worker node
services.resolve_ip_for_localhost = lambda host: host
services.get_node_ip_address = lambda address=None: "127.0.0.1"
from ray.scripts.scripts import main
sys.exit(main())
"""
START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def _has_client() -> bool:
    import importlib.util

    return importlib.util.find_spec("grpc") is not None  # what ray[client] adds


def _session_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return int(fields[3])  # after the name: state, ppid, pgrp, session
    except (OSError, IndexError, ValueError):
        return None


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().strip()
    except OSError:
        return ""


@dataclass
class LocalNode:
    """One node: the `ray start --block` process leads a session holding the node's processes."""

    process: subprocess.Popen[bytes]
    log: Path

    def pids(self) -> list[int]:
        leader = self.process.pid
        return [pid for pid in (int(p) for p in os.listdir("/proc") if p.isdigit())
                if _session_of(pid) == leader]

    def node_id(self) -> str:
        """This node's Ray id (asked of the cluster this process is connected to)."""
        import ray

        pid = self.raylet_pid()
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            args = handle.read().decode(errors="replace").split("\0")
        socket_name = next(a.split("=", 1)[1] for a in args if a.startswith("--raylet_socket_name="))
        nodes = ray.nodes()  # type: ignore[no-untyped-call]
        return next(str(n["NodeID"]) for n in nodes if n.get("RayletSocketName") == socket_name)

    def raylet_pid(self) -> int | None:
        return next((pid for pid in self.pids() if _command(pid) == "raylet"), None)

    def kill(self) -> None:
        """What a lost machine looks like: its raylet killed, and with it at once every other
        process of the node (the actors' workers too, which would otherwise notice the lost
        raylet only a few seconds later and finish what they were running meanwhile)."""
        pid = self.raylet_pid()
        if pid is None:
            raise RuntimeError("this node has no raylet running")
        os.kill(pid, signal.SIGKILL)
        self.stop()

    def stop(self) -> None:
        for pid in [*self.pids(), self.process.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


class LocalCluster:
    """`with LocalCluster(tmp, nodes=2) as cluster:` then, in a process whose environment has
    `cluster.driver_env`, `Sandbox(backend="ray", ray_address=cluster.address)`."""

    def __init__(self, temp_dir: Path | str, *, nodes: int = 2, cpus_per_node: int = 1,
                 env: dict[str, str] | None = None) -> None:
        self.temp_dir = Path(temp_dir)
        self.cpus_per_node = cpus_per_node
        self.port = free_port()
        self.address = f"{LOOPBACK}:{self.port}"
        self.client_port = free_port()
        self.client_address = f"ray://{LOOPBACK}:{self.client_port}"
        # Token authentication with a token of this cluster's own: only processes given
        # `driver_env` can join or use it, and nothing is written to ~/.ray.
        self.driver_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", **self.driver_env, **(env or {})}
        self.nodes: list[LocalNode] = []
        try:
            self._start_node(head=True)
            for _ in range(nodes - 1):
                self.add_node()
        except BaseException:
            self.stop()
            raise

    def add_node(self) -> LocalNode:
        return self._start_node(head=False)

    def _start_node(self, *, head: bool) -> LocalNode:
        args = ["start", "--block", "--node-ip-address", LOOPBACK, "--num-cpus", str(self.cpus_per_node),
                "--disable-usage-stats", "--dashboard-agent-listen-port", str(free_port())]
        if head:
            args += ["--head", "--port", str(self.port), "--include-dashboard", "false",
                     "--temp-dir", str(self.temp_dir)]
            if _has_client():  # the Ray Client server, for ray:// addresses
                args += ["--ray-client-server-port", str(self.client_port)]
        else:
            args += ["--address", self.address]
        log = self.temp_dir / f"node-{len(self.nodes)}.log"
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            process = subprocess.Popen([sys.executable, "-c", LAUNCHER, *args], stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=self.env, start_new_session=True)
        node = LocalNode(process, log)
        self.nodes.append(node)
        deadline = time.monotonic() + START_TIMEOUT_S
        while b"Ray runtime started" not in log.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log.read_bytes()[-3000:].decode(errors="replace")
                raise BackendUnavailableError(f"a local Ray node did not start; its output:\n{tail}",
                                              fix="check that ray is installed (pip install 'runner-sandbox[ray]')")
            time.sleep(0.1)
        return node

    def stop(self) -> None:
        """End every process of every node (workers first, the head last)."""
        for node in reversed(self.nodes):
            node.stop()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
