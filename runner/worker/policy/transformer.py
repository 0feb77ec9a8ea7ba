"""The compiler of the restricted tier: RestrictedPython's transformer, widened where model
code needs it, with two rules of its own that hold whatever a namespace contains.

1. **Hooks are parameters.** The hooks the rewritten code calls (`_getattr_`, `_write_`,
   `_getiter_`, ...) are never looked up in a namespace: a module's code is compiled as
   the body of a function whose parameters are the hooks (`HOOK_NAMES`), with every name
   the code binds at its top level declared global, so module semantics stay (the run's
   namespace holds the code's names) and the hooks are local variables, or closure cells
   of the functions it defines. Holding the run's globals dict, or any dict, or a library
   writing into it under a name of its choice, cannot switch a hook off. (hooks.py runs
   such code.)
2. **Values are checked where they enter user code.** Every user function, method,
   generator and lambda checks its arguments as it starts (`_enter_`, `_lambda_`), with
   the same rule as call results: whoever calls it, user code or a library calling back.

Widened: `__name__` can be read; classes may define special methods and read harmless
dunders; `_helper` names are the user's own; `from module import *` works (at the top
level, through a checked facade); `obj.attr += v` and `obj[k] += v` go through guarded
helpers; `n += 1` on a plain name stays native (as safe as `n = n + 1`). Refused besides
RestrictedPython's rules: dunder keyword names, string annotations, `from __future__
import annotations`. Stdlib only (and RestrictedPython).
"""

from __future__ import annotations

import ast
from typing import Any, cast

from RestrictedPython.compile import CompileResult
from RestrictedPython.transformer import IOPERATOR_TO_STR, RestrictingNodeTransformer, copy_locations

from .builtins import MODULE_CODE_NAME
from .compiled import remember_code
from .direct_calls import ENTRY_CHECK, add_direct_calls
from .inline import inline_fast_paths
from .names import (
    RESERVED_PRIVATE_NAMES,
    SAFE_DUNDER_ATTRIBUTES,
    SPECIAL_METHOD_NAMES,
    is_private_name,
)

# The parameters of every compiled module and expression, in this order (hooks.py passes
# the guards' functions for them). Every one ends with "_" or is a dunder: names user
# code cannot write.
HOOK_NAMES: tuple[str, ...] = (
    "_getattr_", "_getitem_", "_getiter_", "_iter_unpack_sequence_", "_unpack_sequence_",
    "_write_", "_print_", "_inplacevar_", "_inplace_attr_", "_inplace_item_", "_apply_",
    "_result_", "_annotation_", "_enter_", "_lambda_", "_import_star_", "__metaclass__",
    "_type_", "_plain_", "_decorate_", "_with_", "_attribute_", "_method_", "_bound_",
)
EXPRESSION_CODE_NAME = "<expression>"

# Builtins whose result type Python itself guarantees (int() must return an int, str() a
# str, ...): calling them needs no check of the result, which keeps tight loops fast,
# where the code (and what ran before it in the namespace) never binds the name.
KNOWN_RESULT_BUILTINS = frozenset({
    "len", "int", "float", "str", "bool", "complex", "isinstance", "issubclass", "range",
    "print", "repr", "ascii", "hash", "id", "ord", "chr", "hex", "oct", "bin", "callable",
    "format",
})


def _call(name: str, args: list[ast.expr], like: Any) -> ast.Call:
    call = ast.Call(func=ast.Name(name, ast.Load()), args=args, keywords=[])
    copy_locations(call, like)
    copy_locations(call.func, like)
    return call


def _parameters(arguments: ast.arguments) -> list[str]:
    names = [arg.arg for arg in (*arguments.posonlyargs, *arguments.args)]
    if arguments.vararg is not None:
        names.append(arguments.vararg.arg)
    names += [arg.arg for arg in arguments.kwonlyargs]
    if arguments.kwarg is not None:
        names.append(arguments.kwarg.arg)
    return names


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)


