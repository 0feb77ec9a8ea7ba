"""The restricted tier's jail, attacked with the kernel layer alone.

Each promise of the restricted tier is tested with only the layer that carries it: code
holding the real builtins (no policy, no audit hook: `layers="kernel"`), run by a worker
started as root (as CI runs) and by a worker started as an ordinary user. Every attack
checks its status and message, that the host is untouched, and that the next run works:

- the system-call census: every number not on the allow list fails with EPERM (a call
  this project knows) or ENOSYS (one it does not);
- the view: host paths (a file the ordinary user could read, /etc/shadow, the log store,
  the Docker socket) do not exist for a run, by stat, statx, lstat, access, readlink or
  O_PATH; extended attributes, inode flags, inotify and fanotify are refused;
- no host process is visible or reachable;
- nothing is left for a later run (files, attributes, sockets, IPC, keys, processes);
- no privilege: not root, no group, empty capability sets, hard limits equal soft, and
  the process limit binds with a root caller.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from runner.worker import jail, landlock, syscalls

HERE = Path(__file__).parent
ORDINARY_USER = "4242:4242"
CALLERS = ["root", "ordinary-user"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not landlock.available(),
                                reason="the jail tests run as root (as CI does), on a kernel "
                                       "with Landlock")

PRELUDE = r'''
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    ctypes.set_errno(0)
    result = libc.syscall(nr, *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return "allowed" if result != -1 else errno.errorcode.get(ctypes.get_errno(), "?")
def attempt(f):
    try:
        f()
        return "allowed"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    except Exception as exc:
        return type(exc).__name__
OUT = {}
'''
EPILOGUE = "\nprint(json.dumps(OUT))\n"


def _skipped_in_census() -> set[int]:
    """Allowed calls are not called (exit, pause... would end or hang the child); the
    kernel's own uprobe calls are exempt from every filter."""
    return set(syscalls.allowed_numbers()) | {syscalls.X86_64[n] for n in syscalls.KERNEL_EXEMPT}


CENSUS = PRELUDE + f'''
for nr in range({syscalls.HIGHEST_KNOWN + 65}):
    if nr not in {sorted(_skipped_in_census())!r}:
        OUT[nr] = call(nr, 0, 0, 0, 0, 0, 0)
''' + EPILOGUE

XATTRS = {name: syscalls.X86_64[name] for name in (
    "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr", "setxattr",
    "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "setxattrat",
    "getxattrat", "listxattrat", "removexattrat")}

FILE_METADATA = PRELUDE + f'''
view_file = os.__file__.encode()
fd = os.open(os.__file__, os.O_RDONLY)
buf = ctypes.create_string_buffer(256)
for name, nr in {XATTRS!r}.items():
    if name.startswith("f"):
        OUT[name] = call(nr, fd, b"user.runner", buf, 16, 0)
    elif name.endswith("at"):
        OUT[name] = call(nr, -100, view_file, 0, b"user.runner", buf, 16)
    else:
        OUT[name] = call(nr, view_file, b"user.runner", buf, 16, 0)
OUT["os.setxattr"] = attempt(lambda: os.setxattr(os.__file__, "user.runner", b"x"))
OUT["os.listxattr"] = attempt(lambda: os.listxattr(os.__file__))
OUT["FS_IOC_GETFLAGS"] = call({syscalls.X86_64["ioctl"]}, fd, 0x80086601, buf)
OUT["FS_IOC_SETFLAGS"] = call({syscalls.X86_64["ioctl"]}, fd, 0x40086602, buf)
OUT["FS_IOC_FSGETXATTR"] = call({syscalls.X86_64["ioctl"]}, fd, 0x801C581F, buf)
OUT["file_getattr"] = call({syscalls.X86_64["file_getattr"]}, -100, view_file, buf, 32, 0)
OUT["file_setattr"] = call({syscalls.X86_64["file_setattr"]}, -100, view_file, buf, 32, 0)
OUT["inotify_init"] = call({syscalls.X86_64["inotify_init"]})
OUT["inotify_init1"] = call({syscalls.X86_64["inotify_init1"]}, 0)
OUT["fanotify_init"] = call({syscalls.X86_64["fanotify_init"]}, 0, 0)
OUT["chmod"] = attempt(lambda: os.chmod(os.__file__, 0o777))
OUT["utime"] = attempt(lambda: os.utime(os.__file__, (0, 0)))
''' + EPILOGUE


