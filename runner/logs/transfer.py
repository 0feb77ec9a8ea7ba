"""Moving logs between machines: JSON Lines out (`runner logs export`), and back in.

Everything the log holds travels, one JSON object per line, each with a `kind`
(`transfer_lines` defines them):

- `function_version`: a change of a function set (the function history);
- `agent_run` (without its turns) and `agent_turn` (with the `run_id` it belongs to);
- `execution`: an `ExecutionRecord` (request, result, source, meta);
- `evaluation` and `evaluation_item`: an evaluation and each problem of its sample;
- `training`, `training_epoch` and `training_action`: a training, its epochs and every
  action its optimizer proposed (with the function version it made, by name).

Lines come in an order a reader can stream and the import needs: function versions, then
each run with its turns, the executions, the evaluations with their items, the trainings
with their epochs and actions. `--since` takes what was started or made since then (and
the function versions changed since); `--run` one agent run with its turns and executions.

An import is all or nothing: the file must be UTF-8, and every line is checked (as strictly
as the log's own writes, see `transfer_lines`) before anything is written; the rows go in
in one transaction. Rows already in the log (same id; a turn: same run and number; a
function version: same set, function, version and time; an evaluation's items and a
training's epochs and actions come with it) are left as they are and counted as such. An
export of an import is the same text as the export it came from.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..agent.run import AgentRun, AgentTurn
from ..errors import ConfigurationError, NotFoundError
from .agent import AgentLog, insert_run, insert_turn
from .evaluations import EvaluationLog, EvaluationRecord, ItemRecord, insert_evaluation
from .functions import FunctionVersionLog, insert_version, version_key
from .query import ExecutionFilter
from .rows import to_iso
from .store import ExecutionRecord, LogStore, insert_records
from .trainings import ActionRecord, TrainingLog, TrainingRecord, insert_training
from .transfer_lines import (
    LINE,
    AgentRunLine,
    AgentTurnLine,
    EvaluationItemLine,
    EvaluationLine,
    ExecutionLine,
    FunctionVersionLine,
    Line,
    TrainingActionLine,
    TrainingEpochLine,
    TrainingLine,
)

__all__ = ["ImportReport", "export_lines", "import_lines", "parse_lines", "write_export"]

_FIX = "import a file written by `runner logs export --format jsonl`; nothing was imported"


class ImportReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    executions: int = 0
    agent_runs: int = 0
    agent_turns: int = 0
    function_versions: int = 0
    evaluations: int = 0
    trainings: int = 0
    already_present: int = 0


def _dump(kind: str, data: dict[str, Any]) -> str:
    return json.dumps({"kind": kind, **data}, ensure_ascii=False, sort_keys=True)


# -- export ----------------------------------------------------------------------------------


def export_lines(store: LogStore, *, run_id: str | None = None, since: datetime | None = None
                 ) -> Iterator[str]:
    """The lines of an export (without newlines): one run (`run_id`), everything started
    at or after `since`, or the whole log."""
    agent_log = AgentLog(store)
    if run_id is not None:
        run = agent_log.get(run_id)
        yield from _run_lines(run)
        ids = list(dict.fromkeys(run.execution_ids + _ids_of_run(store, run.id)))
        for execution_id in ids:
            try:
                yield _execution_line(store.get_execution(execution_id))
            except NotFoundError:
                continue  # a turn names an execution that was never logged (or was pruned)
        return
    for version in FunctionVersionLog(store).history():
        if since is None or version.changed_at >= since:
            yield _dump("function_version", version.model_dump(mode="json", exclude={"id"}))
    for run in reversed(agent_log.list(limit=None, since=since)):
        yield from _run_lines(agent_log.get(run.id))
    for record in store.iter_executions(ExecutionFilter(since=since)):
        yield _execution_line(record)
    evaluations = EvaluationLog(store)
    for evaluation in reversed(evaluations.list(limit=None)):
        if since is None or evaluation.created_at >= since:
            yield _dump("evaluation", evaluation.model_dump(mode="json"))
            for item in evaluations.items(evaluation.id):
                yield _dump("evaluation_item", item.model_dump(mode="json"))
    trainings = TrainingLog(store)
    for training in reversed(trainings.list(limit=None)):
        if since is None or training.created_at >= since:
            yield from _training_lines(store, trainings, training)


def _ids_of_run(store: LogStore, run_id: str) -> list[str]:
    """Executions linked to the run by their foreign key (also those no turn lists)."""
    rows = store.read(lambda conn: conn.execute(
        "SELECT id FROM executions WHERE agent_run_id = ? ORDER BY started_at, id",
        (run_id,)).fetchall())
    return [str(row[0]) for row in rows]


def _run_lines(run: AgentRun) -> Iterator[str]:
    yield _dump("agent_run", run.model_dump(mode="json", exclude={"turns", "not_logged"}))
    for turn in run.turns:
        yield _dump("agent_turn", {"run_id": run.id, **turn.model_dump(mode="json")})


def _execution_line(record: ExecutionRecord) -> str:
    return _dump("execution", record.model_dump(mode="json"))


def _training_lines(store: LogStore, trainings: TrainingLog, training: TrainingRecord
                    ) -> Iterator[str]:
    yield _dump("training", training.model_dump(mode="json"))
    for epoch in trainings.epochs(training.id):
        yield _dump("training_epoch", epoch.model_dump(mode="json"))
    for action in trainings.actions(training.id):
        data = action.model_dump(mode="json", exclude={"id", "function_version_id"})
        data["function_version"] = _version_key(store, action.function_version_id)
        yield _dump("training_action", data)


def _version_key(store: LogStore, version_id: int | None) -> dict[str, Any] | None:
    if version_id is None:
        return None
    return store.read(lambda conn: version_key(conn, version_id))


def write_export(store: LogStore, out: IO[str], *, run_id: str | None = None,
                 since: datetime | None = None) -> int:
    """Write an export to `out`; how many lines."""
    count = 0
    for line in export_lines(store, run_id=run_id, since=since):
        out.write(line + "\n")
        count += 1
    return count


# -- import ----------------------------------------------------------------------------------


def parse_lines(lines: Iterable[str | bytes], *, source: str = "the file") -> list[Line]:
    """Every line checked (bytes must be UTF-8); the first bad one is a ConfigurationError
    naming its number."""
    parsed: list[Line] = []
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigurationError(
                    f"line {number} of {source} is not UTF-8 text ({exc.reason} at byte "
                    f"{exc.start})", fix=_FIX) from None
        else:
            text = raw
        if not text.strip():
            continue
        try:
            parsed.append(LINE.validate_json(text))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            message = str(first["msg"]).removeprefix("Value error, ")
            raise ConfigurationError(
                f"line {number} of {source} is not a log record ("
                + (f"{where}: " if where else "") + f"{message})", fix=_FIX) from None
    return parsed


class _Parts:
    """The lines of an import, sorted by what they are."""

    def __init__(self, parsed: list[Line], source: str) -> None:
        self.versions: list[FunctionVersionLine] = []
        self.runs: list[AgentRun] = []
        self.turns: dict[str, list[AgentTurn]] = {}
        self.records: list[ExecutionRecord] = []
        self.evaluations: list[EvaluationRecord] = []
        self.items: dict[str, list[ItemRecord]] = {}
        self.trainings: list[TrainingRecord] = []
        self.epochs: dict[str, list[Any]] = {}
        self.actions: dict[str, list[TrainingActionLine]] = {}
        for line in parsed:
            self._add(line)
        self._check_parents(source)

    def _add(self, line: Line) -> None:
        if isinstance(line, AgentTurnLine):
            self.turns.setdefault(line.run_id, []).append(
                AgentTurn.model_validate(line.model_dump(exclude={"kind", "run_id"})))
        elif isinstance(line, AgentRunLine):
            self.runs.append(AgentRun.model_validate(line.model_dump(exclude={"kind"})))
        elif isinstance(line, ExecutionLine):
            self.records.append(ExecutionRecord.model_validate(line.model_dump(exclude={"kind"})))
        elif isinstance(line, FunctionVersionLine):
            self.versions.append(line)
        elif isinstance(line, EvaluationLine):
            self.evaluations.append(EvaluationRecord.model_validate(line.model_dump(exclude={"kind"})))
        elif isinstance(line, EvaluationItemLine):
            self.items.setdefault(line.evaluation_id, []).append(
                ItemRecord.model_validate(line.model_dump(exclude={"kind"})))
        elif isinstance(line, TrainingLine):
            self.trainings.append(TrainingRecord.model_validate(line.model_dump(exclude={"kind"})))
        elif isinstance(line, TrainingEpochLine):
            self.epochs.setdefault(line.training_id, []).append(line)
        else:
            self.actions.setdefault(line.training_id, []).append(line)

    def _check_parents(self, source: str) -> None:
        for children, parents, what, whole in (
                (self.turns, self.runs, "turns of agent runs", "--run RUN_ID"),
                (self.items, self.evaluations, "problems of evaluations", ""),
                (self.epochs, self.trainings, "epochs of trainings", ""),
                (self.actions, self.trainings, "actions of trainings", "")):
            orphans = sorted(set(children) - {parent.id for parent in parents})
            if orphans:
                raise ConfigurationError(
                    f"{source} has {what} it does not contain ({', '.join(orphans[:3])})",
                    fix="export whole records" + (f" (`runner logs export {whole}`)" if whole
                                                  else "") + "; nothing was imported")

    @property
    def total(self) -> int:
        """Every record (line) of the file."""
        return (len(self.versions) + len(self.runs) + len(self.records) + len(self.evaluations)
                + len(self.trainings)
                + sum(len(group) for groups in (self.turns, self.items, self.epochs, self.actions)
                      for group in groups.values()))


def import_lines(store: LogStore, lines: Iterable[str | bytes], *, source: str = "the file"
                 ) -> ImportReport:
    """Check every line, then write them all in one transaction."""
    parts = _Parts(parse_lines(lines, source=source), source)

    def write(conn: sqlite3.Connection) -> ImportReport:
        version_ids: dict[tuple[str, str, int, str], int] = {}
        added_versions = 0
        for line in parts.versions:
            record = line.record()
            version_id, new = insert_version(conn, record)
            version_ids[(record.set_name, record.function, record.version,
                         to_iso(record.changed_at))] = version_id
            added_versions += int(new)
        added_runs = added_turns = 0
        for run in parts.runs:
            # With its turns attached, the run's row gets the right turn count and tokens.
            own = sorted(parts.turns.get(run.id, []), key=lambda turn: turn.number)
            added_runs += insert_run(conn, run.model_copy(update={"turns": own}), ignore_existing=True)
        # Executions before turns: a turn links the executions it caused when it goes in.
        added_executions = insert_records(conn, parts.records)
        for run in parts.runs:
            for turn in parts.turns.get(run.id, []):
                added_turns += insert_turn(conn, run.id, turn, ignore_existing=True)
        added_evaluations = added_children = 0
        for evaluation in parts.evaluations:
            items = parts.items.get(evaluation.id, [])
            if insert_evaluation(conn, evaluation, items):
                added_evaluations += 1
                added_children += len(items)
        added_trainings = 0
        for training in parts.trainings:
            actions: list[tuple[ActionRecord, int | None]] = []
            for action in parts.actions.get(training.id, []):
                key = action.function_version
                actions.append((action.record(), None if key is None else _version_id(
                    conn, version_ids, key.set_name, key.function, key.version,
                    to_iso(key.changed_at))))
            epochs = parts.epochs.get(training.id, [])
            if insert_training(conn, training, epochs, actions):
                added_trainings += 1
                added_children += len(epochs) + len(actions)
        added = (added_executions + added_runs + added_turns + added_versions
                 + added_evaluations + added_trainings + added_children)
        return ImportReport(executions=added_executions, agent_runs=added_runs,
                            agent_turns=added_turns, function_versions=added_versions,
                            evaluations=added_evaluations, trainings=added_trainings,
                            already_present=parts.total - added)

    return store.write(write, verb="import into")


def _version_id(conn: sqlite3.Connection, known: dict[tuple[str, str, int, str], int],
                set_name: str, function: str, version: int, changed_at: str) -> int | None:
    """The id, in this log, of a function version named across logs (None: not here)."""
    key = (set_name, function, version, changed_at)
    if key in known:
        return known[key]
    row = conn.execute("SELECT id FROM function_versions WHERE set_name = ? AND function = ? "
                       "AND version = ? AND changed_at = ?", key).fetchone()
    return int(row[0]) if row else None
