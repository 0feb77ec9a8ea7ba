"""Attacks on the restricted tier's generic mechanism, and legitimate code that must not be
caught by them, grouped by the mechanism each one tests.

Attacks on library sinks (sympy's parsers, lambdify, printers, class factories,
functools.update_wrapper, str.format, namedtuple, ...) are in tests/test_policy_sinks.py,
one test per row of runner/worker/policy/sinks.py; it shares the helpers here.

Every attack goes through `attack()`, which also checks that the same sandbox still
serves a normal run afterwards. Denials must name what was refused. Attacks that would
run a command or write a file carry a marker path under pytest's tmp_path, and the test
checks that nothing appeared there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runner import ExecutionResult, Limits, Status

# Names RestrictedPython-style guards go by; none of them may show up in user-visible output.
GUARD_NAMES = (
    "_getattr_",
    "_getitem_",
    "_getiter_",
    "_write_",
    "_print_",
    "_inplacevar_",
    "_apply_",
    "_unpack_sequence_",
    "_iter_unpack_sequence_",
)


def _describe(r: ExecutionResult) -> str:
    return f"status={r.status!s} exit={r.exit_code} error={r.error!r} stdout={r.stdout[:300]!r}"


# "allowed modules: cmath, collections, math, ..." - an enumeration that would name
# `math` or `random` in every denial, whatever was refused.
_ALLOWED_LIST = re.compile(r"allowed(?:\s+modules)?(?:\s+are)?\s*:?\s*(?:[\w.]+(?:,\s*|\s+and\s+))+[\w.]+", re.I)


def _mentions(message: str, names: tuple[str, ...]) -> bool:
    """True if the message names one of `names` as a whole word (case-insensitive),
    not counting the list of allowed modules."""
    message = _ALLOWED_LIST.sub("", message)
    return any(
        re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message, re.IGNORECASE)
        for name in names
    )


def _ids(cases) -> list[str]:
    """Readable test ids: the snippet, squeezed."""
    return [re.sub(r"\W+", "-", case[0].strip()).strip("-")[:60] for case in cases]


def attack(sb, code: str, limits: Limits | None = None) -> ExecutionResult:
    """Run one attack, then check the same sandbox still runs normal code."""
    r = sb.run(code, limits=limits)
    after = sb.run("print(1+1)")
    assert after.status == Status.OK, f"sandbox broken after attack: {_describe(after)}"
    assert after.stdout == "2\n", f"sandbox broken after attack: {_describe(after)}"
    return r


def assert_denied(r: ExecutionResult, names: tuple[str, ...]) -> None:
    assert r.status == Status.DENIED, _describe(r)
    assert r.error is not None, _describe(r)
    assert _mentions(r.error.message, names), f"message does not name any of {names}: {r.error.message!r}"


def assert_ok(r: ExecutionResult, stdout: str) -> None:
    assert r.status == Status.OK, _describe(r)
    assert r.error is None, _describe(r)
    assert r.stdout == stdout, _describe(r)


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    """An empty directory that attacks try to write into; it must stay empty."""
    d = tmp_path / "markers"
    d.mkdir()
    return d


def _payload(markers: Path) -> str:
    """Python source that, if ever evaluated unguarded, runs a command and writes a file."""
    m1, m2 = markers / "by_system", markers / "by_open"
    return f"__import__('os').system('touch {m1}') + __import__('builtins').open('{m2}', 'w').write('x')"


def _os_system_source(marker: Path) -> str:
    """Unrestricted Python (an expression) that creates `marker` through os.system."""
    return f"__import__('os').system('touch {marker}')"


# --- imports -----------------------------------------------------------------------------

ALLOWED = [
    ("import math\nprint(math.sqrt(16), math.factorial(5))", "4.0 120\n"),
    ("import cmath\nprint(cmath.sqrt(-4))", "2j\n"),
    ("import fractions\nprint(fractions.Fraction(3, 6))", "1/2\n"),
    (
        "import decimal\ndecimal.getcontext().prec = 50\nprint(decimal.Decimal(1) / decimal.Decimal(3))",
        "0.33333333333333333333333333333333333333333333333333\n",
    ),
    ("import statistics\nprint(statistics.median([5, 1, 3]))", "3\n"),
    ("import itertools\nprint(list(itertools.islice(itertools.count(3), 3)))", "[3, 4, 5]\n"),
    ("import functools\nprint(functools.reduce(lambda a, b: a * b, [1, 2, 3, 4]))", "24\n"),
    (
        "from functools import lru_cache\n@lru_cache(maxsize=None)\ndef fib(n):\n"
        "    return n if n < 2 else fib(n - 1) + fib(n - 2)\nprint(fib(30))",
        "832040\n",
    ),
    ("import collections\nprint(collections.Counter('aab').most_common(1))", "[('a', 2)]\n"),
    ("import re\nprint(re.match(r'(\\w+)@', 'bob@x').group(1))", "bob\n"),
    ("import json\nprint(json.loads('{\"k\": [1, 2]}')['k'])", "[1, 2]\n"),
    (
        "import datetime\nprint(datetime.datetime(2024, 2, 29, 12, 30).strftime('%Y-%m-%d %H:%M'))",
        "2024-02-29 12:30\n",
    ),
    ("import random\nrandom.seed(42)\nprint(random.random() < 1)", "True\n"),
    ("import sympy\nx = sympy.Symbol('x')\nprint(sympy.solve(x**2 - 4, x))", "[-2, 2]\n"),
    ("from sympy import sympify\nprint(sympify('sqrt(8)'))", "2*sqrt(2)\n"),
    (
        "from sympy.parsing.sympy_parser import parse_expr\nprint(parse_expr('x**2 + 2*x + 1').factor())",
        "(x + 1)**2\n",
    ),
    ("import sympy\nprint(sympy.simplify('(x**2-1)/(x-1)'))", "x + 1\n"),
    ("import math as m\nfrom math import pi as PI\nprint(round(m.pi, 5), PI == m.pi)", "3.14159 True\n"),
]


@pytest.mark.parametrize(("code", "stdout"), ALLOWED, ids=_ids(ALLOWED))
def test_allowed_imports_work(restricted, code, stdout):
    assert_ok(attack(restricted, code), stdout)


DENIED_MODULES = [
    "os", "sys", "subprocess", "importlib", "ctypes", "pickle", "string", "socket", "builtins",
    "shutil", "pathlib", "io", "warnings", "inspect", "gc", "threading", "multiprocessing",
    "posix", "marshal", "traceback",
]  # fmt: skip


@pytest.mark.parametrize("module", DENIED_MODULES)
def test_denied_import_names_module_and_lists_allowed(restricted, module):
    r = attack(restricted, f"import {module}\nprint('imported')")
    assert_denied(r, (module,))
    msg = r.error.message
    assert "math" in msg and "sympy" in msg, f"message does not list what is allowed: {msg!r}"
    assert "imported" not in r.stdout


@pytest.mark.parametrize(
    ("code", "names"),
    [
        ("from os import system\nsystem('true')", ("os",)),
        ("import os.path\nprint(os.path.exists('/'))", ("os", "os.path")),
        ("from os.path import join", ("os", "os.path")),
        ("import sys as s", ("sys",)),
        ("import math, os", ("os",)),
        ("from . import x", ("relative", "from .", "'.'", '"."')),
        ("from .sibling import y", ("relative", "sibling", ".sibling")),
    ],
    ids=["from-os", "os.path", "from-os.path", "import-as", "second-of-two", "rel", "rel-sub"],
)
def test_other_denied_import_forms(restricted, code, names):
    assert_denied(attack(restricted, code), names)


# An allowed package is allowed as a curated set of subpackages: its test suites,
# benchmarks, timing helpers (which compile strings) and the rest are not.
UNLISTED_PARTS = [
    ("timed setup string",
     "import sympy\nsympy.utilities.timeutils.timed(lambda: 1, setup='import os')"),
    ("timed imported", "from sympy.utilities.timeutils import timed"),
    ("timed from the star import",
     "from sympy import *\ntimed(lambda: 1, setup='import os')"),
    ("sympy test suite", "import sympy.core.tests.test_basic"),
    ("sympy testing", "import sympy.testing.runtests"),
    ("benchmarks", "import sympy.polys.benchmarks"),
]


@pytest.mark.parametrize("code", [c[1] for c in UNLISTED_PARTS], ids=[c[0] for c in UNLISTED_PARTS])
def test_unlisted_parts_of_allowed_packages_are_refused(restricted, code):
    r = attack(restricted, code)
    assert r.status == Status.DENIED, _describe(r)


# --- module pivots -----------------------------------------------------------------------

PIVOTS = [
    ("import json\nm = json.decoder.re.enum.sys.modules['os']\nm.system('true')", ("decoder", "enum", "sys")),
    ("import warnings\nprint(warnings.sys)", ("warnings",)),
    ("import random\nprint(random._os)", ("_os",)),
    ("import random\nprint(getattr(random, '_os'))", ("_os",)),
    ("import statistics\nprint(statistics.sys.modules)", ("sys",)),
    ("from statistics import sys\nprint(sys.modules)", ("sys",)),
    ("import fractions\nprint(fractions.sys)", ("sys",)),
    ("from fractions import sys", ("sys",)),
    ("import datetime\nprint(datetime.sys)", ("sys",)),
    ("import collections\nprint(collections._sys)", ("_sys",)),
    ("import re\nprint(re.enum)", ("enum",)),
    (
        "import sympy\nm = sympy.external.importtools.import_module('os')\nprint(m)\nm.system('true')",
        ("external", "importtools", "import_module", "os"),
    ),
    (
        "import sympy\nf = sympy.utilities.source.get_class('os.system')\nprint(f)",
        ("utilities", "source", "get_class", "os", "os.system"),
    ),
    ("import sympy\nprint(sympy.utilities.misc.os)", ("utilities", "misc", "os")),
    ("from sympy.utilities.misc import os\nprint(os)", ("os", "sympy.utilities.misc")),
]


@pytest.mark.parametrize(("code", "names"), PIVOTS, ids=_ids(PIVOTS))
def test_module_pivots_are_denied(restricted, code, names):
    r = attack(restricted, code)
    assert_denied(r, names)
    assert "<module" not in r.stdout and "built-in function" not in r.stdout, r.stdout


# Objects an allowed module holds but does not define: each belongs to the module that
# defines it (pathlib, io), which is not allowed, whatever re-exports it.
FOREIGN_OBJECTS = [
    (
        # pathlib.Path is a module-level name of sympy.utilities.mathml.
        "sympy-mathml-Path-writes-files",
        "import sympy\n"
        "P = sympy.utilities.mathml.Path\n"
        "P({marker!r}).write_text('x')\n"
        "print(P('/etc/hostname').read_text())\n",
        ("Path", "pathlib", "mathml"),
    ),
    (
        "sympy-dimacs-Path-writes-files",
        "from sympy.logic.utilities.dimacs import Path\n"
        "Path({marker!r}).write_text('x')\n",
        ("Path", "pathlib", "dimacs"),
    ),
    (
        # `from sys import stdout` in sympy.strategies.core: its type's raw FileIO class
        # opens any path (or file descriptor) for reading and writing.
        "sympy-strategies-stdout-FileIO",
        "import sympy\n"
        "F = type(sympy.strategies.core.stdout.buffer.raw)\n"
        "f = F({marker!r}, 'w')\n"
        "f.write(b'x')\n"
        "f.close()\n",
        ("stdout", "FileIO", "io", "_io", "buffer", "raw"),
    ),
]


@pytest.mark.parametrize(("code", "names"), [c[1:] for c in FOREIGN_OBJECTS], ids=[c[0] for c in FOREIGN_OBJECTS])
def test_objects_of_modules_that_are_not_allowed_are_refused(restricted, markers, code, names):
    marker = markers / "pwned"
    r = attack(restricted, code.format(marker=str(marker)))
    assert list(markers.iterdir()) == [], f"the escape ran: a marker file appeared ({_describe(r)})"
    assert_denied(r, names)
    for leak in ("<built-in", "<class", "<module"):
        assert leak not in r.stdout, r.stdout


# --- attributes, dunders and private names -----------------------------------------------

DUNDER_WALKS = [
    ("().__class__.__bases__[0].__subclasses__()", ("__class__",)),
    ("x = 1\nprint(x.__dict__)", ("__dict__",)),
    ("def f():\n    pass\nprint(f.__globals__)", ("__globals__",)),
    ("print(getattr(1, '__class__'))", ("__class__",)),
    ("print(getattr(1, '__class__', None))", ("__class__",)),
    ("print(type(1).__subclasses__())", ("__subclasses__",)),
    ('print(f"{(1).__class__}")', ("__class__",)),
]


@pytest.mark.parametrize(("code", "names"), DUNDER_WALKS, ids=_ids(DUNDER_WALKS))
def test_dunder_walks_are_denied(restricted, code, names):
    r = attack(restricted, code)
    assert_denied(r, names)
    assert "<class" not in r.stdout, r.stdout


# A str subclass overriding startswith would pass `name.startswith("_")` in the
# attribute check; the real getattr would then read any dunder. Names are read as exact
# strings.
STR_SUBCLASS_NAMES = [
    (
        "str-subclass-attribute-name",
        "import json\n"
        "class S(str):\n"
        "    def startswith(self, *a):\n"
        "        return False\n"
        "b = getattr(json.dumps, S('__builtins__'))\n"
        "ev = b.get('eval')\n"
        "ev({payload!r}, {{'__builtins__': b}})\n",
        ("__builtins__", "startswith", "subclass"),
    ),
    (
        "str-subclass-class-walk",
        "class S(str):\n"
        "    def startswith(self, *a):\n"
        "        return False\n"
        "o = getattr(getattr(1, S('__class__')), S('__base__'))\n"
        "print(len(getattr(o, S('__subclasses__'))()))\n",
        ("__class__", "startswith", "subclass"),
    ),
]


@pytest.mark.parametrize(("code", "names"), [c[1:] for c in STR_SUBCLASS_NAMES],
                         ids=[c[0] for c in STR_SUBCLASS_NAMES])
def test_attribute_names_are_read_as_exact_strings(restricted, markers, code, names):
    marker = markers / "pwned"
    r = attack(restricted, code.format(payload=_os_system_source(marker)))
    assert list(markers.iterdir()) == [], f"the escape ran: a marker file appeared ({_describe(r)})"
    assert_denied(r, names)
    for leak in ("<built-in", "<class", "<module"):
        assert leak not in r.stdout, r.stdout


# A library object's private names are the library's (its caches, the helpers it calls
# on itself), also when a user subclass inherits them; the user's own stay the user's.
LIBRARY_PRIVATE_NAMES = {
    # MonomialOps(1) is a shared, cached instance whose _vars sympy calls.
    "private-write-on-library-object": ("from sympy.polys.monomials import MonomialOps\n"
                                        "m = MonomialOps(1)\nm._vars = lambda name: ['a0']\n",
                                        "private to the library"),
    "private-write-on-sympy-expression": ("from sympy import Symbol\nx = Symbol('x')\n"
                                          "x._assumptions = {}\n", "private to the library"),
    "private-from-import": ("from sympy.utilities.lambdify import _import\nprint(_import)\n",
                            "private name '_import'"),
    "library-helper-inherited-by-a-user-subclass": (
        "from sympy.printing.str import StrPrinter\nclass P(StrPrinter):\n    pass\n"
        "p = P()\nprint(p._print_Symbol)", "_print_Symbol"),
    "library-private-data-through-a-user-subclass": (
        "import sympy\nclass S(sympy.Symbol):\n    pass\ns = S('x')\nprint(s._assumptions)", "_assumptions"),
}


@pytest.mark.parametrize("name", list(LIBRARY_PRIVATE_NAMES))
def test_private_names_of_libraries_stay_private(restricted, name):
    code, named = LIBRARY_PRIVATE_NAMES[name]
    r = attack(restricted, code)
    assert r.status == Status.DENIED and named in r.error.message, _describe(r)
    assert "built-in" not in r.stdout and "dict" not in r.stdout, _describe(r)


@pytest.mark.parametrize(
    ("code", "names", "check", "expected"),
    [
        ("import math\nmath.pi = 3", ("pi", "math"), "import math\nprint(math.pi)", "3.141592653589793\n"),
        ("import math\nsetattr(math, 'pi', 3)", ("setattr", "pi", "math"), "import math\nprint(math.pi)", "3.141592653589793\n"),
        ("import math\ndel math.pi", ("pi", "math"), "import math\nprint(math.pi)", "3.141592653589793\n"),
        ("from math import pi\nimport math\nmath.tau = pi", ("tau", "math"), "import math\nprint(math.tau)", "6.283185307179586\n"),
        ("import json\njson.dumps = str", ("dumps", "json"), "import json\nprint(json.dumps([1]))", "[1]\n"),
        ("import random\nrandom.randint = max", ("randint", "random"), "import random\nrandom.seed(1)\nprint(random.randint(1, 6))", "2\n"),
        ("import sympy\nsympy.pi = 3", ("pi", "sympy"), "import sympy\nprint(sympy.N(sympy.pi, 5))", "3.1416\n"),
    ],
    ids=["math.pi", "setattr", "delattr", "math.tau", "json.dumps", "random.randint", "sympy.pi"],
)
def test_allowed_modules_cannot_be_modified(restricted, code, names, check, expected):
    assert_denied(attack(restricted, code), names)
    assert_ok(attack(restricted, check), expected)


def test_writing_a_module_dict_does_not_survive_the_run(restricted):
    attack(restricted, "import math\nd = vars(math)\nd['pi'] = 3")
    assert_ok(attack(restricted, "import math\nprint(math.pi)"), "3.141592653589793\n")


# --- frames and introspection ------------------------------------------------------------

FRAMES = [
    ("def g():\n    yield 1\nx = g()\nprint(x.gi_frame)", ("gi_frame",)),
    ("def g():\n    yield 1\nx = g()\nprint(x.gi_code)", ("gi_code",)),
    ("def g():\n    yield 1\nx = g()\nprint(getattr(x, 'gi_frame'))", ("gi_frame",)),
    ("def g():\n    yield 1\nx = g()\nprint(x.gi_frame.f_back.f_globals)", ("gi_frame",)),
    ("try:\n    1/0\nexcept Exception as e:\n    print(e.__traceback__.tb_frame)", ("__traceback__",)),
    ("try:\n    1/0\nexcept Exception as e:\n    print(getattr(e, '__traceback__'))", ("__traceback__",)),
    ("import sys\nprint(sys._getframe())", ("sys",)),
    ("import inspect\nprint(inspect.currentframe())", ("inspect",)),
    ("async def c():\n    pass\nx = c()\nprint(x.cr_frame)", ("cr_frame", "async", "AsyncFunctionDef")),
]


@pytest.mark.parametrize(("code", "names"), FRAMES, ids=_ids(FRAMES))
def test_frame_access_is_denied(restricted, code, names):
    r = attack(restricted, code)
    assert_denied(r, names)
    assert "<frame" not in r.stdout and "<code" not in r.stdout, r.stdout


def test_dir_lists_the_users_names_and_no_hook(restricted):
    # (globals(), locals() and vars() are refused: tests/test_policy_sinks.py.)
    r = attack(restricted, "secret_marker_name = 1\nprint(dir())")
    assert r.status in (Status.OK, Status.DENIED, Status.ERROR), _describe(r)
    if r.status == Status.DENIED:
        assert _mentions(r.error.message, ("dir",)), r.error.message
    if r.status == Status.OK:
        assert "secret_marker_name" in r.stdout  # the user's own names, nothing more
    for guard in GUARD_NAMES:
        assert guard not in r.stdout, f"dir() leaked {guard}: {r.stdout[:500]!r}"


# --- builtins ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    ["print(__builtins__)", "f = __builtins__['open']\nprint(f('/etc/passwd').read())", "__builtins__ = {}"],
)
def test_builtins_are_not_reachable(restricted, code):
    r = attack(restricted, code)
    assert_denied(r, ("__builtins__",))
    assert "root:" not in r.stdout


# The guarded getattr handed to library code as a value (partial, reduce, map) is still
# the guarded one.
GUARDED_BUILTINS_AS_VALUES = [
    ("import functools\ng = functools.partial(getattr, 1)\nprint(g('__class__'))", ("__class__",)),
    ("import functools\nprint(functools.reduce(getattr, ['__class__', '__base__'], 1))", ("__class__",)),
    ("print(list(map(getattr, [1], ['__class__'])))", ("__class__",)),
]


@pytest.mark.parametrize(("code", "names"), GUARDED_BUILTINS_AS_VALUES, ids=_ids(GUARDED_BUILTINS_AS_VALUES))
def test_guarded_builtins_stay_guarded_as_values(restricted, code, names):
    r = attack(restricted, code)
    assert_denied(r, names)
    assert "<class" not in r.stdout, r.stdout


def test_shadowing_len_is_local_to_one_run(restricted):
    assert_ok(attack(restricted, "len = lambda x: 0\nprint(len([1, 2]))"), "0\n")
    assert_ok(attack(restricted, "print(len([1, 2]))"), "2\n")


def test_shadowing_print_does_not_leak_into_the_next_run(restricted):
    r = attack(restricted, "print = lambda *a: None\nprint('hidden')")
    assert r.status in (Status.OK, Status.DENIED), _describe(r)
    assert r.stdout == ""
    assert_ok(attack(restricted, "print('visible')"), "visible\n")


def test_one_argument_type_is_allowed(restricted):
    assert_ok(attack(restricted, "print(type(1))"), "<class 'int'>\n")


# --- iteration, call results and values entering user functions ----------------------------


def test_what_a_library_iterator_yields_is_checked():
    """Unit level: `for` loops and comprehensions take items through the guards, like a
    call's result (map, filter or a generator can call library code that returns
    anything); ranges and built-in containers keep their C iterators."""
    import os as os_module

    from runner.worker.policy import Denied, Guards, Policy

    guards = Guards(Policy(["math"]))
    assert list(guards.getiter(map(abs, [-1, 2]))) == [1, 2]
    assert type(guards.getiter(range(3))) is type(iter(range(3)))
    with pytest.raises(Denied, match="an item of an iteration"):
        list(guards.getiter(map(lambda value: value, [os_module])))
    # However deep a container holds it, and as a dict's key.
    level: object = [[[[[[os_module]]]]]]
    with pytest.raises(Denied):
        while True:  # one level down at a time, as nested loops would
            level = next(guards.getiter(level))
    with pytest.raises(Denied):
        guards.check_value({os_module: 1}, "a dict")


def test_a_library_dicts_keys_are_checked_like_its_values(restricted):
    # Iterating a dict hands out its keys: here classes of the `ast` module.
    r = attack(restricted, "from sympy.parsing.sympy_parser import EvaluateFalseTransformer as T\n"
                           "for k in T.operators:\n    print(k)\n")
    assert r.status == Status.DENIED and "'ast'" in r.error.message, _describe(r)
    assert "built-in" not in r.stdout and "dict" not in r.stdout, _describe(r)


# --- the policy's hooks --------------------------------------------------------------------


def test_replacing_guards_through_globals_does_not_help(restricted):
    code = "g = globals()\ng['_write_'] = lambda ob: ob\nimport math\nmath.pi = 3\nprint(math.pi)"
    r = attack(restricted, code)
    assert_denied(r, ("globals", "_write_", "pi", "math"))
    assert r.stdout != "3\n"


def test_dunder_keywords_are_refused_in_any_call(restricted):
    # Keyword names are how class factories get dunders into the classes they build.
    r = attack(restricted, "d = dict(**{'__class__': 1})")
    assert_denied(r, ("__class__",))


def test_session_block_cannot_disable_the_guards_of_later_blocks(restricted):
    # One block replaces the policy's deny with a no-op (real builtins from the
    # update_wrapper gadget); every later block of the session then runs unguarded.
    plant = (
        "import functools, json\n"
        "box = []\n"
        "class W:\n"
        "    def __setattr__(self, name, value):\n"
        "        if name == '__globals__':\n"
        "            box.append(value.get('__builtins__'))\n"
        "functools.update_wrapper(W(), json.loads, assigned=('__globals__',), updated=())\n"
        "b = box.pop()\n"
        "g = b.get('__import__')('runner.worker.policy.refusals', None, None, ['x'])\n"
        "b.get('setattr')(g, 'deny', lambda *a, **k: None)\n"
        "print('planted')\n"
    )
    walk = "o = getattr(getattr((), '__class__'), '__base__')\nprint(len(getattr(o, '__subclasses__')()))\n"
    with restricted.session() as session:
        first = session.run(plant)
        second = session.run(walk)
    assert first.status == Status.DENIED, _describe(first)
    assert "planted" not in first.stdout, first.stdout
    assert_denied(second, ("__class__",))


def test_policy_objects_are_out_of_reach_in_a_session(restricted):
    with restricted.session() as s:
        for code in ("getattr.__self__", "getattr.__func__", "print(_getattr_)",
                     "print(__builtins__)", "import sys", "type(getattr)",
                     "[c for c in ().__class__.__base__.__subclasses__()]"):
            r = s.run(code)
            assert r.status == Status.DENIED or (r.status == Status.OK and "Guards" not in r.stdout), \
                f"{code}: {_describe(r)}"
        r = s.run("x = 1\nprint(x)")
        assert r.status == Status.OK and r.stdout == "1\n"


# --- resources and limits ------------------------------------------------------------------


def test_infinite_loop_times_out(restricted):
    r = attack(restricted, "while True:\n    pass", Limits(timeout_s=1))
    assert r.status == Status.TIMEOUT, _describe(r)


@pytest.mark.parametrize(
    "code",
    ["x = [0] * 10**10", "x = 'x' * 10**10", "l = []\nwhile True:\n    l.append('x' * 100000)"],
    ids=["list", "str", "growing-list"],
)
def test_memory_bombs_hit_the_memory_limit(restricted, code):
    r = attack(restricted, code, Limits(memory_mb=64, timeout_s=5))
    assert r.status == Status.MEMORY_LIMIT, _describe(r)
    assert "memory" in r.error.message.lower()


@pytest.mark.parametrize("code", ["x = 2**(10**10)", "x = 10**10**8\nprint(x > 0)"], ids=["2**10**10", "10**10**8"])
def test_huge_integers_are_stopped(restricted, code):
    r = attack(restricted, code, Limits(memory_mb=64, timeout_s=2))
    assert r.status in (Status.TIMEOUT, Status.MEMORY_LIMIT), _describe(r)


def test_int_to_str_digit_limit_is_acceptable(restricted):
    r = attack(restricted, "print(str(10**5000))")
    assert r.status in (Status.OK, Status.ERROR), _describe(r)
    if r.status == Status.ERROR:
        assert r.error.type == "ValueError"
    else:
        assert r.stdout == "1" + "0" * 5000 + "\n"


def test_output_flood_times_out_and_truncates(restricted):
    r = attack(restricted, "while True:\n    print('x' * 1000)", Limits(timeout_s=1, max_output_bytes=100_000))
    assert r.status == Status.TIMEOUT, _describe(r)
    assert r.stdout_truncated is True
    assert len(r.stdout.encode()) <= 100_000 + 200


def test_deep_recursion_is_a_recursion_error(restricted):
    r = attack(restricted, "def f(n):\n    return f(n + 1)\nf(0)", Limits(timeout_s=5))
    assert r.status == Status.ERROR, _describe(r)
    assert r.error.type == "RecursionError"


def test_a_huge_exception_message_is_an_error_cut_to_size(restricted):
    r = attack(restricted, "raise ValueError('x' * (40 * 1024 * 1024))",
               Limits(memory_mb=1024, timeout_s=20))
    assert r.status == Status.ERROR and r.error.type == "ValueError", _describe(r)
    assert len(r.error.message) < 100_000 and "more characters cut" in r.error.message


def test_raise_memory_error_is_an_error_not_the_memory_limit(restricted):
    r = restricted.run("raise MemoryError('my own')")
    assert r.status == Status.ERROR and r.error.type == "MemoryError", _describe(r)
    real = restricted.run("x = bytearray(8 * 1024 ** 3)", limits=Limits(memory_mb=64))
    assert real.status == Status.MEMORY_LIMIT, _describe(real)


# --- the result channel --------------------------------------------------------------------
#
# Ways for user code to make a run's result (or its log record) wrong: forged outcomes,
# reports that fail, values that cannot be encoded.


def test_result_channel_cannot_be_forged(restricted):
    # With the FileIO class (from sympy.strategies.core.stdout) user code writes its own
    # "ok" outcome to the result pipe and closes it; the child's real report (denied,
    # for the swallowed `import os`) then fails on the closed descriptor and is lost.
    code = (
        "import sympy, json\n"
        "try:\n"
        "    import os\n"
        "except BaseException:\n"
        "    pass\n"
        "F = type(sympy.strategies.core.stdout.buffer.raw)\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        f = F(fd, 'w')\n"
        "    except BaseException:\n"
        "        continue\n"
        "    f.write(json.dumps({'kind': 'ok'}).encode())\n"
        "    f.close()\n"
    )
    r = attack(restricted, code)
    assert_denied(r, ("os",))


def test_exception_whose_str_raises_is_an_error_not_a_crash(restricted):
    # describe_exception calls str(exc) unguarded; the exception that raises escapes
    # run_request, and child_main's handler calls str() on it again, so it escapes
    # child_main too and unwinds through the forkserver's own frames in the child: a
    # "crashed" run whose stderr shows the worker's internal traceback and host paths.
    code = (
        "class E(Exception):\n"
        "    def __str__(self):\n"
        "        raise E()\n"
        "raise E()\n"
    )
    r = attack(restricted, code)
    assert r.status == Status.ERROR, _describe(r)
    assert r.error is not None and r.error.type == "E", _describe(r)
    for leak in ("runner/worker", "forkserver", "child_main", "serve("):
        assert leak not in r.stderr, r.stderr


def test_long_exception_chain_is_an_error_not_a_crash(restricted):
    # tracebacks._trim recurses once per __cause__/__context__ link: a chain of a few
    # thousand exceptions makes describing it a RecursionError, reported as a worker failure.
    code = (
        "e = None\n"
        "for i in range(5000):\n"
        "    try:\n"
        "        raise ValueError(i) from e\n"
        "    except ValueError as x:\n"
        "        e = x\n"
        "raise e\n"
    )
    r = attack(restricted, code)
    assert r.status == Status.ERROR, _describe(r)
    assert r.error is not None and r.error.type == "ValueError", _describe(r)


def test_huge_exit_code_does_not_poison_the_log(restricted):
    # SystemExit(2**70) becomes exit_code=2**70 on the result; SQLite cannot store it, so
    # the record goes to the spool file, whose import then fails on every later open
    # (one transaction for the whole spool): this run, and every record spooled after it,
    # never reach the log.
    r = attack(restricted, "exit(2**70)")
    assert r.status == Status.ERROR, _describe(r)
    assert r.exit_code is not None and -(2**63) <= r.exit_code < 2**63, _describe(r)
    store = restricted.log_store
    assert store is not None
    assert store.get_execution(r.id).result.exit_code == r.exit_code


def test_function_returning_a_huge_int_is_not_a_worker_failure(restricted):
    # to_json_value keeps ints as ints; json.dumps then refuses more than 4300 digits in
    # the child's _report and the run is reported as "the worker failed".
    from runner.functions import FunctionSpec

    spec = FunctionSpec(name="big", description="A big number.",
                        code="def big():\n    return 10**5000\n",
                        parameters={"type": "object", "properties": {}})
    r = restricted.call(spec, {})
    assert r.status == Status.OK, _describe(r)


def test_a_refusal_while_the_result_is_encoded_is_recorded(restricted):
    """A returned object's __repr__ runs after the function returned, while the child
    encodes the result: a refusal there still makes the run `denied`."""
    from runner.types import ExecutionRequest, FunctionCall

    code = ("class Sneaky:\n    def __repr__(self):\n        import os\n        return 'x'\n"
            "def f():\n    return Sneaky()\n")
    r = restricted.execute(ExecutionRequest(code=code, call=FunctionCall(name="f")))
    assert r.status == Status.DENIED and "os" in r.error.message, _describe(r)
    assert restricted.run("print(2)").stdout == "2\n"


@pytest.mark.parametrize(("code", "expected"), [
    ("class Liar(int):\n    def bit_length(self):\n        return 1\n"
     "    def __index__(self):\n        raise RuntimeError\ndef f():\n    return Liar(7)", 7),
    ("import decimal\ndef f():\n    return decimal.Decimal('NaN')", "nan"),
    ("import decimal\ndef f():\n    return decimal.Decimal('-Infinity')", "-inf"),
    ("import sympy\ndef f():\n    return sympy.oo", "oo"),
    ("def f():\n    return float('nan')", "nan"),
])
def test_return_values_are_always_json(restricted, code, expected):
    from runner.types import ExecutionRequest, FunctionCall

    r = restricted.execute(ExecutionRequest(code=code, call=FunctionCall(name="f")))
    assert r.status == Status.OK and r.return_value == expected, _describe(r)
    import json

    json.loads(json.dumps(r.to_json_dict(), allow_nan=False))


def test_a_nul_byte_in_the_code_is_an_error(restricted):
    r = attack(restricted, "print(1)\x00")
    assert r.status == Status.ERROR and r.error.type == "SyntaxError", _describe(r)


def test_a_byte_order_mark_is_accepted(restricted):
    r = restricted.run("\ufeffprint('bom')")
    assert r.status == Status.OK and r.stdout == "bom\n", _describe(r)


# --- swallowed denials ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "names"),
    [
        ("try:\n import os\nexcept BaseException:\n pass\nprint('ok')", ("os",)),
        ("try:\n    import subprocess\nexcept ImportError:\n    pass\nprint('ok')", ("subprocess",)),
        ("try:\n    getattr(1, '__class__')\nexcept BaseException:\n    pass\nprint('ok')", ("__class__",)),
        ("import math\ntry:\n    math.pi = 3\nexcept BaseException:\n    pass\nprint('ok')", ("pi", "math")),
        (
            "import statistics\nfor i in range(3):\n    try:\n        statistics.sys\n    except Exception:\n        pass\nprint('ok')",
            ("sys",),
        ),
    ],
    ids=["import-os", "import-subprocess", "getattr", "module-write", "pivot-in-loop"],
)
def test_swallowed_denial_is_still_recorded(restricted, code, names):
    assert_denied(attack(restricted, code), names)


_LAUNDER_PRELUDE = (
    "try:\n"
    "    import os\n"
    "except BaseException as e:\n"
    "    saved = e\n"
    "class L(list):\n"
    "    def __iter__(self):\n"
    "        raise saved\n"
)

DENIAL_LAUNDERING = [
    (
        # The sanitizer of parse_expr's global_dict checks each value, iterating a list
        # subclass with the user's own __iter__; re-raising an earlier Denied there once
        # made the filter pop the *last recorded* denial: the user's refused `import os`,
        # so the run ended "ok".
        "parse_expr-global_dict-pops-denial",
        _LAUNDER_PRELUDE
        + "from sympy.parsing.sympy_parser import parse_expr\n"
          "try:\n"
          "    parse_expr('1', global_dict={'x': L([1])})\n"
          "except BaseException:\n"
          "    pass\n"
          "print('finished')\n",
    ),
    (
        "lambdify-modules-pops-denial",
        _LAUNDER_PRELUDE
        + "import sympy\n"
          "f = sympy.lambdify([], sympy.Integer(3), modules=[{'x': L([1])}, 'math'])\n"
          "print(f())\n",
    ),
]


@pytest.mark.parametrize("code", [c[1] for c in DENIAL_LAUNDERING], ids=[c[0] for c in DENIAL_LAUNDERING])
def test_swallowed_denial_cannot_be_unrecorded(restricted, code):
    r = attack(restricted, code)
    assert_denied(r, ("os",))


# --- legitimate code: no false positives ---------------------------------------------------

LEGIT = {
    "class_init_repr_eq": (
        """
