"""The restricted tier's policy: what compiled code may name, touch, import and call.

RestrictedPython rewrites attribute access, subscripts, iteration, unpacking, writes,
prints and in-place operators into calls of hooks the host supplies; this module is
that host side. RestrictedPython is not a boundary on its own: allowed modules reach
other modules (`json.decoder.re.enum.sys`), and libraries hand out callables that
evaluate strings. So every value that leaves an attribute or item access is checked:
modules must be on the allowlist, frames/code/tracebacks never leave, and callables
from library corners that run code, import by name or touch the system are refused.

A refusal raises `Denied` (a BaseException, so `except Exception` does not swallow it)
and is also recorded, so a run that catches it anyway still ends as `denied`.
"""

from __future__ import annotations

import ast
import builtins
import functools
import itertools
import operator
import string
import sys
import types
from collections import UserString
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, cast

from RestrictedPython.Guards import guarded_iter_unpack_sequence, guarded_unpack_sequence
from RestrictedPython.transformer import INSPECT_ATTRIBUTES, RestrictingNodeTransformer, copy_locations

DEFAULT_ALLOWED_MODULES: tuple[str, ...] = (
    "math", "cmath", "fractions", "decimal", "statistics", "itertools", "functools",
    "collections", "re", "json", "datetime", "random", "sympy",
)

# sympy is allowed as a curated set of its subpackages, not the whole tree: the tree
# also holds test suites, benchmark and timing helpers that compile strings, code
# generators that write and build files, and an interactive layer. A module is allowed
# when it is one of these or below one (and not refused below).
SYMPY_SUBPACKAGES: tuple[str, ...] = (
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
# Packages whose module object may be reached (for the curated submodules inside), but
# whose other submodules are not allowed.
SYMPY_PACKAGES = frozenset({"sympy", "sympy.utilities", "sympy.parsing", "sympy.external"})

# Inside allowed packages: corners that execute code, import by name, start processes,
# write files or open windows, and every test suite. Modules matching these are refused,
# and so is any callable or object whose defining module matches.
REFUSED_MODULES: tuple[str, ...] = (
    "sympy.core.cache", "sympy.printing.preview", "sympy.printing.llvmjitcode",
    "sympy.printing.aesaracode", "sympy.printing.theanocode", "sympy.printing.tensorflow",
    "sympy.physics.secondquant", "sympy.polys.polyconfig", "sympy.stats.sampling",
    "json.tool",
)
REFUSED_PARTS: tuple[str, ...] = (".tests", ".test_", ".benchmarks", ".conftest")

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

RESERVED_PRIVATE_NAMES = frozenset({"_print"})

# Packages whose values user code may hold, though it may not import them: sympy's
# numerics. (Numbers and functions such as cos, which nsolve's generated code calls, are
# mpmath's; mpmath compiles nothing a child may run, reads and writes no file.)
VALUE_ONLY_PACKAGES = ("mpmath.",)

# Modules whose classes, functions and objects user code may hold besides the allowed
# ones: the interpreter's own types and the C accelerators behind the allowed modules.
# Anything defined elsewhere (pathlib, io, posix, operator, types, ...) is refused even
# when an allowed module happens to re-export it.
INTERNAL_MODULES = frozenset({
    # (Not enum: Enum('E', namespace, type=..., module=...) builds a class from a
    # namespace, like three-argument type(); enum members of allowed modules, such as
    # re's flags, belong to those modules.)
    "builtins", "__main__", "abc", "numbers", "_collections", "_collections_abc",
    "_functools", "_decimal", "_pydecimal", "_random", "_json", "_datetime", "_pydatetime",
    "_statistics", "_sre", "_abc", "mpmath",
})

# Modules C code may import through a user frame's builtins (see Guards.import_).
C_INTERNAL_IMPORTS = frozenset({
    "time", "_strptime", "locale", "unicodedata", "encodings", "codecs", "copyreg",
    "datetime", "_datetime", "math", "numbers", "calendar",
})

MAX_SCAN_DEPTH = 3

_PLAIN_TYPES = frozenset({int, float, complex, bool, str, bytes, type(None)})
# `list[int]`, `int | None`: type expressions, harmless to hold (their attributes go
# through the guards like any other object's).
_TYPE_EXPRESSIONS = (types.GenericAlias, types.UnionType)
_CONTAINER_TYPES = (list, tuple, set, frozenset, dict)
# Iterables whose items are plain by construction. A list, tuple or dict is not: what it
# holds may be nested deeper than a result's scan goes, or put there by a library later.
_FAST_ITERABLES = frozenset({range, str, bytes, bytearray})
_BASE_ITER: dict[type, Callable[[Any], Any]] = {list: list.__iter__, tuple: tuple.__iter__, set: set.__iter__,
              frozenset: frozenset.__iter__, dict: dict.__iter__}
_INTROSPECTION_TYPES = (types.FrameType, types.CodeType, types.TracebackType)
_FUNCTION_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                   types.BuiltinMethodType, type, partial)

