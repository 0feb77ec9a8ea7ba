"""`runner doctor`: is the Docker tier usable here, and if not, what to do.

Each check reports ok or a problem with its fix. The self-test runs a sandbox container
and checks its isolation from inside (user, capabilities, no-new-privileges, network,
read-only root, environment): the same code the attack tests rely on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import RunnerError
from . import images
from .engine import docker_cli, engine_info

# Runs inside the sandbox as plain Python; prints one JSON object of observations.
SELF_TEST = r"""
import json, os, socket
status = {}
for line in open('/proc/self/status'):
    key, _, value = line.partition(':')
    status[key] = value.strip()
interfaces = sorted(os.listdir('/sys/class/net')) if os.path.isdir('/sys/class/net') else []
try:
    socket.create_connection(('1.1.1.1', 53), timeout=2).close()
    egress = True
except OSError:
    egress = False
try:
    open('/opt/runner/probe', 'w').close()
    root_writable = True
except OSError:
    root_writable = False
print(json.dumps({
    'uid': os.getuid(), 'gid': os.getgid(), 'cap_eff': status.get('CapEff'),
    'cap_bnd': status.get('CapBnd'), 'no_new_privs': status.get('NoNewPrivs'),
    'interfaces': interfaces, 'egress': egress, 'root_writable': root_writable,
    'env': sorted(os.environ),
}))
"""

# (MPLBACKEND: the headless backend that saves plt.show()'s figures, set by the worker)
ALLOWED_ENV = {"HOME", "TMPDIR", "PATH", "LANG", "HOSTNAME", "PYTHONDONTWRITEBYTECODE",
               "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MALLOC_ARENA_MAX",
               "MPLBACKEND"}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def add(self, name: str, action: Callable[[], str]) -> bool:
        try:
            self.checks.append(Check(name, True, action()))
            return True
        except RunnerError as exc:
            self.checks.append(Check(name, False, exc.message, exc.fix or ""))
        except Exception as exc:
            self.checks.append(Check(name, False, f"{type(exc).__name__}: {exc}"))
        return False


def isolation_problems(seen: dict[str, object]) -> list[str]:
    """What the self-test's observations say is wrong (empty when all is well)."""
    problems = []
    if seen.get("uid") == 0:
        problems.append("the sandbox runs as root")
    if seen.get("cap_eff") != "0000000000000000":
        problems.append(f"effective capabilities are {seen.get('cap_eff')}, not none")
    if seen.get("no_new_privs") != "1":
        problems.append("no-new-privileges is not set")
    interfaces = list(seen.get("interfaces") or [])  # type: ignore[call-overload]
    if [name for name in interfaces if name != "lo"]:
        problems.append(f"network interfaces besides lo: {seen.get('interfaces')}")
    if seen.get("egress"):
        problems.append("a connection to the internet succeeded")
    if seen.get("root_writable"):
        problems.append("the root file system is writable")
    extra = set(seen.get("env") or []) - ALLOWED_ENV  # type: ignore[call-overload]
    if extra:
        problems.append(f"unexpected environment variables: {sorted(extra)}")
    return problems


def self_test() -> str:
    from ..sandbox import Sandbox

    with Sandbox(backend="docker", log_store=False) as sandbox:
        result = sandbox.run(SELF_TEST)
    if not result.ok:
        raise RunnerError(f"the self-test run ended with {result.status}: "
                          f"{result.error.message if result.error else result.stderr}")
    seen = json.loads(result.stdout)
    problems = isolation_problems(seen)
    if problems:
        raise RunnerError("isolation is weaker than configured: " + "; ".join(problems),
                          fix="check the engine's configuration (rootless/userns, seccomp)")
    return (f"uid {seen['uid']}, no capabilities, no-new-privileges, network: "
            f"{', '.join(seen['interfaces']) or 'none'}, read-only root")


def ensure_engine_script() -> str:
    return str(images.images_dir() / "ensure-docker.sh")


def fix_engine() -> None:
    """Install/start the engine (root) via the project's script; progress on stderr.

    The script waits for an engine that is still shutting down, and if it ever has to
    change the storage driver it rebuilds the images with this very runner."""
    env = dict(os.environ, RUNNER_CLI=f"{sys.executable} -m runner")
    proc = subprocess.run(["bash", ensure_engine_script()], stdin=subprocess.DEVNULL, env=env,
                          check=False)
    if proc.returncode != 0:
        raise RunnerError("could not make a Docker engine available (see the lines above)",
                          fix="start Docker yourself, then run `runner doctor` again")


def diagnose(*, fix: bool = False, self_check: bool = True) -> Report:
    report = Report()
    report.add("docker client", lambda: docker_cli())
    if fix:
        def set_up_engine() -> str:
            fix_engine()
            return "ensure-docker.sh done"

        report.add("engine set-up", set_up_engine)
    engine_ok = report.add("docker engine", lambda: _engine_summary())
    if not engine_ok:
        return report
    if fix and not images.status().built:
        report.add("image build", lambda: images.build().tag)
    image_ok = report.add("sandbox image", lambda: _image_summary())
    if image_ok and self_check:
        report.add("isolation self-test", self_test)
    return report


def _engine_summary() -> str:
    info = engine_info()
    return (f"Docker {info.get('ServerVersion')}, storage {info.get('Driver')}, cgroup "
            f"v{info.get('CgroupVersion')}, runtimes {', '.join(sorted(info.get('Runtimes', {})))}"
            f", running as {'root' if os.geteuid() == 0 else 'uid ' + str(os.geteuid())}")


def _image_summary() -> str:
    status = images.require()
    return f"{status.tag} ({status.id[:19] if status.id else '?'})"
