"""Agent runs in the log database: the run, every turn, and the executions each turn caused.

Tables (migration 3): `agent_runs`, one row per run (task, model, protocol, status, final
answer, system prompt, tools, settings), written when the run starts and updated when it
ends; `agent_turns`, one row per turn, written as soon as the turn is over: the exact
messages sent and the reply received (and the whole response body), the parsed actions,
the feedback as data and the exact text sent next, token usage, latency, retries, and the
ids of the executions the turn caused. Those executions are ordinary rows of
`executions`, whose meta names the run and the turn (`agent_run`, `agent_turn`).

`AgentRun` and `AgentTurn` are also what `Agent.run` returns, so the API, `--json`, the
log and `runner logs show RUN_ID` all have one shape. `AgentLog` reads and writes them
over short connections of its own, as `FunctionVersionLog` does, and `render_agent_run`
is the plain-text view.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from runner.errors import LogStoreError, NotFoundError
from runner.logs.side_table import SideTable
from runner.logs.store import ExecutionRecord, LogStore


class AgentStatus(StrEnum):
    """How a run ended (`running` while it has not)."""

    RUNNING = "running"
    ANSWERED = "answered"
    GAVE_UP = "gave_up"
    MAX_TURNS = "max_turns"
    BUDGET = "budget"
    LLM_ERROR = "llm_error"
    TERMINATED = "terminated"  # the model ended the conversation without an answer


class AgentTurn(BaseModel):
    """One request to the model, its reply, what was done about it and what was said back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    number: int
    started_at: datetime
    messages_sent: list[dict[str, Any]]  # exactly the messages of the request
    reply: dict[str, Any] | None = None  # the assistant message as received
    response: dict[str, Any] | None = None  # the whole response body
    actions: list[dict[str, Any]] = Field(default_factory=list)  # as parsed
    feedback: list[dict[str, Any]] = Field(default_factory=list)  # problems, as data
    # Exactly the messages that follow the reply (the last turn of a run that hit its turn
    # limit keeps what would have been sent).
    feedback_messages: list[dict[str, Any]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    execution_ids: list[str] = Field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: int = 0
    retries: int = 0
    error: dict[str, Any] | None = None  # an LLM error that ended the run at this turn

    @property
    def feedback_text(self) -> str | None:
        """The text of the feedback messages (None when there are none)."""
        if not self.feedback_messages:
            return None
        return "\n\n".join(str(m.get("content") or "") for m in self.feedback_messages)

    @property
    def feedback_codes(self) -> list[str]:
        return [str(item.get("code")) for item in self.feedback]


class AgentRun(BaseModel):
    """One conversation with a model, from the task to its end."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    task: str
    protocol: str
    model: str | None = None
    base_url: str | None = None
    backend: str | None = None
    function_set: str | None = None
    functions: list[str] = Field(default_factory=list)
    system_prompt: str = ""
    tools: list[dict[str, Any]] | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    status: AgentStatus = AgentStatus.RUNNING
    final_answer: str | None = None
    stop_reason: str | None = None
    error: dict[str, Any] | None = None
    started_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    finished_at: datetime | None = None
    sandbox_ms: int = 0
    turns: list[AgentTurn] = Field(default_factory=list)

    @property
    def prompt_tokens(self) -> int:
        return sum(t.prompt_tokens or 0 for t in self.turns)

    @property
    def completion_tokens(self) -> int:
        return sum(t.completion_tokens or 0 for t in self.turns)

    @property
    def execution_ids(self) -> list[str]:
        return [i for t in self.turns for i in t.execution_ids]

    def summary_dict(self) -> dict[str, Any]:
        """The run as `runner agent --json` prints it: everything except the full message
        lists and response bodies of each turn (`runner logs show ID --json` has those)."""
        data = {key: value for key, value in self.model_dump(mode="json").items()
                if key not in ("turns", "tools", "system_prompt")}
        data["prompt_tokens"] = self.prompt_tokens
        data["completion_tokens"] = self.completion_tokens
        data["turns"] = [{
            "number": t.number, "reply": t.reply, "actions": t.actions, "feedback": t.feedback,
            "feedback_text": t.feedback_text, "notes": t.notes, "execution_ids": t.execution_ids,
            "prompt_tokens": t.prompt_tokens, "completion_tokens": t.completion_tokens,
            "latency_ms": t.latency_ms, "retries": t.retries, "error": t.error,
        } for t in self.turns]
        return data

    def to_json_dict(self) -> dict[str, Any]:
        """Everything, as plain JSON types."""
        data = self.model_dump(mode="json")
        for turn, source in zip(data["turns"], self.turns, strict=True):
            turn["feedback_text"] = source.feedback_text
        return data


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
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds")


class AgentLog(SideTable):
    """Reads and writes agent runs and turns in the log database of a LogStore."""

    what = "the agent log"

    # -- writing -----------------------------------------------------------------------------

    def start(self, run: AgentRun) -> None:
        """Insert the run's row (status `running` until `finish`)."""
        row = self._run_row(run)
        sql = (f"INSERT INTO agent_runs ({', '.join(_RUN_COLUMNS)}) "
               f"VALUES ({', '.join(':' + c for c in _RUN_COLUMNS)})")
        self._run(lambda conn: conn.execute(sql, row), "write to")

    def add_turn(self, run_id: str, turn: AgentTurn) -> None:
        row = {
            "run_id": run_id, "number": turn.number, "started_at": _iso(turn.started_at),
            "latency_ms": turn.latency_ms, "retries": turn.retries,
            "prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens,
            "messages_sent_json": _json(turn.messages_sent), "reply_json": _json(turn.reply),
            "response_json": _json(turn.response), "actions_json": _json(turn.actions),
            "feedback_json": _json(turn.feedback), "feedback_text": turn.feedback_text,
            "feedback_messages_json": _json(turn.feedback_messages), "notes_json": _json(turn.notes),
            "execution_ids_json": _json(turn.execution_ids), "error_json": _json(turn.error),
        }
        sql = (f"INSERT INTO agent_turns ({', '.join(_TURN_COLUMNS)}) "
               f"VALUES ({', '.join(':' + c for c in _TURN_COLUMNS)})")
        self._run(lambda conn: conn.execute(sql, row), "write to")

    def finish(self, run: AgentRun) -> None:
        """Update the run's row with how it ended (inserting it if `start` never got through)."""
        row = self._run_row(run)
        columns = [c for c in _RUN_COLUMNS if c != "id"]
        sql = (f"INSERT INTO agent_runs ({', '.join(_RUN_COLUMNS)}) "
               f"VALUES ({', '.join(':' + c for c in _RUN_COLUMNS)}) ON CONFLICT(id) DO UPDATE SET "
               + ", ".join(f"{c} = excluded.{c}" for c in columns))
        self._run(lambda conn: conn.execute(sql, row), "write to")

    @staticmethod
    def _run_row(run: AgentRun) -> dict[str, Any]:
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
                               "tools": run.tools}),
        }

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

    def list(self, *, limit: int | None = 20, status: str | None = None) -> list[AgentRun]:
        """Runs, newest first, without their turns (`turns` is empty; see `get`)."""
        sql = f"SELECT {', '.join(_RUN_COLUMNS)} FROM agent_runs"
        params: list[Any] = []
        if status is not None:
            sql += " WHERE status = ?"
            params.append(status)
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
        return {run_id: count for run_id, count in rows}

    def _with_turns(self, row: Sequence[Any]) -> AgentRun:
        turn_rows = self._run(lambda conn: conn.execute(
            f"SELECT {', '.join(_TURN_COLUMNS)} FROM agent_turns WHERE run_id = ? ORDER BY number",
            (row[0],)).fetchall(), "read")
        return _run_from_row(row, [_turn_from_row(r) for r in turn_rows])


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


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
    no run (then it is an execution id). A prefix of both a run and executions is refused."""
    run = AgentLog(store).find(id_or_prefix)
    if run is None or run.id == id_or_prefix.strip().upper():
        return run
    try:
        execution = store.get_execution(id_or_prefix)
    except NotFoundError:
        return run
    raise NotFoundError(f"{id_or_prefix!r} matches agent run {run.id} and execution {execution.id}",
                        fix="type more characters of the id")


# -- plain text -----------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _clean(text: str) -> str:
    """Model and program text is untrusted: escape control characters other than \\n and \\t."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