INPLACE_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul,
    "/=": operator.itruediv, "//=": operator.ifloordiv, "%=": operator.imod,
    "**=": operator.ipow, "<<=": operator.ilshift, ">>=": operator.irshift,
    "&=": operator.iand, "|=": operator.ior, "^=": operator.ixor, "@=": operator.imatmul,
}


class Denied(BaseException):
    """Raised when user code asks for something the restricted tier refuses."""


_denials: list[str] = []
# Called with every refusal before it is raised (the child's Reporter.denied): the
# supervisor hears of it at once, so nothing user code does afterwards can undo it.
_announce: Callable[[str], None] | None = None


def set_announcer(announce: Callable[[str], None] | None) -> None:
    global _announce
    _announce = announce


def deny(message: str) -> Any:
    _denials.append(message)
    if _announce is not None:
        _announce(message)
    raise Denied(message)


class _Unacceptable(Exception):
    """check_value's verdict when asked quietly (filtering, not refusing the user)."""


def _refuse_quietly(message: str) -> Any:
    raise _Unacceptable(message)


def recorded_denials() -> list[str]:
    return list(_denials)


def clear_denials() -> None:
    _denials.clear()


class Policy:
    """Which modules user code may import and reach through attributes."""

    def __init__(self, allowed_modules: Iterable[str] = DEFAULT_ALLOWED_MODULES) -> None:
        self.allowed = tuple(sorted(set(allowed_modules)))
        exact = set(self.allowed)
        prefixes: list[str] = []
        for name in self.allowed:
            if name == "sympy":
                exact |= SYMPY_PACKAGES
                prefixes.extend(SYMPY_SUBPACKAGES)
            else:
                prefixes.append(name)
        self.exact = frozenset(exact)
        self.prefixes = tuple(prefixes)
        self._verdicts: dict[str, bool] = {}
        self._denied_ids: frozenset[int] = frozenset()

    def allowed_text(self) -> str:
        return ", ".join(self.allowed)

    def module_allowed(self, name: str) -> bool:
        verdict = self._verdicts.get(name)
        if verdict is None:
            verdict = type(name) is str and not module_denied(name) and (
                name in self.exact
                or any(name == p or name.startswith(p + ".") for p in self.prefixes))
            if len(self._verdicts) < 10_000:
                self._verdicts[name] = verdict
        return verdict

    def deny_objects(self, objects: Iterable[Any]) -> None:
        self._denied_ids = self._denied_ids | frozenset(id(obj) for obj in objects)

    def is_denied_object(self, obj: Any) -> bool:
        return id(obj) in self._denied_ids


def module_denied(name: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in REFUSED_MODULES) \
        or any(part in name for part in REFUSED_PARTS)


def _defining_module(obj: Any) -> str:
    """The module an object belongs to: a function's or class's own, or its type's."""
    try:
        if isinstance(obj, (types.BuiltinMethodType, types.MethodType)) and \
                not isinstance(getattr(obj, "__self__", None), types.ModuleType):
            owner = obj.__self__
            if owner is not None:  # a bound method belongs where its object belongs
                return _defining_module(owner) if not isinstance(owner, type) else \
                    _module_name(owner)
        if isinstance(obj, _FUNCTION_TYPES):
            name, kind = obj.__module__, obj if isinstance(obj, type) else None
        else:
            kind = type(obj)
            name = kind.__module__
        if type(name) is not str and kind is not None:
            # A class a library's metaclass made at run time (sympy's Function('f')) has
            # no module of its own: it, and its instances, belong where its nearest base
            # with one does, whose methods they run.
            for base in _TYPE_MRO.__get__(kind, type)[1:]:
                name = _module_name(base)
                if name:
                    break
    except Exception:  # objects with hostile __getattr__ cannot be classified: refused
        return ""
    return name if type(name) is str else ""


_TYPE_MRO = type.__dict__["__mro__"]  # the real MRO, whatever a metaclass defines
_TYPE_NAME = type.__dict__["__name__"]


def _is_metaclass(cls: type) -> bool:
    """A class whose instances are classes, other than `type` itself (whose
    three-argument form the builtins table already refuses)."""
    return cls is not type and type in _TYPE_MRO.__get__(cls, type)


def _module_name(cls: type) -> str:
    name = getattr(cls, "__module__", "")
    return name if type(name) is str else ""


def _exact_str(name: Any) -> str:
    """An attribute name as a plain str: a str subclass can override startswith and ==."""
    if type(name) is str:
        return name
    if isinstance(name, str):
        return str.__str__(name)  # a copy of the characters, as an exact str
    raise TypeError(f"attribute name must be a string, not {type(name).__name__}")


def _describe(obj: Any) -> str:
    if isinstance(obj, types.ModuleType):
        return f"module '{obj.__name__}'"
    if isinstance(obj, type):
        return f"class '{obj.__qualname__}'"
    return f"a '{type(obj).__name__}' object"


def _is_private_name(name: str) -> bool:
    """`_helper`-style names: allowed for the user's own variables and attributes."""
    return (len(name) > 1 and name[0] == "_" and name[1] != "_" and not name.endswith("_")
            and name not in RESERVED_PRIVATE_NAMES)


