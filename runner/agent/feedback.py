"""The one place that words what the model is told after each action.

Every problem becomes a `Feedback`: an error code, a message, details (missing, unexpected
and wrongly typed arguments; the exception type and message; the last lines of the
traceback and of the output) and a reminder (what a valid call or reply looks like: the
function's description and schema, the protocol's reply template). `render` turns one
into text; `observe` turns an `ExecutionResult` into the text for the model, success or
not. Protocols only decide how that text is packaged into messages (a tool message, a
user message, an `Observation:` line).

Long text is cut for the model with a marker saying how much was cut and where the whole
of it is (the execution log); the log keeps everything.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..files import format_size
from ..types import ExecutionResult, Status
from ..worker import error_types

DEFAULT_MAX_CHARS = 3000
_TAIL_LINES = 12


class ErrorCode(StrEnum):
    MALFORMED_RESPONSE = "MALFORMED_RESPONSE"
    UNKNOWN_FUNCTION = "UNKNOWN_FUNCTION"
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    EXECUTION_FAILED = "EXECUTION_FAILED"
    TIMEOUT = "TIMEOUT"
    MEMORY_LIMIT = "MEMORY_LIMIT"
    OUTPUT_TRUNCATED = "OUTPUT_TRUNCATED"
    PACKAGE_UNAVAILABLE = "PACKAGE_UNAVAILABLE"
    DENIED = "DENIED"
    TRUNCATED_REPLY = "TRUNCATED_REPLY"
    # A code block that ran but printed nothing, where output is required (MathChat).
    NO_OUTPUT = "NO_OUTPUT"
    # Several code blocks in a row failed: solve the step by reasoning instead.
    CODE_KEEPS_FAILING = "CODE_KEEPS_FAILING"


class Feedback(BaseModel):
    """One problem, as data; `render` words it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: ErrorCode
    message: str
    details: dict[str, Any] = Field(default_factory=dict)
    reminder: str = ""
    execution_id: str | None = None


class ActionReport(BaseModel):
    """What one action produced, as the model will read it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    ok: bool
    problems: tuple[Feedback, ...] = ()
    execution_id: str | None = None
    call_id: str | None = None

    @property
    def codes(self) -> list[str]:
        return [str(problem.code) for problem in self.problems]


# -- cutting long text ------------------------------------------------------------------------


def clip(text: str, max_chars: int, *, where: str = "", note: str = "") -> tuple[str, bool]:
    """`text` if it fits, else its head and tail around a marker that says how much was cut
    and, with `where`, that the whole text is there (`note`: what to say instead, when the
    place holds less than the whole); (text, whether it was cut)."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text, False
    head = max_chars * 3 // 5
    tail = max_chars - head
    cut = len(text) - head - tail
    said = note or (f"the whole text is in {where}" if where else "")
    marker = f"\n[... {cut:,} characters cut{'; ' + said if said else ''} ...]\n"
    return text[:head] + marker + text[-tail:], True


def last_lines(text: str, count: int = _TAIL_LINES) -> str:
    lines = text.rstrip("\n").splitlines()
    if len(lines) <= count:
        return "\n".join(lines)
    return f"[... {len(lines) - count} earlier lines ...]\n" + "\n".join(lines[-count:])


# -- rendering -------------------------------------------------------------------------------


