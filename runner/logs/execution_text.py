"""Plain-text views of logged executions, for the CLI and for pasting into a bug report.

Text that user code produced (stdout, stderr, tracebacks, the code itself) is untrusted,
so control characters other than newline and tab are shown escaped
(`runner.terminal.sanitize_for_terminal`): a logged `print('\\x1b[2J')` must not clear
the reviewer's screen. A `Style` decides that (raw keeps the characters) and whether
statuses are coloured (on a terminal only). Bodies of several megabytes are abridged to
their start and end with a marker saying how much was left out, unless `full`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from ..files import format_size
from ..terminal import PLAIN, Style
from ..text_table import columns
from ..types import ExecutionResult, Limits, Status
from ..worker import error_types
from .store import ExecutionRecord

_CODE_PREVIEW_WIDTH = 50
# A body longer than this is shown as its first and last parts (runner logs show --full
# shows it all): a reviewer needs the start and the end, and a terminal chokes on megabytes.
ABRIDGE_CHARS = 20_000
_HEAD_CHARS = 15_000
FULL_HINT = "--full shows everything"


def abridge(text: str, *, full: bool = False, limit: int = ABRIDGE_CHARS) -> str:
    """`text`, or its first and last parts with a marker of what was left out."""
    if full or len(text) <= limit:
        return text
    head = min(_HEAD_CHARS, limit * 3 // 4)
    tail = limit - head
    left_out = len(text) - head - tail
    return (f"{text[:head]}\n[... {left_out:,} characters not shown; {FULL_HINT} ...]\n"
            f"{text[len(text) - tail:]}")


def status_label(status: str, error_type: str | None) -> str:
    """The status a person is shown: a run stopped by Ctrl-C is `crashed` with the error type
    Interrupted in its data (the eight statuses are the backends' contract), and reads as
    `interrupted` wherever a person looks (the viewer, `runner logs list` and `show`); one
    its caller cancelled (error type Cancelled) reads as `cancelled`."""
    if status == Status.CRASHED and error_type == error_types.INTERRUPTED:
        return "interrupted"
    if status == Status.CRASHED and error_type == error_types.CANCELLED:
        return "cancelled"
    return str(status)


def render_execution(record: ExecutionRecord, *, style: Style = PLAIN, full: bool = False) -> str:
    """Everything about one execution, as a multi-line report."""
    result, request = record.result, record.request
    clean = style.text
    lines = [
        f"execution  {result.id}",
        f"started    {_local_time(result.started_at, zone=True)}",
        f"source     {clean(record.source)}",
        f"backend    {clean(result.backend)}" + (f" (image {clean(result.image)})" if result.image else ""),
        f"status     {style.status(status_label(result.status, _error_type(result)))}",
        f"exit code  {'-' if result.exit_code is None else result.exit_code}",
        f"duration   {format_duration(result.duration_ms)}",
        f"cpu        {format_duration(result.resources.cpu_ms)}",
        f"max rss    {_format_kb(result.resources.max_rss_kb)}",
        f"limits     {_format_limits(result.limits)}",
    ]
    if result.resources.node is not None:
        lines.insert(4, f"node       {clean(result.resources.node)}")
    if result.resources.isolation is not None:
        lines.append(f"isolation  {clean(result.resources.isolation.summary())}")
    if request.limits != result.limits:
        lines.append(f"requested  {_format_limits(request.limits)}")
    lines.append(f"packages   {_format_packages(request.packages, result.packages, clean)}")
    if request.call is not None:
        arguments = json.dumps(request.call.arguments, ensure_ascii=False, default=repr)
        lines.append(f"call       {clean(request.call.name)}({clean(abridge(arguments, full=full))})")
    if record.meta:
        lines.append(f"meta       {clean(abridge(json.dumps(record.meta, sort_keys=True, default=repr), full=full))}")
    lines += _section("code", _numbered(abridge(request.code, full=full), clean))
    lines += _section("stdout", _output(abridge(result.stdout, full=full), result.stdout_truncated, clean))
    lines += _section("stderr", _output(abridge(result.stderr, full=full), result.stderr_truncated, clean))
    if result.error is not None:
        error_lines = [f"{result.error.type}: {result.error.message}"]
        if result.error.traceback:
            error_lines += ["", result.error.traceback.rstrip("\n")]
        lines += _section("error", clean(abridge("\n".join(error_lines), full=full)))
    if result.return_value is not None:
        lines += _section("return value", clean(abridge(_pretty_json(result.return_value), full=full)))
    if request.files:
        lines += _section("files given", "\n".join(
            f"{clean(given.name)}  {format_size(len(given.data))}" for given in request.files))
    if result.files or result.files_left_out:
        lines += _section("files made", render_files(result, clean)
                          + f"\n(`runner logs files {result.id} --out DIR` writes them out)")
    return "\n".join(lines) + "\n"


def render_files(result: ExecutionResult, clean: Callable[[str], str]) -> str:
    """One line per file a run made (name, size, type, whether the log kept its bytes), then
    the ones that were left out; names are the run's, shown as inert text."""
    lines = [f"{clean(made.name)}  {format_size(made.size)}  {clean(made.media_type)}"
             + ("" if made.kept else "  (not kept: the log's cap for files was reached)")
             for made in result.files]
    if result.files_left_out:
        lines.append("left out (past max_returned_files_mb, or refused): "
                     + ", ".join(clean(name) for name in result.files_left_out))
    return "\n".join(lines)



def render_execution_list(records: Sequence[ExecutionRecord], *, style: Style = PLAIN) -> str:
    """A compact table, one execution per line, in the order given."""
    if not records:
        return "no executions\n"
    header = ("ID", "STARTED", "BACKEND", "STATUS", "DURATION", "CODE")
    rows = [
        (
            r.result.id,
            _local_time(r.result.started_at, zone=False),
            style.text(r.result.backend),
            status_label(r.result.status, _error_type(r.result)),
            format_duration(r.result.duration_ms),
            _first_line(r.request.code if r.request.call is None else f"call {r.request.call.name}",
                        _CODE_PREVIEW_WIDTH, style.text),
        )
        for r in records
    ]
    # durations (column 4) line up on the unit
    return "\n".join(columns(header, rows, right={4}, paint={3: style.status})) + "\n"


def format_duration(ms: int) -> str:
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    minutes, rest_ms = divmod(ms, 60_000)
    return f"{minutes} min {rest_ms / 1000:.0f} s"


def _local_time(moment: datetime, *, zone: bool) -> str:
    """The reader's local time; the detail view adds the UTC offset to be unambiguous."""
    local = moment.astimezone()  # stored times are UTC-aware; a naive one is taken as local
    return local.strftime("%Y-%m-%d %H:%M:%S %z" if zone else "%Y-%m-%d %H:%M:%S")


def _format_kb(kb: int) -> str:
    if kb <= 0:
        return "-"
    if kb < 10 * 1024:
        return f"{kb:,} kB"
    return f"{kb / 1024:,.1f} MB"


def _format_limits(limits: Limits) -> str:
    return ", ".join(
        [
            f"timeout {limits.timeout_s:g} s",
            f"cpu {limits.effective_cpu_s:g} s",
            f"memory {limits.memory_mb} MB",
            f"output {limits.max_output_bytes:,} B",
            f"processes {limits.max_processes}",
            f"open files {limits.max_open_files}",
            f"file size {limits.max_file_size_mb} MB",
        ]
    )


def _format_packages(requested: Sequence[str], versions: dict[str, str], clean: Callable[[str], str]) -> str:
    if not requested and not versions:
        return "none"
    asked = ", ".join(clean(p) for p in requested) or "none"
    ran = ", ".join(f"{clean(name)} {clean(version)}" for name, version in sorted(versions.items())) or "none"
    return f"requested {asked}; ran {ran}"


def _section(title: str, body: str) -> list[str]:
    return ["", f"--- {title} ---", body]


def _numbered(code: str, clean: Callable[[str], str]) -> str:
    lines = code.splitlines() or [""]
    width = len(str(len(lines)))
    return "\n".join(f"{n:>{width}} | {clean(line)}" for n, line in enumerate(lines, start=1))


def _output(text: str, truncated: bool, clean: Callable[[str], str]) -> str:
    if not text and not truncated:
        return "(empty)"
    body = clean(text.rstrip("\n"))
    if truncated:
        body += "\n[... truncated by the sandbox: output exceeded max_output_bytes]"
    return body


def _first_line(code: str, width: int, clean: Callable[[str], str]) -> str:
    lines = [line.strip() for line in code.splitlines() if line.strip()]
    if not lines:
        return "(no code)"
    first = clean(lines[0].replace("\t", " "))
    more = len(lines) > 1
    if len(first) > width:
        return first[: width - 3] + "..."
    return first + (" ..." if more else "")


def _pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=repr)


def _error_type(result: ExecutionResult) -> str | None:
    return result.error.type if result.error is not None else None