_WRITABLE_CONTAINERS = frozenset({list, dict, set, bytearray})


class _LibraryObjectWrite:
    """What `_write_` hands the compiled assignment for a library's object: attribute
    writes pass the name check (no `_` names of the library's), items go through."""

    __slots__ = ("_guards", "_target")

    def __init__(self, target: Any, guards: Guards) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_guards", guards)

    def __setattr__(self, name: str, value: Any) -> None:
        target = object.__getattribute__(self, "_target")
        guards = object.__getattribute__(self, "_guards")
        setattr(target, guards._check_write_name(target, name), value)

    def __delattr__(self, name: str) -> None:
        target = object.__getattribute__(self, "_target")
        guards = object.__getattribute__(self, "_guards")
        delattr(target, guards._check_write_name(target, name))

    def __setitem__(self, key: Any, value: Any) -> None:
        object.__getattribute__(self, "_target")[key] = value

    def __delitem__(self, key: Any) -> None:
        del object.__getattribute__(self, "_target")[key]


def _is_user_defined(obj: Any) -> bool:
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(cls, "__module__", None) == "__main__"


def _owned_by_user(obj: Any) -> bool:
    """The user's own class, instance of one, or function."""
    if isinstance(obj, types.FunctionType):
        return obj.__module__ == "__main__"
    return _is_user_defined(obj)


_CLASS_DICT = type.__dict__["__dict__"]
_OBJECT_DICT = object.__getattribute__


def _defined_by_user(obj: Any, name: str) -> bool:
    """A `_private` attribute the user's own code defined: in the instance's own dict, or
    in a user class found before any library class in the method resolution order. A
    helper a user subclass inherits from a library class is the library's, and private
    there (some act as a real getattr, or build code)."""
    if not _is_user_defined(obj):
        return False
    if not isinstance(obj, type):
        try:
            own = _OBJECT_DICT(obj, "__dict__")
        except (AttributeError, TypeError):
            own = None
        if isinstance(own, dict) and name in own:
            return True
    cls = obj if isinstance(obj, type) else type(obj)
    for klass in type.__dict__["__mro__"].__get__(cls, type):
        if name in _CLASS_DICT.__get__(klass, type):
            return getattr(klass, "__module__", None) == "__main__"
    return True  # nowhere yet: reading it raises AttributeError, setting it is the user's


