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
reads and writes them over short connections of its own, as `FunctionVersionLog` does,
and `render_agent_run` is the plain-text view.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python

from ..agent.run import AgentRun, AgentStatus, AgentTurn
from ..errors import LogStoreError, NotFoundError
from ..terminal import PLAIN, Style
from .query import find_ids
from .render import FULL_HINT, abridge
from .side_table import SideTable
from .store import DEFAULT_BUSY_TIMEOUT_S, ExecutionRecord, LogStore, transaction

# -- the database ---------------------------------------------------------------------------

_RUN_COLUMNS = ("id", "started_at", "finished_at", "task", "protocol", "model", "base_url",
                "backend", "function_set", "status", "final_answer", "stop_reason", "error_json",
                "turn_count", "prompt_tokens", "completion_tokens", "sandbox_ms", "settings_json",
                "run_json")
_TURN_COLUMNS = ("run_id", "number", "started_at", "latency_ms", "retries", "prompt_tokens",
                 "completion_tokens", "messages_sent_json", "reply_json", "response_json",
                 "actions_json", "feedback_json", "feedback_text", "feedback_messages_json",
                 "notes_json", "execution_ids_json", "error_json")


def _json(value: Any) -> str:
    return json.dumps(to_jsonable_python(value, fallback=repr), ensure_ascii=False)


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


_INSERT_RUN = (f"INSERT INTO agent_runs ({', '.join(_RUN_COLUMNS)}) "
               f"VALUES ({', '.join(':' + c for c in _RUN_COLUMNS)})")
_UPSERT_RUN = (_INSERT_RUN + " ON CONFLICT(id) DO UPDATE SET "
               + ", ".join(f"{c} = excluded.{c}" for c in _RUN_COLUMNS if c != "id"))
_INSERT_TURN = (f"INSERT INTO agent_turns ({', '.join(_TURN_COLUMNS)}) "
                f"VALUES ({', '.join(':' + c for c in _TURN_COLUMNS)})")


def run_row(run: AgentRun) -> dict[str, Any]:
    """The agent_runs row of a run (its turn count and tokens are those of `run.turns`)."""
    return {
        "id": run.id, "started_at": _iso(run.started_at), "finished_at": _iso(run.finished_at),
        "task": run.task, "protocol": run.protocol, "model": run.model,
        "base_url": run.base_url, "backend": run.backend, "function_set": run.function_set,
        "status": str(run.status), "final_answer": run.final_answer,
        "stop_reason": run.stop_reason, "error_json": _json(run.error),
        "turn_count": len(run.turns), "prompt_tokens": run.prompt_tokens,
        "completion_tokens": run.completion_tokens, "sandbox_ms": run.sandbox_ms,
        "settings_json": _json(run.settings),
        "run_json": _json({"functions": run.functions, "system_prompt": run.system_prompt,
                           "tools": run.tools, "owner": _owner()}),
    }


