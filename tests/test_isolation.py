"""What each tier guarantees, tested with code that holds the real builtins.

The restricted tier's guarantees must not rest on its policy. So everything here runs
on the restricted tier with fewer layers (test modes only: "hook" is code that escaped
the policy, with the real builtins, under the audit hook and the kernel confinement;
"kernel" has only the kernel confinement and the process design), on the jail tier as
users get it (real Python, its writable directory) and on the Docker tier with plain
Python:

- no run sees another: a run that reads all the memory it can finds no trace of earlier
  runs' code, arguments or output, and nothing earlier runs made (files, IPC objects,
  processes, memory pressure, random state) is there for it;
- the result is unforgeable: a forged report counts only as what the code could have
  done by finishing, never over a timeout, a kill or a refusal already announced;
- limits cannot be changed, neither the run's own nor the worker's;
- the worker survives all of it, and the next run is healthy.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets

import pytest

from runner import Limits, Sandbox, Status
from runner.backends.restricted import TEST_LAYERS_VARIABLE
from runner.types import ExecutionRequest, FunctionCall

from conftest import TMP_MOUNT_POINTS, backend_options

SHORT = Limits(timeout_s=3)
TIERS = ["jail", "restricted-hook", "restricted-kernel", "docker"]


def _open(tier: str) -> Sandbox:
    if tier == "docker":
        return Sandbox(backend="docker", log_store=False, **backend_options("docker"))
    if tier == "jail":
        return Sandbox(backend="jail", log_store=False)
    os.environ[TEST_LAYERS_VARIABLE] = "1"
    return Sandbox(backend="restricted", log_store=False, layers=tier.split("-", 1)[1])


def _tier_params(tiers: list[str]) -> list[object]:
    return [pytest.param(t, marks=pytest.mark.docker) if t == "docker" else t for t in tiers]


@pytest.fixture(scope="module", params=_tier_params(TIERS))
def tier(request: pytest.FixtureRequest):
    with _open(request.param) as sb:
        sb.tier = request.param  # type: ignore[attr-defined]
        yield sb


@pytest.fixture(params=_tier_params(TIERS))
def fresh(request: pytest.FixtureRequest):
    """A sandbox of one worker, so consecutive runs share a worker (and a container)."""
    if request.param == "docker":
        sb = Sandbox(backend="docker", log_store=False, pool_size=1, **backend_options("docker"))
    elif request.param == "jail":
        sb = Sandbox(backend="jail", log_store=False, pool_size=1)
    else:
        os.environ[TEST_LAYERS_VARIABLE] = "1"
        sb = Sandbox(backend="restricted", log_store=False, pool_size=1,
                     layers=request.param.split("-", 1)[1])
    with sb:
        sb.tier = request.param  # type: ignore[attr-defined]
        yield sb


def _describe(r) -> str:
    return (f"status={r.status} exit={r.exit_code} error={r.error!r} "
            f"stdout={r.stdout[-2000:]!r} stderr={r.stderr[-2000:]!r}")


def _healthy(sb: Sandbox) -> None:
    for n in range(2):
        r = sb.run(f"print({n} * 7)")
        assert r.status == Status.OK and r.stdout == f"{n * 7}\n", \
            f"the next run is not healthy: {_describe(r)}"


# --- memory: no run can read another run's code, arguments or output ----------------------

# Reads every page of its own memory it can reach and reports which of the given secrets
# it found. On Docker through /proc/self/maps and /proc/self/mem; under Landlock /proc is
# out of reach, so pages are probed by asking the kernel to copy them into a pipe (EFAULT
# for unmapped pages): the whole brk heap, and every megabyte around a live object.
DUMP_MEMORY = r'''
import ctypes, gc, hashlib, json, os, re, sys
# Only hashes of what to look for: the secrets themselves must not be in this code.
WANTED = __WANTED__
CONTROL = "control-__CONTROL__"  # in this run's own code: the dump must find it
PATTERN = re.compile(rb"(?:code|arg|out|session|control)-[0-9a-f]{24}")
PAGE = 4096
found = set()
scanned = 0
def search(chunk):
    for match in PATTERN.finditer(chunk):
        digest = hashlib.sha256(match.group()).hexdigest()
        if digest in WANTED:
            found.add(WANTED[digest])
# Pages are read by asking the kernel to copy them into a pipe: an unmapped or
# unreadable page is EFAULT, never a crash, and nothing needs /proc/self/mem (which a
# non-dumpable process cannot open).
r, w = os.pipe()
def read_page(addr):
    try:
        os.write(w, (ctypes.c_char * PAGE).from_address(addr))
    except OSError:
        return None
    return os.read(r, PAGE)
try:
    maps = open("/proc/self/maps").read().splitlines()
except OSError:
    maps = None  # Landlock: no /proc
starts = set()
if maps is not None:
    regions = []
    for line in maps:
        fields = line.split()
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if "r" in fields[1] and not (len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]")):
            regions.append((lo, hi))
else:
    libc = ctypes.CDLL(None)
    libc.sbrk.restype = ctypes.c_void_p
    top = libc.sbrk(0)
    bottom = (top - 1) // PAGE * PAGE
    while read_page(bottom - PAGE) is not None:
        bottom -= PAGE
    regions = [(bottom, top)]
    for chunk in {id(o) >> 20 for o in gc.get_objects()}:
        start = chunk << 20
        while read_page(start - PAGE) is not None:
            start -= PAGE
        end = start
        while read_page(end) is not None:
            end += PAGE
        regions.append((start, end))
seen = set()
for lo, hi in sorted(regions):
    previous = b""
    for page in range(lo, hi, PAGE):
        if page in seen:
            continue
        seen.add(page)
        data = read_page(page)
        if data is None:
            previous = b""
            continue
        scanned += len(data)
        search(previous[-64:] + data)  # a secret may straddle two pages
        previous = data
print(json.dumps({"found": sorted(found), "scanned": scanned}))
'''


def _secret(kind: str) -> str:
    return f"{kind}-{secrets.token_hex(12)}"


@pytest.fixture(params=_tier_params(["jail", "restricted-kernel", "docker"]))
def dumpable(request: pytest.FixtureRequest):
    """Tiers where a run may read its own memory (under the audit hook it may not: the
    dump needs C-level reads, which the hook refuses; 'kernel' is that same child)."""
    if request.param == "docker":
        sb = Sandbox(backend="docker", log_store=False, pool_size=1, **backend_options("docker"))
    elif request.param == "jail":
        sb = Sandbox(backend="jail", log_store=False, pool_size=1)
    else:
        os.environ[TEST_LAYERS_VARIABLE] = "1"
        sb = Sandbox(backend="restricted", log_store=False, pool_size=1, layers="kernel")
    with sb:
        sb.tier = request.param  # type: ignore[attr-defined]
        yield sb


def test_a_run_finds_no_trace_of_earlier_runs_in_its_memory(dumpable):
    fresh = dumpable
    planted = []
    for n in range(6):
        in_code, in_args, in_output = _secret("code"), _secret("arg"), _secret("out")
        planted += [in_code, in_args, in_output]
        code = (f"SECRET = '{in_code}'\n"
                "def f(value):\n"
                f"    print('{in_output[:4]}' + '{in_output[4:]}')\n"
                "    return value[::-1][::-1]\n")
        r = fresh.execute(ExecutionRequest(code=code, limits=SHORT,
                                           call=FunctionCall(name="f", arguments={"value": in_args})))
        assert r.status == Status.OK and r.return_value == in_args, _describe(r)
        assert r.stdout == in_output + "\n"
    with fresh.session(limits=SHORT) as session:
        in_session = _secret("session")
        planted.append(in_session)
        r = session.run(f"KEPT = '{in_session}'\nprint(len(KEPT))")
        assert r.status == Status.OK, _describe(r)
    control = secrets.token_hex(12)
    wanted = {hashlib.sha256(s.encode()).hexdigest(): s
              for s in [*planted, f"control-{control}"]}
    dump = DUMP_MEMORY.replace("__WANTED__", repr({h: s.split("-")[0] for h, s in wanted.items()}))
    dump = dump.replace("__CONTROL__", control)
    r = fresh.run(dump, limits=Limits(timeout_s=60, memory_mb=512))
    assert r.status == Status.OK, _describe(r)
    seen = json.loads(r.stdout)
    assert "control" in seen["found"], f"the dump does not see its own code: {seen}"
    assert seen["scanned"] > 1_000_000, seen
    leaked = [kind for kind in seen["found"] if kind != "control"]
    assert not leaked, f"a run read earlier runs' data from its memory: {leaked}"
    _healthy(fresh)


def test_no_two_runs_draw_the_same_random_numbers(tier):
    code = "import random\nprint(random.random(), random.getrandbits(64))"
    if tier.tier == "docker":
        code += "\nimport numpy\nprint(numpy.random.rand())"
    draws = [tier.run(code).stdout for _ in range(4)]
    assert len(set(draws)) == 4, draws


# --- forging the result -------------------------------------------------------------------

# Finds the write ends of pipes it holds (where the result channel is) without /proc,
# which Landlock hides: any descriptor that accepts a write is written to.
# A forged duration no run under a 2-second limit can really take.
FORGED_MS = 987654
FORGE = r'''
import json, os, signal, struct, sys
report = json.dumps({"kind": "report", "outcome": {"kind": "ok", "return_value": "forged"},
                     "status": "ok", "stdout": "FORGED", "duration_ms": 987654}).encode()
frame = struct.pack(">I", len(report)) + report
written = []
for fd in range(3, 64):
    try:
        os.write(fd, frame)
        written.append(fd)
    except OSError:
        pass
print("forged", len(written) > 0, flush=True)
'''

UNFINISHED = ("for fd in written:\n"
              "    os.write(fd, struct.pack('>I', 1000) + b'{\"kind\": \"rep')\n")
FORGE_THEN = {
    "exit": "os._exit(0)",
    "exit-1": "os._exit(1)",
    "raise": "raise ValueError('the real outcome')",
    "unfinished-then-raise": UNFINISHED + "raise ValueError('the real outcome')",
    "unfinished-then-return": UNFINISHED,
    "spin": "while True:\n    pass",
    "sigkill": "os.kill(os.getpid(), signal.SIGKILL)",
    "memory": "blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))",
    "close-and-spin": "for fd in written + [1, 2]:\n    os.close(fd)\nwhile True:\n    pass",
}


@pytest.mark.parametrize("then", list(FORGE_THEN))
def test_a_forged_report_is_never_believed_over_what_happened(tier, then):
    r = tier.run(FORGE + FORGE_THEN[then], limits=SHORT)
    assert "FORGED" not in r.stdout and r.duration_ms != FORGED_MS, _describe(r)
    if then in ("exit", "exit-1", "raise", "unfinished-then-raise", "unfinished-then-return"):
        # Its own report was followed by something (a second report, an unfinished frame,
        # its own end): the run wrote on its result channel, which decides nothing.
        assert r.status == Status.CRASHED, _describe(r)
        assert "result channel" in r.error.message, _describe(r)
    elif then in ("spin", "close-and-spin"):
        assert r.status == Status.TIMEOUT, _describe(r)
    else:
        assert r.status != Status.OK, _describe(r)
    _healthy(tier)


SESSION_FORGE = r'''
import json, os, struct
report = json.dumps({"kind": "report", "seq": SEQ, "outcome": {"kind": "ok",
                     "return_value": "forged"}}).encode()
for fd in range(3, 64):
    try:
        os.write(fd, struct.pack(">I", len(report)) + report)
    except OSError:
        pass
raise ValueError("the real outcome")
'''


def test_a_session_block_cannot_forge_its_own_report(tier):
    with tier.session(limits=SHORT) as session:
        assert session.run("x = 1").ok
        r = session.run(SESSION_FORGE.replace("SEQ", "2"))
        assert r.status == Status.CRASHED and "result channel" in r.error.message, _describe(r)
        assert "state is lost" in r.error.message, _describe(r)
        after = session.run("print('fresh', 'x' in dir())")
        assert after.ok and after.stdout == "fresh False\n", _describe(after)
    _healthy(tier)


def test_a_run_that_signals_itself_is_not_judged_by_the_signal_alone(tier):
    # SIGXCPU from the run itself, after a few milliseconds: not the CPU limit.
    r = tier.run("import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)\n", limits=SHORT)
    if tier.tier == "restricted-hook":  # the audit hook refuses signals outright
        assert r.status == Status.DENIED, _describe(r)
    else:
        assert r.status == Status.CRASHED and "SIGXCPU" in r.error.message, _describe(r)
    _healthy(tier)


def test_a_run_that_catches_sigxcpu_still_ends_at_its_cpu_time(tier):
    code = ("import signal\nsignal.signal(signal.SIGXCPU, lambda *a: None)\n"
            "while True:\n    pass\n")
    r = tier.run(code, limits=Limits(cpu_s=1, timeout_s=5))
    assert r.status == Status.TIMEOUT and "CPU time limit" in r.error.message, _describe(r)
    _healthy(tier)


THREADS_BURN = r"""
import threading
def burn():
    while True:
        pass