class Guards:
    """The hook functions RestrictedPython-compiled code calls, bound to one Policy."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._builtins: dict[str, Any] | None = None
        # Library callables user code gets a guarded version of: id -> (real, stand-in).
        self._substitutes: dict[int, tuple[Any, Any]] = {}
        self.substitute(functools.update_wrapper, self._update_wrapper)
        self.substitute(functools.wraps, self._wraps)

    def substitute(self, real: Any, stand_in: Any) -> None:
        self._substitutes[id(real)] = (real, stand_in)

    # -- functools.update_wrapper / wraps -------------------------------------------
    # The real ones read attributes the caller names (with the real getattr) and hand
    # them to the wrapper's own __setattr__ or to whatever its __dict__ is: a way to
    # receive `__globals__` of any function. These copy only the standard attributes,
    # each checked, and never call methods of the wrapper.
    def _update_wrapper(self, wrapper: Any, wrapped: Any,
                        assigned: Any = functools.WRAPPER_ASSIGNMENTS,
                        updated: Any = functools.WRAPPER_UPDATES) -> Any:
        if tuple(assigned) != functools.WRAPPER_ASSIGNMENTS or \
                tuple(updated) != functools.WRAPPER_UPDATES:
            deny("functools.update_wrapper/wraps with custom assigned= or updated= is not "
                 "allowed in the restricted backend")
        if isinstance(wrapped, (types.ModuleType, type)) or isinstance(wrapper, types.ModuleType):
            deny("functools.update_wrapper/wraps needs functions, not modules or classes, in "
                 "the restricted backend")
        for attribute in functools.WRAPPER_ASSIGNMENTS:
            try:
                value = getattr(wrapped, attribute)
            except AttributeError:
                continue
            value = self.check_value(value, f"'{attribute}' of the wrapped function")
            object.__setattr__(wrapper, attribute, value) if _is_user_defined(wrapper) \
                else setattr(wrapper, attribute, value)
        source = getattr(wrapped, "__dict__", None)
        try:  # the instance dict itself, never a `__dict__` the wrapper's class provides
            target = object.__getattribute__(wrapper, "__dict__")
        except (AttributeError, TypeError):
            target = None
        if isinstance(source, dict) and isinstance(target, dict):
            for key, value in list(source.items()):
                target[key] = self.check_value(value, f"attribute {key!r} of the wrapped function")
        object.__setattr__(wrapper, "__wrapped__", wrapped) if _is_user_defined(wrapper) \
            else setattr(wrapper, "__wrapped__", wrapped)
        return wrapper

    def _wraps(self, wrapped: Any, assigned: Any = functools.WRAPPER_ASSIGNMENTS,
               updated: Any = functools.WRAPPER_UPDATES) -> Any:
        return partial(self._update_wrapper, wrapped=wrapped, assigned=assigned,
                       updated=updated)

    def builtins_table(self) -> dict[str, Any]:
        """Built once (in the worker); each forked child gets its own copy-on-write copy."""
        if self._builtins is None:
            self._builtins = make_builtins(self)
        return self._builtins

    # -- values ---------------------------------------------------------------------
    def acceptable(self, value: Any) -> tuple[bool, Any]:
        """(True, the value or its stand-in) if user code may hold it, else (False, None).
        Records nothing: for filtering what libraries hand around, not refusing the user."""
        try:
            return True, self.check_value(value, "", refuse=_refuse_quietly)
        except _Unacceptable:
            return False, None

    def check_value(self, value: Any, where: str, depth: int = 0, *,
                    refuse: Callable[[str], Any] = deny) -> Any:
        """Refuse values user code must never hold; return the value (or its guarded
        stand-in) otherwise."""
        kind = type(value)
        if kind in _PLAIN_TYPES:
            return value
        substitute = self._substitutes.get(id(value))
        if substitute is not None and substitute[0] is value:
            return substitute[1]
        if kind is types.ModuleType or isinstance(value, types.ModuleType):
            name = getattr(value, "__name__", "?")
            if not self.policy.module_allowed(name):
                refuse(f"{where} is the module '{name}', which the restricted backend does not "
                     f"allow; allowed modules: {self.policy.allowed_text()}")
            return value
        if isinstance(value, _INTROSPECTION_TYPES):
            refuse(f"{where} is an interpreter internal ({kind.__name__}); access refused")
        if self.policy.is_denied_object(value):
            refuse(f"{where} is not available in the restricted backend (it can run arbitrary "
                 "code or reach the system); use the docker backend for it")
        if isinstance(value, _CONTAINER_TYPES):
            # Containers are checked a few levels deep: iteration is not guarded, so a
            # list holding a refused object must not be handed out whole.
            if depth < MAX_SCAN_DEPTH:
                # The base type's own iteration: a subclass's __iter__ is user code.
                base_iter = _BASE_ITER[next(t for t in _CONTAINER_TYPES if isinstance(value, t))]
                # A dict's keys as well as its values: iterating it hands out the keys.
                items = itertools.chain(dict.keys(value), dict.values(value)) \
                    if isinstance(value, dict) else base_iter(value)
                for item in items:
                    if type(item) not in _PLAIN_TYPES:
                        self.check_value(item, f"an item of {where}", depth + 1, refuse=refuse)
            return value
        if kind in _TYPE_EXPRESSIONS:
            return value
        if isinstance(value, type) and _is_metaclass(value):
            # Calling one makes a class (like three-argument type()) without the checks a
            # class statement gets: dunders in the namespace, bases that must not mix.
            refuse(f"{where} is a metaclass ('{_TYPE_NAME.__get__(value, type)}'); making "
                   "classes by calling one is not allowed in the restricted backend (write a "
                   "class statement)")
        module = _defining_module(value)
        if not self._module_usable(module):
            refuse(f"{where} comes from '{module or 'an unknown module'}', which the restricted "
                 "backend does not allow (it can run code, import by name or touch the system)")
        return value

    def getiter(self, iterable: Any) -> Any:
        """`for` loops, comprehensions and unpacking: every item is checked like a call's
        result as user code receives it (plain values at the cost of a type test), so no
        container, however deep or however filled, hands out what the guards refuse.
        Ranges and strings keep their C iterators."""
        iterator = iter(iterable)
        if type(iterable) in _FAST_ITERABLES:
            return iterator
        return self._checked_items(iterator)

    def _checked_items(self, iterator: Any) -> Any:
        check, plain = self.check_value, _PLAIN_TYPES
        for item in iterator:
            yield item if type(item) in plain else check(item, "an item of an iteration")

    def check_result(self, value: Any) -> Any:
        """What a call returned, before user code holds it: a library function that
        returns a module, a frame, a code object or a refused callable is refused like an
        attribute that would."""
        if type(value) in _PLAIN_TYPES:
            return value
        return self.check_value(value, "the result of a call")

    def apply(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """Calls with `*args` or `**kwargs`: unpacked values reach the callee unchecked
        otherwise, and keyword names are how class factories get dunders (`**{'__globals__':
        ...}`) into the classes they build."""
        for key in kwargs:
            if type(key) is not str or key.startswith("__"):
                deny(f"the keyword argument {key!r} is not allowed (names starting with '__' "
                     "are interpreter internals in the restricted backend)")
        for value in args:
            if type(value) not in _PLAIN_TYPES:
                self.check_value(value, "an argument")
        return self.check_result(function(*args, **kwargs))

    def annotation(self, value: Any) -> Any:
        """Annotations are evaluated as code when they are strings (typing.get_type_hints,
        which functools.singledispatch calls): an annotation must be the type itself."""
        if _holds_text(value, 0):
            deny("a string annotation is not allowed (typing evaluates it as code); write "
                 "the type itself")
        return value

    def _module_usable(self, module: str) -> bool:
        if module in INTERNAL_MODULES or module.startswith(VALUE_ONLY_PACKAGES):
            return True
        return self.policy.module_allowed(module)

    def _check_attribute_name(self, obj: Any, name: str) -> None:
        if name.startswith("_"):
            if name in SAFE_DUNDER_ATTRIBUTES:
                return
            if _is_private_name(name) and _defined_by_user(obj, name):
                return
            deny(f"access to the attribute '{name}' of {_describe(obj)} is not allowed "
                 "(names starting with '_' are private in the restricted backend)")
        if name in INSPECT_ATTRIBUTES:
            deny(f"access to the attribute '{name}' is not allowed (frames and code objects "
                 "are interpreter internals)")

    def getattr(self, obj: Any, name: str, *default: Any) -> Any:
        name = _exact_str(name)
        self._check_attribute_name(obj, name)
        if isinstance(obj, types.ModuleType) and not self.policy.module_allowed(obj.__name__):
            deny(f"the module '{obj.__name__}' is not allowed in the restricted backend; "
                 f"allowed modules: {self.policy.allowed_text()}")
        if name in ("format", "format_map"):
            if isinstance(obj, str) or (isinstance(obj, type) and issubclass(obj, str)):
                return self._safe_format_method(obj, name)
            if isinstance(obj, UserString):  # its format() calls str.format on .data
                return self._safe_format_method(str(obj.data), name)
            if isinstance(obj, type) and issubclass(obj, UserString):
                deny("UserString.format on the class is not allowed; call it on an instance")
        value = getattr(obj, name, *default)
        if type(value) in _PLAIN_TYPES:
            return value
        return self.check_value(value, f"'{name}' of {_describe(obj)}")

    def hasattr(self, obj: Any, name: str) -> bool:
        try:
            self.getattr(obj, name)
        except AttributeError:
            return False
        return True

    def getitem(self, obj: Any, key: Any) -> Any:
        value = obj[key]
        if type(value) in _PLAIN_TYPES:
            return value
        return self.check_value(value, f"an item of {_describe(obj)}")

    # -- writes ---------------------------------------------------------------------
    def write(self, obj: Any) -> Any:
        """Target of attribute/item assignment and deletion."""
        if isinstance(obj, types.ModuleType):
            deny(f"changing the module '{obj.__name__}' is not allowed")
        if isinstance(obj, type) and not _is_user_defined(obj):
            deny(f"changing the class '{obj.__qualname__}' is not allowed")
        if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)) and \
                getattr(obj, "__module__", None) != "__main__":
            deny(f"changing the function '{getattr(obj, '__qualname__', '?')}' is not allowed")
        if type(obj) in _WRITABLE_CONTAINERS or _owned_by_user(obj):
            return obj
        # A library's object: `obj.name = value` (which reaches here without the name)
        # goes through the same name check as setattr().
        return _LibraryObjectWrite(obj, self)

    def _check_write_name(self, obj: Any, name: str) -> str:
        name = _exact_str(name)
        if name.startswith("_"):
            if not (_is_private_name(name) or name in SPECIAL_METHOD_NAMES):
                deny(f"setting the attribute '{name}' is not allowed")
            # As for reading: a library object's `_` names are the library's (its caches,
            # the helpers it calls on itself); the user's own objects are the user's.
            if not _owned_by_user(obj):
                deny(f"setting the attribute '{name}' of {_describe(obj)} is not allowed (names "
                     "starting with '_' are private to the library that made the object)")
        return name

    def setattr(self, obj: Any, name: str, value: Any) -> None:
        self.write(obj)  # refuses modules, library classes and functions
        setattr(obj, self._check_write_name(obj, name), value)

    def delattr(self, obj: Any, name: str) -> None:
        self.write(obj)
        delattr(obj, self._check_write_name(obj, name))

    def inplace_attr(self, obj: Any, name: str, op: str, value: Any) -> None:
        current = self.getattr(obj, name)
        self.write(obj)
        setattr(obj, self._check_write_name(obj, name), inplacevar(op, current, value))

    def inplace_item(self, obj: Any, key: Any, op: str, value: Any) -> None:
        current = self.getitem(obj, key)
        self.write(obj)[key] = inplacevar(op, current, value)

    # -- imports --------------------------------------------------------------------
    def import_(self, name: str, globals: Any = None, locals: Any = None,
                fromlist: Any = (), level: int = 0) -> Any:
        if (type(fromlist) is list and not fromlist and globals is locals
                and type(name) is str and name in C_INTERNAL_IMPORTS):
            # C code running under a user frame (datetime.strftime importing `time`)
            # imports through the frame's builtins with this exact signature; an import
            # statement passes None or a tuple. The module goes to that C code, not to
            # the user; the fixed list keeps this door shut for anything else.
            return builtins.__import__(name, globals, locals, fromlist, level)
        if level:
            deny("relative imports are not allowed in the restricted backend")
        if not self.policy.module_allowed(name):
            hint = ""
            if module_denied(name):
                hint = " (this part of the package can run code or reach the system)"
            deny(f"import of '{name}' is not allowed in the restricted backend{hint}; "
                 f"allowed modules: {self.policy.allowed_text()}; use the docker backend "
                 "(--backend docker) for anything else")
        module = builtins.__import__(name, None, None, fromlist, 0)
        if not fromlist:
            return module
        target = sys.modules[name]
        if "*" in fromlist:
            return self._star_facade(target)
        # `from M import a` reads `a` off whatever this returns with the real getattr:
        # hand out a facade holding only the checked (and substituted) names.
        facade = types.ModuleType(target.__name__)
        for item in fromlist:
            if not isinstance(item, str):
                continue
            if item.startswith("_"):
                deny(f"importing the private name '{item}' from '{name}' is not allowed in "
                     "the restricted backend")
            if hasattr(target, item):
                value = self.check_value(getattr(target, item), f"'{item}' of module '{name}'")
            else:
                submodule = f"{name}.{item}"
                if not self.policy.module_allowed(submodule):
                    deny(f"import of '{submodule}' is not allowed in the restricted backend; "
                         f"allowed modules: {self.policy.allowed_text()}")
                value = sys.modules.get(submodule)
                if value is None:
                    continue  # Python reports the ImportError itself
            setattr(facade, item, value)
        return facade

    def _star_facade(self, module: types.ModuleType) -> types.ModuleType:
        """`from M import *` copies from this facade: refused names become refusals."""
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        facade = types.ModuleType(module.__name__)
        exported = []
        for name in names:
            if not isinstance(name, str) or name.startswith("_") or not hasattr(module, name):
                continue
            value = getattr(module, name)
            ok, checked = self.acceptable(value)
            # Refusing at use, not at import, keeps `import *` usable.
            value = checked if ok else _refusal(f"{module.__name__}.{name}")
            setattr(facade, name, value)
            exported.append(name)
        setattr(facade, "__all__", exported)
        return facade

    # -- formatting -----------------------------------------------------------------
    def _safe_format_method(self, obj: Any, name: str) -> Callable[..., str]:
        formatter = _GuardedFormatter(self)

        def format_(template: str, *args: Any, **kwargs: Any) -> str:
            return formatter.vformat(template, args, kwargs)

        def format_map(template: str, mapping: Any) -> str:
            return formatter.vformat(template, (), mapping)

        fmt: Callable[..., str] = format_ if name == "format" else format_map
        return partial(fmt, obj) if isinstance(obj, str) else fmt


def _holds_text(value: Any, depth: int) -> bool:
    if isinstance(value, (str, bytes)):
        return True
    if depth > 4:
        return False
    try:
        args = object.__getattribute__(value, "__args__")
    except (AttributeError, TypeError):
        return False
    return isinstance(args, tuple) and any(_holds_text(arg, depth + 1) for arg in args)


def _refusal(qualified: str) -> Callable[..., Any]:
    def refused(*_args: Any, **_kwargs: Any) -> Any:
        deny(f"{qualified} is not available in the restricted backend (it can run arbitrary "
             "code or reach the system); use the docker backend for it")
    refused.__name__ = qualified.rsplit(".", 1)[-1]
    return refused


class _GuardedFormatter(string.Formatter):
    """str.format whose field names go through the same guards as attribute access."""

    def __init__(self, guards: Guards) -> None:
        self.guards = guards

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        first, rest = _formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attribute, key in rest:
            obj = self.guards.getattr(obj, key) if is_attribute else self.guards.getitem(obj, key)
        return obj, first


def _formatter_field_name_split(field_name: str) -> tuple[Any, Any]:
    import _string  # type: ignore[import-not-found]  # the parser str.format itself uses

    first, rest = _string.formatter_field_name_split(field_name)
    return first, rest


def inplacevar(op: str, target: Any, value: Any) -> Any:
    try:
        return INPLACE_OPERATORS[op](target, value)
    except KeyError:
        raise SyntaxError(f"unsupported in-place operator {op!r}") from None


class _PrintToStdout:
    """RestrictedPython's print hook, writing to the captured stdout."""

    def __init__(self, _getattr: Any = None) -> None:
        pass

    def _call_print(self, *objects: Any, **kwargs: Any) -> None:
        if kwargs.get("file") is None:
            kwargs["file"] = sys.stdout
        print(*objects, **kwargs)

    def __call__(self) -> str:
        return ""  # RestrictedPython's `printed`: output goes to stdout instead


