"""The kernel layer under the restricted tier: once a child confines itself with Landlock,
even code holding the real builtins can neither read nor write files outside the Python
installation, nor run programs, nor connect, nor signal the worker."""

from __future__ import annotations

import json
import os
import sys

import pytest

from runner.worker import audit, landlock
from runner.worker.confine import confine

pytestmark = pytest.mark.skipif(not landlock.available(), reason="kernel without Landlock")


def _in_confined_child(tmp_path) -> dict[str, str]:
    """Confine a forked child, then try everything with the real builtins."""
    import socket

    def body(parent):
        return {
            "read /etc/hostname": _attempt(lambda: open("/etc/hostname").read()),
            "write tmp": _attempt(lambda: open(tmp_path / "escaped", "w").write("x")),
            "os.system": _attempt(lambda: os.system(f"touch {tmp_path / 'ran'}")),
            "signal parent": _attempt(lambda: os.kill(parent, 0)),
            "connect": _attempt(lambda: socket.create_connection(("127.0.0.1", 9), timeout=1)),
            "read python stdlib": _attempt(lambda: len(open(os.__file__).read()) > 0),
        }

    outcome = _confined_run(body)  # defined with the review tests below
    return {**outcome, "confined": str(outcome["confined"])}


def test_a_confined_child_cannot_touch_the_host_even_with_real_builtins(tmp_path):
    outcome = _in_confined_child(tmp_path)
    assert outcome["confined"] == "True", outcome
    assert outcome["read /etc/hostname"].startswith("refused"), outcome
    assert outcome["write tmp"].startswith("refused"), outcome
    assert outcome["signal parent"].startswith("refused"), outcome
    assert outcome["connect"].startswith("refused"), outcome
    # os.system cannot exec /bin/sh: it returns the shell's "command not found" status
    assert not (tmp_path / "ran").exists() and not (tmp_path / "escaped").exists()
    assert outcome["read python stdlib"] == "allowed: True", outcome
    assert sys.prefix  # the parent (this test process) is untouched:
    assert open("/etc/hostname").read() is not None


# ---------------------------------------------------------------------------------------
# Review 4 (kernel layer): what a confined child holding the real builtins can still do.
# Each test fails until the gap is closed. They confine a forked child exactly as
# RestrictedExecutor.execute does (or run it through the worker's own fork/kill path).
# ---------------------------------------------------------------------------------------

import ctypes
import errno
import signal
import socket
import struct
import threading
import time

from runner import Limits, Sandbox, Status
from runner.backends.restricted import TEST_LAYERS_VARIABLE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _confined_run(body, *, abi: int | None = None) -> dict:
    """Fork, confine like a restricted child (optionally as on a kernel with Landlock ABI
    `abi`: the ruleset is then built exactly as restrict() builds it there), run `body`
    with the real builtins and return what it reported."""
    read_r, write_w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_r)
            if abi is not None:
                landlock.abi_version = lambda: abi
            outcome = {"confined": confine(audit.readable_roots())}
            try:
                outcome.update(body(parent))
            except BaseException as exc:  # noqa: BLE001 - reported, not raised, in the child
                outcome["body_error"] = f"{type(exc).__name__}: {exc}"
            os.write(write_w, json.dumps(outcome, default=repr).encode())
        finally:
            os._exit(0)
    os.close(write_w)
    data = b""
    while chunk := os.read(read_r, 65536):
        data += chunk
    os.close(read_r)
    os.waitpid(pid, 0)
    return json.loads(data)


def _attempt(action) -> str:
    try:
        return f"allowed: {action()!r}"[:120]
    except OSError as exc:
        return f"refused: {type(exc).__name__} {exc}"