class SandboxTransformer(RestrictingNodeTransformer):
    """RestrictedPython's transformer with the widenings and the entry checks above."""

    def __init__(self, errors: list[str], warnings: list[str], used_names: dict[str, bool],
                 *, bound_elsewhere: frozenset[str] = frozenset()) -> None:
        super().__init__(errors, warnings, used_names)
        self._bound: frozenset[str] | None = None
        self._bound_elsewhere = bound_elsewhere

    def check_name(self, node: Any, name: str | None, allow_magic_methods: bool = False) -> None:
        if name is None:
            return
        if name == "__name__" and isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            return
        if name in SPECIAL_METHOD_NAMES and (allow_magic_methods or name == "__slots__"):
            return
        if is_private_name(name):
            return
        super().check_name(node, name, allow_magic_methods)

    def visit(self, node: ast.AST) -> Any:
        if self._bound is None:  # the root of the tree: names are bound anywhere
            self._bound = bound_names(node) | self._bound_elsewhere
        return super().visit(node)

    def visit_Call(self, node: ast.Call) -> Any:
        new = super().visit_Call(node)
        if _returns_known_type(new, self._bound or frozenset()) or (
                isinstance(new, ast.Call) and isinstance(new.func, ast.Name)
                and new.func.id == "_apply_"):  # guards.apply checks its result itself
            return new
        return _call("_result_", [cast(ast.expr, new)], node)

    def visit_keyword(self, node: ast.keyword) -> Any:
        if node.arg is not None and node.arg.startswith("__"):
            self.error(node, f'"{node.arg}" is an invalid keyword argument name because it '
                             'starts with "__".')
        return super().visit_keyword(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
        if node.module == "__future__" and any(a.name == "annotations" for a in node.names):
            self.error(node, "'from __future__ import annotations' is not allowed (it turns "
                             "every annotation into a string that typing evaluates as code)")
        return super().visit_ImportFrom(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        return _checked_decorators(_check_entry(_guard_annotations(super().visit_FunctionDef(node))))

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> Any:
        return _checked_decorators(
            _check_entry(_guard_annotations(super().visit_AsyncFunctionDef(node))))

    def visit_ClassDef(self, node: ast.ClassDef) -> Any:
        return _checked_decorators(super().visit_ClassDef(node))

    def visit_With(self, node: ast.With) -> Any:
        # `with A as x`: what A's __enter__ returns reaches x through the value check.
        new = super().visit_With(node)
        if isinstance(new, ast.With):
            for item in new.items:
                if item.optional_vars is not None:
                    item.context_expr = _call("_with_", [item.context_expr], item.context_expr)
        return new

    def visit_Yield(self, node: ast.Yield) -> Any:
        # What is sent into a generator (a library may send anything) is a value it gets.
        return _call("_result_", [cast(ast.expr, super().visit_Yield(node))], node)

    def visit_YieldFrom(self, node: ast.YieldFrom) -> Any:
        return _call("_result_", [cast(ast.expr, super().visit_YieldFrom(node))], node)

    def visit_Lambda(self, node: ast.Lambda) -> Any:
        new = super().visit_Lambda(node)
        if isinstance(new, ast.Lambda):
            names = _parameters(new.args)
            if names:
                # `(_lambda_(a, b) if any is not plain else None) or body`: `_lambda_`
                # checks and returns None, and `None or body` is the body.
                not_plain = [_not_plain(name) for name in names]
                check = ast.IfExp(
                    test=not_plain[0] if len(not_plain) == 1 else
                    ast.BoolOp(op=ast.Or(), values=cast(list[ast.expr], not_plain)),
                    body=_call("_lambda_", [ast.Name(n, ast.Load()) for n in names], new),
                    orelse=ast.Constant(None))
                new.body = ast.BoolOp(op=ast.Or(), values=[check, new.body])
                copy_locations(new.body, node)
                ast.fix_missing_locations(new)
        return new

    def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
        new = self.node_contents_visit(node)
        if isinstance(new, ast.AnnAssign):
            new.annotation = _call("_annotation_", [new.annotation], new.annotation)
        return new

    def check_import_names(self, node: ast.ImportFrom | ast.Import) -> ast.AST:
        if isinstance(node, ast.ImportFrom) and [alias.name for alias in node.names] == ["*"]:
            return self.node_contents_visit(node)
        return super().check_import_names(node)

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        attr = node.attr
        if attr in SAFE_DUNDER_ATTRIBUTES or is_private_name(attr):
            # Same rewrite as RestrictedPython's, minus its blanket refusal of "_" names;
            # Guards.getattr decides at run time.
            node.attr = "allowed"
            new = super().visit_Attribute(node)
            if isinstance(new, ast.Call):
                new.args[1] = ast.Constant(attr)
                copy_locations(new.args[1], node)
            elif isinstance(new, ast.Attribute):
                new.attr = attr
            return new
        return super().visit_Attribute(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> Any:
        op = IOPERATOR_TO_STR[type(node.op)]
        target = node.target
        if isinstance(target, ast.Name):
            self.check_name(target, target.id)
            node.value = self.visit(node.value)
            return node
        if isinstance(target, ast.Attribute):
            if target.attr.startswith("_") and not is_private_name(target.attr):
                self.error(node, f'"{target.attr}" is an invalid attribute name because it '
                           'starts with "_".')
                return node
            call = ast.Call(func=ast.Name("_inplace_attr_", ast.Load()),
                            args=[self.visit(target.value), ast.Constant(target.attr),
                                  ast.Constant(op), self.visit(node.value)], keywords=[])
        elif isinstance(target, ast.Subscript) and not isinstance(target.slice, ast.Slice):
            call = ast.Call(func=ast.Name("_inplace_item_", ast.Load()),
                            args=[self.visit(target.value), self.visit(target.slice),
                                  ast.Constant(op), self.visit(node.value)], keywords=[])
        else:
            return super().visit_AugAssign(node)
        new = ast.Expr(value=call)
        copy_locations(new, node)
        ast.fix_missing_locations(new)
        return new


def _checked_decorators(node: Any) -> Any:
    """`@d` becomes `@_decorate_(d)`: applying the decorator is a call whose result the
    code then holds, so it goes through the value check like any call's."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        node.decorator_list = [_call("_decorate_", [decorator], decorator)
                               for decorator in node.decorator_list]
    return node


def _not_plain(name: str) -> ast.Compare:
    """`_type_(name) not in _plain_`."""
    return ast.Compare(
        left=ast.Call(func=ast.Name("_type_", ast.Load()), args=[ast.Name(name, ast.Load())],
                      keywords=[]),
        ops=[ast.NotIn()], comparators=[ast.Name("_plain_", ast.Load())])


def _check_entry(node: Any) -> Any:
    """First thing in the body (after the docstring), for each parameter `p` (`*args` and
    `**kw` included): `if _type_(p) not in _plain_: p = _enter_(p)`. A plain value costs a
    type test; anything else is checked, a stand-in substituted. (`_type_` and `_plain_`
    are hooks like the others: the real `type` and the set of plain types, which user code
    can neither name nor rebind.)"""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node
    names = _parameters(node.args)
    if not names:
        return node
    checks: list[ast.stmt] = []
    for name in names:
        test = _not_plain(name)
        assign = ast.Assign(targets=[ast.Name(name, ast.Store())],
                            value=ast.Call(func=ast.Name("_enter_", ast.Load()),
                                           args=[ast.Name(name, ast.Load())], keywords=[]))
        checks.append(ast.If(test=test, body=[assign], orelse=[]))
    position = 1 if node.body and _is_docstring(node.body[0]) else 0
    like = node.body[position] if len(node.body) > position else node
    for statement in checks:
        copy_locations(statement, like)
        ast.fix_missing_locations(statement)
        setattr(statement, ENTRY_CHECK, True)  # a direct call's twin goes without them
    node.body[position:position] = checks
    return node


def bound_names(tree: ast.AST) -> frozenset[str]:
    """Every name the code binds anywhere (assignments, parameters, definitions,
    imports): a builtin's name is only trusted where the code never rebinds it. A star
    import may bind anything."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            if node.name == "*":
                names.update(KNOWN_RESULT_BUILTINS)
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif (isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar))
              and node.name):
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return frozenset(names)


def _returns_known_type(call: Any, bound: frozenset[str]) -> bool:
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id in KNOWN_RESULT_BUILTINS and call.func.id not in bound)


