"""Attacks on every library sink of the restricted policy (runner/worker/policy/sinks.py).

A sink is a library callable that turns a name or an object the caller chose into code,
an attribute read, a callback, a class, an import or a write into a namespace. SINKS has
one row per sink, naming the `test_sink_*` function here that attacks it; several rows
may share one. Each test attacks its sink through the public API with the real object
the library hands out and checks the status (`denied`, with a message that names what
was refused; for a patched path, also that the legitimate use still works), that no
marker file appeared, and that the same sandbox serves a normal run afterwards
(`attack()`). The last test keeps the table and this module in step.

Attacks on the generic mechanism (imports, attributes, frames, builtins, hooks, limits,
the result channel) are in tests/test_restricted_attacks.py, whose helpers these share.
"""

# `markers` is a fixture shared with tests/test_restricted_attacks.py: tests take it as
# a parameter of the same name.
# ruff: noqa: F811

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

from runner import ExecutionResult, Status
from runner.worker.policy import SINKS, Guards, Policy

from test_restricted_attacks import (  # noqa: F401 - `markers` is a fixture
    GUARD_NAMES,
    _describe,
    _mentions,
    _payload,
    assert_denied,
    assert_ok,
    attack,
    markers,
)


@pytest.fixture(scope="module")
def restricted(_isolated_runner_home: str):
    """One warm restricted Sandbox for this module's attacks."""
    from runner import Sandbox

    with Sandbox(backend="restricted") as sb:
        yield sb


def no_marker(markers: Path, r: ExecutionResult) -> None:
    assert list(markers.iterdir()) == [], f"the payload ran: a marker file appeared ({_describe(r)})"


def run_case(sb, markers: Path, code: str) -> ExecutionResult:
    """Fill in `{marker}` (a path that must never appear) and `{payload}` (unguarded code
    that would create it), run the attack, check the marker stayed absent."""
    source = code.replace("{marker}", str(markers / "pwned")).replace("{payload}", repr(_payload(markers)))
    r = attack(sb, source)
    no_marker(markers, r)
    return r


# --- sympy: strings and generated code ---------------------------------------------------

# Each would run a command and write a file if evaluated as plain Python.
STRING_PARSERS = {
    "sympify": "import sympy\nprint(sympy.sympify({payload}))",
    "S": "from sympy import S\nprint(S({payload}))",
    "parse_expr": "from sympy.parsing.sympy_parser import parse_expr\nprint(parse_expr({payload}))",
}
# Without sympy's transformations the text is Python as written: compiled under the
# policy, refused.
STRING_PARSERS_AS_PYTHON = {
    "parse_expr-no-transformations": ("from sympy.parsing.sympy_parser import parse_expr\n"
                                      "print(parse_expr({payload}, transformations=()))"),
    # evaluate=False: sympy rewrites the tree, then compiles it (under the policy).
    "parse_expr-evaluate-false": ("from sympy.parsing.sympy_parser import parse_expr\n"
                                  "print(parse_expr(\"__import__('os')\", transformations=(), evaluate=False))"),
    "parse_expr-evaluate-false-open": ("from sympy.parsing.sympy_parser import parse_expr\n"
                                       "print(parse_expr(\"open('{marker}', 'w')\", evaluate=False))"),
    "attribute-walk-no-transformations": ("from sympy.parsing.sympy_parser import parse_expr\n"
                                          "print(parse_expr('x.__class__', transformations=()))"),
}
# Refused, or evaluated to a plain sympy expression; never to a module, class, dict or
# file contents (which is what unpatched sympy returns for each of these).
STRING_LEAKS = [
    ("parse_expr", "__import__('os')"),
    ("sympify", "__import__('os')"),
    ("sympify", "x.__class__"),
    ("sympify", "x.__class__.__mro__[-1].__subclasses__()"),
    ("sympify", "open('/etc/passwd').read()"),
    ("sympify", "sympify.__globals__"),
]
PARSER_CASES = [*STRING_PARSERS, *STRING_PARSERS_AS_PYTHON,
                *(f"leak:{func}:{text}" for func, text in STRING_LEAKS), "legitimate"]


@pytest.mark.parametrize("case", PARSER_CASES)
def test_sink_parse_expr_runs_text_under_the_policy(restricted, markers, case):
    if case == "legitimate":
        code = ("import sympy\nfrom sympy.parsing.sympy_parser import parse_expr, "
                "standard_transformations, implicit_multiplication\n"
                "print(sympy.sympify('sin(pi/2) + x'), sympy.S('1/3'), parse_expr('2*x', evaluate=False))\n"
                "print(parse_expr('2x', transformations=standard_transformations + "
                "(implicit_multiplication,)))\n")
        assert_ok(attack(restricted, code), "x + 1 1/3 2*x\n2*x\n")
        return
    if case.startswith("leak:"):
        _, func, text = case.split(":", 2)
        code = f"import sympy\nr = sympy.{func}({text!r})\nprint(isinstance(r, sympy.Basic))\nprint(r)"
        r = attack(restricted, code)
        assert r.status in (Status.OK, Status.DENIED, Status.ERROR), _describe(r)
        if r.status == Status.OK:
            assert r.stdout.startswith("True\n"), _describe(r)
        for leak in ("<module", "<class", "root:", "__builtins__"):
            assert leak not in r.stdout, r.stdout
        return
    if case in STRING_PARSERS:
        # sympy's transformations read the names as symbols: the text is mathematics.
        r = run_case(restricted, markers, STRING_PARSERS[case])
        assert r.status in (Status.DENIED, Status.ERROR), _describe(r)
        return
    r = run_case(restricted, markers, STRING_PARSERS_AS_PYTHON[case])
    assert_denied(r, ("__import__", "__class__", "open"))


PARSER_DICTS = {
    # A mark that once told the sanitizer "already done": there is no such mark now.
    "parse_expr-forged-sanitized-mark": (
        "from sympy.parsing.sympy_parser import parse_expr\n"
        "src = '(lambda e: e(' + repr({payload}) + '))(eval)'\n"
        "print(parse_expr(src, global_dict={'_runner_sanitized_': True}, transformations=()))\n",
        ("_runner_sanitized_", "global_dict", "eval", "parse_expr")),
    # The replaced eval_expr is itself a public name of sympy_parser.
    "eval_expr-forged-sanitized-mark": (
        "from sympy.parsing.sympy_parser import eval_expr\n"
        "src = '(lambda e: e(' + repr({payload}) + '))(eval)'\n"
        "print(eval_expr(src, {}, {'_runner_sanitized_': True}))\n",
        ("_runner_sanitized_", "eval_expr", "eval")),
    # A transformation that writes a hook's name into the text: compiled, refused.
    "transformation-names-a-hook": (
        "from sympy.parsing.sympy_parser import parse_expr\n"
        "def hook(tokens, local_dict, global_dict):\n"
        "    return [(t, '_getattr_' if v == 'a' else v) for t, v in tokens]\n"
        "print(parse_expr(\"a(b, '__class__')\", local_dict={'b': 5}, transformations=(hook,)))\n",
        ("_getattr_",)),
}
# Dict keys named like the hooks, or '__builtins__', change nothing: the hooks are
# parameters of the compiled expression, and both dicts lose their '_' names.
PARSER_DICTS_INERT = {
    "local_dict-getattr": (
        "from sympy.parsing.sympy_parser import parse_expr\n"
        "calls = []\n"
        "def hooked(*args):\n"
        "    calls.append(args)\n"
        "    return 'hooked'\n"
        "print(parse_expr('a.real', local_dict={'a': 5, '_getattr_': hooked}, transformations=()), calls)\n",
        "5 []\n"),
    "global_dict-builtins": (
        "from sympy.parsing.sympy_parser import parse_expr\n"
        "def hooked(*args):\n"
        "    return 'hooked'\n"
        "print(parse_expr(\"len('ab')\", global_dict={'__builtins__': {'len': hooked}, '_getiter_': hooked, "
        "'_result_': hooked}, transformations=()))\n",
        "2\n"),
    "sympify-locals-getattr": (
        "import sympy\n"
        "def hooked(*args):\n"
        "    return 'hooked'\n"
        "print(sympy.sympify('a.real', locals={'a': 5, '_getattr_': hooked, '_write_': hooked}))\n",
        "5\n"),
    # (Once: a transformation received the global_dict with the hooks and the builtins
    # table, whose __import__ took the "C code's lazy import" branch for any caller.) The
    # default global_dict a transformation sees has no '__builtins__' and no '_' name.
    "transformation-sees-no-private-names": (
        "from sympy.parsing.sympy_parser import parse_expr, standard_transformations\n"
        "seen = []\n"
        "def grab(tokens, local_dict, global_dict):\n"
        "    seen.append(sorted(k for k in global_dict if k.startswith('_')))\n"
        "    seen.append(sorted(k for k in local_dict if k.startswith('_')))\n"
        "    seen.append('__builtins__' in global_dict)\n"
        "    seen.append('Symbol' in global_dict and 'len' in global_dict)\n"
        "    return tokens\n"
        "print(parse_expr('1 + x', transformations=standard_transformations + (grab,)), seen)\n",
        "x + 1 [[], [], False, True]\n"),
}


@pytest.mark.parametrize("case", [*PARSER_DICTS, *PARSER_DICTS_INERT])
def test_sink_parse_expr_dicts_cannot_replace_the_hooks(restricted, markers, case):
    if case in PARSER_DICTS_INERT:
        code, stdout = PARSER_DICTS_INERT[case]
        r = run_case(restricted, markers, code)
        assert_ok(r, stdout)
        assert "hooked" not in r.stdout
        return
    code, names = PARSER_DICTS[case]
    r = run_case(restricted, markers, code)
    assert_denied(r, names)
    for leak in ("<built-in", "<class", "<module"):
        assert leak not in r.stdout, r.stdout


