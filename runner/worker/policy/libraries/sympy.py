"""sympy (and the mpmath values it hands out): what the restricted policy allows of it.

Read row by row:

- **Imports.** sympy is allowed as a curated set of subpackages (`SUBPACKAGES`), not the
  whole tree: the tree also holds test suites, benchmark and timing helpers that compile
  strings, code generators that write and build files, and an interactive layer.
- **Refused modules** (`REFUSED_MODULES`): corners below allowed subpackages that run
  code, start processes, write files or change global configuration.
- **Value-only**: mpmath's numbers and functions may be held (nsolve's generated code
  calls mpmath's cos), mpmath itself not imported and its classes not subclassed.
- **Refused callables** (`refused`): what writes into the caller's namespace under a name
  the caller chose, or calls an attribute the caller names.
- **Patches** (`prepare`): sympy's string-to-code paths (parse_expr, lambdify, the monomial
  code generator) run under the policy; printers, findroot and Function take only what
  they need.
- **Warm-up**: caches and lazy imports filled in the worker, so children start warm.

Every sink here has a row in policy.sinks.SINKS with the test that attacks it.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import re
import types
from collections.abc import Iterable, Sequence
from typing import Any

from ... import audit
from ..guards import Guards
from ..hooks import evaluate, run_module
from ..names import identity
from ..refusals import deny
from ..transformer import compile_user_code, compile_user_expression
from . import Library

SUBPACKAGES: tuple[str, ...] = (
    "sympy.abc", "sympy.algebras", "sympy.assumptions", "sympy.calculus",
    "sympy.categories", "sympy.combinatorics", "sympy.concrete", "sympy.core",
    "sympy.crypto", "sympy.diffgeom", "sympy.discrete", "sympy.functions", "sympy.geometry",
    "sympy.holonomic", "sympy.integrals", "sympy.liealgebras", "sympy.logic",
    "sympy.matrices", "sympy.multipledispatch", "sympy.ntheory", "sympy.parsing.sympy_parser",
    "sympy.physics", "sympy.polys", "sympy.printing", "sympy.series", "sympy.sets",
    "sympy.simplify", "sympy.solvers", "sympy.stats", "sympy.strategies", "sympy.tensor",
    "sympy.unify", "sympy.vector", "sympy.utilities.decorator", "sympy.utilities.enumerative",
    "sympy.utilities.exceptions", "sympy.utilities.iterables", "sympy.utilities.lambdify",
    "sympy.utilities.memoization", "sympy.external.pythonmpq", "sympy.external.gmpy",
)
PACKAGES = frozenset({"sympy", "sympy.utilities", "sympy.parsing", "sympy.external"})
REFUSED_MODULES: tuple[str, ...] = (
    "sympy.core.cache",             # clear_cache/cacheit: the cache every sympy call shares
    "sympy.printing.preview",       # runs LaTeX and viewers as processes
    "sympy.printing.llvmjitcode",   # compiles and loads machine code
    "sympy.printing.aesaracode",    # builds code for other libraries
    "sympy.printing.theanocode",
    "sympy.printing.tensorflow",
    "sympy.physics.secondquant",    # evaluates strings with the real builtins
    "sympy.polys.polyconfig",       # changes sympy's global configuration
    "sympy.stats.sampling",         # imports numpy, scipy and pymc by name
)
VALUE_ONLY: tuple[str, ...] = ("mpmath.",)

_LAMBDIFY_IMPORT_ROOTS = frozenset({"math", "cmath", "mpmath", "sympy", "numpy", "scipy"})
_PRINT_METHOD = re.compile(r"_[A-Za-z][A-Za-z0-9_]*")


def refused() -> Iterable[tuple[Any, str]]:
    """sympy's callables refused outright, with the reason the user is told."""
    symbol = importlib.import_module("sympy.core.symbol")
    decorators = importlib.import_module("sympy.core.decorators")
    writes = ("it writes into the caller's namespace under names of its choosing; write "
              "`x, y = symbols('x y')` instead")
    yield symbol.var, f"sympy's var(): {writes}"
    calls = ("it calls an attribute the caller names on any object, which is how a policy "
             "is walked around; sympy's own classes use it, user code needs it not")
    yield decorators.call_highest_priority, f"sympy's call_highest_priority(): {calls}"
    parser = importlib.import_module("sympy.parsing.sympy_parser")
    yield parser.AppliedFunction, ("sympy's AppliedFunction: its item access reads any attribute "
                                   "its `items` name, with the real getattr; it is the "
                                   "parser's own token, user code needs it not")
    ask = importlib.import_module("sympy.assumptions.ask")
    handlers = ("it writes onto sympy's shared `Q` (and reads from it) under the key the caller "
                "names, with the real setattr and getattr; it is deprecated, user code needs it "
                "not")
    yield ask.register_handler, f"sympy's register_handler(): {handlers}"
    yield ask.remove_handler, f"sympy's remove_handler(): {handlers}"
    operations = importlib.import_module("sympy.core.operations")
    yield operations.AssocOpDispatcher, ("sympy's AssocOpDispatcher(name): it walks a dotted "
                                         "attribute path built from the name it is given; "
                                         "sympy's own Add and Mul use it, user code needs it not")