def _guard_annotations(node: Any) -> Any:
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node
    arguments = node.args
    for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                arguments.vararg, arguments.kwarg]:
        if arg is not None and arg.annotation is not None:
            arg.annotation = _call("_annotation_", [arg.annotation], arg.annotation)
    if node.returns is not None:
        node.returns = _call("_annotation_", [node.returns], node.returns)
    return node


def _string_annotations(tree: ast.AST) -> list[str]:
    """String annotations are evaluated as plain Python by typing.get_type_hints (which
    functools.singledispatch calls), outside the guards: refuse them at compile time."""
    found = []
    for node in ast.walk(tree):
        annotations: list[ast.expr | None] = []
        if isinstance(node, ast.arg):
            annotations.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for annotation in annotations:
            if annotation is None:
                continue
            for inner in ast.walk(annotation):
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                    found.append(f"Line {inner.lineno}: a string annotation is not allowed "
                                 "(typing evaluates it as code); write the type itself")
    return found


# -- a module's code as a function of the hooks ---------------------------------------------

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _top_level(body: list[ast.stmt]) -> list[ast.AST]:
    """Every node of the module's own scope (not inside functions, classes, lambdas or
    comprehensions; their names and the expressions evaluated in this scope included)."""
    found: list[ast.AST] = []
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop()
        found.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            pending.extend([*node.decorator_list, *node.args.defaults,
                            *[d for d in node.args.kw_defaults if d is not None]])
            continue
        if isinstance(node, ast.ClassDef):
            pending.extend([*node.decorator_list, *node.bases, *node.keywords])
            continue
        if isinstance(node, ast.Lambda):
            pending.extend([*node.args.defaults,
                            *[d for d in node.args.kw_defaults if d is not None]])
            continue
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            # The first iterable is evaluated here; an assignment expression inside binds
            # in this scope.
            pending.append(node.generators[0].iter)
            pending.extend(inner for inner in ast.walk(node) if isinstance(inner, ast.NamedExpr))
            continue
        pending.extend(ast.iter_child_nodes(node))
    return found


