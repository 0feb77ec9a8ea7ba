"""A block's last top-level expression, found by its syntax and wrapped in a call.

Notebook-style executors show the value of a block's last expression: MathChat prints it,
smolagents' remote executors return it as the step's output. Each wraps that expression
(`wrap_last_expression(code, "print")`) and keeps every other character of the block, so
line numbers in tracebacks stay the block's own. Code that does not parse is returned as
it is: running it shows the error.
"""

from __future__ import annotations

import ast

__all__ = ["parsed", "wrap_last_expression"]


def parsed(code: str) -> ast.Module | None:
    """The block's syntax tree, or None when it does not parse."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def wrap_last_expression(code: str, wrapper: str, tree: ast.Module | None = None) -> str:
    """`code` with its last statement passed to `wrapper` (a callable's name) when that
    statement is an expression; else `code` unchanged."""
    tree = tree if tree is not None else parsed(code)
    if tree is None or not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    last = tree.body[-1]
    if last.end_lineno is None or last.end_col_offset is None:
        return code
    lines = code.splitlines(keepends=True)
    start = sum(len(line) for line in lines[:last.lineno - 1]) + _offset(lines[last.lineno - 1],
                                                                            last.col_offset)
    end = sum(len(line) for line in lines[:last.end_lineno - 1]) + _offset(
        lines[last.end_lineno - 1], last.end_col_offset)
    return f"{code[:start]}{wrapper}({code[start:end]}){code[end:]}"


def _offset(line: str, byte_offset: int) -> int:
    """The character index of a UTF-8 byte offset in `line` (ast gives byte offsets)."""
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))
