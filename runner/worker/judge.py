"""From what the supervisor observed to a result: status, exit code, error, output.

The order of evidence: the supervisor's own clock (timeout), then how the child ended
(signals, the cgroup's OOM counter), then a refusal the child announced (final, even if
the child said otherwise later), and only then the child's own report. Stdlib only.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from . import error_types, wire
from .cgroup import oom_kills
from .observe import Observation
from .protocol import BLOBS

TRUNCATION_MARKER = "\n[... output truncated ...]\n"
# CPU time is read in clock ticks on some kernels: a SIGXCPU at the limit may read a
# little under it.
CPU_MEASURE_TOLERANCE = 0.95
# A run that finished with a little more CPU than its limit (the child's own reporting,
# clock-tick rounding) is not judged over it.
CPU_GRACE_MS = 20


def _fail(status: str, type_: str, message: str, exit_code: int | None) -> dict[str, Any]:
    return {"status": status, "exit_code": exit_code,
            "error": {"type": type_, "message": message, "traceback": ""},
            "return_value": None}


def judge(seen: Observation, limits: dict[str, Any]) -> dict[str, Any]:
    """The result fields of one request (wire.RESULT_FIELDS)."""
    judged = _with_output(_status(seen, limits), seen)
    if seen.outcome is not None:
        # The run's files, whatever its status: its output (the host checks them).
        judged.update({key: seen.outcome[key] for key in (*wire.FILE_FIELDS, BLOBS)
                       if key in seen.outcome})
    return judged


def _status(seen: Observation, limits: dict[str, Any]) -> dict[str, Any]:
    timeout_s = float(limits["timeout_s"])
    cpu_s = float(limits.get("cpu_s") or timeout_s)
    status = seen.wait_status
    signum = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None
    if seen.timed_out:
        return _fail("timeout", error_types.TIMEOUT,
                     f"wall-clock time limit of {timeout_s:g} s exceeded; the run was killed",
                     -signal.SIGKILL)
    # SIGXCPU is the kernel's only when the run has used its CPU time (a run can send it
    # to itself): otherwise it is a signal like any other.
    cpu_reached = seen.cpu_ms >= cpu_s * 1000 * CPU_MEASURE_TOLERANCE
    if seen.oom_kills_before is not None and (oom_kills() or 0) > seen.oom_kills_before:
        # The out-of-memory killer ended one of the run's processes (any of them, the child
        # or one it started): the run's processes together went past its memory.
        return _fail("memory_limit", error_types.MEMORY_ERROR,
                     f"memory limit of {limits['memory_mb']} MB exceeded by the run's processes "
                     "together; the kernel killed one", -signal.SIGKILL)
    if seen.cpu_exceeded:
        return _fail("timeout", error_types.TIMEOUT, f"CPU time limit of {cpu_s:g} s exceeded by the run's "
                     "threads and processes together; the run was killed", -signal.SIGKILL)
    if signum in (signal.SIGXCPU, signal.SIGKILL) and cpu_reached:
        return _fail("timeout", error_types.TIMEOUT,
                     f"CPU time limit of {cpu_s:g} s exceeded; the run was killed", -signum)
    if seen.cpu_ms > cpu_s * 1000 + CPU_GRACE_MS:
        # Finished, but past its CPU time (e.g. it caught SIGXCPU): the limit was exceeded.
        return _fail("timeout", error_types.TIMEOUT, f"CPU time limit of {cpu_s:g} s exceeded "
                     f"({seen.cpu_ms} ms used)", None)
    if signum == signal.SIGKILL:
        # Killed by something other than the supervisor: the out-of-memory killer, if the
        # evidence says so; otherwise the run killed itself (or a process it started did).
        if _oom_killed(seen, limits):
            return _fail("memory_limit", error_types.MEMORY_ERROR,
                         f"memory limit of {limits['memory_mb']} MB exceeded; the run was killed",
                         -signum)
        return _fail("crashed", error_types.CRASH, "the run was killed by SIGKILL (not by the runner)",
                     -signum)
    if signum is not None:
        return _fail("crashed", error_types.CRASH,
                     f"the run was terminated by signal {_signal_name(signum)}", -signum)
    if seen.denial is not None:
        return _fail("denied", error_types.DENIED, seen.denial, 1)
    if status is not None and os.WIFEXITED(status) and \
            os.WEXITSTATUS(status) == wire.CHANNEL_REPLACED_EXIT:
        return _fail("crashed", error_types.CRASH, "the run closed or replaced its result channel, so its "
                     "outcome cannot be told (a run decides its output and return value, "
                     "never its status)", None)
    if seen.outcome is not None and status is not None and os.WIFEXITED(status):
        # A child stops itself once its report is written (and is then killed by the
        # supervisor, or continued for a session's next block): one that ended by exiting
        # was ended by the code it ran.
        return _fail("crashed", error_types.CRASH, "the run exited by itself after a report was written "
                     "on its result channel, so the report cannot be trusted (a run decides its "
                     "output and return value, never its status)", None)
    if seen.outcome is not None and (seen.trailing or seen.malformed):
        what = seen.trailing or f"something unreadable ({seen.malformed})"
        return _fail("crashed", error_types.CRASH, f"the run wrote on its result channel: {what} came after "
                     "its report, so the report cannot be trusted (a run decides its output and "
                     "return value, never its status)", None)
    if seen.outcome is None:
        exit_code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) \
            else None
        why = (f"its result channel was unreadable ({seen.malformed})" if seen.malformed
               else "it ended without reporting a result")
        return _fail("crashed", error_types.CRASH, f"the run crashed: {why} (exit status {exit_code})",
                     exit_code)
    return judge_outcome(seen.outcome, limits)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def _oom_killed(seen: Observation, limits: dict[str, Any]) -> bool:
    if seen.oom_kills_before is not None:
        after = oom_kills()
        if after is not None:
            return after > seen.oom_kills_before
    # No cgroup counter to read: judge by how much memory the run had reached.
    return seen.max_rss_kb >= int(limits.get("memory_mb") or 0) * 1024 * 0.8


def _error(outcome: dict[str, Any]) -> dict[str, Any]:
    """The child's error description, with only the expected shape let through."""
    error = outcome.get("error")
    error = error if isinstance(error, dict) else {}
    shaped = {key: error[key] if isinstance(error.get(key), str) else ""
              for key in wire.ERROR_FIELDS}
    shaped["type"] = shaped["type"] or "Error"
    return shaped


