"""Plain-text views of logged executions, for the CLI and for pasting into a bug report.

No colour: the output is read in terminals, pipes and files alike. Text that user code
produced (stdout, stderr, tracebacks, the code itself) is untrusted, so control
characters other than newline and tab are shown escaped: a logged `print('\\x1b[2J')`
must not clear the reviewer's screen.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from runner.logs.store import ExecutionRecord
from runner.types import Limits

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CODE_PREVIEW_WIDTH = 50


def render_execution(record: ExecutionRecord) -> str:
    """Everything about one execution, as a multi-line report."""
    result, request = record.result, record.request
    lines = [
        f"execution  {result.id}",
        f"started    {_local_time(result.started_at, zone=True)}",
        f"source     {record.source}",
        f"backend    {result.backend}",
        f"status     {result.status}",
        f"exit code  {'-' if result.exit_code is None else result.exit_code}",
        f"duration   {format_duration(result.duration_ms)}",
        f"cpu        {format_duration(result.resources.cpu_ms)}",
        f"max rss    {_format_kb(result.resources.max_rss_kb)}",
        f"limits     {_format_limits(result.limits)}",
    ]
    if request.limits != result.limits:
        lines.append(f"requested  {_format_limits(request.limits)}")
    lines.append(f"packages   {_format_packages(request.packages, result.packages)}")
    if record.meta:
        lines.append(f"meta       {_clean(json.dumps(record.meta, sort_keys=True, default=repr))}")
    lines += _section("code", _numbered(request.code))
    lines += _section("stdout", _output(result.stdout, result.stdout_truncated))
    lines += _section("stderr", _output(result.stderr, result.stderr_truncated))
    if result.error is not None:
        error_lines = [f"{result.error.type}: {result.error.message}"]
        if result.error.traceback:
            error_lines += ["", result.error.traceback.rstrip("\n")]
        lines += _section("error", _clean("\n".join(error_lines)))
    if result.return_value is not None:
        lines += _section("return value", _clean(_pretty_json(result.return_value)))
    return "\n".join(lines) + "\n"


def render_execution_list(records: Sequence[ExecutionRecord]) -> str:
    """A compact table, one execution per line, in the order given."""
    if not records:
        return "no executions\n"
    header = ("ID", "STARTED", "BACKEND", "STATUS", "DURATION", "CODE")
    rows = [
        (
            r.result.id,
            _local_time(r.result.started_at, zone=False),
            r.result.backend,
            str(r.result.status),
            format_duration(r.result.duration_ms),
            _first_line(r.request.code, _CODE_PREVIEW_WIDTH),
        )
        for r in records
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    right_aligned = {4}  # durations line up on the unit
    out = []
    for row in [header, *rows]:
        cells = [
            cell.rjust(width) if i in right_aligned else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=False))
        ]
        out.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(out) + "\n"


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


def _format_packages(requested: Sequence[str], versions: dict[str, str]) -> str:
    if not requested and not versions:
        return "none"
    asked = ", ".join(_clean(p) for p in requested) or "none"
    ran = ", ".join(f"{_clean(name)} {_clean(version)}" for name, version in sorted(versions.items())) or "none"
    return f"requested {asked}; ran {ran}"


def _section(title: str, body: str) -> list[str]:
    return ["", f"--- {title} ---", body]


def _numbered(code: str) -> str:
    lines = code.splitlines() or [""]
    width = len(str(len(lines)))
    return "\n".join(f"{n:>{width}} | {_clean(line)}" for n, line in enumerate(lines, start=1))


def _output(text: str, truncated: bool) -> str:
    if not text and not truncated:
        return "(empty)"
    body = _clean(text.rstrip("\n"))
    if truncated:
        body += "\n[... truncated: output exceeded max_output_bytes]"
    return body


def _first_line(code: str, width: int) -> str:
    lines = [line.strip() for line in code.splitlines() if line.strip()]
    if not lines:
        return "(no code)"
    first = _clean(lines[0].replace("\t", " "))
    more = len(lines) > 1
    if len(first) > width:
        return first[: width - 3] + "..."
    return first + (" ..." if more else "")


def _pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=repr)


def _clean(text: str) -> str:
    """Escape control characters (terminal escapes, carriage returns) in untrusted text."""
    text = text.replace("\r\n", "\n")  # Windows line ends are harmless; a lone \r is not
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