class Sanitizer:
    """Filters namespaces that sympy evaluates generated code in.

    There is no "already sanitized" marker to trust: a marker is just a key, and user
    code can put any key into the dicts it passes in. Instead every namespace is
    filtered every time, and the values already judged safe (sympy's own, long-lived
    objects, kept alive by this cache so their ids stay theirs) are recognised by
    identity, which keeps the filtering cheap.
    """

    def __init__(self, guards: Guards) -> None:
        self.guards = guards
        self._safe: dict[int, Any] = {}

    def filter(self, source: Any) -> dict[str, Any]:
        """The names of `source` restricted code may see (none starting with "_", no
        builtins table)."""
        user_builtins = self.guards.builtins_table()
        namespace: dict[str, Any] = {}
        if not isinstance(source, dict):
            return namespace
        for name, value in list(dict.items(source)):
            if type(name) is not str or name.startswith("_"):
                continue
            if self._safe.get(identity(value)) is value:
                namespace[name] = value
                continue
            if isinstance(value, types.BuiltinFunctionType) and getattr(builtins, name, None) is value:
                if name in user_builtins:
                    namespace[name] = user_builtins[name]
                continue
            if value is builtins:
                namespace[name] = types.SimpleNamespace(**{
                    k: v for k, v in user_builtins.items() if not k.startswith("_")})
                continue
            ok, checked = self.guards.acceptable(value)
            if ok:
                namespace[name] = checked
        return namespace

    def remember(self, namespace: dict[str, Any]) -> None:
        for value in namespace.values():
            self._safe[identity(value)] = value


def _refuse_compile_errors(errors: Sequence[str], what: str) -> None:
    if errors:
        deny(f"{what} was refused by the restricted backend: {'; '.join(errors)}")