LAMBDIFY = {
    # lambdify prints expressions to Python source and executes it: a symbol or function
    # whose name is code becomes code.
    "lambdify-symbol": "import sympy\nf = sympy.lambdify([], sympy.Symbol({payload}))\nprint(f())",
    "lambdify-arg": ("import sympy\nx = sympy.Symbol('x')\n"
                     "f = sympy.lambdify([x], x + sympy.Symbol({payload}))\nprint(f(1))"),
    "nsolve-function": ("import sympy\nx = sympy.Symbol('x')\n"
                        "f = sympy.Function('(' + {payload} + ') * 0 or abs')\n"
                        "print(sympy.nsolve(f(x) - 2, x, 1))"),
    # A printer writes the source; `modules=` dicts are merged into its namespace (once,
    # with a mark that skipped the sanitizer).
    "lambdify-forged-sanitized-mark": (
        "import sympy\n"
        "src = '(lambda e: e(' + repr({payload}) + '))(eval)'\n"
        "f = sympy.lambdify([], sympy.Integer(0), modules=[{'_runner_sanitized_': True}],\n"
        "                   printer=lambda e: src)\n"
        "print(f())\n"),
    "printer-source-walks-dunders": (
        "import sympy\n"
        "f = sympy.lambdify([], sympy.Integer(0), printer=lambda e: '().__class__.__base__')\n"
        "print(f())\n"),
    # Names like the hooks, or '__builtins__', in a `modules=` dict: dropped.
    "modules-dict-names-a-hook": (
        "import sympy\n"
        "def hooked(*args):\n"
        "    return 'hooked'\n"
        "f = sympy.lambdify([], sympy.Integer(0), modules=[{'_getattr_': hooked, '__builtins__': "
        "{'eval': hooked}}], printer=lambda e: \"(5).real + len(eval('1'))\")\n"
        "print(f())\n"),
}
_LAMBDIFY_NAMES = {
    "lambdify-symbol": ("__import__", "lambdify"), "lambdify-arg": ("__import__", "lambdify"),
    "nsolve-function": ("__import__", "lambdify"),
    "lambdify-forged-sanitized-mark": ("_runner_sanitized_", "lambdify", "eval", "modules"),
    "printer-source-walks-dunders": ("__class__", "__base__"),
    "modules-dict-names-a-hook": ("eval",),
}


@pytest.mark.parametrize("case", [*LAMBDIFY, "legitimate"])
def test_sink_lambdify_runs_its_code_under_the_policy(restricted, markers, case):
    if case == "legitimate":
        # Its default modules (scipy, numpy) are not found here: it falls back.
        code = ("from sympy import *\nx = symbols('x')\nprint(lambdify(x, x**2 + 1)(3))\n"
                "print(lambdify(x, sin(x), 'math')(0.0), lambdify(x, cos(x), 'mpmath')(0))\n"
                "print(lambdify([x], [x, x**2], modules=[{'sin': abs}, 'math'])(-2))\n")
        assert_ok(attack(restricted, code), "10\n0.0 1.0\n[-2, 4]\n")
        return
    r = run_case(restricted, markers, LAMBDIFY[case])
    assert_denied(r, _LAMBDIFY_NAMES[case])
    assert "hooked" not in r.stdout and "<class" not in r.stdout, _describe(r)


PRINTER_IMPORTS = {
    # A printer's module_imports become `from M import name` lines, then `name = M.name`.
    "module-imports-dunder-path": (
        "from sympy import Symbol, lambdify\n"
        "class P:\n"
        "    module_imports = {'sympy.__globals__': ['get']}\n"
        "    def doprint(self, expr):\n"
        "        return 'get'\n"
        "x = Symbol('x')\n"
        "f = lambdify(x, x, modules=[{'sympy': lambdify}], printer=P())\n"
        "print(f(1))\n"),
    "module-imports-os-system": (
        "from sympy import Symbol, lambdify\n"
        "class P:\n"
        "    module_imports = {'os': ['system']}\n"
        "    def doprint(self, expr):\n"
        "        return \"system('touch {marker}')\"\n"
        "x = Symbol('x')\n"
        "print(lambdify(x, x, printer=P())(1))\n"),
    "module-imports-second-statement": (
        "from sympy import Symbol, lambdify\n"
        "class P:\n"
        "    module_imports = {'math': ['sqrt; import os']}\n"
        "    def doprint(self, expr):\n"
        "        return 'os'\n"
        "x = Symbol('x')\n"
        "print(lambdify(x, x, printer=P())(1))\n"),
    "module-imports-private-name": (
        "from sympy import Symbol, lambdify\n"
        "class P:\n"
        "    module_imports = {'sympy.utilities.lambdify': ['_import']}\n"
        "    def doprint(self, expr):\n"
        "        return '_import'\n"
        "x = Symbol('x')\n"
        "print(lambdify(x, x, printer=P())(1))\n"),
}


@pytest.mark.parametrize("case", [*PRINTER_IMPORTS, "legitimate"])
def test_sink_lambdify_printer_imports_are_parsed(restricted, markers, case):
    if case == "legitimate":
        code = ("from sympy import Symbol, lambdify\n"
                "class P:\n"
                "    module_imports = {'math': ['sqrt', 'pi']}\n"
                "    def doprint(self, expr):\n"
                "        return 'sqrt(x) + pi * 0'\n"
                "x = Symbol('x')\n"
                "print(lambdify(x, x, printer=P())(16))\n")
        assert_ok(attack(restricted, code), "4.0\n")
        return
    r = run_case(restricted, markers, PRINTER_IMPORTS[case])
    assert r.status == Status.DENIED and "lambdify wanted to run" in r.error.message, _describe(r)
    assert "built-in" not in r.stdout and "dict" not in r.stdout, _describe(r)


MONOMIAL_ATTACKS = {
    # A subclass's own _vars end up in the text that MonomialOps runs with exec.
    "subclass-vars": (
        "from sympy.polys.monomials import MonomialOps\n"
        "class M(MonomialOps):\n"
        "    def _vars(self, name):\n"
        "        return [\"__import__('os').system('touch {marker}')\"]\n"
        "print(M(1).mul()((1,), (2,)))\n"
    ),
    "subclass-vars-attribute": (
        "from sympy.polys.monomials import MonomialOps\n"
        "class M(MonomialOps):\n"
        "    def _vars(self, name):\n"
        "        return ['a0.__class__']\n"
        "print(M(1).lcm())\n"
    ),
    # A line that starts with a carriage return is blank to a tokenizer but code to the
    # compiler: the text must never be read twice in two ways.
    "subclass-vars-carriage-return": (
        "from sympy.polys.monomials import MonomialOps\n"
        "class M(MonomialOps):\n"
        "    def _vars(self, name):\n"
        "        if name == 'r':\n"
        "            return ['r0,)\\n\\r[c for c in ().__class__.__base__.__subclasses__() "
        "if c.__name__ == \"catch_warnings\"][0]()._module.__builtins__[\"open\"]"
        "(\"{marker}\", \"w\")\\ndef r1(): return (r0']\n"
        "        return [name + '0']\n"
        "print(M(1).div())\n"
    ),
    "build-directly": (
        "from sympy.polys.monomials import MonomialOps\n"
        "print(MonomialOps(1)._build(\"def monomial_mul(A, B):\\n    open('{marker}', 'w')\", 'monomial_mul'))\n"
    ),
}


@pytest.mark.parametrize("case", [*MONOMIAL_ATTACKS, "legitimate"])
def test_sink_monomial_builder_runs_only_arithmetic(restricted, markers, case):
    if case == "legitimate":
        # The polynomial rings behind these build their monomial functions with exec.
        code = ("from sympy import *\nx = symbols('x')\nprint(integrate(x*sin(x), x))\n"
                "print(integrate(sin(x)**2, (x, 0, pi)))\nprint(integrate(1/(x**3 - 1), (x, 2, 3)).is_real)\n"
                "print(factor(x**3*symbols('y') - x*symbols('y')**3))\n")
        assert_ok(attack(restricted, code), "-x*cos(x) + sin(x)\npi/2\nTrue\nx*y*(x - y)*(x + y)\n")
        return
    r = run_case(restricted, markers, MONOMIAL_ATTACKS[case])
    assert r.status == Status.DENIED, _describe(r)
    if case.startswith("subclass"):
        assert "monomial code generator" in r.error.message, _describe(r)
    else:
        assert_denied(r, ("_build",))


SYMPY_ABC = {
    # Its import runs `exec('from sympy import *', ...)`, which a child may not do: it was
    # imported in the worker, so these find it loaded, and no exec is reachable from it.
    "private-namespace": ("import sympy.abc\nprint(sympy.abc._clash)\n", ("_clash",)),
    "private-from-import": ("from sympy.abc import _clash1\nprint(_clash1)\n", ("_clash1",)),
    "module-dict": ("import sympy.abc\nprint(sympy.abc.__dict__)\n", ("__dict__",)),
    "module-builtins": ("import sympy.abc\nprint(sympy.abc.__builtins__)\n", ("__builtins__",)),
    "module-vars": ("import sympy.abc\nprint(vars(sympy.abc)['exec'])\n", ("vars",)),
    "reload": ("import sympy.abc, importlib\nimportlib.reload(sympy.abc)\n", ("importlib",)),
}


@pytest.mark.parametrize("case", [*SYMPY_ABC, "legitimate"])
def test_sink_sympy_abc_is_imported_ahead(restricted, case):
    if case == "legitimate":
        code = ("from sympy.abc import x, y\nimport sympy\nprint(sympy.factor(x**2 - y**2))\n"
                "import sympy.abc as abc\nfrom sympy.abc import *\n"
                "print(abc.alpha, beta, sorted(n for n in dir(abc) if n in ('exec', 'eval')))\n")
        assert_ok(attack(restricted, code), "(x - y)*(x + y)\nalpha beta []\n")
        return
    code, names = SYMPY_ABC[case]
    r = attack(restricted, code)
    assert_denied(r, names)
    assert "built-in" not in r.stdout, r.stdout