class SandboxTransformer(RestrictingNodeTransformer):
    """RestrictedPython's transformer, widened where ordinary model code needs it.

    - `__name__` can be read (`if __name__ == "__main__":`).
    - classes may define special methods and read the harmless dunders listed above.
    - `_helper` names are allowed for the user's own variables and attributes (the
      runtime guard still refuses private attributes of objects the user did not define).
    - `from module import *` is allowed; the import guard hands out a filtered facade.
    - `obj.attr += v` and `obj[k] += v` work through guarded helpers.
    - `n += 1` on a plain name stays a native in-place operation: it is exactly as safe
      as `n = n + 1`, which RestrictedPython leaves unguarded, and a hook call per loop
      iteration would double the cost of numeric loops.
    """

    def check_name(self, node: Any, name: str | None, allow_magic_methods: bool = False) -> None:
        if name is None:
            return
        if name == "__name__" and isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            return
        if name in SPECIAL_METHOD_NAMES and (allow_magic_methods or name == "__slots__"):
            return
        if _is_private_name(name):
            return
        super().check_name(node, name, allow_magic_methods)

    _bound_names: frozenset[str] | None = None

    def visit(self, node: ast.AST) -> Any:
        if self._bound_names is None:  # the root of the tree: names are bound anywhere
            self._bound_names = _bound_names(node)
        return super().visit(node)

    def visit_Call(self, node: ast.Call) -> Any:
        new = super().visit_Call(node)
        if _returns_known_type(new, self._bound_names or frozenset()) or (
                isinstance(new, ast.Call) and isinstance(new.func, ast.Name)
                and new.func.id == "_apply_"):  # guards.apply checks its result itself
            return new
        wrapped = ast.Call(func=ast.Name("_result_", ast.Load()), args=[cast(ast.expr, new)],
                           keywords=[])
        copy_locations(wrapped, node)
        copy_locations(wrapped.func, node)
        return wrapped

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
        return _guard_annotations(super().visit_FunctionDef(node))

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> Any:
        return _guard_annotations(super().visit_AsyncFunctionDef(node))

    def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
        new = self.node_contents_visit(node)
        if isinstance(new, ast.AnnAssign):
            new.annotation = _annotation_call(new.annotation)
        return new

    def check_import_names(self, node: ast.ImportFrom | ast.Import) -> ast.AST:
        if isinstance(node, ast.ImportFrom) and [alias.name for alias in node.names] == ["*"]:
            return self.node_contents_visit(node)
        return super().check_import_names(node)

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        attr = node.attr
        if attr in SAFE_DUNDER_ATTRIBUTES or _is_private_name(attr):
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
        op = _augmented_operator(node.op)
        target = node.target
        if isinstance(target, ast.Name):
            self.check_name(target, target.id)
            node.value = self.visit(node.value)
            return node
        if isinstance(target, ast.Attribute):
            if target.attr.startswith("_") and not _is_private_name(target.attr):
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


