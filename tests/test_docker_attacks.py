"""Attacks on the Docker tier, against the real engine and the real sandbox image.

Each attack runs through `Sandbox(backend="docker")` and checks four things: the status
(and the runner's message where it produces one, or what the code itself saw when it
caught the failure), that no container is left behind (containers carrying this
module's label, counted before and after), that no process is left behind inside the
container (a follow-up run lists /proc), and that the next run works.

Containers made here carry `org.runner.test` (swept at the end of the session, see
conftest.py) and a label unique to this test process, so counts are not disturbed by
other test sessions running on the same engine.

Attacks that, when they succeed, leave a container in a state other tests must not
inherit (a full /tmp, a desynchronised protocol, a hijacked spare child) run in a
`fresh` Sandbox of their own.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import backend_options
from runner import ExecutionResult, Limits, Sandbox, Status
from runner.docker.engine import containers

pytestmark = pytest.mark.docker

RUN_LABEL = "org.runner.test.attacks"
RUN_ID = f"{os.getpid()}-{int(time.time())}"
LABELS = {**backend_options("docker")["labels"], RUN_LABEL: RUN_ID}  # type: ignore[dict-item]
RUNNER_CLI = str(Path(sys.executable).with_name("runner"))

SHORT = Limits(timeout_s=2)
# In a run: the worker's pid as the container's /proc shows it (the run is pid 2 of a PID
# namespace of its own, where its parent, outside, reads as 0).
WORKER_PID = "worker = int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[1])\n"
MEDIUM = Limits(timeout_s=3)

# Run inside the sandbox: every process the container has, as JSON.
PROCS = r"""
import json, os
me = int(os.readlink('/proc/self'))  # the run's pid as the container's /proc shows it
worker = int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[1])
procs = []
for entry in os.listdir('/proc'):
    if not entry.isdigit():
        continue
    try:
        with open(f'/proc/{entry}/cmdline', 'rb') as f:
            cmd = f.read().replace(b'\0', b' ').decode('utf-8', 'replace').strip()
        with open(f'/proc/{entry}/stat') as f:
            stat = f.read()
    except OSError:
        continue
    comm = stat[stat.index('(') + 1:stat.rindex(')')]
    state, ppid = stat[stat.rindex(')') + 2:].split()[:2]
    live_threads = 0  # a leader that ended its own thread is a zombie while the rest go on
    for tid in os.listdir(f'/proc/{entry}/task') if os.path.isdir(f'/proc/{entry}/task') else ():
        try:
            with open(f'/proc/{entry}/task/{tid}/stat') as f:
                task = f.read()
        except OSError:
            continue
        live_threads += task[task.rindex(')') + 2:].split()[0] not in ('Z', 'X')
    try:
        status = open(f'/proc/{entry}/status').read()
        uid = int(status.split('Uid:')[1].split()[0])
        nspid = [int(n) for n in status.split('NSpid:')[1].splitlines()[0].split()]
    except (OSError, IndexError, ValueError):
        continue
    procs.append({'pid': int(entry), 'ppid': int(ppid), 'state': state, 'comm': comm, 'cmd': cmd,
                  'live_threads': live_threads, 'uid': uid, 'nspid': nspid})
