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
- wrappers (functools.partial, staticmethod, map objects, cache wrappers, ...) by what
  they wrap (wrappers.py), never by their own class: each part is checked like a value;
- anything else by the module that defines it (its class's, for instances): allowed,
  internal to the interpreter, or a value-only package's; else refused.

A few library callables are handed out as guarded stand-ins instead: by identity
(`substitute`), or by what they are bound to (`rebind`: a bound str.format, wherever it
came from). Instances whose verdict follows from their class alone make up `held`, the
set compiled code tests with one C-level lookup (the `_plain_` hook). Stdlib only.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable
from functools import partial
from typing import Any

from .compiled import is_policy_function
from .modules import Policy
from .names import MAX_SCAN_DEPTH, identity
from .refusals import Unacceptable, deny, refuse_quietly
from .wrappers import WRAPPER_TYPES, Opaque, library_wrapped, wrapped_parts

PLAIN_TYPES: frozenset[type] = frozenset({int, float, complex, bool, str, bytes, type(None)})
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

# How many wrappers deep a wrapper's parts are followed (partial(partial(...))): deeper is
# refused, not trusted.
MAX_WRAPPER_DEPTH = 8
# How many classes `held` may grow to (then instances of new classes are judged one by one).
MAX_HELD_CLASSES = 4096

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
        # Classes whose every instance may be held (the plain types, and classes judged by
        # their module once): one set lookup for compiled code and for the check. Never a
        # function, class, wrapper or module type, nor the class of any object refused or
        # replaced by identity.
        self.held: set[type] = set(PLAIN_TYPES)
        # The policy's own stand-ins user code may hold (the guarded builtins): by identity.
        self._own: dict[int, Any] = {}
        self._own_classes: set[type] = set()
        # Functions whose bound methods, on an instance of a held class, may be held; and
        # such bound methods as compiled code met them (equal methods: the same object and
        # function, so the same verdict), for its one-lookup test.
        self._methods: dict[int, Any] = {}
        self.bound: set[types.MethodType] = set()
        # Bound methods replaced by what they are bound to (the guards' str.format rule):
        # the functions concerned, by identity, and the rule.
        self._rebound: dict[int, Any] = {}
        self._rebind: Callable[[Any], Any | None] = lambda _value: None

    def rebind(self, functions: Any, rule: Callable[[Any], Any | None]) -> None:
        """Bound methods of `functions` (and bound builtins `rule` recognises) are replaced
        by what `rule` gives for them."""
        for function in functions:
            self._rebound[identity(function)] = function
        self._rebind = rule

    def allow_class(self, kind: type) -> None:
        """Instances of one of the policy's own classes (print's hook, CheckedCall) may be
        held, and their bound methods called."""
        self.held.add(kind)
        self._own_classes.add(kind)

    def allow(self, value: Any) -> None:
        """This very object may be held (one of the policy's own guarded callables)."""
        self._own[identity(value)] = value

    def substitute(self, real: Any, stand_in: Any) -> None:
        """User code gets `stand_in` wherever `real` would reach it (and may hold it)."""
        self._substitutes[identity(real)] = (real, stand_in)
        self.held.discard(type(real))  # its class's instances are no longer all alike
        self.allow(stand_in)

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
        kind = type(value)
        if kind in self.held:  # (no object refused or replaced by identity is of these)
            return True
        if self._own.get(identity(value)) is value:
            return True
        if kind is types.MethodType:
            # A bound method is made afresh by every read: never refused or replaced by
            # identity itself. Its function's verdict is kept (by identity).
            owner, function = value.__self__, value.__func__
            if type(owner) in self._own_classes:
                return True
            if type(owner) not in self.held:  # (a held class is never a class or module)
                return False
            if self._methods.get(identity(function)) is not function:
                if identity(function) in self._rebound or \
                        not self.policy.module_usable(function_module(function)):
                    return False
                if len(self._methods) < MAX_HELD_CLASSES:
                    self._methods[identity(function)] = function
            if len(self.bound) < MAX_HELD_CLASSES:
                self.bound.add(value)
            return True
        return False

    def check(self, value: Any, where: str, depth: int = 0, *,
              refuse: Callable[[str], Any] = deny) -> Any:
        """The value (or its guarded stand-in) if user code may hold it; else `refuse`."""
        kind = type(value)
        if kind in self.held or self.known(value):
            return value
        substitute = self.substitute_for(value)
        if substitute is not None:
            return substitute
        if kind is types.BuiltinMethodType or kind is types.MethodType:
            rebound = self._rebind(value)
            if rebound is not None:
                return rebound
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
        if isinstance(value, WRAPPER_TYPES):
            # Judged by what it wraps (its class is functools' or the interpreter's, whatever
            # it calls), every time: no verdict by class.
            self._check_wrapped(value, where, depth, refuse)
            return value
        module = defining_module(value)
        if not self.policy.module_usable(module):
            refuse(f"{where} comes from '{module or 'an unknown module'}', which the restricted "
                   "backend does not allow (it can run code, import by name or touch the system)")
        inner = library_wrapped(value)
        if inner is not None and not is_policy_function(value):
            # A library function made by functools.wraps calls what it wraps.
            self._check_part(inner, f"what {where} wraps", depth, refuse)
        if not isinstance(value, (*FUNCTION_TYPES, type, types.ModuleType)) \
                and len(self.held) < MAX_HELD_CLASSES and self._by_class_safe(kind):
            # An instance: any other instance of its class gets the same verdict.
            self.held.add(kind)
        return value

    def _by_class_safe(self, kind: type) -> bool:
        """No object refused or replaced by identity is an instance of `kind` (its
        instances may then be judged by their class alone)."""
        return not any(type(real) is kind for real, _ in self._substitutes.values()) \
            and not self.policy.denies_instances_of(kind)

    def _check_wrapped(self, value: Any, where: str, depth: int,
                       refuse: Callable[[str], Any]) -> None:
        try:
            parts = wrapped_parts(value)
        except Opaque:
            refuse(f"{where} is a {type(value).__name__} whose contents cannot be checked; "
                   "not allowed in the restricted backend")
            return
        for part in parts:
            self._check_part(part, f"what {where} wraps", depth, refuse)

    def _check_part(self, part: Any, where: str, depth: int,
                    refuse: Callable[[str], Any]) -> None:
        """One part of a wrapper: acceptable as it is (a part that would be handed out as a
        guarded stand-in is the real thing inside the wrapper: refused)."""
        if part is None or type(part) in self.held:
            return
        if depth >= MAX_WRAPPER_DEPTH:
            refuse(f"{where} is wrapped too deeply to be checked in the restricted backend")
        if self.check(part, where, depth + 1, refuse=refuse) is not part:
            refuse(f"{where} is a library function the restricted backend only hands out as a "
                   "guarded stand-in; a wrapper of the real one is not allowed")