# Builtins whose result type Python itself guarantees (int() must return an int, str() a
# str, ...): calling them needs no check of the result, which keeps tight loops fast.
_KNOWN_RESULT_BUILTINS = frozenset({
    "len", "int", "float", "str", "bool", "complex", "isinstance", "issubclass", "range",
    "print", "repr", "ascii", "hash", "id", "ord", "chr", "hex", "oct", "bin", "callable",
    "format",
})


def _bound_names(tree: ast.AST) -> frozenset[str]:
    """Every name the code binds anywhere (assignments, parameters, definitions,
    imports): a builtin's name is only trusted where the code never rebinds it."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
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
            and call.func.id in _KNOWN_RESULT_BUILTINS and call.func.id not in bound)


def _annotation_call(annotation: ast.expr) -> ast.expr:
    call = ast.Call(func=ast.Name("_annotation_", ast.Load()), args=[annotation], keywords=[])
    copy_locations(call, annotation)
    copy_locations(call.func, annotation)
    return call


def _guard_annotations(node: Any) -> Any:
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node
    arguments = node.args
    for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                arguments.vararg, arguments.kwarg]:
        if arg is not None and arg.annotation is not None:
            arg.annotation = _annotation_call(arg.annotation)
    if node.returns is not None:
        node.returns = _annotation_call(node.returns)
    return node


def _augmented_operator(op: ast.operator) -> str:
    from RestrictedPython.transformer import IOPERATOR_TO_STR

    return IOPERATOR_TO_STR[type(op)]


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


def compile_user_code(source: str | ast.Module, filename: str) -> Any:
    """Compile with the sandbox transformer. Returns RestrictedPython's CompileResult."""
    from RestrictedPython.compile import CompileResult

    tree = ast.parse(source, filename, "exec") if isinstance(source, str) else source
    refused = _string_annotations(tree)
    if refused:
        return CompileResult(None, tuple(refused), (), {})
    # RestrictedPython's transformer, but our own compile call: theirs inherits the
    # `from __future__ import annotations` of the module that calls compile(), which
    # turns every annotation of user code into a string that typing later evaluates.
    errors: list[str] = []
    warnings: list[str] = []
    used_names: dict[str, bool] = {}
    SandboxTransformer(errors, warnings, used_names).visit(tree)
    if errors:
        return CompileResult(None, tuple(errors), warnings, used_names)
    code = compile(tree, filename, "exec", dont_inherit=True)
    return CompileResult(code, (), warnings, used_names)