def test_a_confined_child_cannot_connect_to_unix_path_sockets(tmp_path):
    # Landlock (ABI <= 7) does not mediate connect() on a path socket. The Docker daemon's
    # socket (/var/run/docker.sock: root on the host for anyone who may use the docker tier),
    # ssh-agent, D-Bus and systemd sockets are all reachable this way.
    path = str(tmp_path / "daemon.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    server.settimeout(5)

    def body(_parent):
        def connect():
            client = socket.socket(socket.AF_UNIX)
            client.connect(path)
            client.sendall(b"GET /containers/json HTTP/1.0\r\n\r\n")
            return "connected"
        return {"unix connect": _attempt(connect)}

    received: list[bytes] = []

    def serve():
        try:
            conn, _ = server.accept()
            received.append(conn.recv(100))
        except OSError:
            pass

    thread = threading.Thread(target=serve)
    thread.start()
    outcome = _confined_run(body)
    server.close()
    thread.join()
    assert outcome["confined"] is True, outcome
    assert outcome["unix connect"].startswith("refused"), outcome
    assert received == [], received


def _tcp_listener():
    server = socket.socket()
    server.setsockopt(socket.IPPROTO_TCP, 23, 5)  # TCP_FASTOPEN: accept data in the SYN
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(3)
    received: list[bytes] = []

    def serve():
        try:
            while True:
                conn, _ = server.accept()
                conn.settimeout(1)
                try:
                    received.append(conn.recv(100))
                except OSError:
                    received.append(b"<connected>")
        except OSError:
            pass

    thread = threading.Thread(target=serve)
    thread.start()
    return server, thread, received


def test_tcp_fast_open_and_mptcp_do_not_get_around_the_connect_rule():
    # LANDLOCK_ACCESS_NET_CONNECT_TCP hooks connect(); sendto(MSG_FASTOPEN) connects
    # without it, and an IPPROTO_MPTCP stream socket is not handled either.
    server, thread, received = _tcp_listener()
    port = server.getsockname()[1]

    def body(_parent):
        def fast_open():
            s = socket.socket()
            s.sendto(b"fastopen", socket.MSG_FASTOPEN, ("127.0.0.1", port))
            time.sleep(0.3)
            return s.getpeername()

        def mptcp():
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)  # IPPROTO_MPTCP
            s.settimeout(1)
            s.connect(("127.0.0.1", port))
            s.sendall(b"mptcp")
            time.sleep(0.3)
            return s.getpeername()

        return {"fast open": _attempt(fast_open), "mptcp": _attempt(mptcp)}

    outcome = _confined_run(body)
    time.sleep(0.5)
    server.close()
    thread.join()
    assert outcome["confined"] is True, outcome
    assert outcome["fast open"].startswith("refused"), outcome
    assert outcome["mptcp"].startswith("refused"), outcome
    assert received == [], received


def test_a_confined_child_cannot_send_udp():
    # The design says the sandbox never gets a network; Landlock only scopes TCP, so UDP
    # (DNS exfiltration, anything on the LAN) is open.
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(1)
    port = receiver.getsockname()[1]

    def body(_parent):
        return {"udp": _attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                                .sendto(b"exfiltrated", ("127.0.0.1", port)))}

    outcome = _confined_run(body)
    try:
        got = receiver.recv(100)
    except OSError:
        got = b""
    receiver.close()
    assert outcome["confined"] is True, outcome
    assert outcome["udp"].startswith("refused"), outcome
    assert got == b"", got


def test_a_confined_child_keeps_no_host_privileges():
    # Run by root, the child keeps every capability: sethostname (here: to the same name,
    # harmless) changes the host's name, reboot() passes its CAP_SYS_BOOT check (EINVAL for
    # the bad magic numbers, not EPERM), raw and packet sockets open.
    def body(_parent):
        reboot = _libc.syscall(169, 0, 0, 0, 0)  # SYS_reboot with invalid magic: no effect
        reboot_errno = errno.errorcode.get(ctypes.get_errno())
        return {"sethostname": _attempt(lambda: socket.sethostname(socket.gethostname())),
                "reboot": f"{reboot} {reboot_errno}",
                "packet socket": _attempt(lambda: socket.socket(socket.AF_PACKET,
                                                                socket.SOCK_RAW, 0).close())}

    outcome = _confined_run(body)
    assert outcome["confined"] is True, outcome
    assert outcome["sethostname"].startswith("refused"), outcome
    assert outcome["reboot"] == "-1 EPERM", outcome
    assert outcome["packet socket"].startswith("refused"), outcome


def test_a_confined_child_cannot_execute_code_from_a_memfd():
    # "No exec": memfd files live on an internal mount Landlock does not check, so
    # execveat(memfd, "", AT_EMPTY_PATH) runs any static program the child writes.
    code = bytes.fromhex("b83c000000bf2a0000000f05")  # exit(42)
    ehdr = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + b"\0" * 9, 2, 62, 1,
                       0x400078, 64, 0, 0, 64, 56, 1, 0, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, 0x400000, 0x400000, 120 + len(code),
                       120 + len(code), 0x1000)

    def body(_parent):
        fd = os.memfd_create("payload", 0)
        os.write(fd, ehdr + phdr + code)
        pid = os.fork()
        if pid == 0:
            _libc.syscall(322, fd, b"", None, None, 0x1000)  # execveat(..., AT_EMPTY_PATH)
            os._exit(7)
        return {"exit code": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}

    outcome = _confined_run(body)
    assert outcome["confined"] is True, outcome
    # Refused at memfd_create/fork (seccomp), or at least the program never ran.
    assert outcome.get("exit code") != 42, outcome
    assert "exit code" in outcome or outcome["body_error"].startswith("PermissionError"), outcome


