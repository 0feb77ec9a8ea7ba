"""AgentOptimizer trainings in the log database: the training, its epochs, every proposed action.

Tables (migration 6, renamed by migration 7):
- `trainings`: one row per training: the training problems (and their file's hash),
  the agent's and the optimizer's models, the backend, the trained set's name, where the
  best set is saved, the best set itself with its epoch and success rate, settings, status;
- `training_epochs`: one row per epoch: the set it measures, how the optimizer's step
  that made it ended, the evaluation that measured it (a foreign key to `evaluations`,
  whose items link to every conversation), the success rate and what was decided
  (baseline, improved, kept, rolled_back, unchanged);
- `training_actions`: one row per proposal of the optimizer (accepted or refused, with
  the feedback code and reason) and per optimizer conversation that proposed nothing (it
  said TERMINATE, or ended otherwise), each with its agent run and turn (foreign keys),
  and, for an accepted one, the function version it made (`function_versions.id`).

An epoch row is written when the epoch starts, its set rewritten as each action of its
step is accepted, and its measurement and decision written once, when they are known; so
a training resumes from whatever it had recorded (`runner.math.training`).
"""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .job_owner import claim, owner_json, owner_of, seen_status
from .job_status import JobStatus
from .rows import from_iso, from_json, named_marks, now_iso, readable, to_iso, to_json, unreadable
from .side_table import RecordTable


class TrainingRecord(BaseModel):
    """One training's settings and state (epochs and actions are separate)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None
    status: JobStatus = JobStatus.RUNNING
    stop_reason: str | None = None
    dataset: str
    split: str | None = None
    dataset_path: str
    dataset_sha256: str
    method: str
    model: str | None = None
    base_url: str | None = None
    optimizer_model: str | None = None
    optimizer_base_url: str | None = None
    backend: str
    set_name: str
    out_path: str | None = None
    epochs: int
    best_epoch: int | None = None
    best_success_rate: float | None = None
    best_functions: dict[str, Any] | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    error: dict[str, Any] | None = None
    owner: dict[str, Any] | None = None  # the process that runs it (`runner.logs.job_owner`)


class EpochRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    training_id: str
    epoch: int
    status: str  # step, evaluate, done
    started_at: datetime
    finished_at: datetime | None = None
    functions: dict[str, Any]
    step_end: str | None = None
    evaluation_id: str | None = None
    correct: int | None = None
    total: int | None = None
    success_rate: float | None = None
    outcome: str | None = None  # baseline, improved, kept, rolled_back, unchanged

    @property
    def rolled_back(self) -> bool:
        return self.outcome == "rolled_back"


class ActionRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    training_id: str
    epoch: int
    created_at: datetime
    agent_run_id: str | None = None
    agent_turn: int | None = None
    outcome: str  # accepted, rejected, terminated, ended
    action: str | None = None
    function: str | None = None
    code: str | None = None
    reason: str = ""
    spec: dict[str, Any] | None = None
    arguments: Any = None
    function_version_id: int | None = None
    rolled_back: bool = False


class NewAction(BaseModel):
    """A row of `training_actions` to write."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_run_id: str | None
    agent_turn: int | None = None
    outcome: str
    action: str | None = None
    function: str | None = None
    code: str | None = None
    reason: str = ""
    spec: dict[str, Any] | None = None
    arguments: Any = None
    function_version_id: int | None = None


_TRAINING_COLUMNS = ("id", "created_at", "finished_at", "status", "stop_reason", "dataset", "split",
                "dataset_path", "dataset_sha256", "method", "model", "base_url",
                "optimizer_model", "optimizer_base_url", "backend", "set_name", "out_path",
                "epochs", "best_epoch", "best_success_rate", "best_functions_json",
                "settings_json", "error_json", "owner_json")
_EPOCH_COLUMNS = ("training_id", "epoch", "status", "started_at", "finished_at",
                  "functions_json", "step_end", "evaluation_id", "correct", "total",
                  "success_rate", "outcome")
_ACTION_COLUMNS = ("id", "training_id", "epoch", "created_at", "agent_run_id", "agent_turn",
                   "outcome", "action", "function", "code", "reason", "spec_json",
                   "arguments_json", "function_version_id", "rolled_back")


_SELECT_TRAINING = f"SELECT {', '.join(_TRAINING_COLUMNS)} FROM trainings"