def _guarded_type(*args: Any) -> type:
    if len(args) == 1:
        kind = type(args[0])
        if issubclass(kind, type) and kind.__module__ != "__main__":
            # The type of a class is a metaclass (`type` itself, EnumType, ...): calling it
            # makes classes outside the class statement and its checks.
            deny("type() of a class (a metaclass) is not available in the restricted backend")
        return type(args[0])
    deny("type() with three arguments (creating classes dynamically) is not allowed; use a "
         "class statement")
    raise AssertionError("unreachable: deny raises")


_GUARD_NAMES = frozenset({"__builtins__", "__metaclass__"})


def _safe_dir(*args: Any) -> list[str]:
    """dir() that does not list the sandbox's own hook names."""
    if args:
        return dir(*args)
    names = sys._getframe(1).f_locals
    return sorted(n for n in names if n not in _GUARD_NAMES and n not in RESERVED_PRIVATE_NAMES
                  and not (n.startswith("_") and n.endswith("_") and n != "_"))


_VALUE_TYPES = (str, bytes, bytearray, int, float, complex, tuple, list, dict, set, frozenset)


def _guarded_build_class(func: Any, name: str, *bases: Any, **kwargs: Any) -> Any:
    """Class statements, minus one gadget: a class that is both a builtin value (a str,
    say) and a library class can be handed to library code that uses it as data (an
    attribute name) and as an object at once. Deriving from either alone is fine."""
    value_bases = [b for b in bases if isinstance(b, type) and issubclass(b, _VALUE_TYPES)
                   and b.__module__ == "builtins"]
    library_bases = [b for b in bases if isinstance(b, type)
                     and b.__module__ not in ("builtins", "__main__")]
    if value_bases and library_bases:
        deny(f"class {name} may not derive from both {value_bases[0].__name__} and the library "
             f"class {library_bases[0].__name__}")
    for base in bases:
        module = _module_name(base) if isinstance(base, type) else ""
        if module.startswith(VALUE_ONLY_PACKAGES):
            deny(f"class {name} may not derive from {_TYPE_NAME.__get__(base, type)} of "
                 f"'{module}': its values may be used, but its classes not subclassed")
    if kwargs.get("metaclass", type) is not type:  # RestrictedPython passes `type` itself
        deny(f"class {name}: metaclasses are not allowed in the restricted backend")
    return builtins.__build_class__(func, name, *bases, **kwargs)