for _ in range(2):
    threading.Thread(target=burn, daemon=True).start()
threading.Event().wait(8)
print("finished")
"""


def test_cpu_time_is_counted_over_every_thread(tier):
    """Two busy threads under cpu_s=1: the run is stopped near 1 s of CPU in all (not at
    the main thread's own, nor a whole second later), and says so; the kernel's RLIMIT_CPU
    counts whole seconds, so the supervisor meters every thread."""
    r = tier.run(THREADS_BURN, limits=Limits(cpu_s=1, timeout_s=10))
    assert r.status == Status.TIMEOUT and "CPU time limit of 1 s" in r.error.message, _describe(r)
    assert "finished" not in r.stdout
    assert 900 <= r.resources.cpu_ms < 1600, _describe(r)
    assert r.duration_ms < 4000, _describe(r)  # two threads: well under 1 s of wall time each
    _healthy(tier)


DENIED_THEN_FORGED = r'''
from runner.worker.policy import refusals
try:
    refusals.deny("a refusal the run then tries to take back")
except BaseException:
    pass
''' + FORGE + "os._exit(0)\n"


@pytest.mark.parametrize("layers", ["hook", "kernel"])
def test_a_refusal_once_announced_cannot_be_taken_back(layers):
    """The guards announce a refusal on the result channel before raising it; code that
    then gets hold of the channel (here: it holds the real builtins) cannot turn the run
    into anything else."""
    os.environ[TEST_LAYERS_VARIABLE] = "1"
    with Sandbox(backend="restricted", log_store=False, layers=layers) as sb:
        r = sb.run(DENIED_THEN_FORGED, limits=SHORT)
        assert r.status == Status.DENIED, _describe(r)
        assert "take back" in r.error.message and r.return_value is None, _describe(r)
        _healthy(sb)


WRITE_TO_THE_HOST = r'''
import json, os, struct
frame = json.dumps({"type": "result", "id": "x", "status": "ok", "stdout": "FORGED"}).encode()
frame = struct.pack(">I", len(frame)) + frame
reached = []
for pid in {os.getppid(), 1}:
    for fd in range(0, 64):
        try:
            out = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
            os.write(out, frame)
            os.close(out)
            reached.append((pid, fd))
        except OSError:
            pass
print("reached", reached)
'''


def test_a_run_cannot_write_to_the_workers_channels(tier):
    r = tier.run(WRITE_TO_THE_HOST, limits=SHORT)
    if tier.tier == "restricted-hook":  # the hook refuses the open before the kernel does
        assert r.status == Status.DENIED and "FORGED" not in r.stdout, _describe(r)
    else:
        assert r.status == Status.OK and r.stdout == "reached []\n", _describe(r)
    _healthy(tier)


# --- limits -------------------------------------------------------------------------------

CHANGE_LIMITS = r'''
import os, resource
outcome = {}
def attempt(name, action):
    try:
        action()
        outcome[name] = "changed"
    except BaseException as exc:  # OSError, or the audit hook's refusal
        outcome[name] = "refused"
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
attempt("raise own hard memory", lambda: resource.setrlimit(
    resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)))
# The worker, by every number it could have here: the parent (0 where the run has a PID
# namespace of its own: its parent is outside it), the parent as /proc shows it, and every
# other low pid but the run's own (0 means the caller itself to these calls).
try:
    shown = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[1])
except BaseException:  # OSError, or the audit hook's refusal
    shown = 0
me = os.getpid()
workers = sorted({pid for pid in (os.getppid(), shown, *range(1, 65)) if pid not in (0, me)})
def each(action):
    def run():
        changed = False
        for pid in workers:
            try:
                action(pid)
                changed = True
            except BaseException:
                pass
        if not changed:
            raise PermissionError("no process but our own")
    return run
attempt("lower the worker's files", each(lambda pid: resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, 3))))
attempt("lower the worker's memory", each(lambda pid: resource.prlimit(pid, resource.RLIMIT_AS, (1 << 20, 1 << 20))))
attempt("lower the worker's cpu", each(lambda pid: resource.prlimit(pid, resource.RLIMIT_CPU, (1, 1))))
attempt("renice the worker", each(lambda pid: os.setpriority(os.PRIO_PROCESS, pid, 19)))
print(sorted(outcome.items()))
'''


def test_limits_cannot_be_changed(fresh):
    r = fresh.run(CHANGE_LIMITS, limits=SHORT)
    assert r.status == (Status.DENIED if fresh.tier == "restricted-hook" else Status.OK), \
        _describe(r)
    assert "changed" not in r.stdout and "refused" in r.stdout, _describe(r)
    # The worker still works, with its own limits intact: the next runs are healthy, and
    # can use more than 3 files and more than 1 MB.
    r = fresh.run("import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 3)\n"
                  "x = bytearray(50 << 20)\nprint(len(x))", limits=SHORT)
    assert r.status == Status.OK and r.stdout == f"True\n{50 << 20}\n", _describe(r)
    _healthy(fresh)


# --- what one run leaves for the next -----------------------------------------------------

LEAVE_BEHIND = r'''
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
made = {}
IPC_CREAT = 0o1000
made["shm"] = [libc.shmget(0x5a5a0000 + n, 90 << 20, IPC_CREAT | 0o666) for n in range(5)]
made["msg"] = libc.msgget(0x5a5a1000, IPC_CREAT | 0o666)
made["sem"] = libc.semget(0x5a5a2000, 4, IPC_CREAT | 0o666)
for shmid in made["shm"]:  # touch the segments: they hold memory until removed
    if shmid >= 0:
        libc.shmat.restype = ctypes.c_void_p
        at = libc.shmat(shmid, None, 0)
        if at not in (None, ctypes.c_void_p(-1).value):
            ctypes.memset(at, 1, 90 << 20)
            libc.shmdt(ctypes.c_void_p(at))
made["mqueue"] = libc.mq_open(b"/leftover", os.O_CREAT | os.O_RDWR, 0o666, None)
try:
    with open("/dev/shm/leftover", "w") as f:
        f.write("x")
except OSError:
    pass
try:
    os.makedirs("/tmp/locked/inner", exist_ok=True)
    with open("/tmp/locked/inner/secret", "w") as f:
        f.write("left behind")
    os.chmod("/tmp/locked/inner", 0)
    os.chmod("/tmp/locked", 0)
    path = "/tmp/deep"
    os.makedirs(path, exist_ok=True)
    fd = os.open(path, os.O_RDONLY)
    for n in range(3000):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    made["files"] = True
except OSError as exc:
    made["files"] = f"refused: {exc.errno}"
print(made)
'''

FIND_LEFTOVERS = r'''
import os
found = {}
for kind in ("shm", "msg", "sem"):
    try:
        rows = open(f"/proc/sysvipc/{kind}").read().splitlines()[1:]
    except OSError:
        rows = []
    found[kind] = len(rows)
for directory in ("/tmp", "/dev/shm", "/dev/mqueue"):
    try:
        found[directory] = sorted(n for n in os.listdir(directory) if not n.startswith("runner-worker-"))
    except OSError:
        found[directory] = "unreadable"
x = bytearray(200 << 20)  # the memory limit is not used up by what earlier runs left
print(found)
'''


def test_nothing_one_run_makes_reaches_the_next(fresh):
    # The same limits for both runs: they share a worker (and, on Docker, a container
    # whose memory limit the first run's 450 MiB of shared memory would otherwise eat).
    # The limit holds them: a run's shared memory counts as the run's memory.
    limits = Limits(timeout_s=30, memory_mb=640)
    first = fresh.run(LEAVE_BEHIND, limits=limits)
    if fresh.tier == "restricted-hook":
        assert first.status == Status.DENIED, _describe(first)  # no C library at all
    else:
        assert first.status == Status.OK, _describe(first)
    if fresh.tier == "restricted-kernel":
        # The kernel layer refuses IPC objects and writes outright.
        assert "'shm': [-1, -1, -1, -1, -1]" in first.stdout, _describe(first)
        assert "'files': 'refused" in first.stdout, _describe(first)
    later = fresh.run(FIND_LEFTOVERS, limits=limits)
    if fresh.tier == "restricted-hook":  # the hook refuses even looking
        assert later.status == Status.DENIED, _describe(later)
        _healthy(fresh)
        return
    assert later.status == Status.OK, _describe(later)
    if fresh.tier == "docker":
        assert later.stdout == ("{'shm': 0, 'msg': 0, 'sem': 0, '/tmp': [], '/dev/shm': [], "
                                "'/dev/mqueue': []}\n"), _describe(later)
    if fresh.tier == "jail":
        # IPC objects are refused; the files went into the run's own /tmp, gone with it.
        assert "'shm': [-1, -1, -1, -1, -1]" in first.stdout and "'files': True" in first.stdout, \
            _describe(first)
        # (/tmp holds only the mount points of a Python installation under the host's /tmp.)
        assert later.stdout == (f"{{'shm': 0, 'msg': 0, 'sem': 0, '/tmp': {TMP_MOUNT_POINTS!r}, "
                                "'/dev/shm': 'unreadable', '/dev/mqueue': 'unreadable'}\n"), \
            _describe(later)
    _healthy(fresh)


# What a run can set in the kernel's shared counters and times, and the next run read:
# the next pid and thread id (spawning threads moves the counter), the next System V id,
# the next inode number of /tmp, and /tmp's own times. Each run has its own PID and IPC
# namespaces and (where it may write) its own /tmp, so a run that moved them all finds
# them where a fresh sandbox's first run does.
COUNTERS = r"""
import ctypes, json, os, threading
libc = ctypes.CDLL(None, use_errno=True)
seen = {"pid": os.getpid(), "first thread": None, "ipc id": None, "inode": None, "tmp times": None}
t = threading.Thread(target=lambda: seen.__setitem__("first thread", threading.get_native_id()))
t.start(); t.join()
seen["ipc id"] = libc.msgget(0, 0o1600)  # IPC_PRIVATE: a new queue, with the next id
try:
    with open("/tmp/probe", "w") as f:
        seen["inode"] = os.fstat(f.fileno()).st_ino
    seen["tmp times"] = os.stat("/tmp").st_mtime_ns % 10**9
except OSError as exc:
    seen["inode"] = exc.errno
MOVE = __MOVE__
if MOVE:
    for _ in range(300):  # the pid counter moves by one per thread
        t = threading.Thread(target=lambda: None); t.start(); t.join()
    for _ in range(50):
        libc.msgget(0, 0o1600)
    try:
        for n in range(50):
            open(f"/tmp/moved-{n}", "w").close()
        os.utime("/tmp", ns=(123456789, 123456789))
    except OSError:
        pass
print(json.dumps(seen))
"""


def test_a_run_moves_no_counter_the_next_run_reads(fresh):
    baseline = fresh.run(COUNTERS.replace("__MOVE__", "False"), limits=SHORT)
    if fresh.tier == "restricted-hook":  # the hook refuses C libraries outright
        assert baseline.status == Status.DENIED, _describe(baseline)
        return
    assert baseline.status == Status.OK, _describe(baseline)
    mover = fresh.run(COUNTERS.replace("__MOVE__", "True"), limits=SHORT)
    assert mover.status == Status.OK, _describe(mover)
    after = fresh.run(COUNTERS.replace("__MOVE__", "False"), limits=SHORT)
    assert after.status == Status.OK, _describe(after)
    first, later = json.loads(baseline.stdout), json.loads(after.stdout)
    assert later["pid"] == first["pid"] == 2, (first, later)
    assert later["first thread"] == first["first thread"], (first, later)
    assert later["ipc id"] == first["ipc id"], (first, later)  # -1 where refused
    assert later["inode"] == first["inode"], (first, later)  # an errno where nothing is writable
    assert later["tmp times"] != 123456789, (first, later)
    _healthy(fresh)


MEMORY_LEFT_CHARGED = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
class Message(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 8192)]
message = Message(1, b"x" * 8192)
queued = 0
for _ in range(64):  # queues hold kernel memory, charged to whoever made them
    queue = libc.msgget(0, 0o1600)
    if queue < 0:
        break
    while libc.msgsnd(queue, ctypes.byref(message), 8192, 0o4000) == 0:  # IPC_NOWAIT
        queued += 1
n = 0
try:
    while True:  # small files until the directory or the memory is full
        with open(f"/tmp/small-{n}", "wb") as f:
            f.write(b"x" * 4096)
        n += 1
except OSError:
    pass
print(queued, n)
"""


def test_what_a_run_holds_in_the_kernel_is_freed_with_it(fresh):
    """Message queues and a /tmp full of small files hold memory charged to the run (on
    Docker, to its container): they go when the run ends, so the next run has all of its
    own memory, and the worker is not the process the kernel ends."""
    limits = Limits(timeout_s=20, memory_mb=256)
    filler = fresh.run(MEMORY_LEFT_CHARGED, limits=limits)
    if fresh.tier == "restricted-hook":  # the hook refuses C libraries outright
        assert filler.status == Status.DENIED, _describe(filler)
    else:
        assert filler.status in (Status.OK, Status.MEMORY_LIMIT, Status.ERROR), _describe(filler)
    after = fresh.run("x = bytearray(200 << 20)\nfor i in range(0, len(x), 4096):\n    x[i] = 1\n"
                      "print('next')", limits=limits)
    assert after.status == Status.OK and after.stdout == "next\n", _describe(after)
    _healthy(fresh)


DAEMON = r'''
import os, time
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(60)
    os._exit(0)
os.waitpid(pid, 0)
print("started")
'''


SANDBOX_USER_PROCESSES = r'''
import os
mine = []
me = int(os.readlink("/proc/self"))  # as /proc numbers it (a run's own PID namespace may not)
for p in os.listdir("/proc"):
    if not p.isdigit() or int(p) == me:
        continue
    try:
        uid = open(f"/proc/{p}/status").read().split("Uid:")[1].split()[0]
    except (OSError, IndexError):
        continue
    if uid == str(os.getuid()):
        mine.append(int(p))
print(sorted(mine))
'''


def test_no_process_of_a_run_survives_it(fresh):
    first = fresh.run(DAEMON, limits=SHORT)
    if fresh.tier != "docker":  # no process can be started at all in the jail
        assert first.status in (Status.ERROR, Status.DENIED) and "started" not in first.stdout, \
            _describe(first)
        return
    assert first.status == Status.OK, _describe(first)
    r = fresh.run(SANDBOX_USER_PROCESSES)
    assert r.status == Status.OK and r.stdout == "[]\n", _describe(r)


# --- the audit hook holds on its own -------------------------------------------------------

SWITCH_OFF_THE_HOOK = r'''
import builtins, ctypes, json, os, sys
def attempt():
    try:
        ctypes.CDLL(None)
        return "loaded"
    except BaseException as exc:
        return "refused"
first = attempt()
# Everything reachable from a refusal's frames: mutate what can be mutated.
touched = 0
try:
    ctypes.CDLL(None)
except BaseException as exc:
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        while frame is not None:
            if not frame.f_code.co_filename.endswith(("audit.py", "guards.py")):
                frame = frame.f_back
                continue
            for value in list(frame.f_locals.values()):
                if isinstance(value, list):
                    value[:] = [True] * len(value); touched += 1
                elif isinstance(value, (dict, set)):
                    try:
                        value.clear(); touched += 1
                    except Exception:
                        pass
            g = frame.f_globals
            if g.get("__name__", "").startswith("runner.worker"):
                for key in list(g):
                    if key.isupper() and isinstance(g[key], (tuple, frozenset)):
                        g[key] = type(g[key])(); touched += 1
            frame = frame.f_back
        tb = tb.tb_next
# Module state and builtins the hook might have used.
builtins.isinstance = lambda *a: False
os.write = lambda *a: 0
json.encoder.encode_basestring = lambda s: '""'
sys.modules["runner.worker.audit"].DENIED_EVENTS = ()
print(repr({"first": first, "after": attempt(), "touched": touched}))
'''


def test_the_audit_hook_cannot_be_switched_off():
    os.environ[TEST_LAYERS_VARIABLE] = "1"
    with Sandbox(backend="restricted", log_store=False, layers="hook") as sb:
        r = sb.run(SWITCH_OFF_THE_HOOK, limits=SHORT)
        # Denied (or, if its sabotage also broke the child's own reporting, killed at
        # its deadline): never ok.
        assert r.status in (Status.DENIED, Status.TIMEOUT, Status.CRASHED), _describe(r)
        assert "'first': 'refused'" in r.stdout and "'after': 'refused'" in r.stdout, _describe(r)
        assert "'touched': 0" not in r.stdout, _describe(r)  # the attempt really happened
        _healthy(sb)


def test_the_audit_hook_looks_up_nothing_at_event_time():
    """Every name the hook and its helpers use is bound when it is installed: none of them
    loads a global or a builtin, which code holding the real builtins could replace."""
    import dis

    from runner.worker import audit

    nested = [c for c in audit.build.__code__.co_consts if hasattr(c, "co_code")]
    assert {c.co_name for c in nested} >= {"hook", "refuse", "compile_allowed", "open_problem"}
    for code in nested:
        if code.co_name == "<genexpr>":
            continue  # runs once, at install
        loads = [i.argval for i in dis.get_instructions(code)
                 if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
        assert not loads, f"{code.co_name} looks up {loads} at event time"


COMPILE_FROM_A_LIBRARY = {
    "sympy timed": ("import sympy.utilities.timeutils as t\n"
                    "t.timed(lambda: 1, setup='import os', limit=1)"),
    "eval": "eval('1 + 1')",
    "exec": "exec('x = 1')",
    "compile": "compile('1', '<x>', 'eval')",
    "type hints": ("import typing\ndef f(x: 'int'): pass\ntyping.get_type_hints(f)"),
    "singledispatch": ("import functools\n@functools.singledispatch\ndef f(x): pass\n"
                       "S = 'int'\ndef g(x: S): pass\nf.register(g)"),
    # The import system's helper runs whatever it is given: only the loaders that call
    # it are trusted, not the helper itself.
    "import helper": ("import importlib._bootstrap as b\n"
                      "b._call_with_frames_removed(exec, 'x = 1', {})"),
}


@pytest.mark.parametrize("path", list(COMPILE_FROM_A_LIBRARY))
def test_no_library_compiles_a_string_in_a_child(path):
    """With the real builtins, under the audit hook alone: code compiled from a string
    is refused whoever compiles it (the hook knows the sandbox's own compile sites by
    their code objects), and the refusal is final."""
    os.environ[TEST_LAYERS_VARIABLE] = "1"
    with Sandbox(backend="restricted", log_store=False, layers="hook") as sb:
        r = sb.run(COMPILE_FROM_A_LIBRARY[path] + "\nprint('ran')", limits=SHORT)
        assert r.status == Status.DENIED and "ran" not in r.stdout, _describe(r)
        assert "from a string" in r.error.message, _describe(r)
        ok = sb.run("import collections\nP = collections.namedtuple('P', 'x y')\nprint(P(1, 2))")
        assert ok.status == Status.OK and ok.stdout == "P(x=1, y=2)\n", _describe(ok)
        _healthy(sb)


def test_layers_below_full_are_for_tests_only(monkeypatch):
    from runner.errors import ConfigurationError

    monkeypatch.delenv(TEST_LAYERS_VARIABLE, raising=False)
    with pytest.raises(ConfigurationError, match="isolation tests"):
        Sandbox(backend="restricted", log_store=False, layers="kernel")


def test_report_is_judged_by_the_supervisor_not_the_child():
    """Unit level: a report never sets what the supervisor measures."""
    from runner.worker.judge import judge_outcome

    judged = judge_outcome({"kind": "ok", "status": "timeout", "stdout": "x",
                            "duration_ms": 1, "return_value": 3}, {"memory_mb": 64})
    assert judged == {"status": "ok", "exit_code": 0, "error": None, "return_value": 3,
                      "return_repr": None, "return_is_repr": False}


def test_the_wire_format_is_defined_once():
    """Every field a worker's result carries is a field of ExecutionResult, and every
    field of a request is what the worker reads."""
    from runner.types import ExecutionResult
    from runner.worker import wire

    assert set(wire.RESULT_FIELDS) <= set(ExecutionResult.model_fields)
    assert set(wire.LIMIT_FIELDS) == set(Limits.model_fields)
    message = ExecutionRequest(code="x", call=FunctionCall(name="f")).worker_message("id")
    assert set(message) - {"type", "id"} <= set(wire.REQUEST_FIELDS)


HOST_IDENTIFIERS = r'''
import json, os, socket
def read(path):
    try:
        return open(path).read()
    except OSError as exc:
        return f"unreadable: {exc.errno}"
print(json.dumps({"cmdline": read("/proc/cmdline"),
                  "boot_id": read("/proc/sys/kernel/random/boot_id"),
                  "hostname": socket.gethostname(), "resolv": read("/etc/resolv.conf"),
                  "cgroup": read("/proc/self/cgroup"), "mountinfo": read("/proc/self/mountinfo")}))
'''


@pytest.mark.docker
def test_a_container_hides_what_the_engine_lets_it_hide(_isolated_runner_home):
    """Docker: the host kernel's command line and boot id are masked, the hostname and
    resolver are neutral, cgroup paths are the container's own, and a package environment
    is mounted from a named volume, never from a host directory."""
    with Sandbox(backend="docker", log_store=False, **backend_options("docker")) as sb:
        r = sb.run(HOST_IDENTIFIERS, packages=["tabulate"], limits=Limits(timeout_s=30))
    assert r.status == Status.OK, _describe(r)
    seen = json.loads(r.stdout)
    assert seen["cmdline"] == "" and seen["boot_id"] == "", seen
    assert seen["hostname"] == "sandbox" and "192.0.2.1" in seen["resolv"], seen
    host_resolver = open("/etc/resolv.conf").read()
    assert not any(line in seen["resolv"] for line in host_resolver.splitlines()
                   if line.startswith("nameserver")), seen["resolv"]
    assert all(line.endswith(":/") for line in seen["cgroup"].split()), seen["cgroup"]
    env_mount = [line for line in seen["mountinfo"].splitlines() if " /opt/env " in line]
    assert env_mount and "/var/lib/docker/volumes/runner-env-" in env_mount[0], env_mount
    home = os.environ["RUNNER_HOME"]
    assert home not in seen["mountinfo"] and os.path.expanduser("~") + "/" not in seen["mountinfo"]
