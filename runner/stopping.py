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
"""

from __future__ import annotations

from typing import Any


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