class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y
    def __repr__(self):
        return f"Point({self.x}, {self.y})"
    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)
p = Point(1, 2)
print(p, p == Point(1, 2), p == Point(2, 1))
""",
        "Point(1, 2) True False\n",
    ),
    "super_init": (
        """
class Base:
    def __init__(self, name):
        self.name = name
class Child(Base):
    def __init__(self, name, age):
        super().__init__(name)
        self.age = age
c = Child("ann", 7)
print(c.name, c.age)
""",
        "ann 7\n",
    ),
    "custom_exception": (
        """
class InsufficientFunds(Exception):
    pass
class Account:
    def __init__(self, balance):
        self.balance = balance
    def withdraw(self, amount):
        if amount > self.balance:
            raise InsufficientFunds(f"need {amount - self.balance} more")
        self.balance -= amount
a = Account(10)
try:
    a.withdraw(15)
except InsufficientFunds as e:
    print("caught:", e)
a.withdraw(4)
print(a.balance)
""",
        "caught: need 5 more\n6\n",
    ),
    "self_count_augassign": (
        """
class Counter:
    def __init__(self):
        self.count = 0
    def tick(self):
        self.count += 1
        return self.count
c = Counter()
for _ in range(5):
    c.tick()
print(c.count)
""",
        "5\n",
    ),
    "dict_item_augassign": (
        """
