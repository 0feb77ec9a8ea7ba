"""The kernel layer under the restricted tier: once a child confines itself with Landlock,
even code holding the real builtins can neither read nor write files outside the Python
installation, nor run programs, nor connect, nor signal the worker."""

from __future__ import annotations

import json
import os
import sys

import pytest

from runner.worker import audit, landlock

pytestmark = pytest.mark.skipif(not landlock.available(), reason="kernel without Landlock")


def _in_confined_child(tmp_path) -> dict[str, str]:
    read_r, write_w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: confine, then try everything with the real builtins
        os.close(read_r)
        outcome: dict[str, str] = {"confined": str(landlock.restrict(audit.readable_roots()))}

        def attempt(name, action):
            try:
                outcome[name] = f"allowed: {action()!r}"[:80]
            except OSError as exc:
                outcome[name] = f"refused: {type(exc).__name__}"

        attempt("read /etc/hostname", lambda: open("/etc/hostname").read())
        attempt("write tmp", lambda: open(tmp_path / "escaped", "w").write("x"))
        attempt("os.system", lambda: os.system(f"touch {tmp_path / 'ran'}"))
        attempt("signal parent", lambda: os.kill(parent, 0))
        import socket

        attempt("connect", lambda: socket.create_connection(("127.0.0.1", 9), timeout=1))
        attempt("read python stdlib", lambda: len(open(os.__file__).read()) > 0)
        os.write(write_w, json.dumps(outcome).encode())
        os._exit(0)
    os.close(write_w)
    data = b""
    while chunk := os.read(read_r, 65536):
        data += chunk
    os.close(read_r)
    os.waitpid(pid, 0)
    return json.loads(data)


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