def _host_paths(secret: Path) -> list[str]:
    paths = [str(secret), str(secret.parent), "/etc/shadow", "/etc/passwd", os.environ["RUNNER_HOME"],
             "/var/run/docker.sock", "/run/docker.sock", "/home", "/root/.bashrc",
             str(HERE), sys.executable]
    return [path for path in paths if os.path.lexists(path)]


def host_view(secret: Path) -> str:
    return PRELUDE + f'''
statx = ctypes.create_string_buffer(512)
for path in {_host_paths(secret)!r}:
    OUT[path] = {{
        "stat": attempt(lambda: os.stat(path)),
        "lstat": attempt(lambda: os.lstat(path)),
        "access": "allowed" if os.access(path, os.F_OK) else "ENOENT",
        "readlink": attempt(lambda: os.readlink(path)),
        "o_path": attempt(lambda: os.close(os.open(path, os.O_PATH))),
        "statx": call({syscalls.X86_64["statx"]}, -100, path.encode(), 0, 0xFFF, statx),
    }}
''' + EPILOGUE


def host_processes(host_pid: int) -> str:
    return PRELUDE + f'''
OUT["kill 0"] = attempt(lambda: os.kill({host_pid}, 0))
OUT["status"] = attempt(lambda: open("/proc/{host_pid}/status").read())
OUT["pidfd_open"] = call({syscalls.X86_64["pidfd_open"]}, {host_pid}, 0)
OUT["ptrace"] = call({syscalls.X86_64["ptrace"]}, 16, {host_pid}, 0, 0)
OUT["prlimit other"] = call({syscalls.X86_64["prlimit64"]}, 1, 7, 0, ctypes.create_string_buffer(16))
OUT["getpgid 1"] = call({syscalls.X86_64["getpgid"]}, 1)
try:
    OUT["proc entries"] = sorted(n for n in os.listdir("/proc") if n.isdigit())
except OSError as exc:
    OUT["proc entries"] = errno.errorcode.get(exc.errno)
''' + EPILOGUE


LEAVE = PRELUDE + f'''
import socket, threading, time
for path in ("/tmp/jail-leftover", "/dev/shm/jail-leftover", "/jail-leftover"):
    OUT["write " + path] = attempt(lambda: open(path, "w").write("x"))
OUT["mkdir"] = attempt(lambda: os.mkdir("/tmp/jail-dir"))
OUT["setxattr"] = attempt(lambda: os.setxattr(os.__file__, "user.left", b"x"))
OUT["abstract socket"] = attempt(lambda: socket.socket(socket.AF_UNIX).bind("\\0jail-left"))
OUT["shmget"] = call({syscalls.X86_64["shmget"]}, 0x5A5A, 4096, 0o1666)
OUT["msgget"] = call({syscalls.X86_64["msgget"]}, 0x5A5B, 0o1666)
OUT["semget"] = call({syscalls.X86_64["semget"]}, 0x5A5C, 1, 0o1666)
OUT["mq_open"] = call({syscalls.X86_64["mq_open"]}, b"jail-left", 0o102, 0o666, 0)
OUT["add_key"] = call({syscalls.X86_64["add_key"]}, b"user", b"jail-left", b"x", 1, -4)
OUT["fork"] = call({syscalls.X86_64["fork"]})
OUT["memfd"] = call({syscalls.X86_64["memfd_create"]}, b"jail-left", 0)
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
''' + EPILOGUE

FIND = PRELUDE + f'''
import socket, threading
for path in ("/tmp/jail-leftover", "/dev/shm/jail-leftover", "/jail-leftover", "/tmp/jail-dir"):
    OUT["find " + path] = attempt(lambda: os.stat(path))
OUT["xattr"] = attempt(lambda: os.getxattr(os.__file__, "user.left"))
OUT["abstract socket"] = attempt(lambda: socket.socket(socket.AF_UNIX).connect("\\0jail-left"))
OUT["shmget"] = call({syscalls.X86_64["shmget"]}, 0x5A5A, 4096, 0)
OUT["request_key"] = call({syscalls.X86_64["request_key"]}, b"user", b"jail-left", 0, 0)
OUT["threads"] = threading.active_count()
''' + EPILOGUE