d = {}
for k in "abracadabra":
    if k not in d:
        d[k] = 0
    d[k] += 1
lst = [1, 2, 3]
lst[0] *= 10
print(sorted(d.items()), lst)
""",
        "[('a', 5), ('b', 2), ('c', 1), ('d', 1), ('r', 2)] [10, 2, 3]\n",
    ),
    "dunder_main": (
        """
def main():
    print("main ran")
if __name__ == "__main__":
    main()
""",
        "main ran\n",
    ),
    "fstring_format_specs": (
        """
x = 3.14159
n = 42
print(f"{x:.2f} {n:05d} {n:>6} {n:x} {0.25:.1%} {1234567:,}")
print("{:.2f}".format(3.14159), "{} and {}".format("a", "b"), "{name}!".format(name="hi"))
print("%.3f %s" % (2.5, "ok"))
""",
        "3.14 00042     42 2a 25.0% 1,234,567\n3.14 a and b hi!\n2.500 ok\n",
    ),
    "comprehensions": (
        """
squares = [i * i for i in range(6)]
evens = {i: i % 2 == 0 for i in range(4)}
uniq = {c for c in "hello"}
nested = [(a, b) for a in range(3) for b in range(a)]
print(squares, evens, sorted(uniq), nested)
""",
        "[0, 1, 4, 9, 16, 25] {0: True, 1: False, 2: True, 3: False} ['e', 'h', 'l', 'o'] [(1, 0), (2, 0), (2, 1)]\n",
    ),
    "generators": (
        """
