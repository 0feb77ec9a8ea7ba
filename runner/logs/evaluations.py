"""Evaluations in the log database: one row per evaluation, one per problem of its sample.

Tables (migration 5): `evaluations` (dataset and its file's hash, method, model, backend,
checker version, sample size, settings, status) and `evaluation_items` (the problem with
its gold answer, and once it is done: the conversation that counted, in `agent_runs`, the
extracted answer, the verdict and its reason). The conversation's turns and executions
are found through `agent_run_id`, a foreign key, as any SQLite tool can follow.

Every item is written when the evaluation is created, as `pending`; an item becomes `done`
in one UPDATE that also requires it to be pending, so a verdict is recorded at most once
per item whatever happens (a killed process, two processes resuming the same evaluation).
A resumed evaluation runs exactly the items that are still pending. All counts are read
from the rows, so nothing can be counted twice.
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
from .rows import (
    from_iso,
    from_json,
    marks,
    named_marks,
    now_iso,
    readable,
    to_iso,
    to_json,
    unreadable,
)
from .side_table import RecordTable


class EvaluationRecord(BaseModel):
    """One evaluation's settings and state (the items are separate)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None
    status: JobStatus = JobStatus.RUNNING
    dataset: str
    split: str | None = None
    dataset_path: str
    dataset_sha256: str
    method: str
    model: str | None = None
    base_url: str | None = None
    backend: str
    function_set: str | None = None
    checker_version: str
    total: int
    settings: dict[str, Any] = Field(default_factory=dict)
    error: dict[str, Any] | None = None
    owner: dict[str, Any] | None = None  # the process that runs it (`runner.logs.job_owner`)


class NewItem(BaseModel):
    """A problem of the sample, as written when the evaluation is created."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    problem_id: str
    type: str | None = None
    level: int | None = None
    problem: dict[str, Any]  # the whole problem, gold answer included


class ItemRecord(BaseModel):
    """One problem of an evaluation and, once done, how it went."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    evaluation_id: str
    position: int
    problem_id: str
    type: str | None = None
    level: int | None = None
    problem: dict[str, Any]
    status: str = "pending"
    attempts: int = 0
    agent_run_id: str | None = None
    run_status: str | None = None
    answer: str | None = None
    correct: bool | None = None
    verdict: dict[str, Any] | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: int | None = None


class Tally(BaseModel):
    """Correct out of done, for one group (or the whole evaluation)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    correct: int = 0
    total: int = 0

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"correct": self.correct, "total": self.total, "accuracy": self.accuracy}


class Summary(BaseModel):
    """The counts of an evaluation, read from its items."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    done: int
    correct: int
    by_type: dict[str, Tally]
    by_level: dict[str, Tally]
    by_type_level: dict[str, dict[str, Tally]]  # type -> level -> tally
    run_statuses: dict[str, int]  # how the conversations ended: answered, max_turns, ...


NO_TYPE = "(no type)"
NO_LEVEL = "(no level)"

_EVAL_COLUMNS = ("id", "created_at", "finished_at", "status", "dataset", "split",
                 "dataset_path", "dataset_sha256", "method", "model", "base_url", "backend",
                 "function_set", "checker_version", "total", "settings_json", "error_json",
                 "owner_json")
_ITEM_COLUMNS = ("evaluation_id", "position", "problem_id", "type", "level", "problem_json",
                 "status", "attempts", "agent_run_id", "run_status", "answer", "correct",
                 "verdict_json", "started_at", "finished_at", "duration_ms")


_SELECT_EVALUATION = f"SELECT {', '.join(_EVAL_COLUMNS)} FROM evaluations"


def level_name(level: int | None) -> str:
    return f"Level {level}" if level is not None else NO_LEVEL