# --- sympy: names and callbacks ------------------------------------------------------------

PRINTERS = {
    # Printer._print does `getattr(expr, self.printmethod)(self)` with the real getattr. A
    # printer that is also a str, with printmethod '__getattribute__', turns that into
    # `expr.__getattribute__('<any name>')`: json.loads.__globals__, then the real
    # builtins. parenthesize() returns _print's result as is.
    "printmethod-reads-any-attribute": (
        "import json\n"
        "from sympy.printing.str import StrPrinter\n"
        "class P(str, StrPrinter):\n"
        "    printmethod = '__getattribute__'\n"
        "    def __init__(self, name):\n"
        "        StrPrinter.__init__(self)\n"
        "g = P('__globals__').parenthesize(json.loads, 0)\n"
        "b = g.get('__builtins__')\n"
        "b.get('eval')({payload}, {'__builtins__': b})\n"
        "print('escaped')\n",
        ("printmethod", "Printer", "StrPrinter", "__getattribute__", "__globals__", "str")),
    # The same gadget on a module: a module's __getattribute__ reads its globals.
    "printmethod-module-builtins": (
        "import json\n"
        "from sympy.printing.str import StrPrinter\n"
        "class P(str, StrPrinter):\n"
        "    printmethod = '__getattribute__'\n"
        "    def __init__(self, name):\n"
        "        StrPrinter.__init__(self)\n"
        "    def grab(self, obj):\n"
        "        return self.parenthesize(obj, -1)\n"
        "b = P('__builtins__').grab(json)\n"
        "b.get('exec')({payload}, {'__builtins__': b})\n"
        "print('escaped')\n",
        ("printmethod", "Printer", "StrPrinter", "__getattribute__", "__builtins__", "str")),
    # The class statement refuses str mixed with a library class directly; through a str
    # subclass of the user's own, the printer itself refuses (str has its own lookup).
    "printmethod-reads-any-attribute-via-str-subclass": (
        "import json\n"
        "from sympy.printing.str import StrPrinter\n"
        "class T(str):\n"
        "    pass\n"
        "class P(T, StrPrinter):\n"
        "    printmethod = '__getattribute__'\n"
        "    def __init__(self, name):\n"
        "        StrPrinter.__init__(self)\n"
        "g = P('__globals__').parenthesize(json.loads, 0)\n"
        "print('escaped', g)\n",
        # Refused at the class statement now (a str subclass mixed with a library class
        # along the MRO), before the printer's own check would see it.
        ("Printer", "attribute lookup", "derive from both")),
    # sympy reads `self.printmethod`: an instance's own value counts, not only the class's.
    "printmethod-on-the-instance": (
        "from sympy.printing.str import StrPrinter\n"
        "from sympy import Symbol\n"
        "class P(StrPrinter):\n    printmethod = '_sympystr'\n"
        "p = P()\np.printmethod = '__reduce_ex__'\n"
        "print(p.doprint(Symbol('x')))\n", ("printmethod",)),
    "printmethod-as-property": (
        "from sympy.printing.str import StrPrinter\n"
        "from sympy import Symbol\n"
        "class P(StrPrinter):\n    @property\n"
        "    def printmethod(self):\n        return '__reduce_ex__'\n"
        "print(P().doprint(Symbol('x')))\n", ("printmethod",)),
    "printmethod-dunder-on-the-class": (
        "from sympy.printing.str import StrPrinter\n"
        "from sympy import Symbol\n"
        "class P(StrPrinter):\n    printmethod = '__reduce_ex__'\n"
        "print(P().doprint(Symbol('x')))\n", ("printmethod", "__reduce_ex__")),
    "printmethod-str-subclass": (
        "from sympy.printing.str import StrPrinter\n"
        "from sympy import Symbol\n"
        "class N(str):\n    pass\n"
        "class P(StrPrinter):\n    printmethod = N('_sympystr')\n"
        "print(P().doprint(Symbol('x')))\n", ("printmethod",)),
}


@pytest.mark.parametrize("case", [*PRINTERS, "legitimate"])
def test_sink_printer_calls_only_print_methods(restricted, markers, case):
    if case == "legitimate":
        # A printer of the user's own calls the user's own print method, with itself.
        code = ("from sympy import Symbol, latex, sstr\n"
                "from sympy.printing.str import StrPrinter\n"
                "class MyPrinter(StrPrinter):\n    printmethod = '_mystr'\n"
                "    def _print_Integer(self, expr):\n        return 'I' + str(expr)\n"
                "class Thing(Symbol):\n"
                "    def _mystr(self, printer):\n        return 'THING:' + type(printer).__name__\n"
                "print(MyPrinter().doprint(Thing('t') + 2), latex(Symbol('x')**2 / 3), sstr(Symbol('y')))\n")
        assert_ok(attack(restricted, code), "THING:MyPrinter + I2 \\frac{x^{2}}{3} y\n")
        return
    code, names = PRINTERS[case]
    r = run_case(restricted, markers, code)
    assert_denied(r, names)
    assert "escaped" not in r.stdout, r.stdout


FINDROOT = {
    # nsolve passes its keyword arguments to mpmath.findroot, which calls a class given as
    # `solver=` with mpmath's own context (mpmath.ctx_mp.MPContext: its identify() evals
    # strings); list.pop() would then hand it to user code.
    "solver-class-keeps-the-context": (
        "import sympy\n"
        "x = sympy.Symbol('x')\n"
        "box = []\n"
        "class S:\n"
        "    def __init__(self, ctx, f, x0, **kw):\n"
        "        box.append(ctx)\n"
        "        self.x0 = x0\n"
        "    def __iter__(self):\n"
        "        yield self.x0, 0\n"
        "try:\n"
        "    sympy.nsolve(x - 2, x, 1, solver=S, verify=False)\n"
        "except Exception:\n"
        "    pass\n"
        "ctx = box.pop()\n"
        "print(type(ctx))\n"),
    "solver-function": (
        "import sympy\nx = sympy.Symbol('x')\n"
        "def solver(*args, **kwargs):\n    return iter([(1, 0)])\n"
        "print(sympy.nsolve(x**2 - 2, x, 1, solver=solver))\n"),
    "solver-str-subclass": (
        "import sympy\nx = sympy.Symbol('x')\n"
        "class S(str):\n    pass\n"
        "print(sympy.nsolve(x**2 - 2, x, 1, solver=S('secant')))\n"),
}


@pytest.mark.parametrize("case", [*FINDROOT, "legitimate"])
def test_sink_findroot_takes_only_named_solvers(restricted, case):
    if case == "legitimate":
        # nsolve evaluates through mpmath's own functions (cos here) and numbers.
        code = ("from sympy import *\nx = symbols('x')\nprint(nsolve(cos(x) - x, x, 1))\n"
                "print(N(nsolve(exp(x) - 3, x, 1), 8))\n"
                "print(nsolve(x**2 - 2, x, (1, 2), solver='bisect'))\n")
        assert_ok(attack(restricted, code), "0.739085133215161\n1.0986123\n1.41421356237310\n")
        return
    r = attack(restricted, FINDROOT[case])
    assert_denied(r, ("solver", "findroot", "nsolve"))
    assert "MPContext" not in r.stdout, r.stdout


ATTRIBUTE_CALLERS = {
    # call_highest_priority(name) makes a method that calls `getattr(other, name)(self)`.
    "decorator": ("from sympy.core.decorators import call_highest_priority\n"
                  "class U:\n    _op_priority = 1000.0\n"
                  "    @call_highest_priority('__reduce_ex__')\n"
                  "    def __add__(self, other):\n        return 0\n"),
    "module-attribute": ("import sympy\nprint(sympy.core.decorators.call_highest_priority)\n"),
    "re-exported": ("import sympy\nprint(sympy.core.expr.call_highest_priority('__class__'))\n"),
    "star-import": ("from sympy.core.decorators import *\nprint(call_highest_priority('__radd__'))\n"),
    # AppliedFunction's item access is getattr(self, self.items[i]) with the real getattr.
    "applied-function": ("from sympy.parsing.sympy_parser import AppliedFunction\n"
                         "def f(x):\n    return x\nf.items = ['__globals__']\n"
                         "print(AppliedFunction.__getitem__(f, 0))\n"),
    "applied-function-attribute": ("import sympy\nprint(sympy.parsing.sympy_parser.AppliedFunction)\n"),
    # AssocOpDispatcher(name) walks attrgetter('_<name>_handler') over what it is called with.
    "assoc-op-dispatcher": ("from sympy.core.operations import AssocOpDispatcher\n"
                            "d = AssocOpDispatcher('x.__globals__.y')\n"),
    # register_handler(key, ...) is setattr(Q, key, ...) on sympy's shared Q; remove_handler
    # reads getattr(Q, key).
    "register-handler": ("from sympy.assumptions.ask import register_handler\n"
                         "register_handler('__class__', object)\n"),
    "remove-handler": ("from sympy.assumptions.ask import remove_handler\n"
                       "remove_handler('__init__', object)\n"),
}


@pytest.mark.parametrize("case", [*ATTRIBUTE_CALLERS, "legitimate"])
def test_sink_attribute_callers_are_refused(restricted, case):
    if case == "legitimate":
        # sympy's own operators call a higher-priority operand's method: a user's, here,
        # which starts by checking what it receives.
        code = ("import sympy\nx = sympy.Symbol('x')\n"
                "class U:\n    _op_priority = 1000.0\n"
                "    def __radd__(self, other):\n        return ('radd', str(other))\n"
                "    def __rmul__(self, other):\n        return ('rmul', type(other).__name__)\n"
                "print(x + U(), x * U())\n")
        assert_ok(attack(restricted, code), "('radd', 'x') ('rmul', 'Symbol')\n")
        return
    r = attack(restricted, ATTRIBUTE_CALLERS[case])
    assert_denied(r, ("call_highest_priority", "AppliedFunction", "AssocOpDispatcher",
                      "register_handler", "remove_handler"))