def fib():
    a, b = 0, 1
    while True:
        yield a
        a, b = b, a + b
g = fib()
print([next(g) for _ in range(10)], sum(x for x in range(5)))
""",
        "[0, 1, 1, 2, 3, 5, 8, 13, 21, 34] 10\n",
    ),
    "lambdas_args_kwargs": (
        """
def f(*args, **kwargs):
    return sum(args), sorted(kwargs.items())
add = lambda a, b=2: a + b
print(f(1, 2, 3, x=1, y=2), add(1), add(1, b=5), list(map(lambda v: v * 2, [1, 2])))
""",
        "(6, [('x', 1), ('y', 2)]) 3 6 [2, 4]\n",
    ),
    "tuple_unpacking": (
        """
(a, b), [c, *rest] = (1, 2), [3, 4, 5]
first, *middle, last = range(5)
for i, (k, v) in enumerate({"p": 1, "q": 2}.items()):
    print(i, k, v)
print(a, b, c, rest, first, middle, last)
""",
        "0 p 1\n1 q 2\n1 2 3 [4, 5] 0 [1, 2, 3] 4\n",
    ),
    "sorted_by_value": (
        """
d = {"a": 3, "b": 1, "c": 2}
print(sorted(d.items(), key=lambda kv: kv[1]))
print(max(d, key=d.get), min(d.values()))
""",
        "[('b', 1), ('c', 2), ('a', 3)]\na 1\n",
    ),
    "collections_counter": (
        """
