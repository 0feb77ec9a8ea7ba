"""The one value check: may user code hold this value?

Applied at every boundary where a value reaches user code: what an attribute or item
access gives, what a call returns, every item a loop takes, and every argument a user
function, lambda or method receives (whoever calls it: user code, or a library calling
back with a key function, a comparison, a printer method, `__exit__`). One rule:

- plain values pass (at the cost of a type test);
- modules only when the policy allows them; frames and code objects never (tracebacks
  only as arguments of `__exit__`-like callbacks, where their attributes stay guarded);
- objects refused by identity (the real getattr, eval, open, import_module, and each
  library's refused callables) never, with their reason;
- metaclasses never (calling one makes a class without the class statement's checks);
- containers are scanned a few levels deep (their iteration is also checked item by
  item as user code takes them);
- anything else by the module that defines it (its class's, for instances): allowed,
  internal to the interpreter, or a value-only package's; else refused.

A few library callables are handed out as guarded stand-ins instead (`substitute`).
Stdlib only.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable
from functools import partial
from typing import Any

from .modules import Policy
from .names import MAX_SCAN_DEPTH, identity
from .refusals import Unacceptable, deny, refuse_quietly

PLAIN_TYPES = frozenset({int, float, complex, bool, str, bytes, type(None)})
# `list[int]`, `int | None`: type expressions, harmless to hold (their attributes go
# through the guards like any other object's).
_TYPE_EXPRESSIONS = (types.GenericAlias, types.UnionType)
CONTAINER_TYPES = (list, tuple, set, frozenset, dict)
_BASE_ITER: dict[type, Callable[[Any], Any]] = {
    list: list.__iter__, tuple: tuple.__iter__, set: set.__iter__,
    frozenset: frozenset.__iter__, dict: dict.__iter__}
INTROSPECTION_TYPES = (types.FrameType, types.CodeType, types.TracebackType)
FUNCTION_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                  types.BuiltinMethodType, type, partial)

TYPE_MRO = type.__dict__["__mro__"]  # the real MRO, whatever a metaclass defines
TYPE_NAME = type.__dict__["__name__"]


def is_metaclass(cls: type) -> bool:
    """A class whose instances are classes, other than `type` itself (whose
    three-argument form the builtins table already refuses)."""
    return cls is not type and type in TYPE_MRO.__get__(cls, type)


def module_name(cls: type) -> str:
    name = getattr(cls, "__module__", "")
    return name if type(name) is str else ""


def defining_module(obj: Any) -> str:
    """The module an object belongs to: a function's or class's own, or its type's."""
    try:
        if isinstance(obj, (types.BuiltinMethodType, types.MethodType)) and \
                not isinstance(getattr(obj, "__self__", None), types.ModuleType):
            owner = obj.__self__
            if owner is not None:  # a bound method belongs where its object belongs
                return defining_module(owner) if not isinstance(owner, type) else \
                    module_name(owner)
        if isinstance(obj, FUNCTION_TYPES):
            name, kind = obj.__module__, obj if isinstance(obj, type) else None
        else:
            kind = type(obj)
            name = kind.__module__
        if type(name) is not str and kind is not None:
            # A class a library's metaclass made at run time (sympy's Function('f')) has
            # no module of its own: it, and its instances, belong where its nearest base
            # with one does, whose methods they run.
            for base in TYPE_MRO.__get__(kind, type)[1:]:
                name = module_name(base)
                if name:
                    break
    except Exception:  # objects with hostile __getattr__ cannot be classified: refused
        return ""
    return name if type(name) is str else ""


def function_module(function: Any) -> str:
    """The module a (bound method's) function comes from; "" when it cannot be told."""
    try:
        name = function.__module__
    except Exception:
        return ""
    if type(name) is str:
        return name
    return defining_module(function)


def describe(obj: Any) -> str:
    if isinstance(obj, types.ModuleType):
        return f"module '{obj.__name__}'"
    if isinstance(obj, type):
        return f"class '{obj.__qualname__}'"
    return f"a '{type(obj).__name__}' object"