def render(feedback: Feedback, *, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """`[CODE] message`, then `Details:` and `Reminder:` sections when there are any."""
    lines = [f"[{feedback.code}] {feedback.message}"]
    if feedback.details:
        lines.append("Details:")
        lines += _detail_lines(feedback.details)
    if feedback.reminder:
        lines.append("Reminder: " + feedback.reminder)
    where = f"the log (execution {feedback.execution_id})" if feedback.execution_id else "the log"
    text, _ = clip("\n".join(lines), max_chars, where=where)
    return text


def _detail_lines(details: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for key, value in details.items():
        if value in (None, "", [], {}):
            continue
        label = key.replace("_", " ")
        if isinstance(value, str) and "\n" in value:
            lines.append(f"  {label}:")
            lines += ["    " + line for line in value.splitlines()]
        elif isinstance(value, (list, tuple)):
            items = [item if isinstance(item, str) else _compact(item) for item in value]
            lines.append(f"  {label}: " + ", ".join(items))
        elif isinstance(value, str):
            lines.append(f"  {label}: {value}")
        else:
            lines.append(f"  {label}: {_compact(value)}")
    return lines


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=repr)


def call_label(function: str, arguments: Any, *, max_chars: int = 200) -> str:
    """`name({"a": 1})`, shortened for a message's first line."""
    if isinstance(arguments, Mapping):
        text = _compact(dict(arguments)) if arguments else ""
    elif arguments in (None, ""):
        text = ""
    else:
        text = _compact(arguments)
    if len(text) > max_chars:
        text = text[:max_chars - 5] + " ...}"
    return f"{function}({text})"


def function_reference(spec: Any) -> str:
    """One function as the model should see it: name, description and parameters schema."""
    description = f": {spec.description}" if spec.description else ""
    return f"{spec.name}{description}\n  parameters: {_compact(spec.parameters)}"


def functions_reference(specs: Iterable[Any]) -> str:
    return "\n".join("- " + function_reference(spec).replace("\n", "\n  ") for spec in specs)


# -- problems from the reply ---------------------------------------------------------------------


def malformed(message: str, *, template: str, details: Mapping[str, Any] | None = None) -> Feedback:
    return Feedback(code=ErrorCode.MALFORMED_RESPONSE, message=message, details=dict(details or {}),
                    reminder=template)


def truncated_reply(*, max_tokens: int | None, template: str) -> Feedback:
    """The model's reply ended at its token limit (`finish_reason: length`): it is incomplete,
    so none of it is carried out (a call cut short is not a call with fewer arguments)."""
    limit = f" of {max_tokens} tokens" if max_tokens else ""
    return Feedback(code=ErrorCode.TRUNCATED_REPLY,
                    message=f"your reply was cut off at the token limit{limit} before it was "
                            "complete, so nothing in it was run or taken as the answer",
                    reminder="reply again, shorter: less reasoning, one action at a time. "
                             + template)


def unknown_function(name: str, available: Sequence[str], *, template: str) -> Feedback:
    names = ", ".join(available) if available else "none"
    return Feedback(code=ErrorCode.UNKNOWN_FUNCTION,
                    message=f"there is no function {name!r}; the functions are: {names}",
                    details={"available": list(available)}, reminder=template)


def disabled_function(name: str, failures: int, *, template: str) -> Feedback:
    return Feedback(code=ErrorCode.DENIED,
                    message=f"{name} failed {failures} times in a row and is disabled for the rest "
                            "of this conversation; it was not run. Do not call it again: answer "
                            "with what you know, or use another function",
                    reminder=template)


def disabled_notice(name: str, failures: int) -> str:
    return (f"{name} has now failed {failures} times in a row, so it is disabled for the rest of "
            "this conversation: do not call it again.")


# -- results of running something -----------------------------------------------------------------


def observe(result: ExecutionResult, *, label: str, spec: Any = None, template: str = "",
            kind: str = "call", max_chars: int = DEFAULT_MAX_CHARS,
            call_id: str | None = None, require_output: bool = False) -> ActionReport:
    """The text for the model after `result` (of the call or block called `label`).

    `spec` is the called function (for its description and schema in reminders); `kind`
    is "call" or "code"; `template` is the protocol's reply template. With
    `require_output`, a code block that ran but printed nothing is a NO_OUTPUT problem.
    """
    problems: list[Feedback] = []
    problem = problem_for_result(result, label=label, spec=spec, template=template, kind=kind)
    where = f"the log (execution {result.id})"
    output = _output(result)
    if problem is None and require_output and kind == "code" and not output.strip() \
            and not result.files:
        problem = no_output(label, template=template, execution_id=result.id)
    if problem is None:
        body, cut = _success_text(result, label=label, kind=kind, output=output, max_chars=max_chars,
                                  where=where)
        text = body
    else:
        problems.append(problem)
        text = render(problem, max_chars=max_chars)
        cut = False
    if result.files or result.files_left_out:
        text += "\n" + files_made(result)
    sandbox_cut = result.stdout_truncated or result.stderr_truncated
    if sandbox_cut or cut:
        truncated = _truncated(result, sandbox_cut=sandbox_cut, display_cut=cut)
        problems.append(truncated)
        text += "\n" + render(truncated, max_chars=max_chars)
    return ActionReport(text=text, ok=result.status is Status.OK and problem is None, problems=tuple(problems),
                       execution_id=result.id, call_id=call_id)


def files_made(result: ExecutionResult, *, most: int = 20) -> str:
    """The files a run made, for the model: name, size and type of each (the bytes stay in
    the result and the log), and those that did not fit."""
    shown = [f"{made.name} ({format_size(made.size)}, {made.media_type})"
             for made in result.files[:most]]
    if len(result.files) > most:
        shown.append(f"and {len(result.files) - most} more")
    text = "Files made: " + ", ".join(shown) if shown else "No files came back"
    if result.files_left_out:
        text += (f"; left out (past the limit of {result.limits.max_returned_files_mb} MB of files "
                 f"per run): {', '.join(result.files_left_out[:most])}")
    return text + "."


def no_output(label: str, *, template: str, execution_id: str | None = None) -> Feedback:
    return Feedback(code=ErrorCode.NO_OUTPUT,
                    message=f"{label} ran but printed nothing, so there is no result to read",
                    reminder="print() every value you want to see, e.g. print(x); state from "
                             f"this block is kept, so print what you need without redoing it. "
                             f"{template}".rstrip(),
                    execution_id=execution_id)


def code_keeps_failing(failures: int) -> Feedback:
    """After `failures` failing code blocks in a row: stop coding this step, reason it out."""
    return Feedback(code=ErrorCode.CODE_KEEPS_FAILING,
                    message=f"your last {failures} code blocks in a row failed or printed "
                            "nothing. Solve this step by reasoning instead of code: check the "
                            "problem statement and your steps so far, work the step out in "
                            "words and formulas, then go on to the next step",
                    reminder="you may use code again for later steps")


def _output(result: ExecutionResult) -> str:
    parts = [result.stdout]
    if result.stderr.strip():
        parts.append(("" if result.stdout.endswith("\n") or not result.stdout else "\n")
                     + "[stderr]\n" + result.stderr)
    return "".join(parts)


def _success_text(result: ExecutionResult, *, label: str, kind: str, output: str, max_chars: int,
                  where: str) -> tuple[str, bool]:
    if kind == "call":
        value = _compact(result.return_value)
        head = f"Result of {label}: {value}"
        if result.return_is_repr:
            head += "\n(the return value has no JSON form: this is its repr)"
        body = head + (f"\nOutput:\n{output.rstrip()}" if output.strip() else "")
    else:
        body = (f"{label} ran. Output:\n{output.rstrip()}" if output.strip()
                else f"{label} ran and printed nothing (print() what you want to see).")
    return clip(body, max_chars, where=where)


def _truncated(result: ExecutionResult, *, sandbox_cut: bool, display_cut: bool) -> Feedback:
    reasons = []
    if sandbox_cut:
        reasons.append(f"the sandbox kept only {result.limits.max_output_bytes:,} bytes of each "
                       "output stream")
    if display_cut:
        reasons.append("this message shows only the start and the end")
    return Feedback(code=ErrorCode.OUTPUT_TRUNCATED,
                    message="the output was cut: " + "; ".join(reasons),
                    details={"stdout_chars": len(result.stdout), "stderr_chars": len(result.stderr)},
                    reminder="print less (a summary, a slice, the values you need)",
                    execution_id=result.id)


def problem_for_result(result: ExecutionResult, *, label: str, spec: Any = None, template: str = "",
                       kind: str = "call") -> Feedback | None:
    """The Feedback for a result that is not `ok`, or None."""
    if result.status is Status.OK:
        return None
    error = result.error
    message = error.message if error else ""
    error_type = error.type if error else ""
    detail = (error.detail or {}) if error else {}
    reference = function_reference(spec) if spec is not None else ""
    call_reminder = (f"a valid call of {spec.name} gives arguments matching its parameters schema: "
                     f"{_compact(spec.parameters)}. {template}" if spec is not None else template)
    output_tail = last_lines(_output(result)) if _output(result).strip() else ""

    if result.status is Status.INVALID_ARGS and error_type == error_types.UNKNOWN_FUNCTION:
        available = list(detail.get("available") or [])
        return Feedback(code=ErrorCode.UNKNOWN_FUNCTION, message=message,
                        details={"available": available}, reminder=template,
                        execution_id=result.id)
    if result.status is Status.INVALID_ARGS:
        details: dict[str, Any] = {
            "missing": detail.get("missing") or [],
            "unexpected": detail.get("unexpected") or [],
            "wrong_type": [f"{p.get('path')}: expected {p.get('expected')}, got {p.get('got')}"
                           for p in detail.get("wrong_type") or []],
            "invalid": [f"{p.get('path') or '(arguments)'}: {p.get('message')}"
                        for p in detail.get("invalid") or []],
        }
        return Feedback(code=ErrorCode.INVALID_ARGUMENTS, message=message, details=details,
                        reminder=call_reminder, execution_id=result.id)
    if result.status is Status.TIMEOUT:
        return Feedback(code=ErrorCode.TIMEOUT, message=f"{label} was stopped: {message}",
                        details={"time_limit_s": result.limits.timeout_s, "output": output_tail},
                        reminder=_fix_reminder(kind, "make it faster or do less work per step",
                                               reference, template),
                        execution_id=result.id)
    if result.status is Status.MEMORY_LIMIT:
        return Feedback(code=ErrorCode.MEMORY_LIMIT, message=f"{label} was stopped: {message}",
                        details={"memory_limit_mb": result.limits.memory_mb, "output": output_tail},
                        reminder=_fix_reminder(kind, "use less memory (smaller data, generators)",
                                               reference, template),
                        execution_id=result.id)
    if (result.status is Status.INSTALL_FAILED or error_type in (error_types.PACKAGE_UNAVAILABLE,
                                                                 ModuleNotFoundError.__name__)):
        return Feedback(code=ErrorCode.PACKAGE_UNAVAILABLE, message=f"{label} failed: {message}",
                        details={"error": f"{error_type}: {message}" if error_type else ""},
                        reminder=_fix_reminder(kind, "use only the modules that are available",
                                               reference, template),
                        execution_id=result.id)
    if result.status is Status.DENIED:
        return Feedback(code=ErrorCode.DENIED, message=f"{label} was refused: {message}",
                        reminder=_fix_reminder(kind, "do it without what was refused", reference,
                                               template),
                        execution_id=result.id)
    # error, crashed, and anything a later version adds
    what = f"{error_type}: {message}" if error_type else (message or str(result.status))
    verb = "crashed" if result.status is Status.CRASHED else "failed"
    details = {"error": what}
    if error and error.traceback:
        details["traceback"] = last_lines(error.traceback, 8)
    if output_tail:
        details["output"] = output_tail
    if result.exit_code not in (None, 0, 1):
        details["exit_code"] = result.exit_code
    return Feedback(code=ErrorCode.EXECUTION_FAILED, message=f"{label} {verb} with {what}",
                    details=details,
                    reminder=_fix_reminder(kind, "fix the cause and try again", reference, template),
                    execution_id=result.id)


def _fix_reminder(kind: str, advice: str, reference: str, template: str) -> str:
    if kind == "call" and reference:
        return f"{advice}. The function: {reference}\n{template}".rstrip()
    return f"{advice}. {template}".rstrip()


def join(texts: Iterable[str]) -> str:
    """Several observations or notes as one message body."""
    return "\n\n".join(text for text in texts if text)


def notes_text(notes: Sequence[str]) -> str:
    return "\n".join(f"Note: {note}" for note in notes)