def _module_scope_problems(body: list[ast.stmt]) -> list[str]:
    return [f"Line {node.lineno}: '{'return' if isinstance(node, ast.Return) else 'yield'}' "
            "outside function" for node in _top_level(body)
            if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom))]


def _module_scope_names(nodes: list[ast.AST]) -> set[str]:
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias) and node.name != "*":
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return names


class _TopLevelRewriter(ast.NodeTransformer):
    """What a module's top level may say but a function's body may not: `global` (a no-op
    at the top), `from M import *` (the run's namespace receives the names), an annotated
    name (annotations of a module's names are not kept: the annotation is checked and
    the value assigned)."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        return node  # not the top level

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> Any:
        return node

    def visit_Global(self, node: ast.Global) -> Any:
        return ast.copy_location(ast.Pass(), node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
        if [alias.name for alias in node.names] != ["*"]:
            return node
        call = _call("_import_star_", [ast.Constant(node.module or "")], node)
        return ast.copy_location(ast.Expr(call), node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
        if not isinstance(node.target, ast.Name):
            return node
        statements: list[ast.stmt] = [ast.copy_location(ast.Expr(node.annotation), node)]
        if node.value is not None:
            statements.append(ast.copy_location(
                ast.Assign(targets=[node.target], value=node.value), node))
        return statements


def _as_function(body: list[ast.stmt], name: str) -> ast.FunctionDef:
    hooks = ast.arguments(posonlyargs=[ast.arg(hook) for hook in HOOK_NAMES], args=[],
                          kwonlyargs=[], kw_defaults=[], defaults=[])
    function = ast.FunctionDef(name=name, args=hooks, body=body or [ast.Pass()],
                               decorator_list=[], returns=None, type_comment=None)
    function.lineno, function.col_offset = 1, 0
    return function


def wrap_module(tree: ast.Module) -> tuple[ast.Module, list[str]]:
    """The transformed module as `def <module>(hooks...): global <its names>; <body>`."""
    problems = _module_scope_problems(tree.body)
    body = cast(list[ast.stmt], _TopLevelRewriter().visit(ast.Module(tree.body, [])).body)
    # (RestrictedPython's print collector, `_print`, stays the function's own.)
    names = sorted(_module_scope_names(_top_level(body)) - set(HOOK_NAMES)
                   - RESERVED_PRIVATE_NAMES)
    body = add_direct_calls(body)  # (its names are the module function's own locals)
    if names:
        body.insert(0, ast.Global(names=names))
        body[0].lineno, body[0].col_offset = 1, 0
    module = ast.Module(body=[_as_function(body, MODULE_CODE_NAME)], type_ignores=[])
    return ast.fix_missing_locations(module), problems


def compile_user_code(source: str | ast.Module, filename: str, *,
                      bound_elsewhere: frozenset[str] = frozenset()) -> CompileResult:
    """Compile a module's code under the policy, as a function of the hooks (hooks.py
    runs it). `bound_elsewhere`: names the run's namespace already binds (an earlier
    block, the preamble), which the code may use as if they were builtins."""
    tree = ast.parse(source, filename, "exec") if isinstance(source, str) else source
    refused = _string_annotations(tree)
    if refused:
        return CompileResult(None, tuple(refused), (), {})
    errors: list[str] = []
    warnings: list[str] = []
    used_names: dict[str, bool] = {}
    SandboxTransformer(errors, warnings, used_names, bound_elsewhere=bound_elsewhere).visit(tree)
    if errors:
        return CompileResult(None, tuple(errors), warnings, used_names)
    wrapped, problems = wrap_module(tree)
    if problems:
        return CompileResult(None, tuple(problems), warnings, used_names)
    # Our own compile call, not RestrictedPython's: theirs inherits the `from __future__
    # import annotations` of the module that calls compile(), which turns every annotation
    # of user code into a string that typing later evaluates.
    code = compile(inline_fast_paths(wrapped), filename, "exec", dont_inherit=True)
    remember_code(code)
    return CompileResult(code, (), warnings, used_names)


def compile_user_expression(source: str | ast.Expression, filename: str = "<string>"
                            ) -> CompileResult:
    """An expression (sympy's parse_expr) compiled under the policy, as a function of the
    hooks that returns its value (hooks.evaluate runs it)."""
    tree = ast.parse(source, filename, "eval") if isinstance(source, str) else source
    refused = _string_annotations(tree)
    if refused:
        return CompileResult(None, tuple(refused), (), {})
    errors: list[str] = []
    warnings: list[str] = []
    used_names: dict[str, bool] = {}
    transformed = SandboxTransformer(errors, warnings, used_names).visit(tree)
    if errors:
        return CompileResult(None, tuple(errors), warnings, used_names)
    body: list[ast.stmt] = [ast.Return(value=cast(ast.Expression, transformed).body)]
    module = inline_fast_paths(ast.fix_missing_locations(
        ast.Module(body=[_as_function(body, EXPRESSION_CODE_NAME)], type_ignores=[])))
    code = compile(module, filename, "exec", dont_inherit=True)
    remember_code(code)
    return CompileResult(code, (), warnings, used_names)