NAMESPACE_WRITERS = {
    # var() writes Symbols into its caller's globals under names of its choosing; pollute()
    # into its caller's caller's.
    "var": ("import sympy\nsympy.var('x y')\nprint(x)\n", ("var",)),
    "var-from-import": ("from sympy import var\nvar('_getattr_')\n", ("var",)),
    "var-defining-module": ("from sympy.core.symbol import var\nvar('__builtins__')\n", ("var",)),
    "var-module-attribute": ("import sympy\nprint(sympy.core.symbol.var)\n", ("var",)),
    "var-star-import": ("from sympy import *\nvar('_write_')\n", ("var",)),
    "pollute-import": ("from sympy.utilities.magic import pollute\npollute(['_getattr_'], [print])\n",
                       ("sympy.utilities.magic", "magic")),
    "pollute-module-attribute": ("import sympy\nsympy.utilities.magic.pollute(['x'], [1])\n",
                                 ("sympy.utilities.magic", "magic")),
    "pollute-from-package": ("from sympy.utilities import magic\nmagic.pollute(['x'], [1])\n",
                             ("sympy.utilities.magic", "magic")),
}


@pytest.mark.parametrize("case", [*NAMESPACE_WRITERS, "legitimate"])
def test_sink_namespace_writers_are_refused(restricted, case):
    if case == "legitimate":
        code = "from sympy import symbols\nx, y = symbols('x y')\nprint(x + y)\n"
        assert_ok(attack(restricted, code), "x + y\n")
        return
    code, names = NAMESPACE_WRITERS[case]
    r = attack(restricted, code)
    assert_denied(r, names)
    assert r.stdout == "", r.stdout


_CONVERTER = (
    "import sympy\n"
    "from sympy.core.sympify import converter\n"
    "from sympy.parsing.sympy_parser import parse_expr\n"
    "seen = []\n"
)
# A library exception from a module user code may not use (tokenize's, raised through
# parse_expr): user code holds it, but it is an object the policy refuses.
_REFUSED_OBJECT = (
    "try:\n"
    "    parse_expr('(')\n"
    "except Exception as e:\n"
    "    err = e\n"
)
CALLBACKS = {
    # sympify calls the converter registered for any class in the object's MRO: one for
    # `object` receives whatever sympy is asked to convert.
    "converter-for-object": (
        _CONVERTER + "def conv(obj):\n    seen.append(1)\n    return sympy.Integer(7)\n"
        "converter[object] = conv\n" + _REFUSED_OBJECT + "print(sympy.sympify(err), seen)\n",
        ("tokenize",)),
    "converter-lambda": (
        _CONVERTER + "converter[object] = lambda obj: seen.append(obj) or sympy.Integer(7)\n"
        + _REFUSED_OBJECT + "print(sympy.sympify(err), seen)\n",
        ("tokenize",)),
    "converter-through-an-expression": (
        _CONVERTER + "def conv(obj):\n    seen.append(1)\n    return sympy.Integer(7)\n"
        "converter[object] = conv\n" + _REFUSED_OBJECT + "print(sympy.Symbol('x') + err, seen)\n",
        ("tokenize",)),
    # The same object through the builtins' own callbacks.
    "sorted-key": (_CONVERTER + _REFUSED_OBJECT + "print(sorted([err, err], key=lambda v: 0))\n",
                   ("tokenize",)),
    "map": (_CONVERTER + _REFUSED_OBJECT + "def f(v):\n    return v\nprint(list(map(f, [err])))\n",
            ("tokenize",)),
}


@pytest.mark.parametrize("case", [*CALLBACKS, "legitimate"])
def test_sink_library_callbacks_check_their_arguments(restricted, case):
    if case == "legitimate":
        # A converter for the user's own class, and one for `object` fed library objects
        # the user may hold: sympify, Matrix and the arithmetic all call back.
        code = (_CONVERTER
                + "class P:\n    def __init__(self, v):\n        self.v = v\n"
                  "def conv(p):\n    seen.append(type(p).__name__)\n    return sympy.Integer(p.v)\n"
                  "converter[P] = conv\n"
                  "print(sympy.sympify(P(3)) + 1, sympy.Matrix([P(1), P(2)]).T, sympy.Symbol('x') + P(4))\n"
                  "import math, json\n"
                  "converter[object] = lambda obj: seen.append(type(obj).__name__) or sympy.Integer(0)\n"
                  "print(sympy.sympify(math), sympy.sympify(json.loads), sorted(set(seen)))\n")
        assert_ok(attack(restricted, code), "4 Matrix([[1, 2]]) x + 4\n0 0 ['P', 'function', 'module']\n")
        # Registered in that run only: the next one starts with sympy's own converters.
        assert_ok(attack(restricted, "from sympy.core.sympify import converter\nprint(len(converter))\n"),
                  "0\n")
        return
    code, names = CALLBACKS[case]
    r = attack(restricted, code)
    assert_denied(r, names)
    assert r.stdout == "", r.stdout


DISPATCH = {
    # dispatch() looks for an existing Dispatcher in the caller's frame locals under the
    # function's name, which user code may set. At the top level those locals are the
    # module function's: the hooks only.
    "hook-named-function": ("from sympy.multipledispatch import dispatch\n"
                            "def f(self, x):\n    return x\n"
                            "f.__name__ = '_getattr_'\nprint(dispatch(int)(f))\n"),
    "inside-a-function": ("from sympy.multipledispatch import dispatch\n"
                          "def outer():\n    secret = 1\n"
                          "    def secret(self, x):\n        return x\n"
                          "    return dispatch(int)(secret)\nprint(outer())\n"),
}


@pytest.mark.parametrize("case", [*DISPATCH, "legitimate"])
def test_sink_dispatch_finds_nothing_of_the_callers(restricted, case):
    if case == "legitimate":
        code = ("from sympy.multipledispatch import dispatch\n"
                "@dispatch(int)\ndef describe(x):\n    return 'int'\n"
                "@dispatch(str)\ndef describe(x):\n    return 'str'\n"
                "print(describe(1), describe('a'))\n")
        assert_ok(attack(restricted, code), "int str\n")
        return
    r = attack(restricted, DISPATCH[case])
    # Whatever dispatch found under that name (a hook of the policy, or the user's own
    # value) has nothing to add a signature to: an error, never a hook in user hands.
    assert r.status in (Status.ERROR, Status.DENIED), r
    assert "_getattr_" not in r.stdout and "Guards" not in r.stdout, r.stdout


LIBRARY_DECORATORS = {
    # sympy's threaded() wraps with the real functools.wraps, which copies the user
    # function's __dict__ and __module__ ('__main__') onto sympy's own closure: that
    # closure is still not the user's code, so it cannot become a special method.
    "as-a-special-method": ("from sympy.utilities.decorator import threaded\n"
                            "def f(x):\n    return x\nw = threaded(f)\n"
                            "class W:\n    pass\nW.__neg__ = w\n-W()\n"),
    "through-setattr": ("from sympy.utilities.decorator import threaded\n"
                        "def f(x):\n    return x\n"
                        "class W:\n    pass\nsetattr(W, '__enter__', threaded(f))\n"),
    "a-library-callable-as-a-special-method": ("import functools\nclass W:\n    pass\n"
                                               "W.__neg__ = functools.partial(print, 'x')\n-W()\n"),
}


@pytest.mark.parametrize("case", [*LIBRARY_DECORATORS, "legitimate"])
def test_sink_library_decorators_make_nothing_the_users(restricted, case):
    if case == "legitimate":
        code = ("from sympy.utilities.decorator import threaded\nfrom sympy import Matrix\n"
                "@threaded\ndef inc(x):\n    return x + 1\nprint(inc(Matrix([1, 2])).T)\n"
                "class V:\n    pass\ndef neg(self):\n    return 'negated'\nV.__neg__ = neg\nprint(-V())\n")
        assert_ok(attack(restricted, code), "Matrix([[2, 3]])\nnegated\n")
        return
    r = attack(restricted, LIBRARY_DECORATORS[case])
    assert_denied(r, ("__neg__", "__enter__"))
    assert r.stdout == "", r.stdout


CLASS_FACTORIES = {
    # Classes made by calling a factory instead of writing a class statement: the
    # namespace and bases would skip the statement's checks.
    "real-type-as-a-library-value": ("from sympy.strategies.branch.traverse import basic_fns\n"
                                     "T = basic_fns['op']\nT('X', (object,), {})\n", ("type", "basic_fns")),
    "metaclass-value": ("from sympy.core.kind import KindMeta\n"
                        "G = KindMeta('G', (object,), {'__getattr__': lambda s, n: n})\n", ("metaclass",)),
    "metaclass-of-function": ("from sympy import FunctionClass\nprint(FunctionClass)\n", ("FunctionClass",)),
    "function-bases-namespace": ("from sympy import Function\n"
                                 "F = Function('F', (object,), {'__getattr__': lambda s, n: n})\n",
                                 ("namespace",)),
    "function-bases-keyword": ("from sympy import Function\nimport json\n"
                               "F = Function('F', bases=(str, json.JSONDecoder))\n", ("namespace",)),
    "function-dunder-attributes": (
        "import sympy\nF = sympy.Function('F', **{'__annotations__': {'x': 'int'}, '__globals__': {}})\n",
        ("__annotations__", "__globals__")),
    "function-dunder-keyword": ("import sympy\nF = sympy.Function('F', __module__='__main__')\n",
                                ("__module__",)),
    "type-of-a-function-class": ("from sympy import Function\nf = Function('f')\nM = type(f)\n",
                                 ("type", "metaclass")),
    "type-three-arguments": ("X = type('X', (object,), {})", ("type",)),
    # type(int) is the real `type`: three-argument class creation without the class
    # statement's checks (a class that is both a str and a library class, say).
    "type-of-a-class": ("from sympy.printing.str import StrPrinter\n"
                        "T = type(int)\n"
                        "P = T('P', (str, StrPrinter), {})\n"
                        "print('built', P.mro())\n", ("type", "StrPrinter", "str", "class")),
    "enum-functional": ("import re\nEnum = re.RegexFlag.mro()[5]\n"
                        "E = Enum('E', {'A': 1, '__getattr__': lambda s, n: n}, module='__main__')\n",
                        ("enum",)),
    "enum-import": ("from enum import Enum\nE = Enum('E', {'A': 1}, module='__main__')\n", ("enum",)),
}


