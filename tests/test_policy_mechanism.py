"""The restricted policy's generic mechanism: values checked where they enter user code,
hooks out of reach of any namespace, and module semantics kept.

Unit level where the point is the mechanism itself (the test process plays the library
that calls back into user code, or the attacker who holds the run's namespace dict);
through the Sandbox where the point is what model code sees.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import itertools
import os
import sys

import pytest
import sympy
from sympy.utilities.decorator import threaded

from runner import Status
from runner.worker.policy import (
    HOOK_NAMES,
    Denied,
    Guards,
    Policy,
    compile_user_code,
    new_namespace,
    run_module,
)


@pytest.fixture(scope="module")
def guards() -> Guards:
    return Guards(Policy())


def run(guards: Guards, code: str, namespace: dict | None = None) -> dict:
    """Compile `code` under the policy and run it; its namespace."""
    compiled = compile_user_code(code, "<code>")
    assert not compiled.errors, compiled.errors
    namespace = namespace if namespace is not None else new_namespace(guards)
    run_module(compiled.code, namespace, guards)
    return namespace


# --- values entering user code, whoever calls -----------------------------------------

USER_CODE = """
def key(value):
    return 0

def combine(a, b=None, *rest, **named):
    return 0

class Item:
    def __eq__(self, other):
        return True
    def __lt__(self, other):
        return True
    def __hash__(self):
        return 1

class Manager:
    def __enter__(self):
        return self
    def __exit__(self, kind, value, traceback):
        return True

def generator(value):
    yield value

picky = lambda value: 0
"""

# How a library hands a value to a user function: each with a refused object (the os
# module, which user code may never hold) as the value.
CALLBACKS = {
    "map": lambda ns, bad: list(map(ns["key"], [bad])),
    "sorted key": lambda ns, bad: sorted([bad, bad], key=ns["key"]),
    "lambda key": lambda ns, bad: sorted([bad, bad], key=ns["picky"]),
    "filter": lambda ns, bad: list(filter(ns["key"], [bad])),
    "functools.reduce": lambda ns, bad: functools.reduce(ns["combine"], [bad, bad]),
    "*args": lambda ns, bad: ns["combine"](1, 2, bad),
    "**kwargs": lambda ns, bad: ns["combine"](1, other=bad),
    "default": lambda ns, bad: ns["combine"](bad),
    "__eq__": lambda ns, bad: ns["Item"]() == bad,
    "__lt__": lambda ns, bad: ns["Item"]() < bad,
    "__eq__ from a container": lambda ns, bad: ns["Item"]() in [bad],
    "generator": lambda ns, bad: next(ns["generator"](bad)),
    "__exit__ value": lambda ns, bad: ns["Manager"]().__exit__(None, bad, None),
    "sympy replace": lambda ns, bad: sympy.Symbol("x").replace(
        lambda expression: True, lambda expression: ns["key"](bad)),
}


@pytest.mark.parametrize("route", list(CALLBACKS))
def test_a_refused_value_cannot_enter_a_user_function(guards, route):
    namespace = run(guards, USER_CODE)
    with pytest.raises(Denied, match="argument passed to a (user function|lambda)"):
        CALLBACKS[route](namespace, os)


@pytest.mark.parametrize("route", list(CALLBACKS))
def test_allowed_values_enter_user_functions_unchanged(guards, route):
    namespace = run(guards, USER_CODE)
    CALLBACKS[route](namespace, sympy.Symbol("y"))  # no refusal
    CALLBACKS[route](namespace, 3)


def test_exit_receives_the_exception_and_its_traceback(guards):
    namespace = run(guards, USER_CODE + """
seen = []
class Catch:
    def __enter__(self):
        return self
    def __exit__(self, kind, value, traceback):
        seen.append((kind.__name__, str(value), traceback is not None))
        return True
with Catch():
    raise ValueError("inside")