class ValueRule:
    """The check, bound to one Policy and the stand-ins the guards hand out."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        # Library callables user code gets a guarded version of: id -> (real, stand-in).
        self._substitutes: dict[int, tuple[Any, Any]] = {}
        # Instances whose verdict follows from their class alone (the class's module):
        # the verdict per class, found once.
        self._by_class: dict[type, bool] = {}
        # The policy's own stand-ins user code may hold (the guarded builtins): by identity.
        self._own: dict[int, Any] = {}

    def allow(self, value: Any) -> None:
        """This very object may be held (one of the policy's own guarded callables)."""
        self._own[identity(value)] = value

    def substitute(self, real: Any, stand_in: Any) -> None:
        self._substitutes[identity(real)] = (real, stand_in)

    def substitute_for(self, value: Any) -> Any | None:
        entry = self._substitutes.get(identity(value))
        return entry[1] if entry is not None and entry[0] is value else None

    def acceptable(self, value: Any) -> tuple[bool, Any]:
        """(True, the value or its stand-in) if user code may hold it, else (False, None).
        Records nothing: for filtering what libraries hand around, not refusing the user."""
        try:
            return True, self.check(value, "", refuse=refuse_quietly)
        except Unacceptable:
            return False, None

    def known(self, value: Any) -> bool:
        """Held as it is before, no second look needed: one of the policy's own callables,
        an instance of a class already judged, or a bound method of one whose function
        comes from a module that may be used. Never a value refused or replaced by
        identity. (The common case, asked before any message is built.)"""
        if self._own.get(identity(value)) is value:
            return True
        if identity(value) in self._substitutes or self.policy.denial_of(value) is not None:
            return False
        kind = type(value)
        if self._by_class.get(kind):
            return True
        if kind is types.MethodType:
            owner = value.__self__
            return not isinstance(owner, (type, types.ModuleType)) \
                and bool(self._by_class.get(type(owner))) \
                and self.policy.module_usable(function_module(value.__func__))
        return False

    def check(self, value: Any, where: str, depth: int = 0, *,
              refuse: Callable[[str], Any] = deny) -> Any:
        """The value (or its guarded stand-in) if user code may hold it; else `refuse`."""
        kind = type(value)
        if kind in PLAIN_TYPES or self.known(value):
            return value
        substitute = self.substitute_for(value)
        if substitute is not None:
            return substitute
        why = self.policy.denial_of(value)
        if why is not None:
            refuse(f"{where} is not available in the restricted backend: {why}")
        if kind is types.ModuleType or isinstance(value, types.ModuleType):
            name = getattr(value, "__name__", "?")
            if not self.policy.module_allowed(name):
                refuse(f"{where} is the module '{name}', which the restricted backend does not "
                       f"allow; allowed modules: {self.policy.allowed_text()}")
            return value
        if isinstance(value, INTROSPECTION_TYPES):
            refuse(f"{where} is an interpreter internal ({kind.__name__}); access refused")
        if isinstance(value, CONTAINER_TYPES):
            if depth < MAX_SCAN_DEPTH:
                # The base type's own iteration (a subclass's __iter__ is user code), and a
                # dict's keys as well as its values (iterating it hands out the keys).
                base_iter = _BASE_ITER[next(t for t in CONTAINER_TYPES if isinstance(value, t))]
                items = itertools.chain(dict.keys(value), dict.values(value)) \
                    if isinstance(value, dict) else base_iter(value)
                for item in items:
                    if type(item) not in PLAIN_TYPES:
                        self.check(item, f"an item of {where}", depth + 1, refuse=refuse)
            return value
        if kind in _TYPE_EXPRESSIONS:
            return value
        if isinstance(value, type) and is_metaclass(value):
            refuse(f"{where} is a metaclass ('{TYPE_NAME.__get__(value, type)}'); making "
                   "classes by calling one is not allowed in the restricted backend (write a "
                   "class statement)")
        if kind is types.MethodType and not self.policy.module_usable(function_module(value.__func__)):
            # Bound to an allowed object, but the function is another module's (a library
            # class inheriting from one the policy does not allow).
            refuse(f"{where} is a method from '{function_module(value.__func__) or 'an unknown module'}', "
                   "which the restricted backend does not allow")
        module = defining_module(value)
        if not self.policy.module_usable(module):
            refuse(f"{where} comes from '{module or 'an unknown module'}', which the restricted "
                   "backend does not allow (it can run code, import by name or touch the system)")
        if not isinstance(value, FUNCTION_TYPES) and len(self._by_class) < 4096 \
                and not isinstance(value, type):
            # An instance: any other instance of its class gets the same verdict (the checks
            # by identity, above, still come first for each).
            self._by_class[kind] = True
        return value