import collections
from collections import Counter, defaultdict, deque, namedtuple
c = Counter("mississippi")
dd = defaultdict(list)
dd["k"].append(1)
P = namedtuple("P", ["x", "y"])
q = deque([1, 2, 3], maxlen=2)
print(c.most_common(2), dict(dd), P(1, 2), list(q), collections.OrderedDict(a=1))
""",
        "[('i', 4), ('s', 4)] {'k': [1]} P(x=1, y=2) [2, 3] OrderedDict([('a', 1)])\n",
    ),
    "itertools_permutations": (
        """
import itertools
print(list(itertools.permutations([1, 2, 3], 2)))
print(list(itertools.combinations("abc", 2)), list(itertools.accumulate([1, 2, 3])))
""",
        "[(1, 2), (1, 3), (2, 1), (2, 3), (3, 1), (3, 2)]\n[('a', 'b'), ('a', 'c'), ('b', 'c')] [1, 3, 6]\n",
    ),
    "fractions": ("from fractions import Fraction\nprint(Fraction(1, 3) + Fraction(1, 6))\n", "1/2\n"),
    "json_dumps": (
        "import json\nprint(json.dumps({'a': 1}), json.loads('[1, 2, {\"b\": null}]'))\n",
        "{\"a\": 1} [1, 2, {'b': None}]\n",
    ),
    "datetime_iso": (
        "import datetime\nprint(datetime.date(2024, 1, 1).isoformat(), datetime.date(2024, 3, 1) - datetime.date(2024, 2, 1))\n",
        "2024-01-01 29 days, 0:00:00\n",
    ),
    "random_seeded": ("import random\nrandom.seed(1)\nprint(random.randint(1, 6))\n", "2\n"),
    "re_findall": (
        "import re\nprint(re.findall(r'\\d+', 'a1b22'), re.sub(r\"\\s+\", \" \", \"a   b\"))\n",
        "['1', '22'] a b\n",
    ),
    "math_comb": (
        "import math\nprint(math.comb(10, 3), math.gcd(12, 18), math.isclose(math.sqrt(2) ** 2, 2))\n",
        "120 6 True\n",
    ),
    "statistics_mean": ("import statistics\nprint(statistics.mean([1, 2, 3]), statistics.median([3, 1, 2]))\n", "2 2\n"),
    "compound_interest": (
        '''
def compound_interest(principal, rate, years, n=12):
    """Future value with monthly compounding."""
    amount = principal * (1 + rate / n) ** (n * years)
    return round(amount, 2)
print(compound_interest(1000, 0.05, 10))
''',
        "1647.01\n",
    ),
    "sympy_toolbox": (
        """