@pytest.mark.parametrize("abi", [1, 2, 3, 4, 5])
def test_confinement_on_older_kernels_still_blocks_signals_and_tcp(abi):
    # Signal scoping needs ABI 6 (Linux 6.12) and TCP rules ABI 4 (6.7): on Ubuntu 22.04
    # (5.15, ABI 1) or 24.04 (6.8, ABI 4) restrict() reports True, yet the child may kill
    # the worker (or, run by root, anything on the host) and connect anywhere.
    server, thread, received = _tcp_listener()
    port = server.getsockname()[1]

    def body(parent):
        return {"signal parent": _attempt(lambda: os.kill(parent, 0)),
                "connect": _attempt(lambda: socket.create_connection(("127.0.0.1", port),
                                                                     timeout=1).close())}

    outcome = _confined_run(body, abi=abi)
    server.close()
    thread.join()
    if outcome["confined"]:  # a layer that reports itself in place must keep its promises
        assert outcome["signal parent"].startswith("refused"), outcome
        assert outcome["connect"].startswith("refused"), outcome


_LIMITS = Limits(timeout_s=10, memory_mb=256, max_open_files=64, max_file_size_mb=1,
                 max_processes=8, max_output_bytes=65536)


def _worker_run(tmp_path, code: str) -> dict:
    """Run `code` through the real worker with the real builtins and only the kernel
    layer (the restricted tier after an escape from the policy and the audit hook)."""
    os.environ[TEST_LAYERS_VARIABLE] = "1"
    with Sandbox(backend="restricted", layers="kernel", log_store=False) as sb:
        r = sb.run("CONFINED = True\n" + code + "\nimport json\nprint(json.dumps(RESULT))",
                   limits=_LIMITS)
    value = json.loads(r.stdout.splitlines()[-1]) if r.status == Status.OK else None
    return {"status": r.status, "error": r.error, "return_value": value}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is as good as gone
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_no_process_started_by_a_run_outlives_it(tmp_path):
    # The supervisor kills the child's process group; a grandchild that called setsid() is not
    # in it, has no parent-death signal, and keeps running on the host after the run,
    # still able to use everything the tests above show open (UDP, the Docker socket...).
    code = """
import os, time
r, w = os.pipe()
try:
    first = os.fork()
except OSError:  # refused outright: nothing can outlive the run
    first = None
    os.write(w, b"0")
if first == 0:
    os.setsid()
    pid = os.fork()
    if pid == 0:
        for fd in range(256):
            try: os.close(fd)
            except OSError: pass
        time.sleep(30)
        os._exit(0)
    os.write(w, str(pid).encode())
    os._exit(0)
os.close(w)
RESULT = {"confined": CONFINED, "escapee": int(os.read(r, 32))}
"""
    result = _worker_run(tmp_path, code)
    value = result.get("return_value") or {}
    escapee = value.get("escapee")
    assert value.get("confined") is True, result
    if escapee == 0:
        return  # the first fork was refused
    time.sleep(0.5)
    try:
        assert not _alive(escapee), f"process {escapee} outlived its run"
    finally:
        if _alive(escapee):
            os.kill(escapee, signal.SIGKILL)


def test_a_run_cannot_start_more_processes_than_its_limit(tmp_path):
    # RLIMIT_NPROC is the only process limit on the host tier, and the kernel does not
    # apply it to root: run by root, a run forks without bound (a fork bomb, each process
    # with its own RLIMIT_AS and RLIMIT_CPU allowance).
    code = """
import os, time
children = []
try:
    for _ in range(24):
        pid = os.fork()
        if pid == 0:
            time.sleep(2)
            os._exit(0)
        children.append(pid)
except OSError:
    pass
RESULT = {"confined": CONFINED, "forked": len(children)}
for pid in children:
    os.waitpid(pid, 0)
"""
    result = _worker_run(tmp_path, code)
    value = result.get("return_value") or {}
    assert value.get("confined") is True, result
    assert value["forked"] < _LIMITS.max_processes, result