def turn_row(run_id: str, turn: AgentTurn) -> dict[str, Any]:
    return {
        "run_id": run_id, "number": turn.number, "started_at": _iso(turn.started_at),
        "latency_ms": turn.latency_ms, "retries": turn.retries,
        "prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens,
        "messages_sent_json": _json(turn.messages_sent), "reply_json": _json(turn.reply),
        "response_json": _json(turn.response), "actions_json": _json(turn.actions),
        "feedback_json": _json(turn.feedback), "feedback_text": turn.feedback_text,
        "feedback_messages_json": _json(turn.feedback_messages), "notes_json": _json(turn.notes),
        "execution_ids_json": _json(turn.execution_ids), "error_json": _json(turn.error),
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


def insert_run(conn: sqlite3.Connection, run: AgentRun, *, ignore_existing: bool = False) -> bool:
    """Insert a run's row (not its turns); False when `ignore_existing` and it was there."""
    sql = _INSERT_RUN.replace("INSERT", "INSERT OR IGNORE", 1) if ignore_existing else _INSERT_RUN
    return conn.execute(sql, run_row(run)).rowcount > 0


def link_executions(conn: sqlite3.Connection, run_id: str, execution_ids: Sequence[str], *,
                    turn: int | None = None) -> None:
    """Point the executions' foreign keys at their run (and turn, when given)."""
    if not execution_ids:
        return
    marks = ", ".join("?" for _ in execution_ids)
    if turn is None:
        conn.execute(f"UPDATE executions SET agent_run_id = ? WHERE id IN ({marks}) "
                     "AND agent_run_id IS NULL", [run_id, *execution_ids])
    else:
        conn.execute(f"UPDATE executions SET agent_run_id = ?, agent_turn = ? WHERE id IN ({marks})",
                     [run_id, turn, *execution_ids])


class AgentLog(SideTable):
    """Reads and writes agent runs and turns in the log database of a LogStore.

    Opening one closes the runs left `running` by a process that is gone (killed, or its
    machine rebooted): they become `interrupted`, so no run stays `running` for ever."""

    what = "the agent log"

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
                for owner in [(_load(text, {}) or {}).get("owner")]
                if isinstance(owner, dict) and _owner_alive(owner) is False]
        if not gone:
            return []
        now = _iso(datetime.now(UTC))

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
        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                insert_turn(conn, run_id, turn)

        self._run(write, "write to")

    def finish(self, run: AgentRun) -> None:
        """Update the run's row with how it ended (inserting it if `start` never got through,
        and then linking its executions, which could not point at a missing run)."""
        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.execute(_UPSERT_RUN, run_row(run))
                link_executions(conn, run.id, run.execution_ids)

        self._run(write, "write to")

    # -- reading -----------------------------------------------------------------------------

    def find(self, id_or_prefix: str) -> AgentRun | None:
        """The run with this id, or the only one whose id starts with it; None if none does."""
        wanted = id_or_prefix.strip().upper()
        if not wanted:
            return None
        rows = self._run(lambda conn: conn.execute(
            f"SELECT {', '.join(_RUN_COLUMNS)} FROM agent_runs WHERE id = ?", (wanted,)).fetchall(),
            "read")
        if not rows:
            pattern = _like_prefix(wanted)
            rows = self._run(lambda conn: conn.execute(
                f"SELECT {', '.join(_RUN_COLUMNS)} FROM agent_runs WHERE id LIKE ? ESCAPE '\\' "
                "ORDER BY id LIMIT 6", (pattern,)).fetchall(), "read")
            if len(rows) > 1:
                shown = ", ".join(r[0] for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
                raise NotFoundError(f"{id_or_prefix!r} matches several agent runs ({shown})",
                                    fix="type more characters of the id")
        if not rows:
            return None
        return self._with_turns(rows[0])

    def get(self, id_or_prefix: str) -> AgentRun:
        run = self.find(id_or_prefix)
        if run is None:
            raise NotFoundError(f"no agent run with an id starting {id_or_prefix!r} in {self._path}",
                                fix="run `runner logs runs` to see recent runs")
        return run

    def list(self, *, limit: int | None = 20, status: str | None = None,
             since: datetime | None = None) -> list[AgentRun]:
        """Runs, newest first, without their turns (`turns` is empty; see `get`)."""
        sql = f"SELECT {', '.join(_RUN_COLUMNS)} FROM agent_runs"
        clauses: list[str] = []
        params: list[Any] = []
        if status is not None:
            clauses.append("status = ?")
            params.append(status)
        if since is not None:
            clauses.append("started_at >= ?")
            params.append(_iso(since))
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY started_at DESC, id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = self._run(lambda conn: conn.execute(sql, params).fetchall(), "read")
        return [_run_from_row(row, []) for row in rows]

    def turn_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        if not run_ids:
            return {}
        marks = ", ".join("?" for _ in run_ids)
        rows = self._run(lambda conn: conn.execute(
            f"SELECT run_id, COUNT(*) FROM agent_turns WHERE run_id IN ({marks}) GROUP BY run_id",
            list(run_ids)).fetchall(), "read")
        return {str(run_id): int(count) for run_id, count in rows}

    def _with_turns(self, row: Sequence[Any]) -> AgentRun:
        turn_rows = self._run(lambda conn: conn.execute(
            f"SELECT {', '.join(_TURN_COLUMNS)} FROM agent_turns WHERE run_id = ? ORDER BY number",
            (row[0],)).fetchall(), "read")
        return _run_from_row(row, [_turn_from_row(r) for r in turn_rows])


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _start_ticks(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot): a pid reused later differs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _owner() -> dict[str, Any]:
    """The process writing a run: enough to tell later whether it is still alive."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "boot_id": _boot_id(),
            "started": _start_ticks(os.getpid())}


def _owner_alive(owner: dict[str, Any]) -> bool | None:
    """Whether a run's owner still runs: None when this machine cannot tell (another host)."""
    if owner.get("host") != socket.gethostname():
        return None
    if owner.get("boot_id") and _boot_id() and owner.get("boot_id") != _boot_id():
        return False  # the machine has rebooted since
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return None
    started = _start_ticks(pid)
    if started is None:
        return False
    return owner.get("started") in (None, started)


def _load(text: str | None, default: Any = None) -> Any:
    return json.loads(text) if text else default


def _run_from_row(row: Sequence[Any], turns: list[AgentTurn]) -> AgentRun:
    r = dict(zip(_RUN_COLUMNS, row, strict=True))
    extra = _load(r["run_json"], {}) or {}
    try:
        return AgentRun(
            id=r["id"], task=r["task"], protocol=r["protocol"], model=r["model"],
            base_url=r["base_url"], backend=r["backend"], function_set=r["function_set"],
            functions=extra.get("functions") or [], system_prompt=extra.get("system_prompt") or "",
            tools=extra.get("tools"), settings=_load(r["settings_json"], {}) or {},
            status=AgentStatus(r["status"]), final_answer=r["final_answer"],
            stop_reason=r["stop_reason"], error=_load(r["error_json"]),
            started_at=datetime.fromisoformat(r["started_at"]),
            finished_at=datetime.fromisoformat(r["finished_at"]) if r["finished_at"] else None,
            sandbox_ms=r["sandbox_ms"] or 0, turns=turns)
    except ValueError as exc:
        raise LogStoreError(f"agent run {r['id']} in the log database cannot be read: {exc}",
                            fix="the row was probably edited by hand; fix or delete it") from exc


def _turn_from_row(row: Sequence[Any]) -> AgentTurn:
    r = dict(zip(_TURN_COLUMNS, row, strict=True))
    return AgentTurn(
        number=r["number"], started_at=datetime.fromisoformat(r["started_at"]),
        messages_sent=_load(r["messages_sent_json"], []), reply=_load(r["reply_json"]),
        response=_load(r["response_json"]), actions=_load(r["actions_json"], []),
        feedback=_load(r["feedback_json"], []),
        feedback_messages=_load(r["feedback_messages_json"], []),
        notes=_load(r["notes_json"], []), execution_ids=_load(r["execution_ids_json"], []),
        prompt_tokens=r["prompt_tokens"], completion_tokens=r["completion_tokens"],
        latency_ms=r["latency_ms"] or 0, retries=r["retries"] or 0, error=_load(r["error_json"]))


def find_agent_run(store: LogStore, id_or_prefix: str) -> AgentRun | None:
    """For `runner logs show ID`: the agent run `id_or_prefix` names, or None when it names
    no run (then it is an execution id, or nothing). A prefix that fits more than one id
    is refused with every id it fits, runs and executions alike."""
    found = store.read(lambda conn: find_ids(conn, id_or_prefix))
    runs, executions = found["agent_run"], found["execution"]
    if len(runs) + len(executions) > 1:
        def listed(ids: list[str], kind: str) -> str:
            shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
            count = f"{len(ids)}+" if len(ids) > 5 else str(len(ids))
            return f"{count} {kind}{'' if len(ids) == 1 else 's'} ({shown})"

        parts = [listed(ids, kind) for ids, kind in ((runs, "agent run"), (executions, "execution"))
                 if ids]
        raise NotFoundError(f"{id_or_prefix.strip()!r} matches " + " and ".join(parts),
                            fix="type more characters of the id")
    if not runs:
        return None
    return AgentLog(store).get(runs[0])


# -- plain text -----------------------------------------------------------------------------


class _Text:
    """Model and program text is untrusted: every piece of it goes through `clean` (control
    characters shown escaped, unless the style is raw) and long bodies through `body`."""

    def __init__(self, style: Style, full: bool) -> None:
        self.style = style
        self.full = full

    def clean(self, value: object) -> str:
        return self.style.text(str(value))

    def body(self, value: str) -> str:
        return self.clean(abridge(value, full=self.full))

    def indent(self, text: str, prefix: str = "    ") -> list[str]:
        lines = self.body(text).splitlines()
        return [prefix + line if line else prefix.rstrip() for line in lines] or [prefix.rstrip()]


def _when(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _rule(title: str) -> str:
    return f"── {title} " + "─" * max(3, 72 - len(title))


def _execution_lines(record: ExecutionRecord | None, execution_id: str, t: _Text) -> list[str]:
    if record is None:
        return [f"  execution {t.clean(execution_id)}: not in this log"]
    result, request = record.result, record.request
    what = f"call {t.clean(request.call.name)}" if request.call is not None else "code"
    status = t.style.status(str(result.status))
    lines = [f"  execution {result.id} · {what} · {status} · {result.duration_ms} ms"]
    if request.call is None and request.code.strip():
        lines += t.indent(request.code.rstrip("\n"), "    │ ")
    elif request.call is not None:
        lines.append("    arguments " + t.body(json.dumps(request.call.arguments, ensure_ascii=False)))
    if result.return_value is not None:
        value = json.dumps(result.return_value, ensure_ascii=False, default=repr)
        lines.append("    returned " + t.clean(value if len(value) <= 300 else value[:297] + "..."))
    for name, text, cut in (("stdout", result.stdout, result.stdout_truncated),
                            ("stderr", result.stderr, result.stderr_truncated)):
        if text:
            shown = text if t.full or len(text) <= 2000 else \
                text[:2000] + f"\n[... {len(text) - 2000:,} more characters; {FULL_HINT} ...]"
            lines.append(f"    {name}{' (truncated by the sandbox)' if cut else ''}:")
            lines += t.indent(shown.rstrip("\n"), "      ")
    if result.error is not None:
        lines.append(f"    error {t.clean(result.error.type)}: {t.body(result.error.message)}")
    return lines


def _message_lines(message: Mapping[str, Any], t: _Text) -> list[str]:
    role = t.clean(message.get("role", "?"))
    for_call = f" (for {t.clean(message['tool_call_id'])})" if message.get("tool_call_id") else ""
    lines = [f"{role}{for_call}:"]
    content = message.get("content")
    if isinstance(content, str) and content:
        lines += t.indent(content)
    elif content not in (None, ""):
        lines += t.indent(json.dumps(content, ensure_ascii=False))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        lines.append(f"  tool call {t.clean(call.get('id'))}: {t.clean(function.get('name'))}"
                     f"({t.body(str(function.get('arguments')))})")
    return lines


def render_agent_run(run: AgentRun, executions: Mapping[str, ExecutionRecord] | None = None, *,
                     style: Style = PLAIN, full: bool = False) -> str:
    """The conversation in order: the system prompt and task, then per turn the reply, the
    actions read from it, the executions they caused and the feedback sent back."""
    executions = executions or {}
    t = _Text(style, full)
    tokens = f"{run.prompt_tokens} prompt + {run.completion_tokens} completion tokens"
    lines = [
        f"agent run  {run.id}",
        f"started    {_when(run.started_at)}"
        + (f" · took {(run.finished_at - run.started_at).total_seconds():.1f} s" if run.finished_at else ""),
        f"model      {t.clean(run.model or '-')}" + (f" at {t.clean(run.base_url)}" if run.base_url else ""),
        f"protocol   {t.clean(run.protocol)} · backend {t.clean(run.backend or '-')} · functions: "
        + t.clean(", ".join(run.functions) or "none")
        + (f" (set {t.clean(run.function_set)})" if run.function_set else ""),
        (f"status     {style.status(str(run.status))} · {len(run.turns)} "
         f"turn{'' if len(run.turns) == 1 else 's'} · {run.sandbox_ms} ms in the sandbox · {tokens}"),
    ]
    if run.final_answer is not None:
        lines.append("answer     " + t.body(run.final_answer))
    if run.stop_reason:
        lines.append("stopped    " + t.clean(run.stop_reason))
    if run.error:
        lines.append(f"error      [{t.clean(run.error.get('code'))}] {t.clean(run.error.get('message'))}")
        if run.error.get("fix"):
            lines.append(f"fix        {t.clean(run.error.get('fix'))}")
    if run.settings:
        lines.append("settings   " + t.clean(json.dumps(run.settings, sort_keys=True)))
    first = run.turns[0].messages_sent if run.turns else []
    if first:
        lines += ["", _rule("conversation start")]
        for message in first:
            lines += _message_lines(message, t)
    for position, turn in enumerate(run.turns):
        # The last turn's feedback was prepared but never sent once the run had ended.
        unsent = position == len(run.turns) - 1 and run.status is not AgentStatus.RUNNING
        usage = ""
        if turn.prompt_tokens is not None or turn.completion_tokens is not None:
            usage = f" · {turn.prompt_tokens or 0}+{turn.completion_tokens or 0} tokens"
        retries = f" · {turn.retries} retries" if turn.retries else ""
        lines += ["", _rule(f"turn {turn.number} · {turn.latency_ms} ms{usage}{retries}")]
        if turn.error:
            lines.append(f"model error [{t.clean(turn.error.get('code'))}]: "
                         f"{t.clean(turn.error.get('message'))}")
        if turn.reply is not None:
            lines += _message_lines(turn.reply, t)
        for action in turn.actions:
            kind = action.get("kind")
            if kind == "call":
                text = f"{action.get('function')}({json.dumps(action.get('arguments'), ensure_ascii=False)})"
            elif kind == "code":
                first_line = str(action.get("code", "")).strip().splitlines()[:1]
                text = (first_line[0] if first_line else "") + " ..."
            else:
                text = json.dumps(action.get("answer"), ensure_ascii=False)
            lines.append(f"parsed: {t.clean(kind)} {t.body(text)}")
        for execution_id in turn.execution_ids:
            lines += _execution_lines(executions.get(execution_id), execution_id, t)
        if turn.feedback:
            lines.append("problems: " + t.clean(", ".join(turn.feedback_codes)))
        for message in turn.feedback_messages:
            verb = "feedback not sent (the run ended here), as " if unsent else "feedback sent, as "
            message_lines = _message_lines(message, t)
            lines += [verb + message_lines[0], *message_lines[1:]]
    return "\n".join(lines) + "\n"


def render_agent_run_list(runs: Sequence[AgentRun], turn_counts: Mapping[str, int], *,
                          style: Style = PLAIN) -> str:
    if not runs:
        return "no agent runs\n"
    clean = style.text
    header = ("ID", "STARTED", "STATUS", "TURNS", "PROTOCOL", "MODEL", "TASK")
    rows = []
    for run in runs:
        task = " ".join(run.task.split())
        rows.append((run.id, run.started_at.astimezone().strftime("%Y-%m-%d %H:%M:%S"),
                     str(run.status), str(turn_counts.get(run.id, 0)), clean(run.protocol),
                     clean(run.model or "-"), clean(task if len(task) <= 50 else task[:47] + "...")))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    out = []
    for number, row in enumerate([header, *rows]):
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        if number > 0:  # colour after padding, so escape codes do not count as width
            cells[2] = cells[2].replace(row[2], style.status(row[2]), 1)
        out.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(out) + "\n"


def load_executions(store: LogStore, run: AgentRun) -> dict[str, ExecutionRecord]:
    """The executions a run caused, by id (ids missing from the log are left out)."""
    found: dict[str, ExecutionRecord] = {}
    for execution_id in run.execution_ids:
        try:
            found[execution_id] = store.get_execution(execution_id)
        except NotFoundError:
            continue
    return found
