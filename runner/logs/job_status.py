"""The state of a long job in the log, an evaluation or a training: one vocabulary for both."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    RUNNING = "running"  # (or its process died: `--resume ID` continues it)
    FINISHED = "finished"
    INTERRUPTED = "interrupted"  # stopped early with an error, or by Ctrl-C; resumable