def harden_parser(guards: Guards, sanitizer: Sanitizer) -> None:
    """parse_expr (and so sympify of strings) evaluates text with eval: here the text is
    compiled under the policy and evaluated with the hooks as arguments, in a namespace
    of the filtered global and local dicts (neither can shadow a hook: hooks are not
    looked up by name)."""
    sympy_parser = importlib.import_module("sympy.parsing.sympy_parser")
    original_parse_expr = sympy_parser.parse_expr
    cache: dict[str, dict[str, Any]] = {}
    compiled_here: set[int] = set()

    def default_globals() -> dict[str, Any]:
        if "default" not in cache:
            base: dict[str, Any] = {}
            exec("from sympy import *", base)  # the same table parse_expr builds itself
            for name, obj in vars(builtins).items():
                if isinstance(obj, types.BuiltinFunctionType):
                    base[name] = obj
            from sympy import Max, Min

            base["max"], base["min"] = Max, Min
            cache["default"] = sanitizer.filter(base)
            sanitizer.remember(cache["default"])
        return dict(cache["default"])

    def parse_expr(s: str, local_dict: Any = None, transformations: Any =
                   sympy_parser.standard_transformations, global_dict: Any = None,
                   evaluate: bool = True) -> Any:
        # Transformations (which may be user functions) see only plain names.
        global_dict = default_globals() if global_dict is None else global_dict
        return original_parse_expr(s, local_dict, transformations, global_dict, evaluate)

    def eval_expr(code: Any, local_dict: Any, global_dict: Any) -> Any:
        if isinstance(code, str):
            ast.parse(code, "<string>", "eval")  # text that is not an expression: SyntaxError
            result = compile_user_expression(code)
            _refuse_compile_errors(result.errors, f"the expression {code!r}")
            code = result.code
        elif not isinstance(code, types.CodeType) or id(code) not in compiled_here:
            raise TypeError("eval_expr expects source text")
        namespace = sanitizer.filter(global_dict)
        namespace.update(sanitizer.filter(local_dict))
        namespace["__name__"] = "__main__"  # what it defines is the run's, as user code's is
        return evaluate(code, namespace, guards)

    def compile_(source: Any, filename: str, mode: str, *args: Any, **kwargs: Any) -> Any:
        # parse_expr(evaluate=False) compiles an AST it transformed itself.
        if mode == "eval":
            tree = source if isinstance(source, ast.Expression) else \
                ast.parse(source if isinstance(source, str) else ast.unparse(source), filename,
                          "eval")
            result = compile_user_expression(tree, filename)
        else:
            result = compile_user_code(source if isinstance(source, (str, ast.Module))
                                       else ast.unparse(source), filename)
        _refuse_compile_errors(result.errors, "an expression sympy built")
        compiled_here.add(id(result.code))
        return result.code

    # They stand in for sympy's own functions, so they belong to sympy's module: user
    # code may call them (the guards refuse callables from unknown modules).
    functools.update_wrapper(parse_expr, original_parse_expr)
    functools.update_wrapper(eval_expr, sympy_parser.eval_expr)
    for replacement in (parse_expr, eval_expr):
        delattr(replacement, "__wrapped__")  # not a way back to the original
    setattr(sympy_parser, "parse_expr", parse_expr)
    setattr(sympy_parser, "eval_expr", eval_expr)
    setattr(sympy_parser, "compile", compile_)  # shadows the builtin in that module only
    # The only places in a child that compile sympy's strings, under the policy: the
    # audit hook lets them (and nothing else in sympy) compile.
    audit.SITES.trust(compile_, eval_expr)
    default_globals()  # built here, in the worker: a child never runs `from sympy import *`
    import sympy

    sympy.parse_expr = parse_expr
    sympy.parsing.parse_expr = parse_expr


def _public_path(path: str) -> list[str] | None:
    parts = path.split(".")
    if parts[0] not in _LAMBDIFY_IMPORT_ROOTS or any(
            not part.isidentifier() or part.startswith("_") for part in parts):
        return None
    return parts