""")
    assert namespace["seen"] == [("ValueError", "inside", True)]


def test_a_library_function_handed_to_a_lambda_is_refused_not_substituted(guards):
    namespace = run(guards, "apply = lambda f: f\nkeep = lambda f: 0\n")
    with pytest.raises(Denied, match="write a def instead"):
        namespace["keep"](functools.wraps)


def test_a_def_receives_the_guarded_stand_in(guards):
    namespace = run(guards, "def take(f):\n    return f\n")
    assert namespace["take"](functools.update_wrapper) is not functools.update_wrapper


# --- wrappers judged by what they wrap ------------------------------------------------------

# What a library could hand user code: wrappers (of builtins', functools' or itertools'
# classes, all allowed) around something refused. Each is judged by what it wraps.
REFUSED_WRAPPERS = {
    "partial": lambda: functools.partial(getattr),
    "partial-of-a-partial": lambda: functools.partial(functools.partial(eval), "1"),
    "partial-argument": lambda: functools.partial(print, os),
    "partial-keyword": lambda: functools.partial(print, file=os),
    "partialmethod": lambda: functools.partialmethod(setattr),
    "staticmethod": lambda: staticmethod(eval),
    "classmethod": lambda: classmethod(exec),
    "property": lambda: property(open),
    "cached_property": lambda: functools.cached_property(getattr),
    "lru_cache": lambda: functools.lru_cache(maxsize=None)(eval),
    "cache": lambda: functools.cache(importlib.import_module),
    "map": lambda: map(getattr, [1], ["real"]),
    "filter": lambda: filter(eval, []),
    "starmap": lambda: itertools.starmap(setattr, []),
    "takewhile": lambda: itertools.takewhile(exec, []),
    "dropwhile": lambda: itertools.dropwhile(exec, []),
    "filterfalse": lambda: itertools.filterfalse(exec, []),
    "accumulate": lambda: itertools.accumulate([], setattr),
    "groupby": lambda: itertools.groupby([], getattr),
    "callable-iterator": lambda: iter(os.getcwd, None),
    "a-library-function-made-by-wraps": lambda: threaded(eval),
    # (partial flattens a partial of a partial; staticmethod does not.)
    "too-deep-to-read": lambda: functools.reduce(lambda w, _: staticmethod(w), range(20), print),
}
ALLOWED_WRAPPERS = {
    "partial": lambda: functools.partial(sympy.Symbol, positive=True),
    "staticmethod": lambda: staticmethod(sympy.sin),
    "lru_cache": lambda: functools.lru_cache(maxsize=None)(sympy.factorint),
    "map": lambda: map(sympy.sqrt, [4]),
    "a-library-function-made-by-wraps": lambda: threaded(sympy.expand),
}


@pytest.mark.parametrize("wrapper", list(REFUSED_WRAPPERS))
def test_a_wrapper_is_judged_by_what_it_wraps(guards, wrapper):
    namespace = run(guards, USER_CODE)
    with pytest.raises(Denied, match="wraps"):
        namespace["key"](REFUSED_WRAPPERS[wrapper]())
    with pytest.raises(Denied, match="wraps"):
        guards.check_result(REFUSED_WRAPPERS[wrapper]())


@pytest.mark.parametrize("wrapper", list(ALLOWED_WRAPPERS))
def test_a_wrapper_of_allowed_values_may_be_held(guards, wrapper):
    value = ALLOWED_WRAPPERS[wrapper]()
    assert guards.check_result(value) is value


# --- values crossing between library callables in C iteration ------------------------------

# `lookup` (sys.modules.get: a dict's bound method, acceptable by itself) is what a library
# could hand user code. Composed by C iteration, its result (the os module) goes straight
# to the next callable; each route ends in a plain value, so checking only what comes back
# to user code would see nothing.
CROSSINGS = {
    "map": "print(list(map(str, map(lookup, ['os']))))",
    "map-by-type": "M = type(map(len, []))\nprint(list(M(str, M(lookup, ['os']))))",
    "reduce": "import functools\nprint(functools.reduce(lookup, ['os', 'json', 'x']))",
    "accumulate": "import itertools\nprint(list(map(str, itertools.accumulate(['os', 'x'], lookup))))",
    "starmap": "import itertools\nprint(list(map(str, itertools.starmap(lookup, [('os',)]))))",
    "iter-callable": ("import functools\n"
                      "print(next(map(str, iter(functools.partial(lookup, 'os'), None))))"),
}


@pytest.mark.parametrize("route", list(CROSSINGS))
def test_values_crossing_c_iteration_are_checked(guards, route, capsys):
    namespace = new_namespace(guards)
    namespace["lookup"] = sys.modules.get
    with pytest.raises(Denied, match="between library functions"):
        run(guards, CROSSINGS[route], namespace)
    assert "module" not in capsys.readouterr().out


def test_c_iteration_of_allowed_values_is_unchanged(guards, capsys):
    run(guards, "import functools, itertools\nprint(list(map(abs, [-1])), "
                "functools.reduce(max, [1, 3, 2]), list(itertools.accumulate([1, 2])), "
                "sorted(['b', 'a'], key=str.upper), type(map(len, [])))")
    assert capsys.readouterr().out == "[1] 3 [1, 3] ['a', 'b'] <class 'map'>\n"


# --- checks compiled inline, and direct calls, decide as the hooks do --------------------

def test_an_inline_attribute_read_still_checks_what_a_library_stored(guards):
    namespace = run(guards, "class Box:\n    pass\nbox = Box()\n"
                            "def read(b):\n    return b.content\n"
                            "def call(b):\n    return b.content()\n")
    namespace["box"].content = os  # a library wrote it onto the user's object
    with pytest.raises(Denied, match="os"):
        namespace["read"](namespace["box"])
    namespace["box"].content = functools.partial(os.getcwd)
    with pytest.raises(Denied, match="wraps"):
        namespace["call"](namespace["box"])


@pytest.mark.parametrize("code, message", [
    ("import math\ndef f(m):\n    m.tau = 1\nf(math)\n", "module"),
    ("def f(c):\n    c.name = 'x'\nf(sympy.Symbol)\n", "class"),
    ("def f(g):\n    g.attribute = 1\nf(sympy.expand)\n", "function"),
])
def test_an_inline_write_still_refuses_modules_classes_and_functions(guards, code, message):
    with pytest.raises(Denied, match=message):
        run(guards, "import sympy\n" + code)


def test_inline_checks_keep_every_scope_working(guards, capsys):
    # Comprehension iterables, class bodies, lambdas and generators keep the hooks (an
    # assignment expression would bind in the wrong scope, or is not allowed there).
    run(guards, "import sympy\nx = sympy.Symbol('x')\n"
                "class K:\n    free = [s.name for s in (x + 1).free_symbols]\n"
                "    size = x.name.upper()\n"
                "def f(e):\n    g = (a.name for a in e.free_symbols)\n"
                "    h = lambda v: v.name\n"
                "    return [s.name for s in e.free_symbols], list(g), h(x), K.free, K.size\n"
                "print(f(x**2))\n")
    assert capsys.readouterr().out == "(['x'], ['x'], 'x', ['x'], 'X')\n"


def test_a_direct_call_is_an_ordinary_call_once_the_name_is_rebound(guards):
    namespace = run(guards, "def step():\n    return 1\ndef use():\n    return step()\n")
    assert namespace["use"]() == 1
    # A library writing the run's namespace: the call now checks what it gets back.
    namespace["step"] = functools.partial(sys.modules.get, "os")
    with pytest.raises(Denied, match="os"):
        namespace["use"]()


def test_a_library_calling_a_top_level_function_still_meets_its_entry_checks(guards):
    namespace = run(guards, "def step(value):\n    return 0\nprint(step(1))\n")
    with pytest.raises(Denied, match="argument passed to a user function"):
        list(map(namespace["step"], [os]))


def test_direct_call_twins_are_in_no_namespace(guards):
    namespace = run(guards, "def step(v):\n    return v\nstep(1)\nnames = dir()\n")
    hidden = [n for n in (*namespace, *namespace["names"]) if n.startswith(("_direct_", "_public_", "_make_"))]
    assert hidden == []


# --- the hooks are out of reach of every namespace --------------------------------------

PROBES = """
def read_private(obj):
    return obj._private_state

