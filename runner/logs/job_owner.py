"""Who runs a long job (an evaluation or a training), and whether it still does.

A job is written as `running` by the process that runs it, with that process as its owner
(`liveness.current_owner`: host, pid, the pid's start time, the boot id). Two rules follow,
the same as for agent runs:

- a `running` job whose owner is gone (killed, its machine rebooted) is read as
  `interrupted`, with an error that says so and how to resume, wherever it is shown (the
  CLI and the read-only viewer alike: nothing has to be written for it);
- a job is resumed only by claiming it (`claim`): in one write transaction, a job that a
  live process still runs is refused with an error naming that process, and otherwise this
  process becomes its owner. So two processes can never run the same job's items.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..errors import RunnerError
from .job_status import JobStatus
from .liveness import current_owner, owner_alive

Table = Literal["evaluations", "trainings"]
_NOUNS: dict[str, tuple[str, str]] = {"evaluations": ("evaluation", "runner math eval"),
                                      "trainings": ("training", "runner math train")}


class JobRunningError(RunnerError):
    """The job is being run by another process that is still alive."""

    code = "JOB_RUNNING"


def owner_json() -> str:
    """The owner column of a job this process starts or resumes."""
    return json.dumps(current_owner())


def owner_of(text: str | None) -> dict[str, Any] | None:
    try:
        owner = json.loads(text) if text else None
    except ValueError:
        return None
    return owner if isinstance(owner, dict) else None


def is_mine(owner: dict[str, Any]) -> bool:
    mine = current_owner()
    return all(owner.get(key) == mine[key] for key in ("host", "pid", "started", "boot_id"))


def seen_status(table: Table, job_id: str, status: str, owner: dict[str, Any] | None,
                error: dict[str, Any] | None) -> tuple[JobStatus, dict[str, Any] | None]:
    """The status (and error) a job is shown with: `running` with a gone owner reads as
    `interrupted`, saying so."""
    recorded = JobStatus(status)
    if recorded is not JobStatus.RUNNING or owner is None or owner_alive(owner) is not False:
        return recorded, error
    noun, command = _NOUNS[table]
    return JobStatus.INTERRUPTED, {
        "code": "INTERRUPTED",
        "message": f"its process (pid {owner.get('pid')} on {owner.get('host')}) ended before "
                   f"the {noun} did",
        "fix": f"{command} --resume {job_id}", "resume": f"{command} --resume {job_id}"}


def claim(conn: sqlite3.Connection, table: Table, job_id: str) -> None:
    """Make this process the owner of a job it is about to run (status `running`); a
    JobRunningError when another live process runs it. The caller holds a write
    transaction, so two processes cannot both claim it."""
    row = conn.execute(f"SELECT status, owner_json FROM {table} WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        return
    owner = owner_of(row[1])
    # An owner this machine cannot judge (another host name) does not hold the job: a
    # container gets a new host name each time it starts, and its old runs are gone.
    if row[0] == JobStatus.RUNNING and owner is not None and not is_mine(owner) \
            and owner_alive(owner) is True:
        noun, command = _NOUNS[table]
        where = f"pid {owner.get('pid')} on {owner.get('host')}"
        raise JobRunningError(
            f"{noun} {job_id} is being run by another process ({where}); two processes "
            "would solve its problems twice",
            fix=f"wait for that process to end (or stop it: kill {owner.get('pid')}), then "
                f"{command} --resume {job_id}")
    conn.execute(f"UPDATE {table} SET status = 'running', owner_json = ?, error_json = 'null', "
                 "finished_at = NULL WHERE id = ?", (owner_json(), job_id))


class LiveJob(BaseModel):
    """A job (or agent run) that a process still runs, or that this machine cannot tell is
    over (its owner is on another host of a shared disk): maintenance leaves it alone."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["evaluation", "training", "agent run"]
    id: str
    owner: dict[str, Any]

    @property
    def where(self) -> str:
        return f"pid {self.owner.get('pid')} on {self.owner.get('host')}"

    def same_process(self, owner: dict[str, Any] | None) -> bool:
        """Whether `owner` is the process that runs this job (the agent runs of an
        evaluation are its own)."""
        return owner is not None and all(owner.get(key) == self.owner.get(key)
                                         for key in ("host", "pid", "started", "boot_id"))


def still_runs(owner: dict[str, Any] | None) -> bool:
    """Whether an owner may still run its job: alive, or on a host this machine cannot
    judge (a shared disk), where deleting what it writes would be a guess."""
    return owner is not None and owner_alive(owner) is not False


def live_jobs(conn: sqlite3.Connection, table: Table) -> list[LiveJob]:
    """The `running` jobs of a table whose owner still runs them. Jobs from before owners
    were recorded have none: nothing can be running them now."""
    kind: Literal["evaluation", "training"] = "evaluation" if table == "evaluations" else "training"
    found = []
    for job_id, text in conn.execute(f"SELECT id, owner_json FROM {table} WHERE status = 'running'"):
        owner = owner_of(text)
        if owner is not None and still_runs(owner):
            found.append(LiveJob(kind=kind, id=job_id, owner=owner))
    return found