class TrainingLog(RecordTable[TrainingRecord]):
    """Reads and writes trainings, their epochs and actions in the log database."""

    what = "the training log"
    noun, plural = "training", "trainings"
    select = _SELECT_TRAINING
    list_hint = "`runner math trainings` lists them"

    # -- writing -----------------------------------------------------------------------------

    def create(self, record: TrainingRecord) -> None:
        """The training's row; this process is its owner."""
        row = {**_training_dict(record), "owner_json": owner_json()}
        sql = (f"INSERT INTO trainings ({', '.join(_TRAINING_COLUMNS)}) "
               f"VALUES ({named_marks(_TRAINING_COLUMNS)})")
        self._run(lambda conn: conn.execute(sql, row), "write to")

    def claim(self, training_id: str) -> None:
        """Become the owner of a training about to run again (`runner.logs.job_owner`): a
        JobRunningError, naming it, while another live process runs it."""
        self._run_transaction(lambda conn: claim(conn, "trainings", training_id))

    def set_status(self, training_id: str, status: JobStatus, *,
                   stop_reason: str | None = None, error: dict[str, Any] | None = None) -> None:
        finished = now_iso() if status is JobStatus.FINISHED else None
        self._run(lambda conn: conn.execute(
            "UPDATE trainings SET status = ?, stop_reason = ?, error_json = ?, "
            "finished_at = ? WHERE id = ?",
            (str(status), stop_reason, to_json(error), finished, training_id)), "write to")

    def set_best(self, training_id: str, *, epoch: int, success_rate: float,
                 functions: dict[str, Any]) -> None:
        self._run(lambda conn: conn.execute(
            "UPDATE trainings SET best_epoch = ?, best_success_rate = ?, "
            "best_functions_json = ? WHERE id = ?",
            (epoch, success_rate, to_json(functions), training_id)), "write to")

    def start_epoch(self, training_id: str, epoch: int, *, functions: dict[str, Any],
                    status: str) -> None:
        """The epoch's row (again, unchanged, if it is already there: a resumed epoch)."""
        self._run(lambda conn: conn.execute(
            "INSERT OR IGNORE INTO training_epochs (training_id, epoch, status, "
            "started_at, functions_json) VALUES (?, ?, ?, ?, ?)",
            (training_id, epoch, status, now_iso(), to_json(functions))), "write to")

    def record_step_run(self, training_id: str, epoch: int, actions: Sequence[NewAction], *,
                        functions: dict[str, Any]) -> None:
        """One optimizer conversation's proposals, and the epoch's set after them, together."""
        names = [c for c in _ACTION_COLUMNS if c not in ("id", "rolled_back")]
        sql = (f"INSERT INTO training_actions ({', '.join(names)}) "
               f"VALUES ({', '.join('?' for _ in names)})")
        now = now_iso()
        rows = [(training_id, epoch, now, a.agent_run_id, a.agent_turn, a.outcome, a.action,
                 a.function, a.code, a.reason, to_json(a.spec) if a.spec is not None else None,
                 to_json(a.arguments), a.function_version_id) for a in actions]

        def work(conn: sqlite3.Connection) -> None:
            conn.executemany(sql, rows)
            conn.execute("UPDATE training_epochs SET functions_json = ? "
                         "WHERE training_id = ? AND epoch = ?",
                         (to_json(functions), training_id, epoch))

        self._run_transaction(work)

    def end_step(self, training_id: str, epoch: int, *, step_end: str,
                 functions: dict[str, Any]) -> None:
        """The step is over: the epoch goes on to its measurement."""
        self._run(lambda conn: conn.execute(
            "UPDATE training_epochs SET status = 'evaluate', step_end = ?, functions_json = ? "
            "WHERE training_id = ? AND epoch = ?",
            (step_end, to_json(functions), training_id, epoch)), "write to")

    def set_evaluation(self, training_id: str, epoch: int, evaluation_id: str) -> None:
        self._run(lambda conn: conn.execute(
            "UPDATE training_epochs SET evaluation_id = ? WHERE training_id = ? AND "
            "epoch = ?", (evaluation_id, training_id, epoch)), "write to")

    def finish_epoch(self, training_id: str, epoch: int, *, outcome: str,
                     correct: int | None, total: int | None, success_rate: float | None) -> None:
        """The measurement and the decision; an epoch rolled back marks its actions too."""
        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE training_epochs SET status = 'done', finished_at = ?, outcome = ?, "
                "correct = ?, total = ?, success_rate = ? WHERE training_id = ? AND epoch = ?",
                (now_iso(), outcome, correct, total, success_rate, training_id, epoch))
            if outcome == "rolled_back":
                conn.execute("UPDATE training_actions SET rolled_back = 1 WHERE "
                             "training_id = ? AND epoch = ? AND outcome = 'accepted'",
                             (training_id, epoch))

        self._run_transaction(work)

    # -- reading -----------------------------------------------------------------------------

    def _record(self, row: Sequence[Any]) -> TrainingRecord:
        return _training_row(row)

    def list(self, *, limit: int | None = 20, before: tuple[str, str] | None = None
             ) -> builtins.list[TrainingRecord]:
        """Trainings, newest first; with `before` (created_at, id), the ones after it."""
        return self._pages(limit=limit, before=before)

    def epochs(self, training_id: str) -> builtins.list[EpochRecord]:
        rows = self._run(lambda conn: conn.execute(
            f"SELECT {', '.join(_EPOCH_COLUMNS)} FROM training_epochs WHERE "
            "training_id = ? ORDER BY epoch", (training_id,)).fetchall(), "read")
        return readable(rows, _epoch)

    def actions(self, training_id: str, epoch: int | None = None) -> builtins.list[ActionRecord]:
        sql = (f"SELECT {', '.join(_ACTION_COLUMNS)} FROM training_actions WHERE "
               "training_id = ?")
        params: builtins.list[Any] = [training_id]
        if epoch is not None:
            sql += " AND epoch = ?"
            params.append(epoch)
        rows = self._run(lambda conn: conn.execute(sql + " ORDER BY id", params).fetchall(), "read")
        return readable(rows, _action)

    def for_evaluation(self, evaluation_id: str) -> tuple[str, int] | None:
        """(training, epoch) that an evaluation measured, if it was a training's."""
        row = self._run(lambda conn: conn.execute(
            "SELECT training_id, epoch FROM training_epochs WHERE evaluation_id = ?",
            (evaluation_id,)).fetchone(), "read")
        return (str(row[0]), int(row[1])) if row else None

    def set_name_taken(self, set_name: str) -> bool:
        """Whether a set of this name has a history already (or a training owns the name)."""
        return bool(self._run(lambda conn: conn.execute(
            "SELECT EXISTS (SELECT 1 FROM function_versions WHERE set_name = ?) OR "
            "EXISTS (SELECT 1 FROM trainings WHERE set_name = ?)",
            (set_name, set_name)).fetchone()[0], "read"))

    def version_scores(self, set_name: str) -> dict[tuple[str, int], builtins.list[tuple[str, int, float]]]:
        """For each (function, version) of a set that a training measured: (training, epoch,
        success rate) of every epoch whose set held exactly that version."""
        rows = self._run(lambda conn: conn.execute(
            "SELECT e.training_id, e.epoch, e.success_rate, e.functions_json "
            "FROM training_epochs e JOIN trainings o ON o.id = e.training_id "
            "WHERE o.set_name = ? AND e.success_rate IS NOT NULL ORDER BY e.training_id, "
            "e.epoch", (set_name,)).fetchall(), "read")
        scores: dict[tuple[str, int], builtins.list[tuple[str, int, float]]] = {}
        for training_id, epoch, rate, functions_json in rows:
            functions = (from_json(functions_json, {}) or {}).get("functions") or []
            for function in functions:
                name, version = function.get("name"), function.get("version")
                if isinstance(name, str) and isinstance(version, int):
                    scores.setdefault((name, version), []).append(
                        (str(training_id), int(epoch), float(rate)))
        return scores