@pytest.mark.parametrize("case", [*CLASS_FACTORIES, "legitimate"])
def test_sink_class_factories_are_refused(restricted, case):
    if case == "legitimate":
        # Names and assumptions are what Function is for (lambdify's own use of the
        # factory included); enum members of allowed modules are values.
        code = ("from sympy import *\nx = symbols('x')\ng = Function('g', real=True)\n"
                "from sympy.utilities.lambdify import implemented_function\n"
                "h = implemented_function('h', lambda t: t + 1)\n"
                "print(g(x).is_real, lambdify(x, h(x))(2))\n"
                "import re\nprint(re.I | re.M, type(re.I).__name__)\n")
        assert_ok(attack(restricted, code), "True 3\nre.IGNORECASE|re.MULTILINE RegexFlag\n")
        return
    code, names = CLASS_FACTORIES[case]
    r = attack(restricted, code)
    assert_denied(r, names)
    assert "built" not in r.stdout, r.stdout


# --- sympy: modules and packages -----------------------------------------------------------

def _refused_modules() -> list[str]:
    """Every module the table refuses, and every one the policy refuses."""
    listed = {sink.callable for sink in SINKS if sink.how == "refused module"}
    return sorted(listed | set(Policy().refused_modules))


# Objects defined in a refused module that allowed modules re-export.
REFUSED_MODULE_VALUES = {
    "sympy.core.cache": ["import sympy\nprint(sympy.cacheit)\n",
                         "from sympy.polys.monomials import cacheit\n",
                         "from sympy import *\ncacheit(len)\n"],
    "sympy.printing.preview": ["import sympy\nprint(sympy.preview)\n",
                               "from sympy.printing import preview\n"],
    "sympy.polys.polyconfig": ["from sympy.polys.factortools import query\n",
                               "import sympy\nprint(sympy.polys.galoistools.query)\n"],
}


def _refused_module_cases() -> list[tuple[str, str]]:
    cases = []
    for module in _refused_modules():
        cases += [(module, "import"), (module, "import-from"), (module, "from-parent"),
                  (module, "attribute"), (module, "star")]
        cases += [(module, f"value-{i}") for i in range(len(REFUSED_MODULE_VALUES.get(module, ())))]
    return [*cases, ("sympy.stats.sampling", "sample-by-name")]


@pytest.mark.parametrize(("module", "route"), _refused_module_cases(),
                         ids=[f"{m}-{r}" for m, r in _refused_module_cases()])
def test_sink_refused_modules(restricted, module, route):
    parent, _, leaf = module.rpartition(".")
    names = (module, leaf)
    if route == "sample-by-name":
        # sympy.stats imports the sampling library by the name the caller gives: the
        # import finds nothing here, and sympy says so. (`this` prints the Zen of Python
        # when it is imported: it never was.)
        code = ("import sympy\nfrom sympy.stats import Normal, sample\nX = Normal('X', 0, 1)\n"
                "sample(X, library='this')")
        r = attack(restricted, code)
        assert r.status == Status.ERROR and "this" in r.error.message, _describe(r)
        assert "Beautiful is better" not in r.stdout + r.stderr, _describe(r)
        r = attack(restricted, code.replace("'this'", "'os'") + "\n")
        assert r.status == Status.ERROR and "'os'" in r.error.message, _describe(r)
        return
    code = {
        "import": f"import {module}\nprint('imported')\n",
        "import-from": f"from {module} import *\nprint('imported')\n",
        "star": f"from {parent} import *\n{leaf}()\n",
        "from-parent": f"from {parent} import {leaf}\nprint({leaf})\n",
        "attribute": f"import {parent}\nprint({module})\n",
    }.get(route) or REFUSED_MODULE_VALUES[module][int(route.split("-")[1])]
    r = attack(restricted, code)
    assert "<module" not in r.stdout and "<function" not in r.stdout and "imported" not in r.stdout, \
        _describe(r)
    if r.status == Status.DENIED:
        assert _mentions(r.error.message, (*names, "cacheit", "preview", "query")), \
            r.error.message
        return
    # A submodule the worker never loaded is not there to pivot to: the attribute is
    # missing, and importing it through its parent's fromlist is refused by the import
    # layer (ModuleNotFoundError), before the policy sees the name.
    assert r.status == Status.ERROR, _describe(r)
    if route == "attribute" or route == "star":
        assert r.error.type in ("AttributeError", "NameError") and leaf in r.error.message, _describe(r)
    else:
        assert route == "from-parent", _describe(r)
        assert r.error.type == "ModuleNotFoundError" and module in r.error.message \
            and "does not allow" in r.error.message, _describe(r)


# mpmath's numbers and functions may be held (nsolve needs them); its context is then
# one attribute away. Its string evaluation, its modules and its privates stay closed.
MPMATH_VALUE = ("from sympy import *\nx = symbols('x')\n"
                "ctx = lambdify(x, cos(x), 'mpmath')(1).context\n")
MPMATH = {
    "identify-eval": (MPMATH_VALUE + "print(ctx.identify(0.5, ['__import__(\"os\").system(\"touch {marker}\")']))",
                      ("from a string",)),
    "private-attribute": (MPMATH_VALUE + "print(getattr(ctx, '_sage_sqrt'))", ("_sage_sqrt",)),
    "plot-import": (MPMATH_VALUE + "ctx.plot(lambda t: t, [0, 1], file='{marker}')", None),
    "dunder-dict": (MPMATH_VALUE + "print(ctx.__dict__)", ("__dict__",)),
    "subclass-context": (MPMATH_VALUE + "class D(type(ctx)):\n    _aliases = {'ga': '__getattribute__'}\n"
                         "print(D().ga)\n", ("MPContext",)),
    "import": ("import mpmath\nprint(mpmath)\n", ("mpmath",)),
    "from-import": ("from mpmath import mpf\nprint(mpf)\n", ("mpmath",)),
}


@pytest.mark.parametrize("case", [*MPMATH, "legitimate"])
def test_sink_mpmath_values_open_no_way_out(restricted, markers, case):
    if case == "legitimate":
        code = MPMATH_VALUE + "v = lambdify(x, cos(x), 'mpmath')(0)\nprint(v, v + 1, type(v).__name__)\n"
        assert_ok(attack(restricted, code), "1.0 2.0 mpf\n")
        return
    code, names = MPMATH[case]
    r = run_case(restricted, markers, code)
    if names is None:  # plotting needs matplotlib, which is not there: refused or an error
        assert r.status in (Status.DENIED, Status.ERROR), _describe(r)
    else:
        assert_denied(r, names)


# --- the standard library ------------------------------------------------------------------

# The real update_wrapper/wraps read attributes the caller names (with the real getattr)
# and pass them to the wrapper's __setattr__ or to `getattr(wrapper, '__dict__').update`:
# a module's globals, so the real builtins, __import__ and setattr. With those the
# worker's own modules are reachable: the audit hook turned off, os.system run.
_REAL_BUILTINS_THEN_SYSTEM = (
    "imp, ga, sa = b.get('__import__'), b.get('getattr'), b.get('setattr')\n"
    "sa(imp('runner.worker.audit', None, None, ['x']), '_busy', True)\n"
    "ga(imp('os'), 'system')('touch {marker}')\n"
    "print('escaped')\n"
)
UPDATE_WRAPPER = {
    # `assigned=('__globals__',)`: getattr(json.loads, '__globals__'), then
    # setattr(wrapper, '__globals__', value): the user's __setattr__ gets the dict.
    "update_wrapper-assigned-globals-to-user-setattr": (
        "import functools, json\n"
        "box = []\n"
        "class W:\n"
        "    def __setattr__(self, name, value):\n"
        "        if name == '__globals__':\n"
        "            box.append(value.get('__builtins__'))\n"
        "functools.update_wrapper(W(), json.loads, assigned=('__globals__',), updated=())\n"
        "b = box.pop()\n" + _REAL_BUILTINS_THEN_SYSTEM),
    "wraps-assigned-globals-to-user-setattr": (
        "import functools, json\n"
        "box = []\n"
        "class W:\n"
        "    def __setattr__(self, name, value):\n"
        "        if name == '__globals__':\n"
        "            box.append(value.get('__builtins__'))\n"
        "functools.wraps(json.loads, assigned=('__globals__',), updated=())(W())\n"
        "b = box.pop()\n" + _REAL_BUILTINS_THEN_SYSTEM),
    # Default arguments are enough: WRAPPER_UPDATES is ('__dict__',), so
    # getattr(wrapper, '__dict__').update(getattr(json, '__dict__')) hands the module's
    # globals to an update() the user wrote (a __slots__ class answers __dict__ from
    # __getattr__).
    "update_wrapper-default-updated-module-dict": (
        "import functools, json\n"
        "box = []\n"
        "class D:\n"
        "    def update(self, d):\n"
        "        box.append(d.get('__builtins__'))\n"
        "class W:\n"
        "    __slots__ = ()\n"
        "    def __getattr__(self, name):\n"
        "        return D()\n"
        "    def __setattr__(self, name, value):\n"
        "        pass\n"
        "functools.update_wrapper(W(), json)\n"
        "b = box.pop()\n" + _REAL_BUILTINS_THEN_SYSTEM),
}
_UPDATE_WRAPPER_NAMES = ("update_wrapper", "wraps", "functools", "__globals__", "__dict__",
                         "__setattr__", "assigned", "updated", "__builtins__", "update")