def _indent(text: str, prefix: str = "    ") -> list[str]:
    return [prefix + line if line else prefix.rstrip() for line in _clean(text).splitlines()] or [prefix.rstrip()]


def _when(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _rule(title: str) -> str:
    return f"── {title} " + "─" * max(3, 72 - len(title))


def _execution_lines(record: ExecutionRecord | None, execution_id: str) -> list[str]:
    if record is None:
        return [f"  execution {execution_id}: not in this log"]
    result, request = record.result, record.request
    what = f"call {request.call.name}" if request.call is not None else "code"
    lines = [f"  execution {result.id} · {what} · {result.status} · {result.duration_ms} ms"]
    if request.call is None and request.code.strip():
        lines += _indent(request.code.rstrip("\n"), "    │ ")
    elif request.call is not None:
        lines.append("    arguments " + _clean(json.dumps(request.call.arguments, ensure_ascii=False)))
    if result.return_value is not None:
        value = json.dumps(result.return_value, ensure_ascii=False, default=repr)
        lines.append("    returned " + _clean(value if len(value) <= 300 else value[:297] + "..."))
    for name, text, cut in (("stdout", result.stdout, result.stdout_truncated),
                            ("stderr", result.stderr, result.stderr_truncated)):
        if text:
            shown = text if len(text) <= 2000 else text[:2000] + f"\n[... {len(text) - 2000} more characters]"
            lines.append(f"    {name}{' (truncated by the sandbox)' if cut else ''}:")
            lines += _indent(shown.rstrip("\n"), "      ")
    if result.error is not None:
        lines.append(f"    error {_clean(result.error.type)}: {_clean(result.error.message)}")
    return lines


def _message_lines(message: Mapping[str, Any]) -> list[str]:
    role = str(message.get("role", "?"))
    lines = [f"{role}" + (f" (for {message['tool_call_id']})" if message.get("tool_call_id") else "")
             + ":"]
    content = message.get("content")
    if isinstance(content, str) and content:
        lines += _indent(content)
    elif content not in (None, ""):
        lines += _indent(json.dumps(content, ensure_ascii=False))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        lines.append(f"  tool call {call.get('id')}: {_clean(str(function.get('name')))}"
                     f"({_clean(str(function.get('arguments')))})")
    return lines


def render_agent_run(run: AgentRun, executions: Mapping[str, ExecutionRecord] | None = None) -> str:
    """The conversation in order: the system prompt and task, then per turn the reply, the
    actions read from it, the executions they caused and the feedback sent back."""
    executions = executions or {}
    tokens = f"{run.prompt_tokens} prompt + {run.completion_tokens} completion tokens"
    lines = [
        f"agent run  {run.id}",
        f"started    {_when(run.started_at)}"
        + (f" · took {(run.finished_at - run.started_at).total_seconds():.1f} s" if run.finished_at else ""),
        f"model      {run.model or '-'}" + (f" at {run.base_url}" if run.base_url else ""),
        f"protocol   {run.protocol} · backend {run.backend or '-'} · functions: "
        + (", ".join(run.functions) or "none") + (f" (set {run.function_set})" if run.function_set else ""),
        (f"status     {run.status} · {len(run.turns)} turn{'' if len(run.turns) == 1 else 's'} · "
         f"{run.sandbox_ms} ms in the sandbox · {tokens}"),
    ]
    if run.final_answer is not None:
        lines.append("answer     " + _clean(run.final_answer))
    if run.stop_reason:
        lines.append("stopped    " + _clean(run.stop_reason))
    if run.error:
        lines.append(f"error      [{run.error.get('code')}] {_clean(str(run.error.get('message')))}")
        if run.error.get("fix"):
            lines.append(f"fix        {_clean(str(run.error.get('fix')))}")
    if run.settings:
        lines.append("settings   " + _clean(json.dumps(run.settings, sort_keys=True)))
    first = run.turns[0].messages_sent if run.turns else []
    if first:
        lines += ["", _rule("conversation start")]
        for message in first:
            lines += _message_lines(message)
    for position, turn in enumerate(run.turns):
        # The last turn's feedback was prepared but never sent once the run had ended.
        unsent = position == len(run.turns) - 1 and run.status is not AgentStatus.RUNNING
        usage = ""
        if turn.prompt_tokens is not None or turn.completion_tokens is not None:
            usage = f" · {turn.prompt_tokens or 0}+{turn.completion_tokens or 0} tokens"
        retries = f" · {turn.retries} retries" if turn.retries else ""
        lines += ["", _rule(f"turn {turn.number} · {turn.latency_ms} ms{usage}{retries}")]
        if turn.error:
            lines.append(f"model error [{turn.error.get('code')}]: {_clean(str(turn.error.get('message')))}")
        if turn.reply is not None:
            lines += _message_lines(turn.reply)
        for action in turn.actions:
            kind = action.get("kind")
            if kind == "call":
                text = f"{action.get('function')}({json.dumps(action.get('arguments'), ensure_ascii=False)})"
            elif kind == "code":
                first_line = str(action.get("code", "")).strip().splitlines()[:1]
                text = (first_line[0] if first_line else "") + " ..."
            else:
                text = json.dumps(action.get("answer"), ensure_ascii=False)
            lines.append(f"parsed: {kind} {_clean(text)}")
        for execution_id in turn.execution_ids:
            lines += _execution_lines(executions.get(execution_id), execution_id)
        if turn.feedback:
            lines.append("problems: " + ", ".join(turn.feedback_codes))
        for message in turn.feedback_messages:
            verb = "feedback not sent (the run ended here), as " if unsent else "feedback sent, as "
            lines += [verb + _message_lines(message)[0]]
            lines += _message_lines(message)[1:]
    return "\n".join(lines) + "\n"


def render_agent_run_list(runs: Sequence[AgentRun], turn_counts: Mapping[str, int]) -> str:
    if not runs:
        return "no agent runs\n"
    header = ("ID", "STARTED", "STATUS", "TURNS", "PROTOCOL", "MODEL", "TASK")
    rows = []
    for run in runs:
        task = " ".join(run.task.split())
        rows.append((run.id, run.started_at.astimezone().strftime("%Y-%m-%d %H:%M:%S"),
                     str(run.status), str(turn_counts.get(run.id, 0)), run.protocol,
                     run.model or "-", _clean(task if len(task) <= 50 else task[:47] + "...")))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    out = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
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
