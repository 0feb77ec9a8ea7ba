"""Agent runs as plain text for the terminal: one run as its conversation, or a list of runs.

Model and program text is untrusted: every piece of it is shown through the style's
sanitising rule (`runner.terminal`), and long bodies are abridged unless `full`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..agent.run import AgentRun, AgentStatus
from ..terminal import PLAIN, Style
from ..text_table import columns
from .execution_text import FULL_HINT, abridge
from .store import ExecutionRecord


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
    return "\n".join(columns(header, rows, paint={2: style.status})) + "\n"
