"""Moving logs between machines: JSON Lines out (`runner logs export`), and back in.

One JSON object per line, each with a `kind`:

- `agent_run`: an `AgentRun` without its turns (`turns` is left out);
- `agent_turn`: an `AgentTurn`, with the `run_id` it belongs to;
- `execution`: an `ExecutionRecord` (request, result, source, meta), flattened.

A run comes before its turns, and those before the run's executions, so a reader can stream
the file. The same models that the log reads and writes define the lines, so an import
checks every line as strictly as the log itself would (a file is untrusted input), and an
export of an import is the same text as the export it came from.

An import is all or nothing: every line is checked before anything is written, and the
rows go in inside one transaction. Rows already in the log (same id; for turns, same run
and number) are left as they are and counted as such.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import IO, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..agent.run import AgentRun, AgentTurn
from ..errors import ConfigurationError, NotFoundError
from .agent import AgentLog, insert_run, insert_turn
from .query import ExecutionFilter
from .store import ExecutionRecord, LogStore, insert_records


class ExecutionLine(ExecutionRecord):
    kind: Literal["execution"] = "execution"


class AgentRunLine(AgentRun):
    kind: Literal["agent_run"] = "agent_run"


class AgentTurnLine(AgentTurn):
    kind: Literal["agent_turn"] = "agent_turn"
    run_id: str


Line = Annotated[ExecutionLine | AgentRunLine | AgentTurnLine, Field(discriminator="kind")]
_LINE = TypeAdapter(Line)


class ImportReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    executions: int = 0
    agent_runs: int = 0
    agent_turns: int = 0
    already_present: int = 0


def _dump(kind: str, data: dict[str, Any]) -> str:
    return json.dumps({"kind": kind, **data}, ensure_ascii=False, sort_keys=True)


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
    for run in reversed(agent_log.list(limit=None, since=since)):
        yield from _run_lines(agent_log.get(run.id))
    for record in store.iter_executions(ExecutionFilter(since=since)):
        yield _execution_line(record)


def _ids_of_run(store: LogStore, run_id: str) -> list[str]:
    """Executions linked to the run by their foreign key (also those no turn lists)."""
    rows = store.read(lambda conn: conn.execute(
        "SELECT id FROM executions WHERE agent_run_id = ? ORDER BY started_at, id",
        (run_id,)).fetchall())
    return [str(row[0]) for row in rows]


def _run_lines(run: AgentRun) -> Iterator[str]:
    yield _dump("agent_run", run.model_dump(mode="json", exclude={"turns"}))
    for turn in run.turns:
        yield _dump("agent_turn", {"run_id": run.id, **turn.model_dump(mode="json")})


def _execution_line(record: ExecutionRecord) -> str:
    return _dump("execution", record.model_dump(mode="json"))


def write_export(store: LogStore, out: IO[str], *, run_id: str | None = None,
                 since: datetime | None = None) -> int:
    """Write an export to `out`; how many lines."""
    count = 0
    for line in export_lines(store, run_id=run_id, since=since):
        out.write(line + "\n")
        count += 1
    return count


def parse_lines(lines: Iterable[str], *, source: str = "the file") -> list[Line]:
    """Every line checked; the first bad one is a ConfigurationError naming its number."""
    parsed: list[Line] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            parsed.append(_LINE.validate_json(text))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ConfigurationError(
                f"line {number} of {source} is not a log record ({where}: {first['msg']})",
                fix="import a file written by `runner logs export --format jsonl`; nothing "
                    "was imported") from None
    return parsed


def import_lines(store: LogStore, lines: Iterable[str], *, source: str = "the file") -> ImportReport:
    """Check every line, then write them all in one transaction."""
    parsed = parse_lines(lines, source=source)
    turns: dict[str, list[AgentTurn]] = {}
    runs: list[AgentRun] = []
    records: list[ExecutionRecord] = []
    for line in parsed:
        if isinstance(line, AgentTurnLine):
            turns.setdefault(line.run_id, []).append(
                AgentTurn.model_validate(line.model_dump(exclude={"kind", "run_id"})))
        elif isinstance(line, AgentRunLine):
            runs.append(AgentRun.model_validate(line.model_dump(exclude={"kind"})))
        else:
            records.append(ExecutionRecord.model_validate(line.model_dump(exclude={"kind"})))
    known = {run.id for run in runs}
    orphans = sorted(set(turns) - known)
    if orphans:
        raise ConfigurationError(
            f"{source} has turns of agent runs it does not contain ({', '.join(orphans[:3])})",
            fix="export whole runs (`runner logs export --run RUN_ID`); nothing was imported")

    def write(conn: Any) -> ImportReport:
        added_runs = added_turns = 0
        for run in runs:
            # With its turns attached, the run's row gets the right turn count and tokens.
            own = sorted(turns.get(run.id, []), key=lambda turn: turn.number)
            added_runs += insert_run(conn, run.model_copy(update={"turns": own}), ignore_existing=True)
        # Executions before turns: a turn links the executions it caused when it goes in.
        added_executions = insert_records(conn, records)
        for run in runs:
            for turn in turns.get(run.id, []):
                added_turns += insert_turn(conn, run.id, turn, ignore_existing=True)
        total = len(runs) + len(records) + sum(len(t) for t in turns.values())
        return ImportReport(executions=added_executions, agent_runs=added_runs,
                            agent_turns=added_turns,
                            already_present=total - added_executions - added_runs - added_turns)

    return store.write(write, verb="import into")

