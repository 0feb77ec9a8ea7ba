"""What Ctrl-C raises once the work it stopped has been recorded.

Each is a KeyboardInterrupt, so a caller that does nothing special stops as Ctrl-C always
stops it; a caller that wants to say what was stopped (the CLI prints one JSON object, or
the resume command) finds the record on the exception:

- `RunInterrupted`: a run (`Sandbox.run`, a session's block) was stopped; `result` is
  what the log keeps for it (status crashed, error type Interrupted);
- `JobInterrupted`: an evaluation or a training was stopped; `report` is its report as
  recorded (status interrupted, the problems in progress pending, how to resume);
- `Stopped`: a model request was abandoned because its client was told to stop
  (`OpenAIChat.stop`), so that a job's worker threads end at once.

SIGTERM (what systemd, `timeout`, Kubernetes and Ray send to stop a process) stops the
same way once `stop_on_sigterm()` is called: the `runner` command calls it at start, and a
program using the library opts in with one call. `stopped_by()` says which of the two
stopped the process, for the messages that say so.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

_stopped_by = "Ctrl-C"


def stopped_by() -> str:
    """What stopped the process: "Ctrl-C" (SIGINT, the default) or "SIGTERM"."""
    return _stopped_by


def note_stop(signum: int) -> None:
    """Remember which signal is stopping the process (for `stopped_by`)."""
    global _stopped_by
    _stopped_by = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    note_stop(signum)
    raise KeyboardInterrupt


def stop_on_sigterm() -> bool:
    """Make SIGTERM stop this process as the first Ctrl-C does: a KeyboardInterrupt in the
    main thread, so a run in progress is logged as interrupted (`RunInterrupted`), an
    evaluation or a training records its problems in progress as pending
    (`JobInterrupted`), an agent keeps its turn in progress, and a Docker container is
    stopped, none of which happens when SIGTERM kills the process outright.

    Call it from the main thread (signal handlers live there). A SIGTERM the process
    inherited as ignored stays ignored: whoever started it asked for that. Returns whether
    SIGTERM now stops the process this way."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        return False
    signal.signal(signal.SIGTERM, _on_sigterm)
    return True


def stops_on_sigterm() -> bool:
    """Whether `stop_on_sigterm` is in force (the CLI's Ctrl-C handling then takes SIGTERM
    as well)."""
    return signal.getsignal(signal.SIGTERM) is _on_sigterm


class Stopped(KeyboardInterrupt):
    """A model request abandoned because its client was stopped (the job is stopping)."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C while a run ran; `result` is the ExecutionResult the log keeps for it."""

    def __init__(self, result: Any) -> None:
        super().__init__("interrupted (Ctrl-C) while a run ran")
        self.result = result


class JobInterrupted(KeyboardInterrupt):
    """Ctrl-C ended an evaluation or a training; `report` is its report as recorded."""

    def __init__(self, report: Any) -> None:
        super().__init__("interrupted (Ctrl-C)")
        self.report = report
