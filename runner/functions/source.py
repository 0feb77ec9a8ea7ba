"""Function source text: find the `def`, clean what models and `inspect` hand us, read its signature.

Source is edited by position (the `ast` node offsets), never re-generated with
`ast.unparse`, so comments, blank lines and layout survive and a traceback's line text
is the line the author wrote.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

# Decorators that register a function as a tool in runner or in other frameworks. They
# mean nothing inside the sandbox (and their names are not defined there), so they are
# dropped from the function's code; any other decorator is kept.
TOOL_DECORATOR_NAMES = frozenset({
    "tool", "function_tool", "register_function", "register_for_llm", "register_for_execution",
    "register_tool", "kernel_function", "ai_function",
})

_FENCE = re.compile(r"^\s*```[A-Za-z0-9_+-]*[ \t]*\n(?P<body>.*?)\n?[ \t]*```\s*$", re.DOTALL)


def clean_code(code: str) -> str:
    """Code as it is stored: no Markdown fence, no common indentation, one final newline."""
    fenced = _FENCE.match(code)
    if fenced:
        code = fenced.group("body")
    code = textwrap.dedent(code.replace("\r\n", "\n"))
    lines = code.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    text = "\n".join(lines).rstrip()
    return text + "\n" if text else ""


def parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: null bytes
        return None


def find_def(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The last top-level `def name` (the one that wins when the module runs)."""
    found = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found = node
    return found


def decorator_name(node: ast.expr) -> str | None:
    """`tool`, `x.tool`, `tool(...)` and `x.tool(...)` are all named `tool`."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def strip_tool_decorators(code: str, name: str, extra_names: frozenset[str] = frozenset()) -> str:
    """Drop the tool-registration decorator lines above `def name`; other code is untouched."""
    tree = parse(code)
    function = find_def(tree, name) if tree is not None else None
    if function is None:
        return code
    names = TOOL_DECORATOR_NAMES | extra_names
    drop: set[int] = set()  # 1-based line numbers
    for decorator in function.decorator_list:
        if decorator_name(decorator) in names:
            drop.update(range(decorator.lineno, (decorator.end_lineno or decorator.lineno) + 1))
    if not drop:
        return code
    lines = code.splitlines(keepends=True)
    return "".join(line for number, line in enumerate(lines, start=1) if number not in drop)


def strip_annotations(code: str, name: str) -> str:
    """Remove the parameter and return annotations of `def name`.

    The schema already holds the types; inside the sandbox the annotations would be
    evaluated when the `def` runs, and names such as `Annotated`, `Literal` or a pydantic
    model are not defined there (and string annotations are refused by the restricted tier).
    """
    tree = parse(code)
    function = find_def(tree, name) if tree is not None else None
    if function is None:
        return code
    data = code.encode()
    starts = _line_starts(data)

    def offset(line: int, col: int) -> int:  # ast columns are UTF-8 byte offsets
        return starts[line - 1] + col

    cuts: list[tuple[int, int]] = []
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    for argument in every:
        if argument.annotation is None:
            continue
        name_end = offset(argument.lineno, argument.col_offset) + len(argument.arg.encode())
        annotation = argument.annotation
        end = offset(annotation.end_lineno or annotation.lineno, annotation.end_col_offset or 0)
        cuts.append((name_end, end))
    if function.returns is not None:
        returns = function.returns
        start = offset(returns.lineno, returns.col_offset)
        arrow = data.rfind(b"->", 0, start)
        while arrow > 0 and data[arrow - 1:arrow] in (b" ", b"\t"):
            arrow -= 1
        end = offset(returns.end_lineno or returns.lineno, returns.end_col_offset or 0)
        if arrow >= 0:
            cuts.append((arrow, end))
    for start, end in sorted(cuts, reverse=True):
        data = data[:start] + data[end:]
    return data.decode()


def _line_starts(data: bytes) -> list[int]:
    starts = [0]
    for index, byte in enumerate(data):
        if byte == 0x0A:
            starts.append(index + 1)
    return starts


@dataclass(frozen=True, slots=True)
class Signature:
    """What the `def` line says about the arguments a call may pass."""

    parameters: tuple[str, ...]  # names that can be passed by keyword, in order
    required: tuple[str, ...]  # of those, the ones without a default
    accepts_any_keyword: bool  # has **kwargs


def read_signature(code: str, name: str) -> Signature | None:
    """The signature of `def name` in `code`, or None if the code does not parse or define it."""
    tree = parse(code)
    function = find_def(tree, name) if tree is not None else None
    if function is None:
        return None
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    # defaults belong to the last len(defaults) positional parameters
    first_default = len(positional) - len(arguments.defaults)
    names: list[str] = []
    required: list[str] = []
    for index, argument in enumerate(positional):
        if argument in arguments.posonlyargs:
            continue  # cannot be passed by keyword
        names.append(argument.arg)
        if index < first_default:
            required.append(argument.arg)
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
        names.append(argument.arg)
        if default is None:
            required.append(argument.arg)
    return Signature(tuple(names), tuple(required), arguments.kwarg is not None)