PRIVILEGES = PRELUDE + f'''
import resource
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
data = (ctypes.c_uint32 * 6)()
libc.capget(ctypes.byref(Header(0x20080522, 0)), data)
OUT["capabilities"] = list(data)
OUT["ids"] = [os.getresuid(), os.getresgid(), os.getgroups()]
OUT["limits"] = {{name: resource.getrlimit(getattr(resource, name)) for name in
                 ("RLIMIT_NOFILE", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CPU")}}
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
OUT["raise nofile"] = attempt(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (hard + 1, hard + 1)))
OUT["unshare user"] = call({syscalls.X86_64["unshare"]}, 0x10000000)
OUT["setuid 0"] = call({syscalls.X86_64["setuid"]}, 0)
OUT["execve"] = attempt(lambda: os.execv("/bin/sh", ["sh"]))
''' + EPILOGUE

THREADS = PRELUDE + '''
import threading, time
started = []
try:
    for _ in range(200):
        thread = threading.Thread(target=time.sleep, args=(2,), daemon=True)
        thread.start()
        started.append(thread)
except RuntimeError:
    pass
OUT["threads"] = len(started)
''' + EPILOGUE


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory):
    """A host file the ordinary user could read (so only the jail hides it), with an
    extended attribute whose value must not change."""
    directory = Path(tempfile.mkdtemp(prefix="jail-secret-", dir="/tmp"))
    directory.chmod(0o755)
    path = directory / "secret.txt"
    path.write_text("host secret\n")
    path.chmod(0o644)
    os.setxattr(path, "user.runner", b"host value")
    yield path
    shutil.rmtree(directory, ignore_errors=True)


def _attacks(secret: Path) -> list[dict[str, object]]:
    return [
        {"name": "census", "code": CENSUS, "limits": {"timeout_s": 60}},
        {"name": "file metadata", "code": FILE_METADATA},
        {"name": "host view", "code": host_view(secret)},
        {"name": "host processes", "code": host_processes(os.getpid())},
        {"name": "leave", "code": LEAVE},
        {"name": "find", "code": FIND},
        {"name": "privileges", "code": PRIVILEGES},
        {"name": "threads", "code": THREADS, "limits": {"max_processes": 8}},
    ]


_RESULTS: dict[str, dict[str, dict[str, object]]] = {}


@pytest.fixture(scope="module", params=CALLERS)
def attacked(request: pytest.FixtureRequest, secret: Path):
    """Every attack, run in one worker started by the caller (cached per caller)."""
    caller = request.param
    if caller not in _RESULTS:
        command = [sys.executable, str(HERE / "jail_probe.py")]
        if caller == "ordinary-user":
            command = [sys.executable, str(HERE / "as_user.py"), ORDINARY_USER,
                       str(HERE / "jail_probe.py")]
        before = sorted(os.listdir("/tmp"))
        proc = subprocess.run(command, input=json.dumps(_attacks(secret)), capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-4000:]
        results = json.loads(proc.stdout)
        results["_host"] = {"new in /tmp": sorted(set(os.listdir("/tmp")) - set(before))}
        _RESULTS[caller] = results
    return caller, _RESULTS[caller]


def _outcome(results: dict[str, dict[str, object]], name: str) -> dict[str, object]:
    result = results[name]
    assert result["status"] == "ok", f"{name}: {result}"
    return json.loads(str(result["stdout"]).splitlines()[-1])


def test_the_caller_is_who_the_test_says(attacked):
    caller, results = attacked
    assert (results["_caller"]["uid"] == 0) == (caller == "root")
    isolation = results["privileges"]["isolation"]
    assert isolation["namespaces"] == list(jail.NAMESPACE_NAMES)
    assert isolation["unprivileged"] and isolation["seccomp"] == "allow-list"
    assert isolation["landlock_abi"] > 0 and not isolation["policy"] and not isolation["audit_hook"]


def test_every_system_call_off_the_allow_list_is_refused(attacked):
    _, results = attacked
    outcome = _outcome(results, "census")
    wrong = {}
    for number, answer in outcome.items():
        expected = "EPERM" if int(number) in syscalls.X86_64_NAMES else "ENOSYS"
        if answer != expected:
            wrong[f"{number} {syscalls.X86_64_NAMES.get(int(number), '?')}"] = answer
    assert not wrong, wrong
    assert len(outcome) == syscalls.HIGHEST_KNOWN + 65 - len(_skipped_in_census())


