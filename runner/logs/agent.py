"""Agent runs in the log database: the run, every turn, and the executions each turn caused.

Tables (migration 3): `agent_runs`, one row per run (task, model, protocol, status, final
answer, system prompt, tools, settings), written when the run starts and updated when it
ends; `agent_turns`, one row per turn, written as soon as the turn is over: the exact
messages sent and the reply received (and the whole response body), the parsed actions,
the feedback as data and the exact text sent next, token usage, latency, retries, and the
ids of the executions the turn caused. Those executions are ordinary rows of
`executions`, whose meta names the run and the turn (`agent_run`, `agent_turn`).

`AgentRun` and `AgentTurn` (defined in `runner.agent.run`) are what `Agent.run` returns,
so the API, `--json`, the log and `runner logs show RUN_ID` all have one shape. `AgentLog`
reads and writes them over short connections of its own, as `FunctionVersionLog` does;
`runner.logs.agent_text` renders them as plain text, and `runner.logs.liveness` tells
whether the process that owns a `running` run is still alive.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..agent.run import AgentRun, AgentStatus, AgentTurn
from ..errors import LogStoreError, NotFoundError
from .job_owner import LiveJob, still_runs
from .liveness import current_owner, owner_alive
from .query import find_ids
from .rows import from_json, marks, named_marks, readable, shown_ids, to_iso, to_json, unreadable
from .side_table import RecordTable
from .spool import append_to_spool
from .store import (
    DEFAULT_BUSY_TIMEOUT_S,
    RUN_SPOOL_NAME,
    ExecutionRecord,
    LogStore,
    transaction,
)

# -- the database ---------------------------------------------------------------------------

_RUN_COLUMNS = ("id", "started_at", "finished_at", "task", "protocol", "model", "base_url",
                "backend", "function_set", "status", "final_answer", "stop_reason", "error_json",
                "turn_count", "prompt_tokens", "completion_tokens", "sandbox_ms", "settings_json",
                "run_json")
_TURN_COLUMNS = ("run_id", "number", "started_at", "latency_ms", "retries", "prompt_tokens",
                 "completion_tokens", "messages_sent_json", "reply_json", "response_json",
                 "actions_json", "feedback_json", "feedback_text", "feedback_messages_json",
                 "notes_json", "execution_ids_json", "error_json")


_SELECT_RUN = f"SELECT {', '.join(_RUN_COLUMNS)} FROM agent_runs"
_INSERT_RUN = (f"INSERT INTO agent_runs ({', '.join(_RUN_COLUMNS)}) "
               f"VALUES ({named_marks(_RUN_COLUMNS)})")
_UPSERT_RUN = (_INSERT_RUN + " ON CONFLICT(id) DO UPDATE SET "
               + ", ".join(f"{c} = excluded.{c}" for c in _RUN_COLUMNS if c != "id"))
_INSERT_TURN = (f"INSERT INTO agent_turns ({', '.join(_TURN_COLUMNS)}) "
                f"VALUES ({named_marks(_TURN_COLUMNS)})")


def run_row(run: AgentRun) -> dict[str, Any]:
    """The agent_runs row of a run (its turn count and tokens are those of `run.turns`)."""
    return {
        "id": run.id, "started_at": to_iso(run.started_at), "finished_at": to_iso(run.finished_at),
        "task": run.task, "protocol": run.protocol, "model": run.model,
        "base_url": run.base_url, "backend": run.backend, "function_set": run.function_set,
        "status": str(run.status), "final_answer": run.final_answer,
        "stop_reason": run.stop_reason, "error_json": to_json(run.error),
        "turn_count": len(run.turns), "prompt_tokens": run.prompt_tokens,
        "completion_tokens": run.completion_tokens, "sandbox_ms": run.sandbox_ms,
        "settings_json": to_json(run.settings),
        "run_json": to_json({"functions": run.functions, "system_prompt": run.system_prompt,
                           "tools": run.tools, "owner": current_owner()}),
    }


def turn_row(run_id: str, turn: AgentTurn) -> dict[str, Any]:
    return {
        "run_id": run_id, "number": turn.number, "started_at": to_iso(turn.started_at),
        "latency_ms": turn.latency_ms, "retries": turn.retries,
        "prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens,
        "messages_sent_json": to_json(turn.messages_sent), "reply_json": to_json(turn.reply),
        "response_json": to_json(turn.response), "actions_json": to_json(turn.actions),
        "feedback_json": to_json(turn.feedback), "feedback_text": turn.feedback_text,
        "feedback_messages_json": to_json(turn.feedback_messages), "notes_json": to_json(turn.notes),
        "execution_ids_json": to_json(turn.execution_ids), "error_json": to_json(turn.error),
    }


def insert_turn(conn: sqlite3.Connection, run_id: str, turn: AgentTurn, *,
                ignore_existing: bool = False) -> bool:
    """Insert a turn and link the executions it caused to it (their foreign keys: the
    executions were written first, when the turn's row did not exist yet). False when
    `ignore_existing` and the turn was there already. The caller holds a transaction."""
    sql = _INSERT_TURN.replace("INSERT", "INSERT OR IGNORE", 1) if ignore_existing else _INSERT_TURN
    if conn.execute(sql, turn_row(run_id, turn)).rowcount <= 0:
        return False
    link_executions(conn, run_id, turn.execution_ids, turn=turn.number)
    return True


def write_whole_run(conn: sqlite3.Connection, run: AgentRun) -> None:
    """The run's row as it is now, every turn not yet there, and its executions' links.
    The caller holds a transaction."""
    conn.execute(_UPSERT_RUN, run_row(run))
    for turn in run.turns:
        insert_turn(conn, run.id, turn, ignore_existing=True)
    link_executions(conn, run.id, run.execution_ids)


def import_spooled_runs(conn: sqlite3.Connection, lines: list[bytes]) -> tuple[int, list[bytes]]:
    """Write the runs of spool lines (see `AgentLog.spool`), each whole, in one transaction;
    (how many, the lines that are not a run). A later line of a run wins."""
    runs: list[AgentRun] = []
    rejected: list[bytes] = []
    for line in lines:
        try:
            runs.append(AgentRun.model_validate_json(line))
        except ValueError:  # half a line from a writer killed mid-append, or damage
            rejected.append(line)
    with transaction(conn):
        for run in runs:
            write_whole_run(conn, run)
    return len(runs), rejected


def insert_run(conn: sqlite3.Connection, run: AgentRun, *, ignore_existing: bool = False) -> bool:
    """Insert a run's row (not its turns); False when `ignore_existing` and it was there."""
    sql = _INSERT_RUN.replace("INSERT", "INSERT OR IGNORE", 1) if ignore_existing else _INSERT_RUN
    return conn.execute(sql, run_row(run)).rowcount > 0


def link_executions(conn: sqlite3.Connection, run_id: str, execution_ids: Sequence[str], *,
                    turn: int | None = None) -> None:
    """Point the executions' foreign keys at their run (and turn, when given)."""
    if not execution_ids:
        return
    ids = marks(execution_ids)
    if turn is None:
        conn.execute(f"UPDATE executions SET agent_run_id = ? WHERE id IN ({ids}) "
                     "AND agent_run_id IS NULL", [run_id, *execution_ids])
    else:
        conn.execute(f"UPDATE executions SET agent_run_id = ?, agent_turn = ? WHERE id IN ({ids})",
                     [run_id, turn, *execution_ids])


_RUN_OWNER = "CASE WHEN json_valid(run_json) THEN json_extract(run_json, '$.owner') END"


def live_runs(conn: sqlite3.Connection, jobs: Sequence[LiveJob]) -> list[LiveJob]:
    """The agent runs a live process still writes: the `running` ones whose owner still
    runs, and every run of a process that runs one of `jobs` (a conversation an evaluation
    has finished is still its work until the item's verdict names it)."""
    pids = sorted({pid for job in jobs if isinstance(pid := job.owner.get("pid"), int)})
    rows = conn.execute(
        f"SELECT id, status, {_RUN_OWNER} FROM agent_runs WHERE status = 'running' "
        f"OR json_extract({_RUN_OWNER}, '$.pid') IN (SELECT value FROM json_each(?))",
        (json.dumps(pids),)).fetchall()
    found = []
    for run_id, status, text in rows:
        owner = from_json(text, None)
        if not isinstance(owner, dict):
            continue
        if (status == AgentStatus.RUNNING and still_runs(owner)) or any(
                job.same_process(owner) for job in jobs):
            found.append(LiveJob(kind="agent run", id=run_id, owner=owner))
    return found


class AgentLog(RecordTable[AgentRun]):
    """Reads and writes agent runs and turns in the log database of a LogStore.

    Opening one closes the runs left `running` by a process that is gone (killed, or its
    machine rebooted): they become `interrupted`, so no run stays `running` for ever."""

    what = "the agent log"
    noun, plural = "agent run", "agent runs"
    select = _SELECT_RUN
    list_hint = "run `runner logs runs` to see recent runs"

    def __init__(self, store: LogStore | Path | str | None = None, *,
                 busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
        super().__init__(store, busy_timeout_s=busy_timeout_s)
        with contextlib.suppress(LogStoreError):  # a read-only log can still be read
            self.close_abandoned()

    def close_abandoned(self) -> list[str]:
        """Mark `interrupted` the running runs whose owner process is gone; their ids."""
        rows = self._run(lambda conn: conn.execute(
            "SELECT id, run_json FROM agent_runs WHERE status = 'running'").fetchall(), "read")
        gone = [(run_id, owner) for run_id, text in rows
                for owner in [(from_json(text, {}) or {}).get("owner")]
                if isinstance(owner, dict) and owner_alive(owner) is False]
        if not gone:
            return []
        now = to_iso(datetime.now(UTC))

        def close(conn: sqlite3.Connection) -> None:
            for run_id, owner in gone:
                reason = (f"interrupted: its process (pid {owner.get('pid')} on "
                          f"{owner.get('host')}) ended before the run did")
                conn.execute("UPDATE agent_runs SET status = 'interrupted', stop_reason = ?, "
                             "finished_at = ? WHERE id = ? AND status = 'running'",
                             (reason, now, run_id))

        self._run(close, "write to")
        return [run_id for run_id, _ in gone]

    # -- writing -----------------------------------------------------------------------------

    def start(self, run: AgentRun) -> None:
        """Insert the run's row (status `running` until `finish`)."""
        self._run(lambda conn: insert_run(conn, run), "write to")

    def add_turn(self, run_id: str, turn: AgentTurn) -> None:
        self._run_transaction(lambda conn: insert_turn(conn, run_id, turn))

    def finish(self, run: AgentRun) -> None:
        """Write the whole run as it ended: its row (inserted if `start` never got through),
        the turns an earlier write missed, and the links of its executions (which could not
        point at a missing run)."""
        self._run_transaction(lambda conn: write_whole_run(conn, run))

    def spool(self, run: AgentRun) -> Path:
        """Keep a run the database could not take beside it, to be imported the next time
        the log is opened (as failed execution writes are); where it went."""
        # ensure_ascii: one line, whatever the text holds
        return append_to_spool(self._path, RUN_SPOOL_NAME,
                               (json.dumps(run.model_dump(mode="json")) + "\n").encode())

    # -- reading -----------------------------------------------------------------------------

    def _record(self, row: Sequence[Any]) -> AgentRun:
        return self._with_turns(row)

    def list(self, *, limit: int | None = 20, status: str | None = None,
             since: datetime | None = None) -> list[AgentRun]:
        """Runs, newest first, without their turns (`turns` is empty; see `get`)."""
        where = [*([("status = ?", status)] if status is not None else []),
                 *([("started_at >= ?", to_iso(since))] if since is not None else [])]
        rows = self._newest(_SELECT_RUN, "started_at", where=where, limit=limit)
        return readable(rows, lambda row: _run_from_row(row, []))

    def turn_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        if not run_ids:
            return {}
        rows = self._run(lambda conn: conn.execute(
            f"SELECT run_id, COUNT(*) FROM agent_turns WHERE run_id IN ({marks(run_ids)}) "
            "GROUP BY run_id",
            list(run_ids)).fetchall(), "read")
        return {str(run_id): int(count) for run_id, count in rows}

    def _with_turns(self, row: Sequence[Any]) -> AgentRun:
        turn_rows = self._run(lambda conn: conn.execute(
            f"SELECT {', '.join(_TURN_COLUMNS)} FROM agent_turns WHERE run_id = ? ORDER BY number",
            (row[0],)).fetchall(), "read")
        return _run_from_row(row, readable(turn_rows, _turn_from_row))


def _run_from_row(row: Sequence[Any], turns: list[AgentTurn]) -> AgentRun:
    r = dict(zip(_RUN_COLUMNS, row, strict=True))
    try:
        extra = from_json(r["run_json"], {}) or {}
        return AgentRun(
            id=r["id"], task=r["task"], protocol=r["protocol"], model=r["model"],
            base_url=r["base_url"], backend=r["backend"], function_set=r["function_set"],
            functions=extra.get("functions") or [], system_prompt=extra.get("system_prompt") or "",
            tools=extra.get("tools"), settings=from_json(r["settings_json"], {}) or {},
            status=AgentStatus(r["status"]), final_answer=r["final_answer"],
            stop_reason=r["stop_reason"], error=from_json(r["error_json"]),
            started_at=datetime.fromisoformat(r["started_at"]),
            finished_at=datetime.fromisoformat(r["finished_at"]) if r["finished_at"] else None,
            sandbox_ms=r["sandbox_ms"] or 0, turns=turns)
    except ValueError as exc:
        raise unreadable(f"agent run {r['id']}", exc) from exc


def _turn_from_row(row: Sequence[Any]) -> AgentTurn:
    r = dict(zip(_TURN_COLUMNS, row, strict=True))
    try:
        return AgentTurn(
            number=r["number"], started_at=datetime.fromisoformat(r["started_at"]),
            messages_sent=from_json(r["messages_sent_json"], []), reply=from_json(r["reply_json"]),
            response=from_json(r["response_json"]), actions=from_json(r["actions_json"], []),
            feedback=from_json(r["feedback_json"], []),
            feedback_messages=from_json(r["feedback_messages_json"], []),
            notes=from_json(r["notes_json"], []), execution_ids=from_json(r["execution_ids_json"], []),
            prompt_tokens=r["prompt_tokens"], completion_tokens=r["completion_tokens"],
            latency_ms=r["latency_ms"] or 0, retries=r["retries"] or 0, error=from_json(r["error_json"]))
    except (ValueError, TypeError) as exc:  # bad JSON or time: damaged
        raise unreadable(f"turn {r['number']} of agent run {r['run_id']}", exc) from exc


def find_agent_run(store: LogStore, id_or_prefix: str) -> AgentRun | None:
    """For `runner logs show ID`: the agent run `id_or_prefix` names, or None when it names
    no run (then it is an execution id, or nothing). A prefix that fits more than one id
    is refused with every id it fits, runs and executions alike."""
    found = store.read(lambda conn: find_ids(conn, id_or_prefix))
    runs, executions = found["agent_run"], found["execution"]
    if len(runs) + len(executions) > 1:
        def listed(ids: list[str], kind: str) -> str:
            count = f"{len(ids)}+" if len(ids) > 5 else str(len(ids))
            return f"{count} {kind}{'' if len(ids) == 1 else 's'} ({shown_ids(ids)})"

        parts = [listed(ids, kind) for ids, kind in ((runs, "agent run"), (executions, "execution"))
                 if ids]
        raise NotFoundError(f"{id_or_prefix.strip()!r} matches " + " and ".join(parts),
                            fix="type more characters of the id")
    if not runs:
        return None
    return AgentLog(store).get(runs[0])


def load_executions(store: LogStore, run: AgentRun) -> dict[str, ExecutionRecord]:
    """The executions a run caused, by id (ids missing from the log are left out)."""
    found: dict[str, ExecutionRecord] = {}
    for execution_id in run.execution_ids:
        try:
            found[execution_id] = store.get_execution(execution_id)
        except NotFoundError:
            continue
    return found
