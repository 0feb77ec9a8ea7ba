"""The builtins user code sees: the plain ones, guarded stand-ins for the ones that reach
attributes, types, classes and imports, and refusals (with the reason) for the ones that
run strings, open files or expose namespaces. Stdlib only.
"""

from __future__ import annotations

import builtins
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from .checks import TYPE_MRO, TYPE_NAME, is_metaclass, module_name
from .names import RESERVED_PRIVATE_NAMES
from .refusals import ELSEWHERE, deny

if TYPE_CHECKING:
    from .guards import Guards

# The name of the function a module's code runs as (transformer.py): `dir()` there lists
# the run's namespace, as at the top of a module.
MODULE_CODE_NAME = "<module>"

_PLAIN_BUILTINS = (
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr",
    "classmethod", "complex", "dict", "divmod", "enumerate", "filter", "float",
    "format", "frozenset", "hash", "hex", "id", "int", "isinstance", "issubclass", "iter",
    "len", "list", "map", "max", "memoryview", "min", "next", "object", "oct", "ord", "pow",
    "property", "range", "repr", "reversed", "round", "set", "slice", "sorted",
    "staticmethod", "str", "sum", "super", "tuple", "zip", "NotImplemented", "Ellipsis",
    "None", "True", "False",
)

_REFUSED_BUILTINS = {
    "open": f"the restricted backend has no file access; {ELSEWHERE}",
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

# Builtins that are values of other kinds, classes whose instances are plain values: the
# subclasses of these may not also derive from a library class (see _guarded_build_class).
_VALUE_TYPES = (str, bytes, bytearray, int, float, complex, tuple, list, dict, set, frozenset)
_HIDDEN_NAMES = frozenset({"__builtins__", "__metaclass__"})


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


def _safe_dir(*args: Any) -> list[str]:
    """dir() that does not list the sandbox's own names. Without arguments, at the top of
    the code, it lists the run's namespace (where the code's names live)."""
    if args:
        return dir(*args)
    frame = sys._getframe(1)
    names = frame.f_globals if frame.f_code.co_name == MODULE_CODE_NAME else frame.f_locals
    return sorted(n for n in names if n not in _HIDDEN_NAMES and n not in RESERVED_PRIVATE_NAMES
                  and not (n.startswith("_") and n.endswith("_") and n != "_"))


def _exit(code: Any = None) -> NoReturn:
    raise SystemExit(code)


def _refused_builtin(name: str, why: str) -> Callable[..., Any]:
    def refused(*_args: Any, **_kwargs: Any) -> Any:
        deny(f"{name}() is not allowed in the restricted backend: {why}")
    refused.__name__ = name
    return refused


def make_builtins(guards: Guards) -> dict[str, Any]:
    policy = guards.policy

    def build_class(func: Any, name: str, *bases: Any, **kwargs: Any) -> Any:
        """Class statements, minus what they could mix or make: bases are resolved once
        (`__mro_entries__` asked once, here) and the class is built from exactly those;
        no metaclass, no class deriving from one (or from `type`); a class that is both a
        builtin value (a str, say) and a library class could be handed to library code
        that uses it as data (an attribute name) and as an object at once; a value-only
        package's classes may be used, not subclassed; every special method the body
        defines is the user's own code (the interpreter calls it implicitly)."""
        resolved = types.resolve_bases(bases)
        for base in resolved:
            if isinstance(base, type) and (base is type or is_metaclass(base)):
                deny(f"class {name} may not derive from a metaclass in the restricted backend")
        # Along each base's whole MRO: `class T(str)` then `class P(T, LibraryClass)`.
        ancestors = [klass for base in resolved if isinstance(base, type)
                     for klass in TYPE_MRO.__get__(base, type)]
        value_bases = [b for b in ancestors if b in _VALUE_TYPES]
        library_bases = [b for b in ancestors if b.__module__ not in ("builtins", "__main__")]
        if value_bases and library_bases:
            deny(f"class {name} may not derive from both {value_bases[0].__name__} and the "
                 f"library class {library_bases[0].__name__}")
        for base in resolved:
            module = module_name(base) if isinstance(base, type) else ""
            if policy.value_only_module(module):
                deny(f"class {name} may not derive from {TYPE_NAME.__get__(base, type)} of "
                     f"'{module}': its values may be used, but its classes not subclassed")
        if kwargs.get("metaclass", type) is not type:  # RestrictedPython passes `type` itself
            deny(f"class {name}: metaclasses are not allowed in the restricted backend")
        cls = builtins.__build_class__(func, name, *resolved, **kwargs)
        if isinstance(cls, type):
            if is_metaclass(cls):
                deny(f"class {name} is a metaclass, which the restricted backend does not allow")
            check_class_body(cls)
        return cls

    from .guards import check_class_body

    table: dict[str, Any] = {name: getattr(builtins, name) for name in _PLAIN_BUILTINS}
    for name, value in vars(builtins).items():
        if isinstance(value, type) and issubclass(value, BaseException):
            table[name] = value
    table.update(
        getattr=guards.getattr, hasattr=guards.hasattr, setattr=guards.setattr,
        delattr=guards.delattr, type=_guarded_type, exit=_exit, quit=_exit, dir=_safe_dir,
        __build_class__=build_class, __import__=guards.import_,
    )
    for name, why in _REFUSED_BUILTINS.items():
        table[name] = _refused_builtin(name, why)
    return table


class PrintToStdout:
    """RestrictedPython's print hook, writing to the captured stdout."""

    def __init__(self, _getattr: Any = None) -> None:
        pass

    def _call_print(self, *objects: Any, **kwargs: Any) -> None:
        if kwargs.get("file") is None:
            kwargs["file"] = sys.stdout
        print(*objects, **kwargs)

    def __call__(self) -> str:
        return ""  # RestrictedPython's `printed`: output goes to stdout instead