def test_every_allowed_call_has_its_reason_in_the_readme():
    readme = (HERE.parent / "README.md").read_text(encoding="utf-8")
    assert syscalls.markdown_table() in readme, \
        "the README's security section must show runner.worker.syscalls.markdown_table()"
    assert syscalls.markdown_table(syscalls.JAIL_CHANGES) in readme, \
        "the README's security section must show the jail tier's changes (JAIL_CHANGES)"
    for group in (*syscalls.RESTRICTED_CHILD, *syscalls.JAIL_CHILD):
        assert group.reason and group.calls
    # The jail's table is the restricted one with its changes, nothing else.
    assert set(syscalls.JAIL_CHILD) == {*syscalls.RESTRICTED_CHILD, *syscalls.JAIL_CHANGES} - {
        group for group in syscalls.RESTRICTED_CHILD
        if group.check in (syscalls.DESCRIPTOR_FLAGS, syscalls.TERMINAL_QUERY)}


def test_extended_attributes_inode_flags_and_watches_are_refused(attacked, secret):
    _, results = attacked
    outcome = _outcome(results, "file metadata")
    assert all(answer == "EPERM" for answer in outcome.values()), outcome
    assert os.getxattr(secret, "user.runner") == b"host value"
    assert os.listxattr(secret) == ["user.runner"]


def test_host_paths_do_not_exist_for_a_run(attacked, secret):
    _, results = attacked
    outcome = _outcome(results, "host view")
    assert set(outcome) == set(_host_paths(secret))
    for path, answers in outcome.items():
        assert set(answers.values()) == {"ENOENT"}, (path, answers)
    assert secret.read_text() == "host secret\n"


def test_no_host_process_is_visible_or_reachable(attacked):
    _, results = attacked
    outcome = _outcome(results, "host processes")
    for key in ("kill 0", "status", "pidfd_open", "ptrace", "prlimit other", "getpgid 1"):
        assert outcome[key] != "allowed", (key, outcome)
    entries = outcome["proc entries"]
    assert entries == "EACCES" or str(os.getpid()) not in entries, outcome


def test_nothing_is_left_for_a_later_run(attacked):
    _, results = attacked
    left = _outcome(results, "leave")
    assert all(answer != "allowed" for answer in left.values()), left
    found = _outcome(results, "find")
    assert found.pop("threads") == 1, found
    assert all(answer != "allowed" for answer in found.values()), found
    assert results["_next_run"] == {"status": "ok", "stdout": "42\n"}
    # (Other processes on the machine may make files in /tmp meanwhile: only the run's
    # own markers count.)
    assert not [name for name in results["_host"]["new in /tmp"] if "jail-" in name], \
        results["_host"]


def test_a_run_holds_no_privilege_and_cannot_raise_its_limits(attacked):
    _, results = attacked
    outcome = _outcome(results, "privileges")
    assert outcome["capabilities"] == [0] * 6
    (uids, gids, groups) = outcome["ids"]
    assert 0 not in uids and 0 not in gids and groups == []
    for name, (soft, hard) in outcome["limits"].items():
        assert soft == hard, (name, soft, hard)
    assert outcome["raise nofile"] in ("EPERM", "ValueError")
    assert outcome["unshare user"] == outcome["setuid 0"] == outcome["execve"] == "EPERM"


def test_the_process_limit_binds_whoever_started_the_worker(attacked):
    _, results = attacked
    outcome = _outcome(results, "threads")
    assert outcome["threads"] <= 7, outcome  # the run's own thread is the eighth
    assert outcome["threads"] >= 1, outcome