@pytest.mark.parametrize("case", [*UPDATE_WRAPPER, "in-a-function-call", "legitimate"])
def test_sink_update_wrapper_copies_only_checked_attributes(restricted, markers, case):
    marker = markers / "pwned"
    if case == "legitimate":
        code = ('import functools\ndef f(a):\n    """Doc of f."""\n    return a\n'
                "@functools.wraps(f)\ndef g(*args):\n    return f(*args)\n"
                "def h(a):\n    return a\nfunctools.update_wrapper(h, f)\n"
                "print(g.__name__, g.__doc__, g(3), h.__name__)\n")
        assert_ok(attack(restricted, code), "f Doc of f. 3 f\n")
        return
    if case == "in-a-function-call":
        # The same escape inside a FunctionSpec body, through Sandbox.call.
        from runner.functions import FunctionSpec

        body = UPDATE_WRAPPER["update_wrapper-assigned-globals-to-user-setattr"].replace("{marker}", str(marker))
        code = "def add(x: int, y: int) -> int:\n" + "".join(
            f"    {line}\n" for line in body.splitlines()) + "    return x + y\n"
        spec = FunctionSpec(name="add", description="Add two integers.", code=code, parameters={
            "type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
            "required": ["x", "y"]})
        r = restricted.call(spec, {"x": 1, "y": 2})
        no_marker(markers, r)
        assert_denied(r, _UPDATE_WRAPPER_NAMES)
        assert_ok(attack(restricted, "print('after')"), "after\n")
        return
    r = run_case(restricted, markers, UPDATE_WRAPPER[case])
    assert_denied(r, _UPDATE_WRAPPER_NAMES)
    assert "escaped" not in r.stdout, r.stdout


FORMAT = {
    '"{0.__class__}".format(1)': ('print("{0.__class__}".format(1))', ("__class__",)),
    '"{0.__class__.__mro__}".format(1)': ('print("{0.__class__.__mro__}".format(1))', ("__class__", "__mro__")),
    "bound-format": ('fmt = "{0.__class__}".format\nprint(fmt(1))', ("__class__",)),
    "str.format": ('print(str.format("{0.__class__}", 1))', ("__class__",)),
    "format_map": ('print("{x.__class__}".format_map({"x": 1}))', ("__class__",)),
    "item-then-attribute": ('print("{0[0].__class__}".format([1]))', ("__class__",)),
    # collections.UserString.format calls the real str.format on its data: its field
    # names would walk any attribute (frames, __globals__, __subclasses__) into the output.
    "UserString.format": (
        "import collections, json\n"
        "t = collections.UserString('{0.__class__.__mro__[1].__subclasses__}|"
        "{1.__globals__[__builtins__][open]}|{1.__globals__[scanner]}')\n"
        "print(t.format(1, json.loads))\n",
        ("__class__", "__globals__", "format", "UserString")),
    "UserString.format-on-the-class": (
        "import collections\nprint(collections.UserString.format('{0.__class__}', 1))\n",
        ("UserString", "format")),
    "string.Formatter": ("from string import Formatter\nprint(Formatter().format('{0.__class__}', 1))\n",
                         ("string",)),
}


@pytest.mark.parametrize("case", [*FORMAT, "legitimate"])
def test_sink_format_strings_use_the_guards(restricted, case):
    if case == "legitimate":
        code = ('print("{:.2f}".format(3.14159))\nprint("{0}-{1}".format("a", 2), "{k}".format_map({"k": 3}))\n'
                "import collections\nprint(collections.UserString('{0}-{1:.1f}').format('a', 2.25))\n"
                'print("{0.real}|{1[0]}".format(5, [7]))\n')
        assert_ok(attack(restricted, code), "3.14\na-2 3\na-2.2\n5|7\n")
        return
    code, names = FORMAT[case]
    r = attack(restricted, code)
    assert_denied(r, names)
    for leak in ("<class", "<built-in", "<module", "__subclasses__"):
        assert leak not in r.stdout, r.stdout


_OBJECT_WALK_OS = (
    "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'BuiltinImporter'][0]"
    ".load_module('os')"
)
STRING_ANNOTATIONS = {
    # singledispatch.register evaluates string annotations with typing.get_type_hints:
    # plain eval, no policy, so dunder walks work inside it.
    "singledispatch-annotation-eval": (
        "import functools\n"
        "@functools.singledispatch\n"
        "def f(x):\n"
        "    return 0\n"
        "def g(x: {walk}):\n"
        "    pass\n"
        "f.register(g)\n"
        "print('registered')\n"),
    "annotation-literal": "def g(x: 'int'):\n    return 1\n",
    "annotation-held-in-a-variable": (
        "import functools\nS = 'int'\n@functools.singledispatch\ndef f(x):\n    return 0\n"
        "def g(x: S):\n    return 1\nf.register(g)\nprint('registered')\n"),
    "return-annotation-in-a-variable": "S = 'int'\ndef g(x) -> S:\n    return 1",
    "class-annotation-in-a-variable": "S = 'os.system'\nclass C:\n    x: S",
    "generic-annotation-with-a-string": "S = list['os']\ndef g(x: S):\n    return 1",
    "postponed-annotations": "from __future__ import annotations\ndef g(x: int):\n    return 1",
}


@pytest.mark.parametrize("case", [*STRING_ANNOTATIONS, "legitimate"])
def test_sink_string_annotations_are_refused(restricted, markers, case):
    if case == "legitimate":
        code = ("import functools\n@functools.singledispatch\ndef f(x):\n    return 'any'\n"
                "@f.register\ndef _(x: int):\n    return 'int'\n"
                "print(f(1), f('a'))\n")
        assert_ok(attack(restricted, code), "int any\n")
        return
    walk = repr(f"{_OBJECT_WALK_OS}.system('touch {markers / 'pwned'}') or int")
    r = run_case(restricted, markers, STRING_ANNOTATIONS[case].replace("{walk}", walk))
    assert_denied(r, ("annotation", "annotations"))
    assert "registered" not in r.stdout, r.stdout


NAMEDTUPLE = {
    # namedtuple fills a class template with the names and evaluates it (a trusted compile
    # site): only exact-str identifiers get into the text.
    "code-in-the-type-name": ("import collections\n"
                              "P = collections.namedtuple('P)\\n__import__(\"os\").system(\"touch {marker}\")\\n(', "
                              "['x'])\n", "ValueError", "valid identifiers"),
    "code-in-a-field-name": ("import collections\n"
                             "P = collections.namedtuple('P', ['x=__import__(\"os\").system(\"touch {marker}\")'])\n",
                             "ValueError", "valid identifiers"),
    "code-in-a-field-string": ("import collections\n"
                               "P = collections.namedtuple('P', 'x, y=().__class__')\n",
                               "ValueError", "valid identifiers"),
    "keyword-field": ("import collections\nP = collections.namedtuple('P', ['x', 'def'])\n",
                      "ValueError", "keyword"),
    "dunder-field": ("import collections\nP = collections.namedtuple('P', ['x', '__class__'])\n",
                     "ValueError", "underscore"),
    # A str subclass whose str() is itself and that calls itself an identifier.
    "str-subclass-field": ("import collections\n"
                           "class S(str):\n"
                           "    def __str__(self):\n        return self\n"
                           "    def isidentifier(self):\n        return True\n"
                           "    def startswith(self, *a):\n        return False\n"
                           "P = collections.namedtuple('P', [S('x=().__class__)\\nopen(\"{marker}\", \"w\")#')])\n",
                           "TypeError", "must be strings"),
    "str-subclass-field-renamed": ("import collections\n"
                                   "class S(str):\n"
                                   "    def __str__(self):\n        return self\n"
                                   "    def isidentifier(self):\n        return True\n"
                                   "P = collections.namedtuple('P', [S('x=1)#')], rename=True)\n",
                                   "TypeError", "must be strings"),
}


@pytest.mark.parametrize("case", [*NAMEDTUPLE, "module-refused", "renamed-and-defaults", "defaults-are-values",
                                  "defaults-hold-a-refused-object", "legitimate"])
def test_sink_namedtuple_takes_only_identifiers(restricted, markers, case):
    if case == "legitimate":
        code = ("import collections\nP = collections.namedtuple('P', 'x y', defaults=[len])\n"
                "Q = collections.namedtuple('Q', ['a'], module='__main__')\n"
                "p = P(1)\nprint(p, p.y([1, 2]), p._replace(x=3).x, P._fields, Q(2))\n")
        assert_ok(attack(restricted, code), "P(x=1, y=<built-in function len>) 2 3 ('x', 'y') Q(a=2)\n")
        return
    if case == "renamed-and-defaults":
        # rename= replaces what is not an identifier with '_<index>': nothing of it runs.
        code = ("import collections\n"
                "P = collections.namedtuple('P', ['x', 'def', '_y', 'x', '__import__(\"os\")'], rename=True)\n"
                "print(P._fields, P(1, 2, 3, 4, 5))\n")
        assert_ok(run_case(restricted, markers, code),
                  "('x', '_1', '_2', '_3', '_4') P(x=1, _1=2, _2=3, _3=4, _4=5)\n")
        return
    if case == "defaults-are-values":
        # Defaults are stored, never put into the template's text.
        code = ("import collections\n"
                "P = collections.namedtuple('P', 'x', defaults=[\"__import__('os').system('touch {marker}')\"])\n"
                "print(P().x.startswith('__import__'))\n")
        assert_ok(run_case(restricted, markers, code), "True\n")
        return
    if case == "defaults-hold-a-refused-object":
        # A default the policy refuses (a library exception of tokenize's, which user code
        # can catch but not use) comes back inside the instance: checked there.
        code = ("import collections\nfrom sympy.parsing.sympy_parser import parse_expr\n"
                "try:\n    parse_expr('(')\nexcept Exception as e:\n    err = e\n"
                "P = collections.namedtuple('P', 'x', defaults=[err])\nprint(P())\n")
        r = run_case(restricted, markers, code)
        assert_denied(r, ("tokenize",))
        assert r.stdout == "", r.stdout
        return
    if case == "module-refused":
        # module= names where the class belongs: a module user code may not use makes
        # the class a refused object.
        r = run_case(restricted, markers, "import collections\nP = collections.namedtuple('P', ['x'], module='os')\n"
                                          "print(P(1))\n")
        assert_denied(r, ("os",))
        return
    code, error_type, words = NAMEDTUPLE[case]
    r = run_case(restricted, markers, code)
    assert r.status == Status.ERROR and r.error.type == error_type and words in r.error.message, _describe(r)