def run_import_lines(code: str, namespace: dict[str, Any]) -> None:
    """The import lines lambdify assembles from its module tables (and from a printer's
    `module_imports`, which the user writes): `import M`, `from M import a, b` or `*`,
    and the fallback `a = M.a`. Each is parsed and carried out here, with public names
    of the allowed roots only, and nothing is looked up in `namespace` (whose names the
    caller chose). A module the policy does not allow (numpy, scipy) is "not found", and
    lambdify falls back to math, mpmath and sympy."""
    refusal = f"lambdify wanted to run {code!r}, which the restricted backend refuses"
    try:
        statements = ast.parse(code, "<lambdify import>", "exec").body
    except SyntaxError:
        deny(refusal)
    for statement in statements:
        if isinstance(statement, ast.Import) and all(
                alias.asname is None and _public_path(alias.name) for alias in statement.names):
            for alias in statement.names:
                importlib.import_module(alias.name)
                root = alias.name.split(".")[0]
                namespace[root] = importlib.import_module(root)
        elif isinstance(statement, ast.ImportFrom) and statement.level == 0 \
                and statement.module and _public_path(statement.module) and all(
                    alias.asname is None and (alias.name == "*" or not alias.name.startswith("_"))
                    for alias in statement.names):
            module = importlib.import_module(statement.module)
            names = [alias.name for alias in statement.names]
            if names == ["*"]:
                exported = getattr(module, "__all__", None)
                names = [name for name in (exported if isinstance(exported, (list, tuple))
                                           else vars(module))
                         if type(name) is str and not name.startswith("_")]
            for name in names:
                try:
                    namespace[name] = getattr(module, name)
                except AttributeError:
                    raise ImportError(f"cannot import name {name!r} from {module.__name__!r}") \
                        from None
        elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Name) \
                and not statement.targets[0].id.startswith("_") \
                and (path := _public_path(ast.unparse(statement.value))) is not None \
                and len(path) > 1:
            # Resolved from the real module, never from a name in `namespace`.
            value: Any = importlib.import_module(path[0])
            for part in path[1:]:
                value = getattr(value, part)
            namespace[statement.targets[0].id] = value
        else:
            deny(refusal)


def harden_lambdify(guards: Guards, sanitizer: Sanitizer) -> None:
    """lambdify prints an expression to Python source and execs it: the source is compiled
    under the policy and run with the hooks as arguments, in a filtered namespace."""
    # Not `from sympy.utilities import lambdify`: that name is the function, which
    # shadows the module of the same name in the package namespace.
    lambdify_module = importlib.import_module("sympy.utilities.lambdify")
    compiled_here: set[int] = set()

    def compile_(source: str, filename: str, mode: str, *args: Any, **kwargs: Any) -> Any:
        result = compile_user_code(source, filename)
        _refuse_compile_errors(result.errors, "the code lambdify generated")
        compiled_here.add(id(result.code))
        return result.code

    def exec_(code: Any, globals_: dict[str, Any], locals_: Any = None) -> None:
        if isinstance(code, str):
            run_import_lines(code, locals_ if isinstance(locals_, dict) else globals_)
            return
        if not isinstance(code, types.CodeType) or id(code) not in compiled_here:
            deny("lambdify tried to run code the restricted backend did not compile")
        sanitized = sanitizer.filter(globals_)
        globals_.clear()
        globals_.update(sanitized)
        globals_["__name__"] = "__main__"  # the function it makes is the run's
        before = set(globals_)
        run_module(code, globals_, guards)
        if isinstance(locals_, dict) and locals_ is not globals_:
            # lambdify reads the function it made from the locals it passed in.
            for name in set(globals_) - before:
                locals_[name] = globals_[name]

    setattr(lambdify_module, "compile", compile_)  # module globals shadow the builtins
    setattr(lambdify_module, "exec", exec_)
    audit.SITES.trust(compile_, exec_)


def _printmethod(printer: Any) -> Any:
    """The `printmethod` that `self.printmethod` gives the original `_print`: the instance's
    own if it has one, else the class's. Anything that could answer differently when read
    twice (a property or other descriptor, a custom attribute lookup) is refused."""
    kind = type(printer)
    lookup: Any = kind.__getattribute__
    if lookup is not object.__getattribute__:
        return deny("a Printer may not define its own attribute lookup in the restricted backend")
    found: Any = None
    for klass in kind.__mro__:
        if "printmethod" in klass.__dict__:
            found = klass.__dict__["printmethod"]
            break
    if found is not None and type(found) is not str:
        return deny("a Printer's printmethod must be a plain string in the restricted backend")
    try:
        own = object.__getattribute__(printer, "__dict__")
    except AttributeError:
        return found
    if not isinstance(own, dict):
        return deny("a Printer's attributes must be a plain dict in the restricted backend")
    return dict.get(own, "printmethod", found)