def _venv_under_tmp(base: Path) -> tuple[Path, Path]:
    """A virtual environment in `base` whose site directory holds the project's packages;
    (the environment, its site-packages)."""
    base.chmod(0o755)
    venv = base / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv",
                    "--without-pip", str(venv)], check=True, timeout=120)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    Path(purelib, "project.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return venv, Path(purelib)


def test_a_python_installation_under_tmp_is_bound_not_hidden(secret):
    """A virtual environment under /tmp (a checkout in a temporary directory, as CI clones
    one) is bound into the jail's own /tmp, read-only; the rest of the host's /tmp stays
    out of sight."""
    base = Path(tempfile.mkdtemp(prefix="jail-venv-", dir="/tmp"))
    try:
        venv, _ = _venv_under_tmp(base)
        python = venv / "bin" / "python"
        code = PRELUDE + f'''
import sys
OUT["prefix"] = sys.prefix
OUT["list tmp"] = attempt(lambda: os.listdir("/tmp"))
OUT["secret dir"] = os.path.exists({str(secret.parent)!r})
OUT["secret"] = os.path.exists({str(secret)!r})
OUT["write"] = attempt(lambda: open({str(venv)!r} + "/planted", "w"))
''' + EPILOGUE
        proc = subprocess.run([str(python), str(HERE / "jail_probe.py")],
                              input=json.dumps([{"name": "view", "code": code}]),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-4000:]
        results = json.loads(proc.stdout)
        seen = _outcome(results, "view")
        assert seen["prefix"] == str(venv)
        assert seen["list tmp"] == "EACCES"  # Landlock: the environment's path, no listing
        assert seen["secret"] is False and seen["secret dir"] is False
        assert seen["write"] in ("EROFS", "EACCES"), seen["write"]
        assert not (venv / "planted").exists()
        assert results["_next_run"] == {"status": "ok", "stdout": "42\n"}
    finally:
        shutil.rmtree(base, ignore_errors=True)


PLANT = PRELUDE + """
for path in PATHS:
    OUT[path] = attempt(lambda: os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)))
OUT["dir"] = attempt(lambda: os.mkdir("/tmp/left-dir"))
""" + EPILOGUE
OBSERVE = PRELUDE + """
OUT["found"] = [path for path in PATHS if os.path.exists(path)]
OUT["tmp"] = sorted(os.listdir("/tmp"))
""" + EPILOGUE


@pytest.mark.parametrize("caller", CALLERS)
def test_nothing_in_the_jails_tmp_is_writable_without_landlock(caller):
    """The jail's /tmp and the mount points made in it for an environment under the host's
    /tmp are read-only mounts: with Landlock off (as on a kernel without it), and with the
    worker started by an ordinary user (who owns them, as its children do), a run can
    leave nothing there for the next."""
    base = Path(tempfile.mkdtemp(prefix="jail-venv-", dir="/tmp"))
    try:
        venv, purelib = _venv_under_tmp(base)
        # Landlock off in the worker: the read-only mounts alone carry this promise.
        Path(purelib, "zz_no_landlock.pth").write_text(
            f"import sys; sys.path.insert(0, {str(HERE.parent)!r}); "
            "import runner.worker.landlock as landlock; landlock.build = lambda *a, **k: None; "
            "landlock.abi_version = lambda: 0\n")
        subprocess.run(["chmod", "-R", "a+rX", str(base)], check=True)
        paths = ["/tmp/planted", f"{base}/planted", f"{venv}/lib/planted"]
        prelude = f"PATHS = {paths!r}\n"
        attacks = [{"name": "plant", "code": prelude + PLANT},
                   {"name": "observe", "code": prelude + OBSERVE}]
        python = str(venv / "bin" / "python")
        command = [python, str(HERE / "jail_probe.py")]
        if caller == "ordinary-user":
            command = [python, str(HERE / "as_user.py"), ORDINARY_USER, str(HERE / "jail_probe.py")]
        proc = subprocess.run(command, input=json.dumps(attacks), capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-4000:]
        results = json.loads(proc.stdout)
        assert (results["_caller"]["uid"] == 0) == (caller == "root")
        assert results["plant"]["isolation"]["landlock_abi"] == 0
        planted = _outcome(results, "plant")
        assert all(planted[path] == "EROFS" for path in paths), planted
        assert planted["dir"] in ("EROFS", "EPERM"), planted  # the mount, or seccomp
        observed = _outcome(results, "observe")
        assert observed["found"] == [], observed
        # Only mount points of the view (the environment, a checkout under /tmp).
        assert base.name in observed["tmp"] and "left-dir" not in observed["tmp"], observed
        assert results["_next_run"] == {"status": "ok", "stdout": "42\n"}
        assert not list(base.rglob("planted"))
    finally:
        shutil.rmtree(base, ignore_errors=True)