def walk(obj):
    return getattr(obj, 'lower')

def items(values):
    return [value for value in values]
"""


def test_holding_the_namespace_dict_does_not_switch_the_policy_off(guards):
    class Library:  # a library's object, with a private attribute
        __module__ = "sympy.core.basic"
        _private_state = "secret"

    namespace = run(guards, PROBES)
    # Whoever holds the run's namespace writes every hook name into it, and the real
    # builtins: the code compiled before and after keeps its guards.
    for name in HOOK_NAMES:
        namespace[name] = (lambda *args, **kwargs: "hijacked")
    namespace["__builtins__"] = builtins
    with pytest.raises(Denied, match="_private_state"):
        namespace["read_private"](Library())
    with pytest.raises(Denied):
        namespace["items"]([os])
    run(guards, "def later(obj):\n    return obj._private_state\n", namespace)
    with pytest.raises(Denied, match="_private_state"):
        namespace["later"](Library())
    assert namespace["__builtins__"] is guards.builtins_table()  # reset for every run


def test_no_namespace_holds_a_hook(guards):
    namespace = run(guards, PROBES + "x = 1\n")
    assert not set(namespace) & set(HOOK_NAMES)
    assert set(namespace) == {"__builtins__", "__name__", "read_private", "walk", "items", "x"}


def test_user_code_cannot_name_a_hook(guards):
    for name in HOOK_NAMES:
        compiled = compile_user_code(f"{name} = 1\n", "<code>")
        assert compiled.errors, name


# --- module semantics under the hooks' function --------------------------------------

MODULE_SEMANTICS = """
from math import *
global later
total: int = 0
for n in range(3):
    total += n
