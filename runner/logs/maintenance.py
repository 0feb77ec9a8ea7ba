"""Keeping the log small: `runner logs prune --before 30d` deletes old rows, then VACUUM.

What goes: executions started before the cut-off, and agent runs started before it with
all their turns and all their executions (a run is kept or dropped whole). The search
index follows by its triggers. Function versions stay: they are the history of what the
function sets are now, however old. A replay whose original is deleted keeps its row;
its `replay_of` becomes NULL (the foreign key says ON DELETE SET NULL). The filter
choices (execution_facets) are recomputed from what is left.

The deletes are one transaction; VACUUM afterwards gives the freed pages back to the file
system (it cannot run inside a transaction, and needs as much free disk as the file).
"""

from __future__ import annotations

import sqlite3
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from runner.errors import LogStoreError
from runner.logs.query import iso_utc
from runner.logs.store import LogStore


class PruneReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    before: datetime
    executions: int
    agent_runs: int
    agent_turns: int
    bytes_before: int
    bytes_after: int
    dry_run: bool


_OLD_RUNS = "SELECT id FROM agent_runs WHERE started_at < :cut"
_COUNT_EXECUTIONS = ("SELECT COUNT(*) FROM executions WHERE started_at < :cut "
                     f"OR agent_run_id IN ({_OLD_RUNS})")


def prune(store: LogStore, before: datetime, *, dry_run: bool = False, vacuum: bool = True
          ) -> PruneReport:
    """Delete what started before `before` (see the module docstring); with `dry_run`,
    only count it."""
    cut = {"cut": iso_utc(before)}
    size_before = _size(store)

    def count(conn: sqlite3.Connection) -> tuple[int, int, int]:
        executions = conn.execute(_COUNT_EXECUTIONS, cut).fetchone()[0]
        runs = conn.execute(f"SELECT COUNT(*) FROM ({_OLD_RUNS})", cut).fetchone()[0]
        turns = conn.execute(f"SELECT COUNT(*) FROM agent_turns WHERE run_id IN ({_OLD_RUNS})",
                             cut).fetchone()[0]
        return int(executions), int(runs), int(turns)

    def delete(conn: sqlite3.Connection) -> tuple[int, int, int]:
        counts = count(conn)
        # Children before parents: executions and turns point at runs.
        conn.execute(f"DELETE FROM executions WHERE agent_run_id IN ({_OLD_RUNS})", cut)
        conn.execute("DELETE FROM executions WHERE started_at < :cut", cut)
        conn.execute(f"DELETE FROM agent_turns WHERE run_id IN ({_OLD_RUNS})", cut)
        conn.execute("DELETE FROM agent_runs WHERE started_at < :cut", cut)
        # The filter choices: only values that are still there.
        conn.execute("DELETE FROM execution_facets")
        conn.execute("INSERT INTO execution_facets (kind, value) "
                     "SELECT 'backend', backend FROM executions UNION "
                     "SELECT 'source', source FROM executions UNION "
                     "SELECT 'function', function FROM executions WHERE function IS NOT NULL")
        return counts

    if dry_run:
        executions, runs, turns = store.read(count)
        return PruneReport(before=before, executions=executions, agent_runs=runs, agent_turns=turns,
                           bytes_before=size_before, bytes_after=size_before, dry_run=True)
    executions, runs, turns = store.write(delete, verb="prune")
    if vacuum:
        _vacuum(store)
    return PruneReport(before=before, executions=executions, agent_runs=runs, agent_turns=turns,
                       bytes_before=size_before, bytes_after=_size(store), dry_run=False)


def _vacuum(store: LogStore) -> None:
    def work(conn: sqlite3.Connection) -> None:
        # Merge the search index's segments first: deletes leave tombstones behind.
        conn.execute("INSERT INTO executions_fts (executions_fts) VALUES ('optimize')")
        conn.execute("INSERT INTO agent_turns_fts (agent_turns_fts) VALUES ('optimize')")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    try:
        store.read(work)
    except LogStoreError as exc:
        raise LogStoreError(f"the rows were deleted, but VACUUM failed: {exc.message}",
                            fix="free disk space (VACUUM needs as much as the file) and run "
                                "`runner logs prune` again") from exc


def _size(store: LogStore) -> int:
    """Bytes on disk: the database file and its write-ahead log."""
    total = 0
    for suffix in ("", "-wal"):
        try:
            total += store.path.with_name(store.path.name + suffix).stat().st_size
        except FileNotFoundError:
            continue
    return total
