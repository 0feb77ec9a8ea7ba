"""The log store: executions (and later agent runs, turns, function versions) in SQLite.

`LogStore` writes and reads the database, `render_execution` and
`render_execution_list` turn records into plain text for the CLI.
"""

from __future__ import annotations

from runner.logs.migrations import MIGRATIONS, Migration
from runner.logs.render import format_duration, render_execution, render_execution_list
from runner.logs.store import SPOOL_NAME, ExecutionRecord, LogStore

__all__ = [
    "MIGRATIONS",
    "SPOOL_NAME",
    "ExecutionRecord",
    "LogStore",
    "Migration",
    "format_duration",
    "render_execution",
    "render_execution_list",
]