def harden_printers() -> None:
    """Printer._print calls `getattr(expr, self.printmethod)(self)` with the real getattr:
    a user printer could name any attribute. Only sympy-style hook names are accepted."""
    printer_module = importlib.import_module("sympy.printing.printer")
    original = printer_module.Printer._print

    def _print(self: Any, expr: Any, **kwargs: Any) -> Any:
        method = _printmethod(self)
        if method is not None and (type(method) is not str or not _PRINT_METHOD.fullmatch(method)
                                   or method.startswith("__")):
            deny(f"a Printer's printmethod must be a name like '_mymethod', not {method!r}")
        return original(self, expr, **kwargs)

    functools.update_wrapper(_print, original)
    delattr(_print, "__wrapped__")
    setattr(printer_module.Printer, "_print", _print)


def harden_findroot() -> None:
    """nsolve passes `solver=` through to mpmath's findroot, which calls a callable solver
    with mpmath's own context object: only mpmath's named solvers are accepted."""
    solvers = importlib.import_module("sympy.solvers.solvers")
    original = solvers.findroot

    def findroot(*args: Any, **kwargs: Any) -> Any:
        solver = kwargs.get("solver", "secant")
        if type(solver) is not str:
            deny("nsolve/findroot: solver= must be the name of one of mpmath's solvers "
                 "(e.g. 'secant', 'newton', 'bisect'), not a callable")
        return original(*args, **kwargs)

    setattr(solvers, "findroot", findroot)


_MONOMIAL_FUNCTIONS = frozenset({"monomial_mul", "monomial_pow", "monomial_mulpow",
                                 "monomial_ldiv", "monomial_div", "monomial_lcm",
                                 "monomial_gcd"})
_MONOMIAL_NAMES = re.compile(r"[abr][0-9]+|A|B|k")
_MONOMIAL_NODES = (ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Assign,
                   ast.Tuple, ast.Name, ast.Load, ast.Store, ast.Return, ast.If, ast.IfExp,
                   ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Compare, ast.Lt, ast.LtE,
                   ast.GtE)
MAX_MONOMIAL_GENERATORS = 1000