def insert_training(conn: sqlite3.Connection, record: TrainingRecord,
                    epochs: Sequence[EpochRecord],
                    actions: Sequence[tuple[ActionRecord, int | None]]) -> bool:
    """Write a training, its epochs and its actions (each with the id its function version
    has in this log) as they were recorded elsewhere (an import), unless the log has it
    already (then nothing is written: False). A link to an evaluation, a conversation or
    its turn is kept only when that is in the log. The caller holds a transaction."""
    row = _training_dict(record)
    sql = (f"INSERT OR IGNORE INTO trainings ({', '.join(_TRAINING_COLUMNS)}) "
           f"VALUES ({named_marks(_TRAINING_COLUMNS)})")
    if conn.execute(sql, row).rowcount <= 0:
        return False
    conn.executemany(
        "INSERT INTO training_epochs (training_id, epoch, status, started_at, finished_at, "
        "functions_json, step_end, evaluation_id, correct, total, success_rate, outcome) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, (SELECT id FROM evaluations WHERE id = ?), ?, ?, ?, ?)",
        [(record.id, e.epoch, e.status, to_iso(e.started_at), to_iso(e.finished_at),
          to_json(e.functions), e.step_end, e.evaluation_id, e.correct, e.total, e.success_rate,
          e.outcome) for e in epochs])
    conn.executemany(
        "INSERT INTO training_actions (training_id, epoch, created_at, agent_run_id, agent_turn, "
        "outcome, action, function, code, reason, spec_json, arguments_json, "
        "function_version_id, rolled_back) VALUES (?, ?, ?, "
        "(SELECT id FROM agent_runs WHERE id = ?), "
        "(SELECT number FROM agent_turns WHERE run_id = ? AND number = ?), "
        "?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(record.id, a.epoch, to_iso(a.created_at), a.agent_run_id, a.agent_run_id, a.agent_turn,
          a.outcome, a.action, a.function, a.code, a.reason,
          to_json(a.spec) if a.spec is not None else None, to_json(a.arguments), version_id,
          int(a.rolled_back)) for a, version_id in actions])
    return True