def _exit(code: Any = None) -> None:
    raise SystemExit(code)


def _refused_builtin(name: str, why: str) -> Callable[..., Any]:
    def refused(*_args: Any, **_kwargs: Any) -> Any:
        deny(f"{name}() is not allowed in the restricted backend: {why}")
    refused.__name__ = name
    return refused


_PLAIN_BUILTINS = (
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr",
    "classmethod", "complex", "dict", "divmod", "enumerate", "filter", "float",
    "format", "frozenset", "hash", "hex", "id", "int", "isinstance", "issubclass", "iter",
    "len", "list", "map", "max", "memoryview", "min", "next", "object", "oct", "ord", "pow",
    "property", "range", "repr", "reversed", "round", "set", "slice", "sorted",
    "staticmethod", "str", "sum", "super", "tuple", "zip", "NotImplemented", "Ellipsis",
    "None", "True", "False", "__build_class__",
)

_REFUSED_BUILTINS = {
    "open": "the restricted backend has no file access; use the docker backend",
    "eval": "it runs strings as code",
    "exec": "it runs strings as code",
    "compile": "it turns strings into code",
    "input": "there is no standard input",
    "breakpoint": "there is no debugger",
    "help": "there is no interactive help",
    "globals": "it exposes the sandbox's internals",
    "locals": "it exposes the sandbox's internals",
    "vars": "it exposes objects' internals",
}


def make_builtins(guards: Guards) -> dict[str, Any]:
    table: dict[str, Any] = {name: getattr(builtins, name) for name in _PLAIN_BUILTINS}
    for name, value in vars(builtins).items():
        if isinstance(value, type) and issubclass(value, BaseException):
            table[name] = value
    table.update(
        getattr=guards.getattr, hasattr=guards.hasattr, setattr=guards.setattr,
        delattr=guards.delattr, type=_guarded_type, exit=_exit, quit=_exit, dir=_safe_dir,
        __build_class__=_guarded_build_class,
        __import__=guards.import_,
    )
    for name, why in _REFUSED_BUILTINS.items():
        table[name] = _refused_builtin(name, why)
    return table


def make_globals(guards: Guards) -> dict[str, Any]:
    """A fresh namespace for one run of compiled user code."""
    return {
        "__builtins__": guards.builtins_table(),
        "__name__": "__main__",
        "__metaclass__": type,
        "_getattr_": guards.getattr,
        "_getitem_": guards.getitem,
        "_getiter_": guards.getiter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_write_": guards.write,
        "_print_": _PrintToStdout,
        "_inplacevar_": inplacevar,
        "_inplace_attr_": guards.inplace_attr,
        "_inplace_item_": guards.inplace_item,
        "_apply_": guards.apply,
        "_result_": guards.check_result,
        "_annotation_": guards.annotation,
    }