def monomial_tree(code: str, name: str) -> ast.Module | None:
    """The parsed function if `code` is the kind MonomialOps generates, else None: one
    function `name`, no decorators or annotations, whose body only unpacks tuples and
    does arithmetic and comparisons on names like a0, b1, r2 (no attribute, call,
    subscript, string or builtin anywhere). The tree is what gets compiled, never the
    text again: the text's reading is not the checker's to trust."""
    if name not in _MONOMIAL_FUNCTIONS:
        return None
    try:
        tree = ast.parse(code, "<monomial>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None
    function = tree.body[0]
    if function.name != name or function.decorator_list or function.returns is not None \
            or getattr(function, "type_params", None):
        return None
    for node in ast.walk(function):
        if isinstance(node, ast.FunctionDef):
            if node is not function:
                return None
        elif isinstance(node, ast.arg):
            if node.annotation is not None or not _MONOMIAL_NAMES.fullmatch(node.arg):
                return None
        elif isinstance(node, ast.Name):
            if not _MONOMIAL_NAMES.fullmatch(node.id):
                return None
        elif isinstance(node, ast.Constant):
            if node.value is not None and not (type(node.value) is int and node.value == 0):
                return None
        elif not isinstance(node, _MONOMIAL_NODES):
            return None
    return tree


def harden_monomials() -> None:
    """The polynomial rings (used by integrate, cancel, factor over several generators)
    build fast monomial functions from source text with `exec`: sympy's own templates,
    filled in from the number of generators. Only MonomialOps itself (not a subclass,
    whose methods would write the text) with a plain int count may build; the text must
    parse to nothing but tuple unpacking and arithmetic; the checked tree is compiled
    and run with no builtins. This is the one place in the polynomial code that may
    compile."""
    monomials = importlib.import_module("sympy.polys.monomials")
    monomial_ops = monomials.MonomialOps
    real_compile, real_exec = builtins.compile, builtins.exec

    def _build(self: Any, code: Any, name: Any) -> Any:
        ngens = getattr(self, "ngens", None) if type(self) is monomial_ops else None
        tree = monomial_tree(code, name) \
            if type(code) is str and type(name) is str and type(ngens) is int \
            and 0 <= ngens <= MAX_MONOMIAL_GENERATORS else None
        if tree is None:
            return deny("sympy's monomial code generator may only build its own arithmetic "
                        "(not from a subclass, not other code) in the restricted backend")
        namespace: dict[str, Any] = {"__builtins__": {}}
        real_exec(real_compile(tree, "<monomial>", "exec", dont_inherit=True), namespace)
        return namespace[name]

    functools.update_wrapper(_build, monomial_ops._build)
    delattr(_build, "__wrapped__")
    setattr(monomial_ops, "_build", _build)
    audit.SITES.trust(_build)


def harden_undefined_functions() -> None:
    """`Function('f', bases, namespace)` builds a class from a namespace and bases the
    caller chose: a class statement without its checks. Names and assumptions
    (`Function('f', real=True)`) are what Function is for; bases, a namespace or dunder
    attributes are refused."""
    function_module = importlib.import_module("sympy.core.function")
    undefined = function_module.UndefinedFunction
    original = undefined.__new__

    def __new__(mcl: Any, name: Any, *rest: Any, **kwargs: Any) -> Any:
        if rest or "bases" in kwargs or "__dict__" in kwargs:
            deny("Function(name, bases, namespace) is not allowed in the restricted backend: "
                 "give a name and assumptions (Function('f', real=True)), or write a class "
                 "statement")
        for key in kwargs:
            if type(key) is not str or key.startswith("__"):
                deny(f"Function(...): the attribute {key!r} is not allowed in the restricted "
                     "backend")
        return original(mcl, name, **kwargs)

    functools.update_wrapper(__new__, original)
    delattr(__new__, "__wrapped__")
    setattr(undefined, "__new__", __new__)


def _as_sympy(replacement: Any, original: Any) -> Any:
    """`replacement` stands in for sympy's `original`: it belongs to sympy's module (user
    code may hold it), with no way back to the original."""
    functools.update_wrapper(replacement, original)
    delattr(replacement, "__wrapped__")
    return replacement


def harden_memoize_property(guards: Guards) -> None:
    """memoize_property(f) caches under `'_' + f.__name__`, a name the caller makes (a user
    function's __name__ can be set to anything: `'_globals__'` makes `__globals__`), with
    the real getattr and, when it is missing, the real setattr on whatever object the
    property's getter is given (`p.fget(sympy.Symbol)` writes onto sympy's class). Here
    the name must be a plain identifier read once, as a decorator sees it, and the cached
    attribute is read and written through the guards: the user's own objects only."""
    decorator = importlib.import_module("sympy.utilities.decorator")
    original = decorator.memoize_property

    def memoize_property(propfunc: Any) -> Any:
        name = guards.getattr(propfunc, "__name__")
        if type(name) is not str or not name.isidentifier() or name.startswith("_"):
            deny(f"memoize_property caches under '_' + the function's name: the name {name!r} "
                 "is not allowed in the restricted backend (a plain identifier not starting "
                 "with '_')")
        attrname, sentinel = "_" + name, object()

        def accessor(self: Any) -> Any:
            value = guards.getattr(self, attrname, sentinel)
            if value is sentinel:
                value = propfunc(self)
                guards.setattr(self, attrname, value)
            return value

        accessor.__module__ = original.__module__
        accessor.__name__ = accessor.__qualname__ = name
        return property(accessor)

    _as_sympy(memoize_property, original)
    for module in (decorator, importlib.import_module("sympy.utilities"),
                   importlib.import_module("sympy")):
        setattr(module, "memoize_property", memoize_property)


def _public_names(names: Iterable[Any], what: str) -> None:
    for name in names:
        if type(name) is str and name.startswith("_"):
            deny(f"{what}: the name {name!r} is not allowed in the restricted backend (sympy "
                 "writes each name onto the object it makes, with the real setattr; names "
                 "starting with '_' are that object's internals)")


def harden_generator_names() -> None:
    """PolyRing, FracField and FreeGroup write each generator onto the object they make
    under its symbol's name (FreeGroup overwrites an attribute it already has); CoordSys3D
    does so with the variable and vector names it is given: names starting with '_' (the
    object's internals, dunders) are refused before anything is made."""
    symbol_class = importlib.import_module("sympy.core.symbol").Symbol
    for module_name, class_name in (("sympy.polys.rings", "PolyRing"),
                                    ("sympy.polys.fields", "FracField"),
                                    ("sympy.combinatorics.free_groups", "FreeGroup")):
        module = importlib.import_module(module_name)
        cls = getattr(module, class_name)
        parse = getattr(module, "_parse_symbols", None) or \
            importlib.import_module("sympy.polys.rings")._parse_symbols

        def __new__(klass: Any, symbols: Any, *args: Any, _original: Any = cls.__new__,
                    _parse: Any = parse, _what: str = class_name, **kwargs: Any) -> Any:
            _public_names((s.name for s in _parse(symbols) if isinstance(s, symbol_class)),
                          _what)
            return _original(klass, symbols, *args, **kwargs)

        setattr(cls, "__new__", _as_sympy(__new__, cls.__new__))
    coordinates = importlib.import_module("sympy.vector.coordsysrect").CoordSys3D
    original = coordinates.__new__

    def coordinates_new(cls: Any, name: Any, transformation: Any = None, parent: Any = None,
                        location: Any = None, rotation_matrix: Any = None,
                        vector_names: Any = None, variable_names: Any = None) -> Any:
        for names in (vector_names, variable_names):
            if isinstance(names, (list, tuple)):
                _public_names(names, "CoordSys3D")
        return original(cls, name, transformation, parent, location, rotation_matrix,
                        vector_names, variable_names)

    setattr(coordinates, "__new__", _as_sympy(coordinates_new, original))


def harden_qasm() -> None:
    """Qasm calls the method its text names on itself (`getattr(self, command)(*rest)`):
    the text is the caller's, so `__setattr__ a,b` would write attributes. Commands must
    be public names."""
    qasm = importlib.import_module("sympy.physics.quantum.qasm")
    original = qasm.Qasm.add

    def add(self: Any, *lines: Any) -> Any:
        for line in qasm.nonblank(lines):
            command, _rest = qasm.fullsplit(line)
            if type(command) is not str or command.startswith("_"):
                deny(f"Qasm: the command {command!r} is not allowed in the restricted backend "
                     "(Qasm calls the method its text names; names starting with '_' are "
                     "the object's internals)")
        return original(self, *lines)

    setattr(qasm.Qasm, "add", _as_sympy(add, original))


def prepare(guards: Guards) -> None:
    sanitizer = Sanitizer(guards)
    harden_parser(guards, sanitizer)
    harden_lambdify(guards, sanitizer)
    harden_printers()
    harden_findroot()
    harden_monomials()
    harden_undefined_functions()
    harden_memoize_property(guards)
    harden_generator_names()
    harden_qasm()


def warm_up() -> None:
    """Fill sympy's caches and lazy imports once, so children do not pay for them."""
    import sympy

    # sympy.abc runs `exec("from sympy import *")` when first imported, which a child may
    # not do: imported here, it is already loaded in every child.
    importlib.import_module("sympy.abc")
    x = sympy.Symbol("x")
    sympy.solve(x**2 - 4, x)
    sympy.simplify(sympy.sympify("(x**2 - 1)/(x - 1)"))
    sympy.integrate(sympy.sin(x), x)
    sympy.factorint(2**32 + 1)
    sympy.Matrix([[1, 2], [3, 4]]).det()
    sympy.N(sympy.pi, 20)
    sympy.nsolve(x**2 - 2, x, 1)
    sympy.latex(x**2 / 3)


LIBRARY = Library(
    root="sympy", subpackages=SUBPACKAGES, packages=PACKAGES,
    refused_modules=REFUSED_MODULES, value_only=VALUE_ONLY, refused=refused,
    prepare=prepare, warm_up=warm_up,
)