def judge_outcome(outcome: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
    kind = outcome.get("kind")
    if kind == "ok":
        return {"status": "ok", "exit_code": 0, "error": None,
                "return_value": outcome.get("return_value"),
                "return_repr": outcome.get("return_repr")
                if isinstance(outcome.get("return_repr"), str) else None,
                "return_is_repr": outcome.get("return_is_repr") is True}
    if kind == "exit":
        code = outcome.get("exit_code")
        if code in (0, None):
            return {"status": "ok", "exit_code": 0, "error": None, "return_value": None}
        code = code if isinstance(code, int) and not isinstance(code, bool) \
            and 0 <= code <= 255 else 1
        return {"status": "error", "exit_code": code, "error": _error(outcome),
                "return_value": None}
    if kind == "denied":
        return {"status": "denied", "exit_code": 1, "error": _error(outcome),
                "return_value": None}
    if kind == "error":
        error = _error(outcome)
        if error["type"] == error_types.MEMORY_ERROR and outcome.get("allocation_failed") is True:
            error["message"] = (f"memory limit of {limits['memory_mb']} MB exceeded"
                                + (f": {error['message']}" if error["message"] else ""))
            return {"status": "memory_limit", "exit_code": 1, "error": error,
                    "return_value": None}
        return {"status": "error", "exit_code": 1, "error": error, "return_value": None}
    message = _error(outcome)["message"] or "unknown failure"
    return {"status": "crashed", "exit_code": None,
            "error": {"type": error_types.WORKER_ERROR, "message": f"the worker failed: {message}",
                      "traceback": ""},
            "return_value": None}


def _with_output(judged: dict[str, Any], seen: Observation) -> dict[str, Any]:
    stdout, stderr = seen.stdout.text(), seen.stderr.text()
    if seen.stdout.truncated:
        stdout += TRUNCATION_MARKER
    if seen.stderr.truncated:
        stderr += TRUNCATION_MARKER
    judged.update(
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=seen.stdout.truncated,
        stderr_truncated=seen.stderr.truncated,
        duration_ms=seen.duration_ms,
        resources={"cpu_ms": seen.cpu_ms, "max_rss_kb": seen.max_rss_kb,
                   **({wire.ISOLATION: seen.isolation} if seen.isolation else {})},
    )
    return judged
