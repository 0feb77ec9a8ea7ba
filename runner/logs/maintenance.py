"""Keeping the log small: `runner logs prune --before 30d` deletes old rows, then VACUUM.

What goes: executions started before the cut-off, agent runs started before it with all
their turns and all their executions (a run is kept or dropped whole), and evaluations and
optimizer trainings created before it, with their items, epochs and actions. What a kept
record still points at stays, however old: the conversation behind a kept evaluation's
verdict, the evaluation behind a kept training's epoch. The search
index follows by its triggers, and the deleted executions' files with them (a content
that no kept file names is deleted too). Function versions stay: they are the history of what the
function sets are now, however old. A replay whose original is deleted keeps its row;
its `replay_of` becomes NULL (the foreign key says ON DELETE SET NULL). The filter
choices (execution_facets) are recomputed from what is left.

Nothing a live process still runs is touched, however old: an evaluation or a training
whose owner (`runner.logs.job_owner`) is alive, with its items, epochs, actions, every
agent run of that process and their executions; and a `running` agent run whose owner is
alive. An owner on another host (a shared disk) counts as alive: this machine cannot tell.
The report names what was skipped.

The deletes are one transaction, with the check of who is alive inside it; VACUUM
afterwards gives the freed pages back to the file system (it cannot run inside a
transaction, and needs as much free disk as the file).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..errors import LogStoreError
from .agent import live_runs
from .execution_files import drop_orphans
from .job_owner import LiveJob, live_jobs
from .rows import to_iso
from .store import LogStore


class PruneReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    before: datetime
    executions: int
    agent_runs: int
    agent_turns: int
    evaluations: int = 0
    trainings: int = 0
    bytes_before: int
    bytes_after: int
    dry_run: bool
    # What started before the cut-off but is kept because a live process still runs it:
    # the evaluations and trainings, then the agent runs that are no part of one of them.
    skipped: list[LiveJob] = []
    skipped_runs: int = 0  # the agent runs of the skipped jobs, kept with them

    @property
    def total(self) -> int:
        """How many records (with turns) go."""
        return (self.executions + self.agent_runs + self.agent_turns + self.evaluations
                + self.trainings)


# Each :live_* is a JSON array of the ids that live processes still run (`_live_work`).
_OLD_TRAININGS = ("SELECT id FROM trainings WHERE created_at < :cut "
                  "AND id NOT IN (SELECT value FROM json_each(:live_trainings))")
_OLD_EVALUATIONS = ("SELECT id FROM evaluations WHERE created_at < :cut "
                    "AND id NOT IN (SELECT value FROM json_each(:live_evaluations)) "
                    "AND id NOT IN (SELECT evaluation_id FROM training_epochs "
                    "WHERE evaluation_id IS NOT NULL "
                    f"AND training_id NOT IN ({_OLD_TRAININGS}))")
_KEPT_RUNS = ("SELECT agent_run_id FROM evaluation_items WHERE agent_run_id IS NOT NULL "
              f"AND evaluation_id NOT IN ({_OLD_EVALUATIONS}) UNION "
              "SELECT agent_run_id FROM training_actions WHERE agent_run_id IS NOT NULL "
              f"AND training_id NOT IN ({_OLD_TRAININGS}) UNION "
              "SELECT value FROM json_each(:live_runs)")
_OLD_RUNS = f"SELECT id FROM agent_runs WHERE started_at < :cut AND id NOT IN ({_KEPT_RUNS})"
# An execution of a live run is kept even before its row points at the run (the link is
# set when the run's row exists, and a spooled run's executions may arrive first).
_OF_LIVE_RUN = ("CASE WHEN json_valid(meta_json) THEN json_extract(meta_json, '$.agent_run') "
                "END IN (SELECT value FROM json_each(:live_runs))")
_OLD_EXECUTIONS = ("SELECT id FROM executions WHERE "
                   "((started_at < :cut AND (agent_run_id IS NULL OR agent_run_id IN "
                   f"({_OLD_RUNS}))) OR agent_run_id IN ({_OLD_RUNS})) "
                   f"AND NOT coalesce({_OF_LIVE_RUN}, 0)")
_COUNT_EXECUTIONS = f"SELECT COUNT(*) FROM ({_OLD_EXECUTIONS})"


def prune(store: LogStore, before: datetime, *, dry_run: bool = False, vacuum: bool = True
          ) -> PruneReport:
    """Delete what started before `before` (see the module docstring), except what a live
    process still runs (`PruneReport.skipped` says what); with `dry_run`, only count it."""
    size_before = _size(store)

    def count(conn: sqlite3.Connection) -> tuple[dict[str, Any], dict[str, str]]:
        # Who still runs what is read in the same transaction as the deletes: no job can
        # start or be resumed between the check and them.
        live = _LiveWork.of(conn)
        cut = {"cut": to_iso(before), **live.params()}
        counts = {
            "executions": conn.execute(_COUNT_EXECUTIONS, cut).fetchone()[0],
            "agent_runs": conn.execute(f"SELECT COUNT(*) FROM ({_OLD_RUNS})", cut).fetchone()[0],
            "agent_turns": conn.execute(
                f"SELECT COUNT(*) FROM agent_turns WHERE run_id IN ({_OLD_RUNS})", cut).fetchone()[0],
            "evaluations": conn.execute(f"SELECT COUNT(*) FROM ({_OLD_EVALUATIONS})",
                                        cut).fetchone()[0],
            "trainings": conn.execute(f"SELECT COUNT(*) FROM ({_OLD_TRAININGS})", cut).fetchone()[0],
            **live.skipped(conn, cut["cut"])}
        return counts, cut

    def delete(conn: sqlite3.Connection) -> dict[str, Any]:
        counts, cut = count(conn)
        # Children before parents, and what is decided before what it decides: trainings
        # (their epochs and actions go with them), then evaluations (and their items), then
        # the runs nothing kept points at, their turns and executions.
        old_runs = [row[0] for row in conn.execute(_OLD_RUNS, cut).fetchall()]
        old_executions = [row[0] for row in conn.execute(_OLD_EXECUTIONS, cut).fetchall()]
        old_evaluations = [row[0] for row in conn.execute(_OLD_EVALUATIONS, cut).fetchall()]
        conn.execute(f"DELETE FROM trainings WHERE id IN ({_OLD_TRAININGS})", cut)
        _delete_ids(conn, "evaluations", "id", old_evaluations)
        _delete_ids(conn, "executions", "id", old_executions)
        _delete_ids(conn, "agent_turns", "run_id", old_runs)
        _delete_ids(conn, "agent_runs", "id", old_runs)
        # The deleted executions' files went with them; the contents no file names now go.
        drop_orphans(conn)
        # The filter choices: only values that are still there.
        conn.execute("DELETE FROM execution_facets")
        conn.execute("INSERT INTO execution_facets (kind, value) "
                     "SELECT 'backend', backend FROM executions UNION "
                     "SELECT 'source', source FROM executions UNION "
                     "SELECT 'function', function FROM executions WHERE function IS NOT NULL")
        return counts

    if dry_run:
        counted, _ = store.read(count)
        return PruneReport(before=before, bytes_before=size_before, bytes_after=size_before,
                           dry_run=True, **counted)
    counted = store.write(delete, verb="prune")
    if vacuum:
        _vacuum(store)
    return PruneReport(before=before, bytes_before=size_before, bytes_after=_size(store),
                       dry_run=False, **counted)


class _LiveWork:
    """What live processes still run: their evaluations and trainings, and agent runs."""

    def __init__(self, jobs: list[LiveJob], runs: list[LiveJob]) -> None:
        self.jobs, self.runs = jobs, runs

    @classmethod
    def of(cls, conn: sqlite3.Connection) -> _LiveWork:
        jobs = [*live_jobs(conn, "evaluations"), *live_jobs(conn, "trainings")]
        return cls(jobs, live_runs(conn, jobs))

    def params(self) -> dict[str, str]:
        """The ids, as the JSON arrays the queries take."""
        def ids(kind: str) -> str:
            return json.dumps([job.id for job in [*self.jobs, *self.runs] if job.kind == kind])

        return {"live_evaluations": ids("evaluation"), "live_trainings": ids("training"),
                "live_runs": ids("agent run")}

    def skipped(self, conn: sqlite3.Connection, cut: str) -> dict[str, Any]:
        """What the cut-off would have taken but is kept: the jobs created before it, and
        the runs started before it (a job's own runs are only counted, with the job)."""
        old = set()
        for table, column, kind in (("evaluations", "created_at", "evaluation"),
                                    ("trainings", "created_at", "training"),
                                    ("agent_runs", "started_at", "agent run")):
            ids = json.dumps([job.id for job in [*self.jobs, *self.runs] if job.kind == kind])
            old |= {row[0] for row in conn.execute(
                f"SELECT id FROM {table} WHERE {column} < ? AND id IN "
                "(SELECT value FROM json_each(?))", (cut, ids))}
        jobs = [job for job in self.jobs if job.id in old]
        runs = [run for run in self.runs if run.id in old]
        of_jobs = [run for run in runs if any(job.same_process(run.owner) for job in jobs)]
        return {"skipped": jobs + [run for run in runs if run not in of_jobs],
                "skipped_runs": len(of_jobs)}


def _delete_ids(conn: sqlite3.Connection, table: str, column: str, ids: list[str]) -> None:
    for start in range(0, len(ids), 500):  # SQLite limits the parameters of one statement
        chunk = ids[start:start + 500]
        conn.execute(f"DELETE FROM {table} WHERE {column} IN ({', '.join('?' for _ in chunk)})",
                     chunk)


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
