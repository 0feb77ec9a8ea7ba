"""Direct calls: user code calling its own top-level function skips the entry checks.

Every user function checks its arguments as it starts (transformer.py), because a library
may call it with anything. A call written in user code, `step(a, b)`, passes values user
code already holds: checked when they reached it. So each top-level function gets a twin
without the entry checks, and each such call in the code calls the twin, but only when
the name still refers to that very function (`step is _public_step_`): rebinding the
name, shadowing it, or a library writing the run's namespace makes the call an ordinary
one again. The twin and the function it stands for are local variables of the module's
function (closure cells of the code inside it), never in any namespace, and their names
end with "_": user code cannot name them, and only these calls reach the twin.

A function qualifies when it is a plain `def` directly at the top level, undecorated,
without defaults (the twin would evaluate them again, and hold other objects); calls
qualify with plain positional and keyword arguments (`*args`/`**kwargs` go through the
guards' `apply`, which checks them). Stdlib only.
"""

from __future__ import annotations

import ast
import copy
from typing import Any, cast

# Set by transformer._check_entry on the statements it inserts, so the twin can drop them.
ENTRY_CHECK = "runner_entry_check"


def _twin_names(name: str) -> tuple[str, str, str]:
    """(the twin, the public function it stands for, the function that makes the twin)."""
    return f"_direct_{name}_", f"_public_{name}_", f"_make_direct_{name}_"


def _qualifies(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.FunctionDef)
        and not node.decorator_list
        and not node.args.defaults
        and not any(default is not None for default in node.args.kw_defaults)
    )


def _twin(node: ast.FunctionDef) -> ast.FunctionDef:
    """The function without its entry checks (and without annotations, which would be
    evaluated again), made inside a function of its own so its name stays `name`."""
    twin = copy.deepcopy(node)
    twin.body = [statement for statement in twin.body if not getattr(statement, ENTRY_CHECK, False)]
    twin.body = twin.body or [ast.Pass()]
    twin.returns = None
    for argument in ast.walk(twin.args):
        if isinstance(argument, ast.arg):
            argument.annotation = None
    _, _, maker = _twin_names(node.name)
    return ast.FunctionDef(
        name=maker,
        args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[twin, ast.Return(ast.Name(node.name, ast.Load()))],
        decorator_list=[],
        returns=None,
        type_comment=None,
    )


class _DirectCalls(ast.NodeTransformer):
    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def visit_Call(self, node: ast.Call) -> Any:
        node = cast(ast.Call, self.generic_visit(node))
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id in self.names
            and not any(isinstance(argument, ast.Starred) for argument in node.args)
            and all(keyword.arg is not None for keyword in node.keywords)
        ):
            direct, public, _ = _twin_names(func.id)
            same = ast.Compare(
                left=ast.Name(func.id, ast.Load()), ops=[ast.Is()], comparators=[ast.Name(public, ast.Load())]
            )
            node.func = ast.copy_location(
                ast.IfExp(test=same, body=ast.Name(direct, ast.Load()), orelse=ast.Name(func.id, ast.Load())), func
            )
        return node


def add_direct_calls(body: list[ast.stmt]) -> list[ast.stmt]:
    """The module function's body (after its `global` line) with twins and direct calls."""
    names = frozenset(node.name for node in body if _qualifies(node))  # type: ignore[attr-defined]
    if not names:
        return body
    body = [_DirectCalls(names).visit(statement) for statement in body]
    result: list[ast.stmt] = []
    for name in sorted(names):  # both unset until the def runs: calls before it are ordinary
        direct, public, _ = _twin_names(name)
        result.append(
            ast.Assign(targets=[ast.Name(direct, ast.Store()), ast.Name(public, ast.Store())], value=ast.Constant(None))
        )
    for statement in body:
        result.append(statement)
        if isinstance(statement, ast.FunctionDef) and statement.name in names:
            direct, public, maker = _twin_names(statement.name)
            result.append(_twin(statement))
            result.append(
                ast.Assign(targets=[ast.Name(direct, ast.Store())], value=ast.Call(ast.Name(maker, ast.Load()), [], []))
            )
            result.append(
                ast.Assign(targets=[ast.Name(public, ast.Store())], value=ast.Name(statement.name, ast.Load()))
            )
    for statement in result:
        if not hasattr(statement, "lineno"):
            ast.copy_location(statement, body[0])
    return result  # (wrap_module fills in the locations of the new nodes, once)
