"""Column tables for the terminal, laid out by rich: a header line, then a line per row.

Cells are plain text: rich reads them as `Text`, never as markup, so a `[bold]` in a model's
answer is shown as written; making hostile text inert (control characters) is the
caller's job, with the one rule of `runner.terminal` (`Style.text`), before the cell gets
here. Columns are two spaces apart, sized to their widest cell, never wrapped; trailing
spaces are dropped. Colour is painted on the laid-out line (`paint`), so escape codes
never count toward a column's width.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

_GAP = 2  # spaces between columns


def columns(header: Sequence[str], rows: Sequence[Sequence[str]], *,
            right: Collection[int] = (),
            paint: Mapping[int, Callable[[str], str]] | None = None) -> list[str]:
    """The table's lines. `right` holds the columns aligned right (numbers); `paint` maps
    a column to what colours its cells (the header is never painted)."""
    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, _GAP // 2),
                  show_header=True, header_style="")
    for index, title in enumerate(header):
        table.add_column(Text(title), justify="right" if index in right else "left",
                         no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    widths = [max(cell_len(line[index]) for line in [header, *rows]) for index in range(len(header))]
    console = Console(width=sum(widths) + _GAP * len(widths) + 1, color_system=None,
                      markup=False, emoji=False, highlight=False, soft_wrap=False)
    with console.capture() as captured:
        console.print(table)
    lines = [line.rstrip() for line in captured.get().splitlines()]
    if paint:
        lines[1:] = [_painted(line, row, widths, right, paint) for line, row in zip(lines[1:], rows,
                                                                                    strict=True)]
    return lines


def _painted(line: str, row: Sequence[str], widths: Sequence[int], right: Collection[int],
             paint: Mapping[int, Callable[[str], str]]) -> str:
    """`line` with the cells of the painted columns coloured in place (from the right, so
    the offsets of the columns to their left stay valid)."""
    for index in sorted(paint, reverse=True):
        start = sum(width + _GAP for width in widths[:index])
        if index in right:
            start += widths[index] - cell_len(row[index])
        # Offsets are in cells; the columns to the left of a painted one hold no wide
        # characters in any table that paints (ids, times, names the runner chose).
        end = start + len(row[index])
        if line[start:end] == row[index]:
            line = line[:start] + paint[index](row[index]) + line[end:]
    return line
