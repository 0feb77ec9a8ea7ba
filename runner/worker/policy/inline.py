"""Fast paths compiled inline: what the compiler can prove, it does not ask a hook.

RestrictedPython's rewrite calls a hook (a Python function) for every attribute read,
every call's result and every attribute write; in a loop of method calls those calls
cost far more than the work. Most of what they decide is known when compiling or costs
one C-level set lookup at run time, so this pass (after the policy's transformer, on
the code as a function of its hooks) replaces, inside function bodies:

- `_result_(X)` by `(_r_ if _type_(_r_ := X) in _plain_ else _result_(_r_))`: a value
  whose class is held (plain, or a class whose every instance was judged acceptable) is
  already what the check would return;
- a call as a statement, `_result_(X)`, by `X`: its result is dropped, never held;
- `_getattr_(O, 'name')`, for a name the compiler sees is public (no `_`, not an
  introspection attribute, not `format`/`format_map`, whose read the guards replace), by
  the native read with the same test, or a bound method found in `_bound_` (methods the
  check accepted, whose verdict depends only on their object's class and function, both
  the same for an equal method), and `_attribute_(O, 'name', value)` otherwise: the name
  check is done here, once, at compile time;
- `_write_(O).name = V`, for such a name, by the native write when O's class is held:
  for those the guards' write would hand back O itself or a proxy whose name check a
  public name passes (modules, classes and functions are never held).

`_plain_` is the value check's `held` set (checks.py), which grows as classes are judged.
Nothing is inlined in class bodies, lambdas or comprehensions, where an assignment
expression would bind in the wrong scope or is not allowed: the hooks stay there.
`_r_`, `_o_`, `_w_` end with "_": names user code cannot write or read. Stdlib only.
"""

from __future__ import annotations

import ast
from typing import Any, cast

from RestrictedPython.transformer import INSPECT_ATTRIBUTES

# Attribute names whose read the guards answer with something else than the attribute.
_REPLACED_READS = frozenset({"format", "format_map"})
_NO_INLINE = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _name(identifier: str) -> ast.Name:
    return ast.Name(identifier, ast.Load())


def _held(value: ast.expr) -> ast.Compare:
    """`_type_(value) in _plain_`."""
    return ast.Compare(left=ast.Call(_name("_type_"), [value], []), ops=[ast.In()], comparators=[_name("_plain_")])


def _held_or_bound(value: ast.expr) -> ast.BoolOp:
    """`_type_(value) in _plain_ or (_type_(_r_) is _method_ and _r_ in _bound_)`: a bound
    method the check has accepted before (same object, same function) passes as well."""
    method = ast.BoolOp(
        op=ast.And(),
        values=[
            ast.Compare(
                left=ast.Call(_name("_type_"), [_name("_r_")], []), ops=[ast.Is()], comparators=[_name("_method_")]
            ),
            ast.Compare(left=_name("_r_"), ops=[ast.In()], comparators=[_name("_bound_")]),
        ],
    )
    return ast.BoolOp(op=ast.Or(), values=[_held(value), method])


def _walrus(target: str, value: ast.expr) -> ast.NamedExpr:
    return ast.NamedExpr(target=ast.Name(target, ast.Store()), value=value)


def public_attribute(name: Any) -> bool:
    """A name whose read the guards would allow of any object, decided by the name alone."""
    return (
        type(name) is str
        and not name.startswith("_")
        and name not in INSPECT_ATTRIBUTES
        and name not in _REPLACED_READS
    )


def _hook_call(node: ast.AST, hook: str, arguments: int) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == hook
        and len(node.args) == arguments
        and not node.keywords
    )


class Inliner(ast.NodeTransformer):
    """Rewrites hook calls into their inline fast paths, in function scopes only."""

    def __init__(self) -> None:
        self._in_function = False

    def _scoped(self, node: ast.AST, fields: tuple[str, ...], in_function: bool) -> None:
        """Visit `fields` of `node` with `_in_function` set as given."""
        saved, self._in_function = self._in_function, in_function
        try:
            for field in fields:
                value = getattr(node, field, None)
                if isinstance(value, list):
                    setattr(node, field, [self.visit(item) for item in value])
                elif isinstance(value, ast.AST):
                    setattr(node, field, self.visit(value))
        finally:
            self._in_function = saved

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        # Decorators, defaults and annotations run in the enclosing scope; the body in its own.
        self._scoped(node, ("decorator_list", "args", "returns"), self._in_function)
        self._scoped(node, ("body",), True)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> Any:
        self._scoped(node, ("decorator_list", "bases", "keywords"), self._in_function)
        self._scoped(node, ("body",), False)  # methods inside turn it back on
        return node

    def generic_visit(self, node: ast.AST) -> Any:
        if isinstance(node, _NO_INLINE):
            saved, self._in_function = self._in_function, False
            try:
                return super().generic_visit(node)
            finally:
                self._in_function = saved
        return super().generic_visit(node)

    def visit_Call(self, node: ast.Call) -> Any:
        node = self.generic_visit(node)
        if not self._in_function:
            return node
        if _hook_call(node, "_result_", 1):
            return ast.copy_location(
                ast.IfExp(
                    test=_held(_walrus("_r_", node.args[0])),
                    body=_name("_r_"),
                    orelse=ast.Call(_name("_result_"), [_name("_r_")], []),
                ),
                node,
            )
        if (
            _hook_call(node, "_getattr_", 2)
            and isinstance(node.args[1], ast.Constant)
            and public_attribute(node.args[1].value)
        ):
            name = cast(str, node.args[1].value)
            # A plain local or global name is read again for the slow path; anything else
            # is evaluated once, into `_o_`.
            target = node.args[0]
            simple = isinstance(target, ast.Name)
            owner = _name(target.id) if isinstance(target, ast.Name) else _name("_o_")
            read = ast.Attribute(value=target if simple else _walrus("_o_", target), attr=name, ctx=ast.Load())
            return ast.copy_location(
                ast.IfExp(
                    test=_held_or_bound(_walrus("_r_", read)),
                    body=_name("_r_"),
                    orelse=ast.Call(_name("_attribute_"), [owner, ast.Constant(name), _name("_r_")], []),
                ),
                node,
            )
        return node

    def visit_Expr(self, node: ast.Expr) -> Any:
        if _hook_call(node.value, "_result_", 1):
            # A call as a statement: its result is dropped, never held by user code.
            node.value = node.value.args[0]  # type: ignore[attr-defined]
        return self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        node = self.generic_visit(node)
        if (
            self._in_function
            and isinstance(node.ctx, ast.Store)
            and _hook_call(node.value, "_write_", 1)
            and public_attribute(node.attr)
        ):
            target = node.value.args[0]  # type: ignore[attr-defined]
            if isinstance(target, ast.Name):  # read twice: no side effect, same value
                node.value = ast.IfExp(
                    test=_held(_name(target.id)),
                    body=_name(target.id),
                    orelse=ast.Call(_name("_write_"), [_name(target.id)], []),
                )
            else:
                node.value = ast.IfExp(
                    test=_held(_walrus("_w_", target)),
                    body=_name("_w_"),
                    orelse=ast.Call(_name("_write_"), [_name("_w_")], []),
                )
        return node


def inline_fast_paths(module: ast.Module) -> ast.Module:
    """The module (a function of the hooks: transformer.wrap_module) with fast paths."""
    return cast(ast.Module, ast.fix_missing_locations(Inliner().visit(module)))