class EvaluationLog(RecordTable[EvaluationRecord]):
    """Reads and writes evaluations and their items in the log database of a LogStore."""

    what = "the evaluation log"
    noun, plural = "evaluation", "evaluations"
    select = _SELECT_EVALUATION
    list_hint = "run `runner math evals` to list them"

    # -- writing -----------------------------------------------------------------------------

    def create(self, record: EvaluationRecord, items: Sequence[NewItem]) -> None:
        """The evaluation and every item of its sample (pending), in one transaction; this
        process is its owner."""
        row = {**self._row(record), "owner_json": owner_json()}
        evaluation_sql = (f"INSERT INTO evaluations ({', '.join(_EVAL_COLUMNS)}) "
                          f"VALUES ({named_marks(_EVAL_COLUMNS)})")
        item_sql = ("INSERT INTO evaluation_items (evaluation_id, position, problem_id, type, "
                    "level, problem_json) VALUES (?, ?, ?, ?, ?, ?)")
        item_rows = [(record.id, position, item.problem_id, item.type, item.level,
                      to_json(item.problem)) for position, item in enumerate(items)]

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(evaluation_sql, row)
            conn.executemany(item_sql, item_rows)

        self._run_transaction(work)

    def start_item(self, evaluation_id: str, position: int) -> None:
        """Count one more conversation started for a pending item."""
        self._run(lambda conn: conn.execute(
            "UPDATE evaluation_items SET attempts = attempts + 1, started_at = ? "
            "WHERE evaluation_id = ? AND position = ? AND status = 'pending'",
            (now_iso(), evaluation_id, position)), "write to")

    def finish_item(self, evaluation_id: str, position: int, *, agent_run_id: str | None,
                    run_status: str, answer: str | None, correct: bool,
                    verdict: dict[str, Any] | None, duration_ms: int) -> bool:
        """Record an item's outcome; False (and nothing written) when it was already done."""
        changed = self._run(lambda conn: conn.execute(
            "UPDATE evaluation_items SET status = 'done', agent_run_id = ?, run_status = ?, "
            "answer = ?, correct = ?, verdict_json = ?, finished_at = ?, duration_ms = ? "
            "WHERE evaluation_id = ? AND position = ? AND status = 'pending'",
            (agent_run_id, run_status, answer, int(correct), to_json(verdict), now_iso(), duration_ms,
             evaluation_id, position)).rowcount, "write to")
        return bool(changed == 1)

    def claim(self, evaluation_id: str) -> None:
        """Become the owner of an evaluation about to run again (`runner.logs.job_owner`):
        a JobRunningError, naming it, while another live process runs it."""
        self._run_transaction(lambda conn: claim(conn, "evaluations", evaluation_id))

    def set_status(self, evaluation_id: str, status: JobStatus, *,
                   error: dict[str, Any] | None = None) -> None:
        finished = now_iso() if status is JobStatus.FINISHED else None
        self._run(lambda conn: conn.execute(
            "UPDATE evaluations SET status = ?, error_json = ?, finished_at = ? WHERE id = ?",
            (str(status), to_json(error), finished, evaluation_id)), "write to")

    @staticmethod
    def _row(record: EvaluationRecord) -> dict[str, Any]:
        return {
            "id": record.id, "created_at": to_iso(record.created_at),
            "finished_at": to_iso(record.finished_at), "status": str(record.status),
            "dataset": record.dataset, "split": record.split, "dataset_path": record.dataset_path,
            "dataset_sha256": record.dataset_sha256, "method": record.method,
            "model": record.model, "base_url": record.base_url, "backend": record.backend,
            "function_set": record.function_set, "checker_version": record.checker_version,
            "total": record.total, "settings_json": to_json(record.settings),
            "error_json": to_json(record.error),
            "owner_json": to_json(record.owner) if record.owner is not None else None,
        }

    # -- reading -----------------------------------------------------------------------------

    def _record(self, row: Sequence[Any]) -> EvaluationRecord:
        return _evaluation(row)

    def list(self, *, limit: int | None = 20, before: tuple[str, str] | None = None
             ) -> list[EvaluationRecord]:
        """Evaluations, newest first; with `before` (created_at, id), the ones after that one
        in this order (the next page)."""
        return self._pages(limit=limit, before=before)

    def items(self, evaluation_id: str, *, status: str | None = None,
              correct: bool | None = None, after: int | None = None, limit: int | None = None
              ) -> builtins.list[ItemRecord]:
        """The items in sample order (only those with `status`, or judged `correct` or not,
        if given; with `after` and `limit`, a page of them after that position)."""
        sql = (f"SELECT {', '.join(_ITEM_COLUMNS)} FROM evaluation_items WHERE evaluation_id = ?")
        params: list[Any] = [evaluation_id]
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
        if correct is not None:
            sql += " AND correct = ?"
            params.append(int(correct))
        if after is not None:
            sql += " AND position > ?"
            params.append(after)
        sql += " ORDER BY position"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = self._run(lambda conn: conn.execute(sql, params).fetchall(), "read")
        return readable(rows, _item)

    def progress(self, evaluation_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """(done, correct) for each evaluation."""
        if not evaluation_ids:
            return {}
        rows = self._run(lambda conn: conn.execute(
            "SELECT evaluation_id, COUNT(*), COALESCE(SUM(correct), 0) FROM evaluation_items "
            f"WHERE status = 'done' AND evaluation_id IN ({marks(evaluation_ids)}) "
            "GROUP BY evaluation_id",
            list(evaluation_ids)).fetchall(), "read")
        found = {row[0]: (int(row[1]), int(row[2])) for row in rows}
        return {i: found.get(i, (0, 0)) for i in evaluation_ids}

    def summary(self, evaluation_id: str) -> Summary:
        """Correct/done overall, by type, by level and by both, from the done items."""
        rows = self._run(lambda conn: conn.execute(
            "SELECT type, level, COUNT(*), COALESCE(SUM(correct), 0) FROM evaluation_items "
            "WHERE evaluation_id = ? AND status = 'done' GROUP BY type, level",
            (evaluation_id,)).fetchall(), "read")
        statuses = self._run(lambda conn: conn.execute(
            "SELECT run_status, COUNT(*) FROM evaluation_items WHERE evaluation_id = ? AND "
            "status = 'done' GROUP BY run_status ORDER BY run_status", (evaluation_id,)).fetchall(),
            "read")
        by_type: dict[str, list[int]] = {}
        by_level: dict[str, list[int]] = {}
        both: dict[str, dict[str, list[int]]] = {}
        done = correct = 0
        for kind, level, count, right in rows:
            type_key = kind or NO_TYPE
            level_key = level_name(level)
            for bucket in (by_type.setdefault(type_key, [0, 0]),
                           by_level.setdefault(level_key, [0, 0]),
                           both.setdefault(type_key, {}).setdefault(level_key, [0, 0])):
                bucket[0] += int(right)
                bucket[1] += int(count)
            done += int(count)
            correct += int(right)

        def tallies(groups: dict[str, list[int]]) -> dict[str, Tally]:
            return {key: Tally(correct=value[0], total=value[1])
                    for key, value in sorted(groups.items(), key=lambda item: _order(item[0]))}

        return Summary(done=done, correct=correct, by_type=tallies(by_type),
                       by_level=tallies(by_level),
                       by_type_level={key: tallies(value) for key, value in
                                      sorted(both.items(), key=lambda item: _order(item[0]))},
                       run_statuses={str(status): int(count) for status, count in statuses})


def insert_evaluation(conn: sqlite3.Connection, record: EvaluationRecord,
                      items: Sequence[ItemRecord]) -> bool:
    """Write an evaluation and its items as they were recorded elsewhere (an import), unless
    the log has it already (then nothing is written: False). An item's conversation is
    linked only when it is in the log. The caller holds a transaction."""
    row = EvaluationLog._row(record)
    sql = (f"INSERT OR IGNORE INTO evaluations ({', '.join(_EVAL_COLUMNS)}) "
           f"VALUES ({named_marks(_EVAL_COLUMNS)})")
    if conn.execute(sql, row).rowcount <= 0:
        return False
    columns = [c for c in _ITEM_COLUMNS if c != "agent_run_id"]
    item_sql = (f"INSERT INTO evaluation_items ({', '.join(columns)}, agent_run_id) VALUES "
                f"({named_marks(columns)}, (SELECT id FROM agent_runs WHERE id = :agent_run_id))")
    conn.executemany(item_sql, [{
        "evaluation_id": record.id, "position": item.position, "problem_id": item.problem_id,
        "type": item.type, "level": item.level, "problem_json": to_json(item.problem),
        "status": item.status, "attempts": item.attempts, "agent_run_id": item.agent_run_id,
        "run_status": item.run_status, "answer": item.answer,
        "correct": None if item.correct is None else int(item.correct),
        "verdict_json": to_json(item.verdict), "started_at": to_iso(item.started_at),
        "finished_at": to_iso(item.finished_at), "duration_ms": item.duration_ms}
        for item in items])
    return True


def _order(key: str) -> tuple[int, str]:
    """Groups sort by name, with the catch-all groups last."""
    return (1 if key in (NO_TYPE, NO_LEVEL) else 0, key)


def _evaluation(row: Sequence[Any]) -> EvaluationRecord:
    r = dict(zip(_EVAL_COLUMNS, row, strict=True))
    try:
        owner = owner_of(r["owner_json"])
        status, error = seen_status("evaluations", r["id"], r["status"], owner,
                                    from_json(r["error_json"]))
        return EvaluationRecord(
            id=r["id"], created_at=datetime.fromisoformat(r["created_at"]),
            finished_at=from_iso(r["finished_at"]),
            status=status, dataset=r["dataset"], split=r["split"],
            dataset_path=r["dataset_path"], dataset_sha256=r["dataset_sha256"],
            method=r["method"], model=r["model"], base_url=r["base_url"], backend=r["backend"],
            function_set=r["function_set"], checker_version=r["checker_version"],
            total=r["total"], settings=from_json(r["settings_json"], {}) or {},
            error=error, owner=owner)
    except ValueError as exc:
        raise unreadable(f"evaluation {r['id']}", exc) from exc


def _item(row: Sequence[Any]) -> ItemRecord:
    r = dict(zip(_ITEM_COLUMNS, row, strict=True))
    try:
        return ItemRecord(
            evaluation_id=r["evaluation_id"], position=r["position"], problem_id=r["problem_id"],
            type=r["type"], level=r["level"], problem=from_json(r["problem_json"], {}) or {},
            status=r["status"], attempts=r["attempts"], agent_run_id=r["agent_run_id"],
            run_status=r["run_status"], answer=r["answer"],
            correct=None if r["correct"] is None else bool(r["correct"]),
            verdict=from_json(r["verdict_json"]),
            started_at=from_iso(r["started_at"]),
            finished_at=from_iso(r["finished_at"]),
            duration_ms=r["duration_ms"])
    except ValueError as exc:
        raise unreadable(f"item {r['position']} of evaluation {r['evaluation_id']}", exc) from exc