from sympy import symbols, solve, integrate, factorint, Matrix, Rational, nsimplify, N, pi
x = symbols("x")
print(solve(x**2 - 5*x + 6, x))
print(integrate(x**2, (x, 0, 3)))
print(factorint(360))
print(Matrix([[1, 2], [3, 4]]).det())
print(Rational(1, 3) + Rational(1, 6))
print(nsimplify(0.125))
print(N(pi, 30))
""",
        "[2, 3]\n9\n{2: 3, 3: 2, 5: 1}\n-2\n1/2\n1/8\n3.14159265358979323846264338328\n",
    ),
    "decimal_prec": (
        "import decimal\ndecimal.getcontext().prec = 50\nprint(decimal.Decimal(1) / decimal.Decimal(7))\n",
        "0.14285714285714285714285714285714285714285714285714\n",
    ),
    # Function('f') makes a class at run time, with no module of its own.
    "undefined_function_dsolve_rsolve": (
        "from sympy import *\nx, n = symbols('x n')\nf = Function('f')\n"
        "print(dsolve(f(x).diff(x) - f(x), f(x)))\n"
        "print(rsolve(f(n + 1) - 2*f(n), f(n), {f(0): 1}))\n",
        "Eq(f(x), C1*exp(x))\n2**n\n",
    ),
    # The user's own objects take private attributes (set, changed in place, deleted).
    "private_attributes_of_own_objects": (
        "class Cache:\n    def __init__(self):\n        self._store = {}\n        self._hits = 0\n"
        "c = Cache()\nc._store[1] = 2\nc._extra = 3\nc._hits += 1\ndel c._extra\n"
        "setattr(c, '_more', 4)\nprint(c._store, c._hits, c._more, hasattr(c, '_extra'))\n",
        "{1: 2} 1 4 False\n",
    ),
}


@pytest.mark.parametrize("name", list(LEGIT))
def test_legitimate_code_is_not_refused(restricted, name):
    code, stdout = LEGIT[name]
    assert_ok(attack(restricted, code), stdout)


def test_user_private_names_still_work(restricted):
    code = ("class Acc:\n    def __init__(self):\n        self._total = 0\n"
            "    def _add(self, n):\n        self._total += n\n        return self\n"
            "a = Acc()\na._add(2)._add(3)\nprint(a._total, hasattr(a, '_missing'))\n"
            "import sympy\nclass S(sympy.Symbol):\n    def _mine(self):\n        return 'own'\n"
            "print(S('y')._mine())\n"
            "import collections\nP = collections.namedtuple('P', 'x y')\nprint(P(1, 2)._asdict())\n"
            "def typed(x: int, y: list[int] = None) -> float:\n    return 1.0\nprint(typed(1))")
    r = restricted.run(code)
    assert r.status == Status.OK, _describe(r)
    assert r.stdout == "5 False\nown\n{'x': 1, 'y': 2}\n1.0\n", _describe(r)
