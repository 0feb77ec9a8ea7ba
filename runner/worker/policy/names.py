"""The restricted policy's generic data: which names, modules and attributes are what.

Nothing here is specific to a library (those are declared in `libraries/`); these are
the rules of Python itself as the policy sees them. Stdlib only, no imports of the
policy's own modules (everything else imports this).
"""

from __future__ import annotations

# An object's identity as a dict key, for the tables the checks consult on every value.
# Not id(): each id() call is an audit event ("builtins.id") the worker's audit hook looks
# at, millions of times in a loop of calls. object.__hash__ is the default, address-derived
# hash whatever the object's class defines (a rotation of the address: one per live
# object); the tables keep the object and confirm it with `is`.
identity = object.__hash__

# The modules allowed by default (each library among them also has a declaration).
DEFAULT_ALLOWED_MODULES: tuple[str, ...] = (
    "math", "cmath", "fractions", "decimal", "statistics", "itertools", "functools",
    "collections", "re", "json", "datetime", "random", "sympy",
)

# Below any allowed package: test suites and benchmarks are never allowed.
REFUSED_PARTS: tuple[str, ...] = (".tests", ".test_", ".benchmarks", ".conftest")
# Standard-library corners of allowed modules that reach the system.
REFUSED_STDLIB_MODULES: tuple[str, ...] = ("json.tool",)

# Modules whose classes, functions and objects user code may hold besides the allowed
# ones: the interpreter's own types and the C accelerators behind the allowed modules.
# Anything defined elsewhere (pathlib, io, posix, operator, types, ...) is refused even
# when an allowed module happens to re-export it. (Not enum: Enum('E', namespace, ...)
# builds a class from a namespace, like three-argument type(); enum members of allowed
# modules, such as re's flags, belong to those modules.)
INTERNAL_MODULES = frozenset({
    "builtins", "__main__", "abc", "numbers", "_collections", "_collections_abc",
    "_functools", "_decimal", "_pydecimal", "_random", "_json", "_datetime", "_pydatetime",
    "_statistics", "_sre", "_abc",
})

# What the C code of allowed modules imports lazily (datetime.strftime imports `time`,
# through the builtins of the frame that called it). The worker imports them all before
# any child exists; a child may import these for the first time only on that C code's
# behalf (Guards.import_, the audit hook), and what comes back is checked like any value.
LAZY_IMPORTS = frozenset({
    "time", "_strptime", "locale", "calendar", "unicodedata", "encodings", "codecs",
    "copyreg", "numbers", "_datetime", "datetime", "math", "_pydecimal", "decimal",
    "_decimal", "cmath", "_statistics", "_bisect", "bisect", "_heapq", "heapq", "_random",
    "_sha512", "_sha2", "_json",
})

# Dunder attributes that are plain data or ordinary protocol methods. Everything else
# that starts with "__" (__class__, __dict__, __globals__, __subclasses__, ...) is the
# classic escape route and stays refused.
SAFE_DUNDER_ATTRIBUTES = frozenset({
    "__init__", "__name__", "__qualname__", "__doc__", "__len__", "__str__", "__repr__",
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__",
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
    "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__",
    "__rpow__", "__neg__", "__pos__", "__abs__", "__contains__", "__iter__", "__next__",
    "__getitem__", "__enter__", "__exit__", "__call__", "__int__", "__float__",
    "__index__", "__round__", "__format__",
})

# Special methods user classes may define (defining them on one's own class is harmless).
SPECIAL_METHOD_NAMES = SAFE_DUNDER_ATTRIBUTES | frozenset({
    "__new__", "__del__", "__setitem__", "__delitem__", "__post_init__", "__iadd__", "__isub__",
    "__imul__", "__itruediv__",
    "__ifloordiv__", "__imod__", "__ipow__", "__and__", "__or__", "__xor__", "__rand__",
    "__ror__", "__rxor__", "__invert__", "__lshift__", "__rshift__", "__matmul__",
    "__rmatmul__", "__divmod__", "__rdivmod__", "__complex__", "__trunc__", "__floor__",
    "__ceil__", "__reversed__", "__missing__", "__length_hint__", "__slots__",
})

# Private names a library reads off objects the user made (sympy's printers call
# `printer._print`): never the user's to define.
RESERVED_PRIVATE_NAMES = frozenset({"_print"})

# How deep containers are scanned when they are handed out whole.
MAX_SCAN_DEPTH = 3


def is_private_name(name: str) -> bool:
    """`_helper`-style names: allowed for the user's own variables and attributes. (Names
    that also end with "_" are the policy's own hooks, never the user's.)"""
    return (len(name) > 1 and name[0] == "_" and name[1] != "_" and not name.endswith("_")
            and name not in RESERVED_PRIVATE_NAMES)
