"""Plain-text views of function sets and their history, for the CLI.

Descriptions, code, diffs, authors and notes are written by models and people; the
history view makes each of them inert for a terminal (`safe`, the default) before it adds
its own colour, and the CLI does the same for the set view as a whole.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

from ..logs.functions import FunctionVersionRecord
from ..terminal import diff as coloured_diff
from ..terminal import sanitize_for_terminal, style
from .sets import FunctionSet


def render_function_set(function_set: FunctionSet, *, code: bool = False) -> str:
    """Each function: name and version, description, arguments, packages (and code)."""
    count = len(function_set)
    lines = [f"{function_set.name} ({count} function{'' if count == 1 else 's'})"]
    for spec in function_set:
        lines += ["", f"{spec.name}  v{function_set.version(spec.name)}"]
        if spec.description:
            lines += textwrap.wrap(spec.description, width=88, initial_indent="  ",
                                   subsequent_indent="  ")
        rows = spec.argument_summary()
        if rows:
            lines.append("  arguments:")
            width = max(len(name) for name, *_ in rows)
            type_width = max(len(kind) for _, kind, *_ in rows)
            for name, kind, required, description in rows:
                flag = "required" if required else "optional"
                text = f"    {name:<{width}}  {kind:<{type_width}}  {flag}"
                lines.append(f"{text}  {description}".rstrip())
        else:
            lines.append("  arguments: none")
        lines.append(f"  packages: {', '.join(spec.packages) if spec.packages else 'none'}")
        if code:
            lines += ["  code:", textwrap.indent(spec.code.rstrip("\n"), "    ")]
    return "\n".join(lines) + "\n"


Scores = Mapping[tuple[str, str, int], Sequence[tuple[str, int, float]]]


def render_history(records: list[FunctionVersionRecord], *, diffs: bool = True, safe: bool = True,
                   colour: bool = False, scores: Scores | None = None) -> str:
    """One block per change, oldest first: when, what, who, and the code diff.

    `safe` escapes control sequences in everything that came from a person or a model;
    `colour` colours the diffs (for a terminal); `scores` maps (set, function, version) to
    the (training, epoch, success rate) of the epochs that measured that version."""
    clean = sanitize_for_terminal if safe else (lambda text: text)
    if not records:
        return "no recorded changes\n"
    lines: list[str] = []
    for record in records:
        when = record.changed_at.strftime("%Y-%m-%d %H:%M:%S")
        note = f"  ({clean(record.note)})" if record.note else ""
        heading = clean(f"{record.set_name}.{record.function} v{record.version}")
        lines.append(f"{when}  {style(heading, 'heading', enabled=colour)}  "
                     f"{record.action} by {clean(str(record.author))}{note}")
        measured = (scores or {}).get((record.set_name, record.function, record.version), [])
        if measured and record.action != "remove":
            lines.append("    score: " + ", ".join(
                f"{rate * 100:.1f}% at epoch {epoch}" + (f" of training {training}"
                                                         if record.author.name != training else "")
                for training, epoch, rate in measured))
        if diffs and record.code_diff:
            body = textwrap.indent(clean(record.code_diff.rstrip("\n")), "    ")
            lines.append(coloured_diff(body, enabled=colour))
    return "\n".join(lines) + "\n"