def _training_dict(record: TrainingRecord) -> dict[str, Any]:
    return {
        "id": record.id, "created_at": to_iso(record.created_at),
        "finished_at": to_iso(record.finished_at), "status": str(record.status),
        "stop_reason": record.stop_reason, "dataset": record.dataset, "split": record.split,
        "dataset_path": record.dataset_path, "dataset_sha256": record.dataset_sha256,
        "method": record.method, "model": record.model, "base_url": record.base_url,
        "optimizer_model": record.optimizer_model,
        "optimizer_base_url": record.optimizer_base_url, "backend": record.backend,
        "set_name": record.set_name, "out_path": record.out_path, "epochs": record.epochs,
        "best_epoch": record.best_epoch, "best_success_rate": record.best_success_rate,
        "best_functions_json": to_json(record.best_functions),
        "settings_json": to_json(record.settings), "error_json": to_json(record.error),
        "owner_json": to_json(record.owner) if record.owner is not None else None}


def _training_row(row: Sequence[Any]) -> TrainingRecord:
    r = dict(zip(_TRAINING_COLUMNS, row, strict=True))
    try:
        owner = owner_of(r["owner_json"])
        status, error = seen_status("trainings", r["id"], r["status"], owner,
                                    from_json(r["error_json"]))
        return TrainingRecord(
            id=r["id"], created_at=datetime.fromisoformat(r["created_at"]),
            finished_at=from_iso(r["finished_at"]), status=status,
            stop_reason=r["stop_reason"], dataset=r["dataset"], split=r["split"],
            dataset_path=r["dataset_path"], dataset_sha256=r["dataset_sha256"],
            method=r["method"], model=r["model"], base_url=r["base_url"],
            optimizer_model=r["optimizer_model"], optimizer_base_url=r["optimizer_base_url"],
            backend=r["backend"], set_name=r["set_name"], out_path=r["out_path"],
            epochs=r["epochs"], best_epoch=r["best_epoch"],
            best_success_rate=r["best_success_rate"],
            best_functions=from_json(r["best_functions_json"]),
            settings=from_json(r["settings_json"], {}) or {}, error=error, owner=owner)
    except ValueError as exc:
        raise unreadable(f"training {r['id']}", exc) from exc


def _epoch(row: Sequence[Any]) -> EpochRecord:
    r = dict(zip(_EPOCH_COLUMNS, row, strict=True))
    try:
        return EpochRecord(
            training_id=r["training_id"], epoch=r["epoch"], status=r["status"],
            started_at=datetime.fromisoformat(r["started_at"]), finished_at=from_iso(r["finished_at"]),
            functions=from_json(r["functions_json"], {}) or {}, step_end=r["step_end"],
            evaluation_id=r["evaluation_id"], correct=r["correct"], total=r["total"],
            success_rate=r["success_rate"], outcome=r["outcome"])
    except (ValueError, TypeError) as exc:  # bad JSON or time: damaged
        raise unreadable(f"epoch {r['epoch']} of training {r['training_id']}", exc) from exc


def _action(row: Sequence[Any]) -> ActionRecord:
    r = dict(zip(_ACTION_COLUMNS, row, strict=True))
    try:
        return ActionRecord(
            id=r["id"], training_id=r["training_id"], epoch=r["epoch"],
            created_at=datetime.fromisoformat(r["created_at"]), agent_run_id=r["agent_run_id"],
            agent_turn=r["agent_turn"], outcome=r["outcome"], action=r["action"],
            function=r["function"], code=r["code"], reason=r["reason"] or "",
            spec=from_json(r["spec_json"]), arguments=from_json(r["arguments_json"]),
            function_version_id=r["function_version_id"], rolled_back=bool(r["rolled_back"]))
    except (ValueError, TypeError) as exc:  # bad JSON or time: damaged
        raise unreadable(f"action {r['id']} of training {r['training_id']}", exc) from exc
