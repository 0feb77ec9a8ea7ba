"""The log store: executions, function versions (and later agent runs, turns) in SQLite.

`LogStore` writes and reads the database, `render_execution` and
`render_execution_list` turn records into plain text for the CLI, and
`FunctionVersionLog` keeps the history of function sets.
"""

from __future__ import annotations

from .execution_text import format_duration, render_execution, render_execution_list
from .functions import Author, FunctionVersionLog, FunctionVersionRecord
from .migrations import MIGRATIONS, Migration
from .store import SPOOL_NAME, ExecutionRecord, LogStore

__all__ = [
    "MIGRATIONS",
    "SPOOL_NAME",
    "Author",
    "ExecutionRecord",
    "FunctionVersionLog",
    "FunctionVersionRecord",
    "LogStore",
    "Migration",
    "format_duration",
    "render_execution",
    "render_execution_list",
]