print(json.dumps({'me': me, 'worker': worker, 'procs': procs}))
"""


def _describe(r: ExecutionResult) -> str:
    return (f"status={r.status!s} exit={r.exit_code} error={r.error!r} "
            f"stdout={r.stdout[:400]!r} stderr={r.stderr[-400:]!r} duration={r.duration_ms}ms")


def our_containers() -> list[str]:
    """IDs of the running or stopped containers this test process created."""
    return [c["ID"] for c in containers(f"{RUN_LABEL}={RUN_ID}")]


def host_docker_clients() -> int:
    """`docker start -a -i` client processes on the host for our containers (one each)."""
    names = {c["Names"].encode() for c in containers(f"{RUN_LABEL}={RUN_ID}")}
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(cmd) > 2 and cmd[0].endswith(b"docker") and cmd[1] in (b"run", b"start") \
                and names & set(cmd):
            count += 1
    return count


def processes(sb: Sandbox) -> dict:
    r = sb.run(PROCS)
    assert r.status == Status.OK, f"the process listing failed: {_describe(r)}"
    return json.loads(r.stdout)


def assert_no_stray_processes(sb: Sandbox) -> list[dict]:
    """From a run inside the container: pid 1 is the init, then the worker (this run's
    parent), this run, the worker's forkserver and at most one pre-forked spare child
    (both the worker's user, not the sandbox user), the holders of PID namespaces (pid 1
    of each: the forkserver's, this run's and the spare's; the worker's user, sharing the
    forkserver's memory), plus zombies of earlier runs the worker has not reaped yet.
    Anything else was left behind."""
    seen = processes(sb)
    me, worker = seen["me"], seen["worker"]
    by_pid = {p["pid"]: p for p in seen["procs"]}
    listing = "\n".join(f"  {p['pid']:>5} ppid={p['ppid']:<5} {p['state']}/{p['live_threads']} {p['comm']}: "
                        f"{p['cmd'][:90]}"
                        for p in sorted(seen["procs"], key=lambda p: p["pid"]))
    assert 1 in by_pid, f"no init process:\n{listing}"
    assert worker in by_pid and me in by_pid, listing
    assert not [p for p in seen["procs"] if "sleep" in p["comm"] or p["cmd"].startswith("sleep")], \
        f"a sleep survived its run:\n{listing}"
    worker_cmd = by_pid[worker]["cmd"]
    others = [p for p in seen["procs"] if p["pid"] not in (1, me, worker)]
    live = [p for p in others if p["state"] != "Z" or p["live_threads"]]
    strays = [p for p in others if p["ppid"] != worker or (p in live and p["cmd"] != worker_cmd)]
    assert not strays, f"processes left behind by earlier runs:\n{listing}"
    holders = [p for p in live if len(p["nspid"]) > 1 and p["nspid"][-1] == 1]
    assert len(holders) <= 3, f"more than three PID namespaces' holders:\n{listing}"
    assert len(live) - len(holders) <= 2, \
        f"more than the forkserver and one spare child besides this run:\n{listing}"
    assert not [p for p in live if p["uid"] == by_pid[me]["uid"]], \
        f"another process of the sandbox user besides this run:\n{listing}"
    return seen["procs"]


def assert_next_run_works(sb: Sandbox) -> None:
    r = sb.run("print(6 * 7)")
    assert r.status == Status.OK and r.stdout == "42\n", f"the next run failed: {_describe(r)}"


class Census:
    """Containers and docker clients before an attack, compared after it."""

    def __init__(self) -> None:
        self.containers = our_containers()
        self.clients = host_docker_clients()

    def assert_nothing_left(self) -> None:
        after = our_containers()
        assert len(after) == len(self.containers), \
            f"containers before {self.containers}, after {after}"
        assert host_docker_clients() == self.clients == len(after), \
            f"docker clients on the host: {host_docker_clients()} for {len(after)} containers"


@pytest.fixture(scope="module")
def sb(_isolated_runner_home: str) -> Iterator[Sandbox]:
    """One warm sandbox for the attacks that leave nothing behind when the runner is right."""
    with Sandbox(backend="docker", labels=LABELS) as sandbox:
        sandbox.warm()
        yield sandbox


@pytest.fixture
def fresh(_isolated_runner_home: str) -> Iterator[Sandbox]:
    """A sandbox (and so a container) of its own, for attacks that might poison it."""
    before = len(our_containers())
    with Sandbox(backend="docker", labels=LABELS) as sandbox:
        sandbox.warm()
        yield sandbox
    assert len(our_containers()) == before, "closing the Sandbox left its container behind"


def attack(sb: Sandbox, code: str, limits: Limits | None = None) -> ExecutionResult:
    """Run an attack; afterwards nothing may be left and the next run must work."""
    census = Census()
    r = sb.run(code, limits=limits)
    assert_next_run_works(sb)
    assert_no_stray_processes(sb)
    census.assert_nothing_left()
    return r


def assert_status(r: ExecutionResult, *statuses: Status) -> None:
    assert r.status in statuses, _describe(r)


# --- network ---------------------------------------------------------------------------

def test_http_egress_fails(sb):
    r = attack(sb, "import urllib.request\ntry:\n"
                   "    urllib.request.urlopen('http://1.1.1.1/', timeout=3)\n    print('CONNECTED')\n"
                   "except OSError as exc:\n    print('refused:', exc)\n", MEDIUM)
    assert_status(r, Status.OK)
    assert r.stdout.startswith("refused:") and "unreachable" in r.stdout, _describe(r)


def test_raw_ip_socket_fails(sb):
    r = attack(sb, "import socket\ntry:\n"
                   "    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)\n"
                   "    print('RAW SOCKET')\nexcept OSError as exc:\n    print('refused:', exc.errno)\n"
                   "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ntry:\n"
                   "    s.sendto(b'x', ('1.1.1.1', 53))\n    print('SENT')\n"
                   "except OSError as exc:\n    print('udp refused:', exc.errno)\n")
    assert_status(r, Status.OK)
    # EPERM: no CAP_NET_RAW; ENETUNREACH: no route, only lo exists.
    assert r.stdout == "refused: 1\nudp refused: 101\n", _describe(r)


def test_dns_resolution_fails(sb):
    r = attack(sb, "import socket\ntry:\n    print(socket.getaddrinfo('example.com', 80))\n"
                   "except OSError as exc:\n    print('no dns:', type(exc).__name__)\n", MEDIUM)
    assert_status(r, Status.OK)
    assert r.stdout == "no dns: gaierror\n", _describe(r)


# --- file system -----------------------------------------------------------------------

def test_reading_etc_shadow_fails(sb):
    r = attack(sb, "print(open('/etc/shadow').read())")
    assert_status(r, Status.ERROR)
    assert r.error.type == "PermissionError" and "/etc/shadow" in r.error.message, _describe(r)
    assert r.stdout == ""


@pytest.mark.parametrize("path", ["/evil", "/opt/runner/evil", "/opt/runner/worker/forkserver.py",
                                  "/usr/evil", "/usr/lib/python3.11/os.py", "/etc/passwd"])
def test_writing_outside_the_working_dir_fails(sb, path):
    r = attack(sb, f"open({path!r}, 'a').write('x')")
    assert_status(r, Status.ERROR)
    assert r.error.type in ("OSError", "PermissionError"), _describe(r)
    assert "Read-only file system" in r.error.message or "Permission denied" in r.error.message, \
        _describe(r)


def test_working_dir_is_writable_and_fresh_for_every_run(sb):
    first = attack(sb, "import os\nopen('note.txt', 'w').write('secret')\n"
                       "print(os.getcwd(), sorted(os.listdir('.')))")
    assert_status(first, Status.OK)
    cwd, listing = first.stdout.split(" ", 1)
    assert listing == "['note.txt']\n", _describe(first)
    second = sb.run(f"import os\nprint(os.path.exists({cwd!r}), os.listdir('.'), os.getcwd() == {cwd!r})")
    # The same path (/sandbox), but a tmpfs of the next run's own: empty.
    assert cwd == "/sandbox" and second.stdout == "True [] True\n", _describe(second)


def test_files_outside_the_working_dir_do_not_survive_into_the_next_run(fresh):
    """/tmp (the working dir's parent) and /dev/shm are writable: a run must not be able
    to leave data there for the next run (a different caller, perhaps) to find."""
    first = fresh.run("import os\nfor d in ('/tmp', '/dev/shm'):\n"
                      "    if os.access(d, os.W_OK):\n"
                      "        open(os.path.join(d, 'left-behind.txt'), 'w').write('from run 1')\n"
                      "        print('wrote', d)\n")
    assert_status(first, Status.OK)
    second = fresh.run("import os\nprint([d for d in ('/tmp', '/dev/shm') "
                       "if os.path.exists(os.path.join(d, 'left-behind.txt'))])")
    assert second.stdout == "[]\n", f"written by {first.stdout!r}, still there: {_describe(second)}"


def test_a_run_cannot_plant_files_in_the_next_runs_working_dir(fresh):
    """The next run's working dir exists before it starts (the spare child's); a run
    must not be able to write into it."""
    first = fresh.run("import os, time\ntime.sleep(0.2)\nplanted = []\n"
                      "for name in os.listdir('..'):\n"
                      "    path = os.path.join('..', name)\n"
                      "    if os.path.isdir(path) and os.path.abspath(path) != os.getcwd():\n"
                      "        try:\n"
                      "            open(os.path.join(path, 'planted.txt'), 'w').write('x')\n"
                      "            planted.append(name)\n"
                      "        except OSError:\n            pass\nprint(planted)\n")
    assert_status(first, Status.OK)
    second = fresh.run("import os\nprint(os.listdir('.'))")
    assert_status(second, Status.OK)
    assert second.stdout == "[]\n", f"planted by {first.stdout!r}: {_describe(second)}"


# --- processes, threads, memory --------------------------------------------------------

def test_fork_bomb_is_limited(sb):
    r = attack(sb, "import os\nwhile True:\n    try:\n        os.fork()\n"
                   "    except OSError:\n        pass\n", MEDIUM)
    assert_status(r, Status.TIMEOUT, Status.ERROR)
    assert r.error is not None and r.error.message, _describe(r)
    if r.status == Status.TIMEOUT:
        assert "time limit of 3 s exceeded" in r.error.message, _describe(r)


def test_a_forked_child_ending_with_sys_exit_does_not_spoil_the_result(sb):
    """The forked copy of the run unwinds through the runner's own code when it calls
    sys.exit (or reaches the end of the code): it must not report a second result."""
    r = attack(sb, "import os, sys\npid = os.fork()\nif pid == 0:\n    print('child', flush=True)\n"
                   "    sys.exit(0)\nos.waitpid(pid, 0)\nprint('parent')\n")
    assert_status(r, Status.OK)
    assert r.stdout == "child\nparent\n", _describe(r)


def test_fork_bomb_without_error_handling_is_limited(sb):
    r = attack(sb, "import os\nwhile True:\n    os.fork()\n", MEDIUM)
    assert_status(r, Status.ERROR, Status.TIMEOUT)
    if r.status == Status.ERROR:
        assert r.error.type == "BlockingIOError" and "Resource temporarily unavailable" in r.error.message, \
            _describe(r)


def test_thread_bomb_is_limited(sb):
    r = attack(sb, "import threading, time\nwhile True:\n"
                   "    threading.Thread(target=time.sleep, args=(100,), daemon=True).start()\n", MEDIUM)
    assert_status(r, Status.ERROR, Status.TIMEOUT, Status.MEMORY_LIMIT)
    if r.status == Status.ERROR:
        assert "can't start new thread" in r.error.message, _describe(r)


# --- limits hold for all of a run's processes together -------------------------------

MEMORY_TOGETHER = r"""
import os, time
held, kids = 0, []
for _ in range(4):
    r, w = os.pipe()
    if os.fork() == 0:
        block = bytearray(56 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        os.write(w, b"x")
        time.sleep(3)
        os._exit(0)
    os.close(w)
    kids.append(r)
for r in kids:
    held += len(os.read(r, 1))
print("held at once", held, flush=True)
"""


def _with_own_limits(fresh: Sandbox, code: str, limits: Limits) -> ExecutionResult:
    """Other limits than the default make a container of their own (containers are kept
    per memory and process limits): run there, then check the next run there works."""
    r = fresh.run(code, limits=limits)
    after = fresh.run("print(1 + 1)", limits=limits)
    assert after.status == Status.OK and after.stdout == "2\n", _describe(after)
    return r


def test_a_runs_processes_together_stay_within_its_memory(fresh):
    r = _with_own_limits(fresh, MEMORY_TOGETHER, Limits(memory_mb=64, timeout_s=10))
    # Four processes of 56 MiB each under 64 MiB: the kernel ends one long before all of
    # them hold their share. The container's limit is the warm worker's memory plus the
    # run's (and an allowance for copied pages); the page cache the container holds
    # besides (its files, read once) can be reclaimed for a run under pressure, so a
    # second process may fit, never four.
    assert_status(r, Status.MEMORY_LIMIT)
    assert "processes together" in r.error.message, _describe(r)
    held = int(r.stdout.split()[-1]) if r.stdout else 0
    assert held <= 2, _describe(r)


PROCESSES_TOGETHER = r"""
import os, time
made = 0
for _ in range(20):
    try:
        if os.fork() == 0:
            time.sleep(2)
            os._exit(0)
        made += 1
    except OSError:
        break
print("made", made, flush=True)
"""


def test_a_runs_processes_together_stay_within_its_process_limit(fresh):
    r = _with_own_limits(fresh, PROCESSES_TOGETHER, Limits(max_processes=8, timeout_s=10))
    assert_status(r, Status.OK)
    assert r.stdout == "made 7\n", _describe(r)  # the run's own process is the eighth


CPU_TOGETHER = r"""
import os
for _ in range(3):
    if os.fork() == 0:
        while True:
            pass
while True:
    pass
"""


def test_a_runs_processes_together_stay_within_its_cpu_time(sb):
    r = attack(sb, CPU_TOGETHER, Limits(cpu_s=1, timeout_s=10))
    assert_status(r, Status.TIMEOUT)
    assert "CPU time limit of 1 s exceeded by the run's threads and processes together" in r.error.message
    assert r.duration_ms < 4000, _describe(r)  # well before three processes' worth


def test_a_run_cannot_raise_its_hard_limits_or_continue_the_worker(sb):
    r = attack(sb, "import os, resource, signal\n"
                   "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\nprint(soft == hard)\n"
                   "try:\n    resource.setrlimit(resource.RLIMIT_NOFILE, (hard + 1, hard + 1))\n"
                   "except (ValueError, OSError) as exc:\n    print('raise refused')\n"
                   f"{WORKER_PID}"
                   "try:\n    os.kill(worker, signal.SIGCONT)\n"
                   "except (PermissionError, ProcessLookupError):\n    print('SIGCONT refused')\n",
               SHORT)
    assert_status(r, Status.OK)
    assert r.stdout == "True\nraise refused\nSIGCONT refused\n", _describe(r)


def test_io_uring_and_namespaces_are_refused(sb):
    r = attack(sb, "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                   "for name, nr, args in (('io_uring_setup', 425, (1, 0)), "
                   "('unshare', 272, (0x10000000,)), ('setns', 308, (0, 0))):\n"
                   "    print(name, libc.syscall(nr, *args), errno.errorcode[ctypes.get_errno()])\n",
               SHORT)
    assert_status(r, Status.OK)
    assert r.stdout == ("io_uring_setup -1 EPERM\nunshare -1 EPERM\nsetns -1 EPERM\n"), _describe(r)


def test_a_fork_bomb_in_one_sandbox_does_not_starve_another(sb, fresh):
    """The process limit must be per sandbox. RLIMIT_NPROC counts every process of the
    user on the whole host, and every sandbox runs as uid 10001: a fork bomb elsewhere
    must not stop this run from starting a few threads well within its own limit."""
    bomb = "import os, time\nwhile True:\n    try:\n        if os.fork() == 0:\n" \
           "            time.sleep(100)\n    except OSError:\n        time.sleep(0.01)\n"
    results: list[ExecutionResult] = []
    bomber = threading.Thread(target=lambda: results.append(sb.run(bomb, limits=MEDIUM)))
    bomber.start()
    try:
        time.sleep(1.5)
        r = fresh.run("import threading, time\nts = [threading.Thread(target=time.sleep, args=(0.1,)) "
                      "for _ in range(8)]\nfor t in ts:\n    t.start()\nfor t in ts:\n    t.join()\n"
                      "print('8 threads ran')", limits=SHORT)
    finally:
        bomber.join()
    assert_status(results[0], Status.TIMEOUT)
    assert r.status == Status.OK and r.stdout == "8 threads ran\n", \
        f"a fork bomb in another sandbox starved this run: {_describe(r)}"
    assert_next_run_works(sb)
    assert_no_stray_processes(sb)


def test_memory_bomb_is_memory_limit(sb):
    r = attack(sb, "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))\n", MEDIUM)
    assert_status(r, Status.MEMORY_LIMIT)
    assert "memory limit of 256 MB exceeded" in r.error.message, _describe(r)
    assert r.resources.max_rss_kb < (256 + 384) * 1024, _describe(r)


def test_one_big_allocation_is_memory_limit(sb):
    r = attack(sb, "x = bytearray(4 * 1024 ** 3)\nprint('allocated')", MEDIUM)
    assert_status(r, Status.MEMORY_LIMIT)
    assert "memory limit of 256 MB exceeded" in r.error.message and r.stdout == "", _describe(r)


# --- disk ------------------------------------------------------------------------------

FILL_CWD = ("n = 0\nwhile True:\n    with open(f'fill-{n}', 'wb') as f:\n"
            "        f.write(b'x' * (8 << 20))\n    n += 1\n")
# Most of a run's own directory (disk_mb, 128 MB by default).
CAN_WRITE_96MB = ("import os\nfor n in range(12):\n    with open(f'ok-{n}', 'wb') as f:\n"
                  "        f.write(b'y' * (8 << 20))\nprint('wrote 96 MB')")


def test_disk_fill_of_the_working_dir_is_limited_and_freed(sb):
    r = attack(sb, FILL_CWD, Limits(timeout_s=5))
    assert_status(r, Status.ERROR)
    assert "No space left on device" in r.error.message, _describe(r)
    after = sb.run(CAN_WRITE_96MB, limits=Limits(timeout_s=5))
    assert after.status == Status.OK and after.stdout == "wrote 96 MB\n", \
        f"the space was not freed: {_describe(after)}"


def test_disk_fill_of_tmp_outside_the_working_dir_is_freed(fresh):
    r = fresh.run("import os\nn = 0\nwhile True:\n"
                  "    with open(f'/tmp/fill-{os.getpid()}-{n}', 'wb') as f:\n"
                  "        f.write(b'x' * (8 << 20))\n    n += 1\n", limits=Limits(timeout_s=5))
    assert_status(r, Status.ERROR)
    assert "No space left on device" in r.error.message, _describe(r)
    after = fresh.run(CAN_WRITE_96MB, limits=Limits(timeout_s=5))
    assert after.status == Status.OK and after.stdout == "wrote 96 MB\n", \
        f"the space was not freed: {_describe(after)}"


def test_a_single_huge_file_hits_the_file_size_limit(sb):
    r = attack(sb, "with open('huge', 'wb') as f:\n    f.write(b'x' * (64 << 20))\n", MEDIUM)
    assert_status(r, Status.ERROR, Status.CRASHED)
    assert "File too large" in r.error.message or "SIGXFSZ" in r.error.message, _describe(r)
    after = sb.run("with open('small', 'wb') as f:\n    f.write(b'x' * (8 << 20))\nprint('ok')")
    assert after.stdout == "ok\n", _describe(after)


def test_fd_exhaustion_is_an_error(sb):
    r = attack(sb, "files = []\nwhile True:\n    files.append(open('/dev/null'))\n")
    assert_status(r, Status.ERROR)
    assert "Too many open files" in r.error.message, _describe(r)


# --- signals, daemons, exits -----------------------------------------------------------

def test_ignoring_sigterm_and_looping_is_a_timeout(sb):
    r = attack(sb, "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):\n"
                   "    signal.signal(s, signal.SIG_IGN)\nprint('ignoring', flush=True)\nwhile True:\n    pass\n",
               SHORT)
    assert_status(r, Status.TIMEOUT)
    assert "time limit of 2 s exceeded" in r.error.message, _describe(r)
    assert r.stdout == "ignoring\n"
    assert 1900 <= r.duration_ms < 4000, _describe(r)


DAEMON = r"""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open('/dev/null', os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execvp('sleep', ['sleep', '1000'])
    os._exit(0)
os.wait()
time.sleep(0.2)
def session(entry):  # as the container's /proc shows it (the run has a PID namespace of its own)
    return open(f'/proc/{entry}/stat').read().rsplit(')', 1)[1].split()[3]
for entry in os.listdir('/proc'):
    try:
        if entry.isdigit() and open(f'/proc/{entry}/comm').read().strip() == 'sleep':
            print('daemon', entry, 'left our session', session(entry) != session('self'))
    except OSError:
        pass
"""


def test_a_daemonised_child_does_not_outlive_the_run(sb):
    census = Census()
    r = sb.run(DAEMON)
    assert_status(r, Status.OK)
    assert r.stdout.startswith("daemon ") and r.stdout.endswith(" left our session True\n"), _describe(r)
    pid = int(r.stdout.split()[1])
    seen = assert_no_stray_processes(sb)  # lists what it sees on failure; no sleep
    assert pid not in {p["pid"] for p in seen if p["state"] != "Z"}, seen
    assert_next_run_works(sb)
    census.assert_nothing_left()


# A daemon whose main thread ends while another thread goes on: its leader shows as a
# zombie, but the process still runs code.
HEADLESS_DAEMON = r"""
import ctypes, os, threading, time
if os.fork() == 0:
    os.setsid()
    threading.Thread(target=time.sleep, args=(1000,)).start()
    ctypes.CDLL(None).pthread_exit(None)
time.sleep(0.3)
"""


def test_a_daemon_whose_main_thread_ended_does_not_outlive_the_run(sb):
    census = Census()
    r = sb.run(HEADLESS_DAEMON)
    assert_status(r, Status.OK)
    assert_no_stray_processes(sb)  # counts every thread, not the leader's state alone
    assert_next_run_works(sb)
    census.assert_nothing_left()


# A daemon that never stays put: each process forks the next and exits at once, so a
# look at /proc finds the one it listed already gone and misses the one just made.
MOVING_DAEMON = r"""
import os, time
if os.fork() == 0:
    os.setsid()
    # Small shells keep the chain quick: each starts the next in the background and ends.
    os.execvpe('sh', ['sh', '-c', 'sh -c "$NEXT" &'], dict(os.environ, NEXT='sh -c "$NEXT" &'))
time.sleep(0.3)
print('started')
"""


def test_a_daemon_that_keeps_moving_does_not_outlive_the_run(sb):
    census = Census()
    for _ in range(3):
        r = sb.run(MOVING_DAEMON, limits=MEDIUM)
        assert_status(r, Status.OK)
        assert r.stdout == "started\n", _describe(r)
        assert_no_stray_processes(sb)
    assert_next_run_works(sb)
    census.assert_nothing_left()


def test_a_daemon_started_in_a_session_does_not_outlive_the_session(fresh):
    """A session's worker goes back to the pool when the session closes: whatever the
    session started must be gone before the next caller's run starts on that worker."""
    census = Census()
    with fresh.session(limits=MEDIUM) as session:
        r = session.run(DAEMON)
    assert_status(r, Status.OK)
    assert r.stdout.startswith("daemon "), _describe(r)
    assert_no_stray_processes(fresh)
    assert_next_run_works(fresh)
    census.assert_nothing_left()


def test_os_exit_3_is_reported_with_its_exit_code(sb):
    r = attack(sb, "import os\nprint('before', flush=True)\nos._exit(3)")
    assert_status(r, Status.CRASHED, Status.ERROR)
    assert r.exit_code == 3, _describe(r)
    assert "exit status 3" in r.error.message and r.stdout == "before\n", _describe(r)


def test_sys_exit_3_is_an_error_with_exit_code_3(sb):
    r = attack(sb, "import sys\nsys.exit(3)")
    assert_status(r, Status.ERROR)
    assert r.exit_code == 3 and r.error.type == "SystemExit", _describe(r)


def test_a_run_that_kills_itself_is_not_reported_as_out_of_memory(sb):
    """SIGKILL from the run itself (or any other process) is not the OOM killer."""
    r = attack(sb, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert_status(r, Status.CRASHED)
    assert "SIGKILL" in r.error.message, _describe(r)


@pytest.mark.parametrize("target", ["worker", "os.getppid()", "1", "-1"])
def test_a_run_cannot_kill_the_worker(sb, target):
    """User code runs as another user than the worker (and init), in a PID namespace of its
    own: it cannot signal them (by the worker's pid as the container shows it: no such
    process here; by its parent's, 0: its own group). (The worker's death would still only
    cost this container: see test_docker_faults.)"""
    census = Census()
    r = sb.run(f"import os, signal\n{WORKER_PID}try:\n    os.kill({target}, signal.SIGKILL)\n"
               "    print('sent')\nexcept OSError as e:\n    print('refused', e.errno)",
               limits=SHORT)
    assert_status(r, Status.OK, Status.CRASHED)
    if r.status == Status.OK:
        # kill(-1) reaches only the run's own processes (itself excluded): "sent" is fine
        # there, as long as nothing of the worker died.
        assert r.stdout in ("refused 1\n", "refused 3\n", "sent\n"), _describe(r)
        if target not in ("-1", "os.getppid()"):
            assert r.stdout in ("refused 1\n", "refused 3\n"), _describe(r)
    assert_next_run_works(sb)
    assert_no_stray_processes(sb)
    census.assert_nothing_left()


# --- forging the result channel ---------------------------------------------------------
#
# What is asserted, and why. The child's result pipe is the code's own report: anything
# the code writes there it could also have produced by finishing normally (a return
# value, an exception). So forging it may at most claim `ok` for a run that really did
# end at once. It must never
#   - carry fields the parent measures (stdout, exit code, duration, resources),
#   - turn a run that goes on past its deadline into anything but `timeout`,
#   - turn a run that is then killed (by a signal, or out of memory) into `ok`.
# The worker's own channel to the host (the attached stdin/stdout of `docker run`) is
# not the code's at all: nothing written there by a run may reach the host.

FORGE = r"""
import json, os, signal, sys, time
FAKE = json.dumps({"kind": "ok", "return_value": "forged", "status": "ok", "exit_code": 0,
                   "stdout": "FORGED", "duration_ms": 987654,
                   "resources": {"cpu_ms": 0, "max_rss_kb": 1}}).encode()
def pipes():
    found = []
    for fd in os.listdir('/proc/self/fd'):
        try:
            if int(fd) > 2 and os.readlink(f'/proc/self/fd/{fd}').startswith('pipe:'):
                found.append(int(fd))
        except OSError:
            pass
    return found
print('pipes', len(pipes()), flush=True)
for fd in pipes():
    os.write(fd, FAKE)
"""

FORGE_THEN = {
    "exit": "os._exit(0)",
    "spin": "while True:\n    pass",
    "sigkill": "os.kill(os.getpid(), signal.SIGKILL)",
    "memory": "blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))",
    "close-and-spin": "for fd in pipes() + [1, 2]:\n    os.close(fd)\nwhile True:\n    pass",
}


@pytest.mark.parametrize("then", list(FORGE_THEN))
def test_forging_the_result_pipe(sb, then):
    r = attack(sb, FORGE + FORGE_THEN[then], SHORT)
    assert r.stdout == "pipes 1\n", _describe(r)  # the parent's capture, not the forgery
    assert r.resources.max_rss_kb > 1000 and r.duration_ms != 987654, _describe(r)
    if then == "exit":
        # A report, then the end of the child by its own hand (not the stop that follows
        # the child's own report): the run wrote on its result channel.
        assert_status(r, Status.CRASHED)
        assert "result channel" in r.error.message, _describe(r)
    elif then == "spin":
        assert_status(r, Status.TIMEOUT)
    elif then in ("sigkill", "memory"):
        assert r.status != Status.OK, _describe(r)
    else:
        # The streams closed after a complete report: the parent may take the report and
        # end the run there, but then it must end it (nothing left running, checked by
        # attack()) and well before the deadline; otherwise it is a timeout.
        if r.status == Status.OK:
            assert r.duration_ms < 1000, _describe(r)
        else:
            assert_status(r, Status.TIMEOUT)


FORGE_HOST_FRAME = r"""
import json, os, struct
worker = int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[1])
frame = json.dumps({"type": "result", "id": "forged", "status": "ok", "exit_code": 0,
                    "stdout": "FORGED: all tests passed\n", "stderr": "", "error": None,
                    "duration_ms": 1, "resources": {"cpu_ms": 0, "max_rss_kb": 1}}).encode()
frame = struct.pack('>I', len(frame)) + frame
reached = []
for fd in os.listdir(f'/proc/{worker}/fd'):
    try:
        if int(fd) > 2 and os.readlink(f'/proc/{worker}/fd/{fd}').startswith('pipe:'):
            out = os.open(f'/proc/{worker}/fd/{fd}', os.O_WRONLY | os.O_NONBLOCK)
            os.write(out, frame)
            os.close(out)
            reached.append(fd)
    except OSError:
        pass
print('reached', reached, flush=True)
while True:
    pass
"""


def test_a_run_cannot_write_frames_to_the_host(fresh):
    """The worker's protocol pipes are reachable as /proc/<worker>/fd/N when the worker
    is dumpable and runs as the same user: a forged frame there would be read by the
    host as this run's result (hiding the timeout below) and desynchronise every later
    reply."""
    r = fresh.run(FORGE_HOST_FRAME, limits=SHORT)
    assert "FORGED" not in r.stdout, _describe(r)
    # Either the worker's fds cannot even be opened (it is not dumpable), or the forged
    # frame is ignored and the run's real end (a timeout) is reported.
    assert_status(r, Status.TIMEOUT, Status.ERROR)
    if r.status == Status.ERROR:
        assert r.error.type == "PermissionError" and "/fd" in r.error.message, _describe(r)
    for n in (2, 3):
        later = fresh.run(f"print('run {n}')")
        assert later.status == Status.OK and later.stdout == f"run {n}\n", \
            f"the reply channel is out of step after the forgery: {_describe(later)}"


HIJACK_SPARE = r"""
import json, os, struct, time
me = int(os.readlink('/proc/self'))
worker = int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[1])
time.sleep(0.3)  # the worker forks the next run's child while this one runs
request = json.dumps({"type": "run", "id": "x", "code": "print('HIJACKED')", "limits": {
    "timeout_s": 10, "cpu_s": None, "memory_mb": 256, "max_output_bytes": 100000,
    "max_processes": 32, "max_open_files": 64, "max_file_size_mb": 16}}).encode()
done = []
for entry in os.listdir('/proc'):
    if not entry.isdigit() or int(entry) in (1, me, worker):
        continue
    try:
        fds = sorted(int(fd) for fd in os.listdir(f'/proc/{entry}/fd'))
        target = os.open(f'/proc/{entry}/fd/{fds[-1]}', os.O_WRONLY | os.O_NONBLOCK)
        os.write(target, struct.pack('>I', len(request)) + request)
        os.close(target)
        out = os.open(f'/proc/{entry}/fd/1', os.O_WRONLY | os.O_NONBLOCK)
        os.write(out, b'INJECTED\n')
        os.close(out)
        done.append(entry)
    except OSError as exc:
        print('could not reach', entry, exc)
print('reached', done)
"""


def test_a_run_cannot_reach_into_the_next_runs_child(fresh):
    """The next run's child is forked while this run executes. Its request pipe and its
    stdout must be out of reach, or a run decides what the next caller's run executes
    and prints."""
    first = fresh.run(HIJACK_SPARE)
    assert_status(first, Status.OK)
    assert first.stdout.endswith("reached []\n") and "could not reach" in first.stdout, _describe(first)
    second = fresh.run("print('my own code')")
    assert second.status == Status.OK and second.stdout == "my own code\n", \
        f"first run: {first.stdout!r}; second run: {_describe(second)}"


def test_a_run_cannot_kill_the_next_runs_child(fresh):
    first = fresh.run("import os, signal, time\nme = int(os.readlink('/proc/self'))\n"
                      f"{WORKER_PID}time.sleep(0.3)\n"
                      "for e in os.listdir('/proc'):\n"
                      "    if e.isdigit() and int(e) not in (1, me, worker):\n"
                      "        try:\n            os.kill(int(e), signal.SIGKILL)\n"
                      "            print('killed', e)\n        except OSError:\n            pass\n"
                      "print('tried', len(os.listdir('/proc')))\n")
    assert_status(first, Status.OK)
    assert "killed" not in first.stdout and "tried" in first.stdout, _describe(first)
    second = fresh.run("print('my own code')")
    assert second.status == Status.OK and second.stdout == "my own code\n", \
        f"first run: {first.stdout!r}; second run: {_describe(second)}"


# --- packages --------------------------------------------------------------------------

@pytest.mark.parametrize("requirement", [
    "--index-url=http://evil",
    "x; rm -rf /",
    "git+https://github.com/pypa/sampleproject",
    "numpy @ file:///etc/passwd",
    "-e .",
    "./local/path",
    "pkg\n--extra-index-url=http://evil",
])
def test_package_name_injection_is_denied(sb, requirement):
    census = Census()
    wheels = Path(os.environ["RUNNER_HOME"]) / "cache" / "wheels"
    before = sorted(wheels.iterdir()) if wheels.is_dir() else []
    r = sb.run("print('ran')", packages=[requirement])
    assert_status(r, Status.DENIED)
    assert r.error.type == "PackageUnavailable" and repr(requirement) in r.error.message, _describe(r)
    assert r.stdout == "" and r.packages == {}, _describe(r)
    assert (sorted(wheels.iterdir()) if wheels.is_dir() else []) == before, "pip was run"
    assert_next_run_works(sb)
    census.assert_nothing_left()


def test_package_satisfied_by_the_image(sb):
    census = Census()
    r = sb.run("import mpmath\nprint(mpmath.__version__, mpmath.__file__)", packages=["mpmath>=1.3"])
    assert_status(r, Status.OK)
    version, path = r.stdout.split()
    assert r.packages == {"mpmath": version}, _describe(r)
    assert path.startswith("/opt/runner/venv/"), "the image's own mpmath should be used"
    census.assert_nothing_left()  # no environment, so no extra pool or container


def _first_package_run(package: str) -> tuple[ExecutionResult, float]:
    with Sandbox(backend="docker", labels=LABELS) as sandbox:
        sandbox.run("print(1)")  # warm the image's pool: only the package work is timed
        started = time.perf_counter()
        r = sandbox.run(f"import {package}\nprint({package}.__version__, {package}.__file__)",
                        packages=[package])
        return r, time.perf_counter() - started


def test_package_from_the_index_is_installed_then_reused(monkeypatch, tmp_path):
    monkeypatch.setenv("RUNNER_HOME", str(tmp_path))  # a cold cache, whatever ran before
    before = len(our_containers())
    first, _ = _first_package_run("tabulate")
    assert_status(first, Status.OK)
    version, path = first.stdout.split()
    assert first.packages == {"tabulate": version}, _describe(first)
    assert path.startswith("/opt/env/"), _describe(first)  # the mounted environment
    envs = [p for p in (tmp_path / "envs").iterdir() if not p.name.startswith(".")]
    assert len(envs) == 1, envs
    built = (envs[0] / ".complete").stat().st_mtime_ns

    second, _ = _first_package_run("tabulate")
    assert_status(second, Status.OK)
    assert second.stdout == first.stdout and second.packages == first.packages, _describe(second)
    # Reused, not rebuilt: the environment's completion mark is the first build's. (The
    # times are not compared: on a loaded machine the second run's own start can cost as
    # much as a small install.)
    assert (envs[0] / ".complete").stat().st_mtime_ns == built, "the environment was rebuilt"
    assert len(our_containers()) == before


def test_nonexistent_package_is_install_failed_with_pips_reason(sb):
    census = Census()
    r = sb.run("print('ran')", packages=["no-such-package-xyz-123"])
    assert_status(r, Status.INSTALL_FAILED)
    assert "No matching distribution found for no-such-package-xyz-123" in r.error.message, _describe(r)
    assert r.stdout == ""
    assert_next_run_works(sb)
    census.assert_nothing_left()


# --- identity, capabilities, environment: checked from inside ----------------------------

INSIDE = r"""
import json, os
status = dict(line.rstrip('\n').split(':\t', 1) for line in open('/proc/self/status') if ':\t' in line)
print(json.dumps({'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(),
                  'groups': os.getgroups(),
                  'caps': {k: status[k] for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')},
                  'no_new_privs': status.get('NoNewPrivs'), 'seccomp': status.get('Seccomp'),
                  'interfaces': sorted(os.listdir('/sys/class/net')),
                  'env': dict(os.environ)}))
"""


def test_identity_capabilities_and_environment_from_inside(monkeypatch, _isolated_runner_home):
    marker = f"host-secret-{RUN_ID}"
    monkeypatch.setenv("RUNNER_TEST_HOST_MARKER", marker)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", marker)
    with Sandbox(backend="docker", labels=LABELS) as fresh_sandbox:
        r = fresh_sandbox.run(INSIDE)
    assert_status(r, Status.OK)
    seen = json.loads(r.stdout)
    assert seen["uid"] == seen["euid"] == 10001 and seen["gid"] == 10001, seen
    assert 0 not in seen["groups"], seen
    assert set(seen["caps"].values()) == {"0000000000000000"}, seen["caps"]
    assert seen["no_new_privs"] == "1", seen
    assert seen["seccomp"] == "2", "the engine's default seccomp filter is not applied"
    assert seen["interfaces"] == ["lo"], seen["interfaces"]
    env = seen["env"]
    assert "RUNNER_TEST_HOST_MARKER" not in env and "AWS_SECRET_ACCESS_KEY" not in env, env
    assert not [k for k, v in env.items() if marker in v], env
    assert not [k for k in env if k.startswith(("DOCKER", "RUNNER", "PYTEST", "VIRTUAL_ENV"))], env


def test_doctor_isolation_check_on_the_observations(sb):
    from runner.docker.doctor import SELF_TEST, isolation_problems

    r = sb.run(SELF_TEST)
    assert_status(r, Status.OK)
    seen = json.loads(r.stdout)
    assert seen["uid"] == 10001 and seen["egress"] is False and seen["root_writable"] is False, seen
    assert isolation_problems(seen) == [], seen


def test_doctor_isolation_check_can_fail():
    from runner.docker.doctor import isolation_problems

    bad = {"uid": 0, "cap_eff": "00000000a80425fb", "no_new_privs": "0",
           "interfaces": ["eth0", "lo"], "egress": True, "root_writable": True,
           "env": ["HOME", "AWS_SECRET_ACCESS_KEY"]}
    problems = " | ".join(isolation_problems(bad))
    for expected in ("root", "capabilities", "no-new-privileges", "eth0", "internet",
                     "root file system", "AWS_SECRET_ACCESS_KEY"):
        assert expected in problems, problems


def _doctor(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([RUNNER_CLI, "doctor", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    output, _ = proc.communicate(timeout=120)
    return proc, output


def test_runner_doctor_without_self_test():
    proc, output = _doctor("--no-self-test")
    assert proc.returncode == 0, output
    assert "[FAIL]" not in output and "[ok  ] sandbox image" in output, output
    assert "isolation self-test" not in output, output


def test_runner_doctor_with_self_test():
    proc, output = _doctor()
    assert "[ok  ] isolation self-test: uid 10001" in output, output
    assert proc.returncode == 0, output
    # The doctor's own sandbox container went away with it.
    from runner.docker.engine import OWNER_LABEL

    assert containers(f"{OWNER_LABEL}={socket.gethostname()}:{proc.pid}") == []