DANGEROUS = {
    "exec": ("exec('print(1)')", ("exec",)),
    "eval": ("eval('1+1')", ("eval",)),
    "exec-as-a-value": ("f = exec\nf('print(1)')", ("exec",)),
    "compile": ("compile('1', 'x', 'eval')", ("compile",)),
    "open": ("print(open('/etc/passwd').read())", ("open",)),
    "input": ("input()", ("input",)),
    "breakpoint": ("breakpoint()", ("breakpoint",)),
    "__import__": ("__import__('os')", ("__import__",)),
    "vars-of-a-type": ("print(len(vars(type)['__subclasses__'](object)))", ("vars",)),
    "globals": ("secret_marker_name = 1\nprint(globals())", ("globals",)),
    "locals": ("secret_marker_name = 1\nprint(locals())", ("locals",)),
    "vars": ("secret_marker_name = 1\nprint(vars())", ("vars",)),
    "operator.attrgetter": ("import operator\nprint(operator.attrgetter('__class__')(1))",
                            ("operator", "attrgetter", "__class__")),
    "importlib.import_module": ("from importlib import import_module\nprint(import_module('os'))",
                                ("importlib", "import_module")),
    # The real attrgetter, as a name of sympy modules: refused by identity.
    "attrgetter-re-exported": ("import sympy\nprint(sympy.core.add.attrgetter('__class__')(1))",
                               ("attrgetter",)),
    "attrgetter-from-import": ("from sympy.core.operations import attrgetter\nprint(attrgetter('real')(1))",
                               ("attrgetter",)),
    "attrgetter-star-import": ("from sympy.core.add import *\nprint(attrgetter('real')(1))", ("attrgetter",)),
}


@pytest.mark.parametrize("case", list(DANGEROUS))
def test_sink_dangerous_callables_are_refused(restricted, case):
    code, names = DANGEROUS[case]
    r = attack(restricted, code)
    assert_denied(r, names)
    for leak in ("root:", "<module", "<class", "secret_marker_name", *GUARD_NAMES):
        assert leak not in r.stdout, r.stdout


LAZY_IMPORTS = {
    # C code running under a user frame imports through that frame's builtins with the
    # signature `__import__(name, g, g, [], 0)`; from user code that name is refused, and
    # so is every way to the builtins table that holds it.
    "by-name": ("g = {}\nt = __import__('time', g, g, [], 0)\nprint(t)\n", ("__import__",)),
    "from-a-builtin": ("imp = getattr(len, '__self__')\nprint(imp)\n", ("__self__",)),
    "through-a-module": ("import json\nprint(json.__builtins__)\n", ("__builtins__",)),
    "through-parse_expr": ("from sympy.parsing.sympy_parser import parse_expr\n"
                           "print(parse_expr(\"__import__('time', g, g, [], 0)\", local_dict={'g': {}}, "
                           "transformations=()))\n", ("__import__",)),
    "through-lambdify": ("import sympy\n"
                         "f = sympy.lambdify([], sympy.Integer(0),\n"
                         "                   printer=lambda e: \"__import__('time', {}, {}, [], 0)\")\n"
                         "print(f())\n", ("__import__",)),
    "import-statement": ("import time\nprint(time)\n", ("time",)),
    # Modules on the list, reached as attributes of allowed ones.
    "json.codecs": ("import json\nprint(json.codecs)", ("codecs",)),
    "re.copyreg": ("import re\nprint(re.copyreg)", ("copyreg",)),
}


@pytest.mark.parametrize("case", [*LAZY_IMPORTS, "what-comes-back-is-checked", "legitimate"])
def test_sink_lazy_imports_hand_out_nothing(restricted, case):
    if case == "legitimate":
        # datetime's C code imports time and _strptime on its own behalf.
        code = ("import datetime\nd = datetime.datetime.strptime('2024-02-29', '%Y-%m-%d')\n"
                "print(d.strftime('%A %d %B'), datetime.date(2024, 1, 2).strftime('%j'))\n")
        assert_ok(attack(restricted, code), "Thursday 29 February 002\n")
        return
    if case == "what-comes-back-is-checked":
        # Were user code to call the guarded __import__ that way, the module would come
        # back through the check of a call's result; a module not on the fixed list is
        # refused outright.
        from runner.worker.policy import LAZY_IMPORTS as LAZY
        from runner.worker.policy import Denied, Guards

        guards = Guards(Policy())
        g: dict[str, object] = {}
        module = guards.import_("time", g, g, [], 0)
        assert module is sys.modules["time"] and "time" in LAZY
        with pytest.raises(Denied, match="time"):
            guards.check_result(module)
        with pytest.raises(Denied, match="'os'"):
            guards.import_("os", g, g, [], 0)
        with pytest.raises(Denied, match="time"):
            guards.import_("time", g, g, (), 0)  # an import statement's fromlist is a tuple
        return
    code, names = LAZY_IMPORTS[case]
    r = attack(restricted, code)
    assert_denied(r, names)
    assert "<module" not in r.stdout and "<built-in" not in r.stdout, r.stdout


# --- names built from caller data, wrappers, C iteration, format by value ------------------

# The library classes an attack could write onto, and what they hold before it: compared
# after the attack (its refusal caught, so the run goes on to say).
_LIBRARY_CLASSES = ("import sympy\nfrom sympy.polys.rings import PolyRing\n"
                    "from sympy.physics.quantum.qasm import Qasm\n"
                    "_classes = [sympy.Symbol, sympy.Basic, sympy.Expr, sympy.sin, sympy.Function, "
                    "PolyRing, Qasm]\n_before = [sorted(dir(c)) for c in _classes]\n")
_CLASSES_UNCHANGED = "classes unchanged: True\n"


def caught(attack_code: str) -> str:
    """The attack between the snapshot of the library classes and their comparison."""
    body = "".join(f"    {line}\n" for line in attack_code.strip("\n").split("\n"))
    return (_LIBRARY_CLASSES + "try:\n" + body + "except BaseException:\n"
            "    print('refused')\n"
            "print('classes unchanged:', [sorted(dir(c)) for c in _classes] == _before)\n")


def assert_refused_and_unchanged(r: ExecutionResult, names: tuple[str, ...]) -> None:
    assert_denied(r, names)
    assert r.stdout.endswith("refused\n" + _CLASSES_UNCHANGED), _describe(r)


_MEMOIZED = "from sympy.utilities.decorator import memoize_property\ndef f(self):\n    return f\n"
MEMOIZE = {
    # '_' + '_globals__' is '__globals__': a dunder read off any object (then written, when
    # missing, onto sympy's class).
    "dunder-name": (_MEMOIZED + "f.__name__ = '_globals__'\np = memoize_property(f)\n"
                    "print(p.fget(sympy.sin))\n", ("_globals__", "memoize_property")),
    "dunder-qualname-route": (_MEMOIZED + "f.__name__ = '_class__'\n"
                              "print(sympy.memoize_property(f).fget(1))\n", ("_class__",)),
    # A plain name: its cache attribute written onto sympy's own class.
    "write-onto-a-library-class": (_MEMOIZED + "f.__name__ = 'cached'\n"
                                   "p = memoize_property(f)\np.fget(sympy.Symbol)\n", ("_cached",)),
    "write-onto-a-library-object": (_MEMOIZED + "p = memoize_property(f)\n"
                                    "p.fget(sympy.Symbol('x'))\n", ("_f",)),
    # A library object's internals read under a name the run chose.
    "read-library-internals": (_MEMOIZED + "f.__name__ = 'assumptions0'\n"
                               "print(memoize_property(f).fget(sympy.Symbol('x')))\n", ("_assumptions0",)),
    "user-subclass-of-a-library-class": (
        _MEMOIZED + "f.__name__ = 'assumptions0'\n"
        "class S(sympy.Symbol):\n    p = memoize_property(f)\nprint(S('x').p)\n", ("_assumptions0",)),
    "from-the-package": ("from sympy.utilities import memoize_property\n"
                         "def g(self):\n    return 1\ng.__name__ = '_dict__'\n"
                         "print(memoize_property(g).fget(sympy.Basic))\n", ("_dict__",)),
    # The getter called by C iteration, not by user code.
    "getter-through-map": (_MEMOIZED + "f.__name__ = 'x'\n"
                           "print(list(map(memoize_property(f).fget, [sympy.Expr])))\n", ("_x",)),
}


@pytest.mark.parametrize("case", [*MEMOIZE, "legitimate"])
def test_sink_memoize_property_reaches_only_the_users_attributes(restricted, case):
    if case == "legitimate":
        code = ("from sympy import memoize_property\nclass C:\n    calls = []\n"
                "    @memoize_property\n    def area(self):\n        C.calls.append(1)\n        return 6\n"
                "c = C()\nprint(c.area, c.area, c._area, len(C.calls))\n")
        assert_ok(attack(restricted, code), "6 6 6 1\n")
        return
    code, names = MEMOIZE[case]
    assert_refused_and_unchanged(attack(restricted, caught(code)), names)