squares = [n * n for n in range(4)]
if (size := len(squares)) > 2:
    biggest = max(squares)
try:
    raise KeyError('k')
except KeyError as problem:
    caught = str(problem)
class Point:
    scale = 2
    def double(self, value):
        return value * self.scale
def uses_global():
    global counter
    counter = 10
uses_global()
first, *tail = squares
del n
names = dir()
print(total, squares, size, biggest, caught, Point().double(3), counter, tail, floor(2.5))
"""


def test_top_level_code_keeps_module_semantics(restricted):
    r = restricted.run(MODULE_SEMANTICS)
    assert r.status == Status.OK, r.error
    assert r.stdout == "3 [0, 1, 4, 9] 4 9 'k' 6 10 [1, 4, 9] 2\n"


def test_dir_at_the_top_lists_the_codes_names(restricted):
    r = restricted.run("alpha = 1\ndef beta():\n    pass\nprint([n for n in dir() if n in ('alpha', 'beta')])")
    assert r.status == Status.OK and r.stdout == "['alpha', 'beta']\n", r


def test_names_carry_across_session_blocks(restricted):
    with restricted.session() as session:
        assert session.run("value = 41\ndef bump(v):\n    return v + 1\n").ok
        r = session.run("print(bump(value))")
    assert r.ok and r.stdout == "42\n", r


def test_return_and_yield_at_the_top_are_syntax_errors(restricted):
    for code in ("return 1", "yield 1", "x = 1\nif x:\n    return x"):
        r = restricted.run(code)
        assert r.status == Status.DENIED and "outside function" in r.error.message, (code, r)


def test_a_traceback_names_the_module_as_usual(restricted):
    r = restricted.run("x = 1\n1 / 0\n")
    assert r.status == Status.ERROR
    assert 'File "<code>", line 2, in <module>' in r.error.traceback, r.error.traceback


# --- values the interpreter hands to user code without a call in the code ------------

def test_what_a_decorator_returns_is_checked(guards):
    namespace = new_namespace(guards)
    namespace["library_decorator"] = lambda function: os  # a library returning a refused value
    with pytest.raises(Denied, match="result of a call"):
        run(guards, "@library_decorator\ndef f():\n    pass\n", namespace)


def test_what_enter_returns_is_checked(guards):
    class LibraryContext:  # a library's context manager handing out a refused value
        def __enter__(self):
            return os

        def __exit__(self, *details):
            return False

    namespace = new_namespace(guards)
    namespace["context"] = LibraryContext()
    with pytest.raises(Denied, match="result of a call"):
        run(guards, "with context as value:\n    pass\n", namespace)
    run(guards, "with context:\n    entered = True\n", namespace)  # no `as`: nothing handed over
    assert namespace["entered"] is True


def test_what_is_sent_into_a_generator_is_checked(guards):
    namespace = run(guards, "def receiver():\n    got = yield 1\n    yield got\n")
    generator = namespace["receiver"]()
    next(generator)
    with pytest.raises(Denied, match="result of a call"):
        generator.send(os)  # a library sending into the user's generator


@pytest.mark.parametrize("code", [
    "class W:\n    pass\nW.__neg__ = library_callable\n",
    "class W:\n    pass\nsetattr(W, '__neg__', library_callable)\n",
    "class W:\n    pass\nW.__enter__ = staticmethod(library_callable)\n",
])
def test_a_special_method_is_the_users_own_code(guards, code):
    namespace = new_namespace(guards)
    namespace["library_callable"] = functools.partial(print, "x")
    with pytest.raises(Denied, match="special method|__neg__|__enter__"):
        run(guards, code, namespace)


def test_special_methods_defined_in_the_code_work(guards):
    namespace = run(guards, "class W:\n    def __neg__(self):\n        return 'negated'\n"
                            "def plus(self, other):\n    return 'plus'\nW.__add__ = plus\n"
                            "result = (-W(), W() + 1)\n")
    assert namespace["result"] == ("negated", "plus")


def test_no_class_derives_from_a_metaclass(guards):
    namespace = new_namespace(guards)
    namespace["real_type"] = type  # as if a library had handed it out
    with pytest.raises(Denied, match="metaclass"):
        run(guards, "class M(real_type):\n    pass\n", namespace)


def test_a_bound_method_is_judged_by_its_function_too(guards):
    import ast as ast_module

    class Library:  # an allowed library's class whose method comes from a refused module
        __module__ = "sympy.parsing.sympy_parser"
        generic_visit = ast_module.NodeVisitor.generic_visit

    namespace = run(guards, "def take(method):\n    return method\n")
    with pytest.raises(Denied, match="method from 'ast'"):
        namespace["take"](Library().generic_visit)