GENERATOR_NAMES = {
    "ring": ("from sympy.polys.rings import ring\nfrom sympy import ZZ\nring('_hash, x', ZZ)\n",
             ("_hash", "PolyRing")),
    "ring-dunder": ("from sympy import ring, ZZ, symbols\nring(symbols('__init__ y'), ZZ)\n",
                    ("__init__",)),
    "field": ("from sympy import field, QQ\nfield('_hash', QQ)\n", ("_hash", "FracField")),
    # FreeGroup writes a generator over an attribute it already has.
    "free-group": ("from sympy.combinatorics.free_groups import free_group\nfree_group('_hash x')\n",
                   ("_hash", "FreeGroup")),
    "coordinate-system": ("from sympy.vector import CoordSys3D\n"
                          "CoordSys3D('N', variable_names=('_parent', 'y', 'z'))\n",
                          ("_parent", "CoordSys3D")),
    "coordinate-vectors": ("from sympy.vector import CoordSys3D\n"
                           "CoordSys3D('N', vector_names=['i', '__class__', 'k'])\n",
                           ("__class__", "CoordSys3D")),
}


@pytest.mark.parametrize("case", [*GENERATOR_NAMES, "legitimate"])
def test_sink_generator_names_write_no_internals(restricted, case):
    if case == "legitimate":
        code = ("from sympy import ring, field, ZZ, QQ\nfrom sympy.combinatorics.free_groups import free_group\n"
                "from sympy.vector import CoordSys3D\nR, x, y = ring('x, y', ZZ)\nK, a = field('a', QQ)\n"
                "F, u, v = free_group('u v')\nN = CoordSys3D('N', variable_names=('p', 'q', 'r'))\n"
                "print(R.x == x, (x + y)**2, K.a == a, F, N.p)\n")
        assert_ok(attack(restricted, code), "True x**2 + 2*x*y + y**2 True <free group on the generators (u, v)> N.p\n")
        return
    code, names = GENERATOR_NAMES[case]
    assert_refused_and_unchanged(attack(restricted, caught(code)), names)


QASM = {
    "setattr": ("from sympy.physics.quantum.qasm import Qasm\nQasm('qubit q0', '__setattr__ defs,1')\n",
                ("__setattr__", "Qasm")),
    "init": ("from sympy.physics.quantum.qasm import Qasm\nq = Qasm('qubit q0')\nq.add('__init__ x')\n",
             ("__init__", "Qasm")),
    "private-helper": ("from sympy.physics.quantum.qasm import Qasm\nQasm('_secret q0')\n", ("_secret",)),
}


@pytest.mark.parametrize("case", [*QASM, "legitimate"])
def test_sink_qasm_calls_only_public_commands(restricted, case):
    if case == "legitimate":
        code = ("from sympy.physics.quantum.qasm import Qasm\n"
                "print(Qasm('qubit q0', 'qubit q1', 'h q0', 'cnot q0,q1').get_circuit())\n")
        assert_ok(attack(restricted, code), "CNOT(1,0)*H(1)\n")
        return
    code, names = QASM[case]
    assert_refused_and_unchanged(attack(restricted, caught(code)), names)


WRAPPERS = {
    # A property read off a library class: builtins' class, but its getter comes from a
    # refused module (sympy.core.cache).
    "library-property": ("from sympy.solvers.ode.single import SingleODEProblem\n"
                         "p = SingleODEProblem.order\n", ("sympy.core.cache", "wraps")),
    "library-property-via-getattr": ("from sympy.solvers.ode.single import SingleODEProblem\n"
                                     "p = getattr(SingleODEProblem, 'order')\n", ("sympy.core.cache",)),
    # Wrappers of the real str.format: the stand-in is what user code gets, never the real
    # one inside a wrapper.
    "partial-of-a-bound-super-format": (
        "import functools\nclass S(str):\n    pass\ns = S('{0.__class__}')\n"
        "f = functools.partial(super(S, s).format)\nprint(f(1))\n", ("__class__",)),
    # A subclass whose `func` lies: the C partial's own fields are read.
    "partial-subclass-with-a-lying-func": (
        "import functools\nclass P(functools.partial):\n    @property\n    def func(self):\n"
        "        return len\nclass S(str):\n    pass\n"
        "p = P(super(S, S('{0.__class__}')).format)\nprint(p(1))\n", ("__class__",)),
}


@pytest.mark.parametrize("case", [*WRAPPERS, "legitimate"])
def test_sink_wrappers_are_judged_by_what_they_wrap(restricted, case):
    if case == "legitimate":
        code = ("import functools, sympy\np = functools.partial(sympy.Symbol, positive=True)\n"
                "c = functools.lru_cache(maxsize=None)(sympy.factorint)\n"
                "class K:\n    @staticmethod\n    def s(v):\n        return v + 1\n"
                "    @property\n    def q(self):\n        return 2\n"
                "m = map(sympy.sqrt, [4])\nprint(p('x').is_positive, c(12), K.s(1), K().q, list(m), "
                "functools.partial(print, 'via partial')())\n")
        assert_ok(attack(restricted, code), "via partial\nTrue {2: 2, 3: 1} 2 2 [2] None\n")
        return
    code, names = WRAPPERS[case]
    assert_refused_and_unchanged(attack(restricted, caught(code)), names)


C_ITERATION = {
    # The memoize getter (a library function) fed by C iteration: each argument it gets is
    # a value the check sees.
    "map-of-a-library-getter": (_MEMOIZED + "p = memoize_property(f)\n"
                                "print(list(map(p.fget, [sympy.Symbol])))\n", ("_f",)),
    "reduce": (_MEMOIZED + "import functools\np = memoize_property(f)\n"
               "print(functools.reduce(lambda a, b: p.fget(b), [1, sympy.sin]))\n", ("_f",)),
    # The real map is not reachable through type() of a stand-in's object either.
    "type-of-a-map": ("class S(str):\n    pass\nM = type(map(len, []))\n"
                      "print(list(M(super(S, S('{0.__class__}')).format, [1])))\n", ("__class__",)),
    "iter-callable": ("class S(str):\n    pass\nf = super(S, S('{0.__class__}')).format\n"
                      "print(next(iter(lambda: f(1), None)))\n", ("__class__",)),
}


@pytest.mark.parametrize("case", [*C_ITERATION, "legitimate"])
def test_sink_c_iteration_checks_what_crosses_it(restricted, case):
    if case == "legitimate":
        code = ("import functools, itertools, sympy\nx = sympy.Symbol('x')\n"
                "print(list(map(sympy.diff, [x**2, x**3], [x, x])), list(filter(None, [0, 1])),\n"
                "      sorted([x, 2*x], key=str), functools.reduce(sympy.Add, [x, 1, 2]),\n"
                "      list(itertools.starmap(pow, [(2, 5)])), list(itertools.accumulate([1, 2, 3])),\n"
                "      [k for k, _ in itertools.groupby('aab')], max([x, x**2], key=sympy.count_ops),\n"
                "      sorted([3, 1, 2], key=functools.cmp_to_key(lambda a, b: a - b)), type(map(len, [])))\n")
        assert_ok(attack(restricted, code),
                  "[2*x, 3*x**2] [1] [2*x, x] x + 3 [32] [1, 3, 6] ['a', 'b'] x**2 [1, 2, 3] "
                  "<class 'map'>\n")
        return
    code, names = C_ITERATION[case]
    assert_refused_and_unchanged(attack(restricted, caught(code)), names)


BOUND_FORMAT = {
    # The receiver of the read is a super proxy, not a str: the bound method is the real
    # str.format unless the value decides.
    "super-of-a-str-subclass": ("class S(str):\n    pass\nimport json\n"
                                "print(super(S, S('{0.__globals__}')).format(json.loads))\n",
                                ("__globals__",)),
    "super-format-map": ("class S(str):\n    pass\n"
                         "print(super(S, S('{x.__class__}')).format_map({'x': 1}))\n", ("__class__",)),
    "super-of-the-class": ("class S(str):\n    pass\nprint(super(S, S).format('{0.__class__}', 1))\n",
                           ("__class__",)),
    "bound-held-in-a-list": ("class S(str):\n    pass\nfs = [super(S, S('{0.__class__}')).format]\n"
                             "print(fs[0](1))\n", ("__class__",)),
}


@pytest.mark.parametrize("case", [*BOUND_FORMAT, "legitimate"])
def test_sink_bound_format_is_guarded_by_its_value(restricted, case):
    if case == "legitimate":
        code = ("class S(str):\n    pass\nprint(super(S, S('{0}-{1:.1f}')).format('a', 2.25), "
                "super(S, S('{k}')).format_map({'k': 3}), super(S, S('{0.real}')).format(5))\n")
        assert_ok(attack(restricted, code), "a-2.2 3 5\n")
        return
    code, names = BOUND_FORMAT[case]
    assert_refused_and_unchanged(attack(restricted, caught(code)), names)


# --- the table and this module -------------------------------------------------------------

def test_every_sink_has_an_attack_test_and_every_attack_test_a_sink():
    module = sys.modules[__name__]
    defined = {name for name, obj in inspect.getmembers(module, inspect.isfunction)
               if name.startswith("test_sink_")}
    named = {sink.test for sink in SINKS}
    assert all(name.startswith("test_sink_") for name in named), sorted(named)
    assert named - defined == set(), f"rows of SINKS name tests that do not exist: {sorted(named - defined)}"
    assert defined - named == set(), f"attack tests that no row of SINKS names: {sorted(defined - named)}"
    for sink in SINKS:
        assert sink.callable and sink.reaches and sink.how, sink
        assert sink.closed_by in ("patched", "refused", "substituted", "mechanism", "worker"), sink
    # Every callable a declaration refuses, every stand-in of C iteration and every kind
    # of wrapper the check looks inside has its row (and so its attack).
    from runner.worker.policy.libraries import declaration
    from runner.worker.policy.plumbing import make_plumbing
    from runner.worker.policy.wrappers import WRAPPER_TYPES

    rows = " ".join(sink.callable for sink in SINKS)
    refused = [obj.__name__ for obj, _ in declaration("sympy").refused()]
    plumbing = [real.__name__ for real in make_plumbing(Guards(Policy()).values)]
    wrappers = [kind.__name__.strip("_").replace("_wrapper", "") for kind in WRAPPER_TYPES]
    for name in (*refused, *plumbing, *wrappers):
        assert name in rows, f"{name} has no row in SINKS"
