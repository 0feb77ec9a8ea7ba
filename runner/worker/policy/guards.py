"""The hooks compiled user code calls: attribute and item access, iteration, writes, calls
with `*args`/`**kwargs`, call results, function entry, imports, formatting.

RestrictedPython's transformer rewrites those operations into calls of hooks; the
transformer here (transformer.py) passes the hooks to the compiled code as parameters
(hooks.py), so no namespace holds them. Every value the hooks hand to user code goes
through the one value check (checks.py); names are checked by the rules in names.py.
Nothing here is specific to a library. Stdlib only.
"""

from __future__ import annotations

import builtins
import functools
import operator
import string
import sys
import types
from collections import UserString
from collections.abc import Callable
from functools import partial
from typing import Any

from RestrictedPython.transformer import INSPECT_ATTRIBUTES

from .checks import PLAIN_TYPES, ValueRule, describe
from .compiled import is_policy_function
from .modules import Policy
from .names import LAZY_IMPORTS, SAFE_DUNDER_ATTRIBUTES, SPECIAL_METHOD_NAMES, is_private_name
from .plumbing import install as install_plumbing
from .refusals import ELSEWHERE, deny

# Iterables whose items are plain by construction. A list, tuple or dict is not: what it
# holds may be nested deeper than a result's scan goes, or put there by a library later.
_FAST_ITERABLES = frozenset({range, str, bytes, bytearray})
_WRITABLE_CONTAINERS = frozenset({list, dict, set, bytearray})

INPLACE_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul,
    "/=": operator.itruediv, "//=": operator.ifloordiv, "%=": operator.imod,
    "**=": operator.ipow, "<<=": operator.ilshift, ">>=": operator.irshift,
    "&=": operator.iand, "|=": operator.ior, "^=": operator.ixor, "@=": operator.imatmul,
}

_CLASS_DICT = type.__dict__["__dict__"]
_OBJECT_DICT = object.__getattribute__


def exact_str(name: Any) -> str:
    """An attribute name as a plain str: a str subclass can override startswith and ==."""
    if type(name) is str:
        return name
    if isinstance(name, str):
        return str.__str__(name)  # a copy of the characters, as an exact str
    raise TypeError(f"attribute name must be a string, not {type(name).__name__}")


def is_user_defined(obj: Any) -> bool:
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(cls, "__module__", None) == "__main__"


def owned_by_user(obj: Any) -> bool:
    """The user's own class, instance of one, or function."""
    if isinstance(obj, types.FunctionType):
        return obj.__module__ == "__main__"
    return is_user_defined(obj)


def _defined_by_user(obj: Any, name: str) -> bool:
    """A `_private` attribute the user's own code defined: in the instance's own dict, or
    in a user class found before any library class in the method resolution order. A
    helper a user subclass inherits from a library class is the library's, and private
    there (some act as a real getattr, or build code)."""
    if not is_user_defined(obj):
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


class LibraryObjectWrite:
    """What `_write_` hands the compiled assignment for a library's object: attribute
    writes pass the name check (no `_` names of the library's), items go through."""

    __slots__ = ("_guards", "_target")

    def __init__(self, target: Any, guards: Guards) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_guards", guards)

    def __setattr__(self, name: str, value: Any) -> None:
        target = object.__getattribute__(self, "_target")
        guards = object.__getattribute__(self, "_guards")
        setattr(target, guards.check_write_name(target, name), value)

    def __delattr__(self, name: str) -> None:
        target = object.__getattribute__(self, "_target")
        guards = object.__getattribute__(self, "_guards")
        delattr(target, guards.check_write_name(target, name))

    def __setitem__(self, key: Any, value: Any) -> None:
        object.__getattribute__(self, "_target")[key] = value

    def __delitem__(self, key: Any) -> None:
        del object.__getattribute__(self, "_target")[key]


# Dunder attributes of a class that hold data, which the interpreter never calls.
_CLASS_DATA_DUNDERS = frozenset({"__module__", "__qualname__", "__doc__", "__slots__",
                                 "__annotations__", "__match_args__", "__orig_bases__",
                                 "__dict__", "__weakref__", "__firstlineno__",
                                 "__static_attributes__", "__classcell__"})


def special_method_allowed(name: str, value: Any) -> bool:
    """A class's special method (`__neg__`, `__enter__`, `__eq__`, ...) is called by the
    interpreter, and what it returns reaches user code unchecked (`-x`, `with x as y`,
    `x == y`): on a user class it must be the user's own code, a function the policy
    compiled (or None, or static/class methods and properties of such functions)."""
    if not (name.startswith("__") and name.endswith("__")) or name in _CLASS_DATA_DUNDERS:
        return True
    if value is None or is_policy_function(value):
        return True
    if isinstance(value, (staticmethod, classmethod)):
        return is_policy_function(value.__func__)
    if isinstance(value, property):
        return all(part is None or is_policy_function(part)
                   for part in (value.fget, value.fset, value.fdel))
    return False


def check_class_body(cls: type) -> None:
    """Every special method a class statement defined is the user's own code."""
    for name, value in list(_CLASS_DICT.__get__(cls, type).items()):
        if not special_method_allowed(name, value):
            deny(f"class {cls.__name__}: its special method {name} must be a function defined "
                 "in the code (not a library callable) in the restricted backend")


class UserClassWrite:
    """What `_write_` hands the compiled assignment for a user's class: special methods
    must be the user's own functions (the interpreter calls them implicitly)."""

    __slots__ = ("_target",)

    def __init__(self, target: type) -> None:
        object.__setattr__(self, "_target", target)

    def __setattr__(self, name: str, value: Any) -> None:
        target = object.__getattribute__(self, "_target")
        name = exact_str(name)
        if not special_method_allowed(name, value):
            deny(f"setting {name} of class {target.__name__} to something other than a function "
                 "defined in the code is not allowed in the restricted backend")
        setattr(target, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(object.__getattribute__(self, "_target"), exact_str(name))

    def __setitem__(self, key: Any, value: Any) -> None:
        object.__getattribute__(self, "_target")[key] = value

    def __delitem__(self, key: Any) -> None:
        del object.__getattribute__(self, "_target")[key]


class Guards:
    """The hook functions compiled code calls, bound to one Policy."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.values = ValueRule(policy)
        self._builtins: dict[str, Any] | None = None
        # The policy's own callables, made once so each is one object the value check
        # recognises by identity (inside a partial, too).
        self._update_wrapper_stand_in = self._update_wrapper
        self._format_stand_ins: dict[str, Callable[..., str]] = {
            "format": self._format, "format_map": self._format_map}
        for own in (self._update_wrapper_stand_in, *self._format_stand_ins.values()):
            self.values.allow(own)
        self.values.substitute(functools.update_wrapper, self._update_wrapper_stand_in)
        self.values.substitute(functools.wraps, self._wraps)
        # The real str.format reads attributes its field names name: wherever a user
        # could come by it (the method of the class, a bound one through `super()`, a
        # library's attribute), it is the guarded one.
        self.values.substitute(str.format, self._format_stand_ins["format"])
        self.values.substitute(str.format_map, self._format_stand_ins["format_map"])
        self.values.substitute(UserString.format, self._user_string_format)
        self.values.substitute(UserString.format_map, self._user_string_format_map)
        self.values.rebind((UserString.format, UserString.format_map), self._rebound_format)

    def builtins_table(self) -> dict[str, Any]:
        """Built once (in the worker); each forked child gets its own copy-on-write copy."""
        if self._builtins is None:
            from .builtins import make_builtins

            self._builtins = make_builtins(self)
            install_plumbing(self.values, self._builtins)
            from .builtins import PrintToStdout

            self.values.allow_class(PrintToStdout)  # `print` as a value: its bound method
            for value in self._builtins.values():
                self.values.allow(value)  # the guarded builtins may be passed around
        return self._builtins

    # -- values ---------------------------------------------------------------------
    def check_value(self, value: Any, where: str) -> Any:
        return self.values.check(value, where)

    def acceptable(self, value: Any) -> tuple[bool, Any]:
        return self.values.acceptable(value)

    def check_result(self, value: Any) -> Any:
        """What a call returned, before user code holds it."""
        if type(value) in PLAIN_TYPES:
            return value
        return self.values.check(value, "the result of a call")

    def enter(self, value: Any) -> Any:
        """An argument of a user function as it starts (a parameter, `*args`, `**kwargs`,
        a default), whoever called it: user code, or a library calling back (a key
        function, a comparison, a printer method, `__exit__`). The same rule as a call's
        result (plain values never get here); a traceback (what `__exit__` receives) may be
        held, its attributes stay refused."""
        if type(value) is types.TracebackType:
            return value
        return self.values.check(value, "an argument passed to a user function")

    def check_lambda_arguments(self, *arguments: Any) -> None:
        """A lambda's arguments: checked like a function's, but a lambda has nowhere to
        put a guarded stand-in, so a value that would get one is refused."""
        for value in arguments:
            if type(value) in PLAIN_TYPES or type(value) is types.TracebackType:
                continue
            if self.values.substitute_for(value) is not None:
                deny("a lambda cannot receive this library function in the restricted "
                     "backend; write a def instead")
            self.values.check(value, "an argument passed to a lambda")

    def getiter(self, iterable: Any) -> Any:
        """`for` loops, comprehensions and unpacking: every item is checked as user code
        receives it. Ranges and strings keep their C iterators."""
        iterator = iter(iterable)
        if type(iterable) in _FAST_ITERABLES:
            return iterator
        return self._checked_items(iterator)

    def _checked_items(self, iterator: Any) -> Any:
        check, plain = self.values.check, PLAIN_TYPES
        for item in iterator:
            yield item if type(item) in plain else check(item, "an item of an iteration")

    def apply(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """Calls with `*args` or `**kwargs`: keyword names are how class factories get
        dunders (`**{'__globals__': ...}`) into the classes they build."""
        for key in kwargs:
            if type(key) is not str or key.startswith("__"):
                deny(f"the keyword argument {key!r} is not allowed (names starting with '__' "
                     "are interpreter internals in the restricted backend)")
        for value in args:
            if type(value) not in PLAIN_TYPES:
                self.values.check(value, "an argument")
        return self.check_result(function(*args, **kwargs))

    def decorate(self, decorator: Any) -> Callable[[Any], Any]:
        """`@decorator`: applying it is a call, its result checked like any call's."""
        def apply(target: Any) -> Any:
            return self.check_result(decorator(target))
        return apply

    def with_(self, manager: Any) -> Any:
        """`with manager as x`: x gets what __enter__ returns, checked."""
        return CheckedContext(manager, self)

    def annotation(self, value: Any) -> Any:
        """Annotations are evaluated as code when they are strings (typing.get_type_hints,
        which functools.singledispatch calls): an annotation must be the type itself."""
        if _holds_text(value, 0):
            deny("a string annotation is not allowed (typing evaluates it as code); write "
                 "the type itself")
        return value

    # -- attributes and items -------------------------------------------------------
    def _check_attribute_name(self, obj: Any, name: str) -> None:
        if name.startswith("_"):
            if name in SAFE_DUNDER_ATTRIBUTES:
                return
            if is_private_name(name) and _defined_by_user(obj, name):
                return
            deny(f"access to the attribute '{name}' of {describe(obj)} is not allowed "
                 "(names starting with '_' are private in the restricted backend)")
        if name in INSPECT_ATTRIBUTES:
            deny(f"access to the attribute '{name}' is not allowed (frames and code objects "
                 "are interpreter internals)")

    def getattr(self, obj: Any, name: str, *default: Any) -> Any:
        name = exact_str(name)
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
        if type(value) in PLAIN_TYPES or self.values.known(value):
            return value
        return self.values.check(value, f"'{name}' of {describe(obj)}")

    def attribute(self, obj: Any, name: str, value: Any) -> Any:
        """The slow path of an inlined read `obj.name` (inline.py) whose value's class is not
        held: the name was checked when compiling, and the value has been read."""
        if isinstance(obj, types.ModuleType) and not self.policy.module_allowed(obj.__name__):
            deny(f"the module '{obj.__name__}' is not allowed in the restricted backend; "
                 f"allowed modules: {self.policy.allowed_text()}")
        if self.values.known(value):
            return value
        return self.values.check(value, f"'{name}' of {describe(obj)}")

    def hasattr(self, obj: Any, name: str) -> bool:
        try:
            self.getattr(obj, name)
        except AttributeError:
            return False
        return True

    def getitem(self, obj: Any, key: Any) -> Any:
        value = obj[key]
        if type(value) in PLAIN_TYPES or self.values.known(value):
            return value
        return self.values.check(value, f"an item of {describe(obj)}")

    # -- writes ---------------------------------------------------------------------
    def write(self, obj: Any) -> Any:
        """Target of attribute/item assignment and deletion."""
        if isinstance(obj, types.ModuleType):
            deny(f"changing the module '{obj.__name__}' is not allowed")
        if isinstance(obj, type) and not is_user_defined(obj):
            deny(f"changing the class '{obj.__qualname__}' is not allowed")
        if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)) and \
                getattr(obj, "__module__", None) != "__main__":
            deny(f"changing the function '{getattr(obj, '__qualname__', '?')}' is not allowed")
        if isinstance(obj, type):
            return UserClassWrite(obj)  # a user's class (a library's was refused above)
        if type(obj) in _WRITABLE_CONTAINERS or owned_by_user(obj):
            return obj
        # A library's object: `obj.name = value` (which reaches here without the name)
        # goes through the same name check as setattr().
        return LibraryObjectWrite(obj, self)

    def check_write_name(self, obj: Any, name: str) -> str:
        name = exact_str(name)
        if name.startswith("_"):
            if not (is_private_name(name) or name in SPECIAL_METHOD_NAMES):
                deny(f"setting the attribute '{name}' is not allowed")
            # As for reading: a library object's `_` names are the library's (its caches,
            # the helpers it calls on itself); the user's own objects are the user's.
            if not owned_by_user(obj):
                deny(f"setting the attribute '{name}' of {describe(obj)} is not allowed (names "
                     "starting with '_' are private to the library that made the object)")
        return name

    def setattr(self, obj: Any, name: str, value: Any) -> None:
        setattr(self.write(obj), self.check_write_name(obj, name), value)  # write() refuses
        # modules, library classes and functions, and checks a user class's special methods

    def delattr(self, obj: Any, name: str) -> None:
        self.write(obj)
        delattr(obj, self.check_write_name(obj, name))

    def inplace_attr(self, obj: Any, name: str, op: str, value: Any) -> None:
        current = self.getattr(obj, name)
        setattr(self.write(obj), self.check_write_name(obj, name), inplacevar(op, current, value))

    def inplace_item(self, obj: Any, key: Any, op: str, value: Any) -> None:
        current = self.getitem(obj, key)
        self.write(obj)[key] = inplacevar(op, current, value)

    # -- imports --------------------------------------------------------------------
    def import_(self, name: str, globals: Any = None, locals: Any = None,
                fromlist: Any = (), level: int = 0) -> Any:
        if (type(fromlist) is list and not fromlist and globals is locals
                and type(name) is str and name in LAZY_IMPORTS):
            # C code running under a user frame (datetime.strftime importing `time`)
            # imports through the frame's builtins with this exact signature; an import
            # statement passes None or a tuple. The module goes to that C code (or, if
            # user code called this itself, through the check of call results).
            return builtins.__import__(name, globals, locals, fromlist, level)
        if level:
            deny("relative imports are not allowed in the restricted backend")
        if not self.policy.module_allowed(name):
            hint = ""
            if self.policy.module_denied(name):
                hint = " (this part of the package can run code or reach the system)"
            deny(f"import of '{name}' is not allowed in the restricted backend{hint}; "
                 f"allowed modules: {self.policy.allowed_text()}; {ELSEWHERE}")
        if not fromlist:
            return builtins.__import__(name, None, None, (), 0)
        # The package alone first: the real __import__ would import every name of the
        # fromlist that is a submodule, allowed or not, before we could look at it.
        builtins.__import__(name, None, None, (), 0)
        target = sys.modules[name]
        if "*" in fromlist:
            return self.star_facade(target)
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
                value = self.values.check(getattr(target, item), f"'{item}' of module '{name}'")
            else:
                submodule = f"{name}.{item}"
                if not self.policy.module_allowed(submodule):
                    deny(f"import of '{submodule}' is not allowed in the restricted backend; "
                         f"allowed modules: {self.policy.allowed_text()}")
                try:
                    value = builtins.__import__(submodule, None, None, ("__name__",), 0)
                except ModuleNotFoundError:
                    continue  # Python reports the ImportError itself
            setattr(facade, item, value)
        return facade

    def star_facade(self, module: types.ModuleType) -> types.ModuleType:
        """What `from M import *` copies from: refused names become refusals at use."""
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        facade = types.ModuleType(module.__name__)
        exported = []
        for name in names:
            if not isinstance(name, str) or name.startswith("_") or not hasattr(module, name):
                continue
            value = getattr(module, name)
            ok, checked = self.values.acceptable(value)
            # Refusing at use, not at import, keeps `import *` usable.
            value = checked if ok else refusing_stand_in(f"{module.__name__}.{name}")
            setattr(facade, name, value)
            exported.append(name)
        setattr(facade, "__all__", exported)
        return facade

    def import_star(self, namespace: dict[str, Any], name: str) -> None:
        """`from M import *` at the top of user code (where the module's namespace is the
        run's): the facade's names go into the run's namespace."""
        facade = self.import_(name, None, None, ("*",), 0)
        for exported in getattr(facade, "__all__", ()):
            namespace[exported] = getattr(facade, exported)

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
            value = self.values.check(value, f"'{attribute}' of the wrapped function")
            object.__setattr__(wrapper, attribute, value) if is_user_defined(wrapper) \
                else setattr(wrapper, attribute, value)
        source = getattr(wrapped, "__dict__", None)
        try:  # the instance dict itself, never a `__dict__` the wrapper's class provides
            target = object.__getattribute__(wrapper, "__dict__")
        except (AttributeError, TypeError):
            target = None
        if isinstance(source, dict) and isinstance(target, dict):
            for key, value in list(source.items()):
                target[key] = self.values.check(value, f"attribute {key!r} of the wrapped function")
        object.__setattr__(wrapper, "__wrapped__", wrapped) if is_user_defined(wrapper) \
            else setattr(wrapper, "__wrapped__", wrapped)
        return wrapper

    def _wraps(self, wrapped: Any, assigned: Any = functools.WRAPPER_ASSIGNMENTS,
               updated: Any = functools.WRAPPER_UPDATES) -> Any:
        return partial(self._update_wrapper_stand_in, wrapped=wrapped, assigned=assigned,
                       updated=updated)

    # -- formatting -----------------------------------------------------------------
    def _format(self, template: str, /, *args: Any, **kwargs: Any) -> str:
        """str.format, its field names read through the guards."""
        return _GuardedFormatter(self).vformat(template, args, kwargs)

    def _format_map(self, template: str, mapping: Any, /) -> str:
        return _GuardedFormatter(self).vformat(template, (), mapping)

    def _user_string_format(self, text: Any, /, *args: Any, **kwargs: Any) -> str:
        """UserString.format: the real one calls the real str.format on `.data`."""
        return self._format(str(text.data), *args, **kwargs)

    def _user_string_format_map(self, text: Any, mapping: Any, /) -> str:
        return self._format_map(str(text.data), mapping)

    def _safe_format_method(self, obj: Any, name: str) -> Callable[..., str]:
        fmt = self._format_stand_ins[name]
        return partial(fmt, obj) if isinstance(obj, str) else fmt

    def _rebound_format(self, method: Any) -> Any | None:
        """The guarded stand-in for a bound format/format_map of a str (the builtin, bound
        by whatever route: `super(S, s).format` is one) or of a UserString; else None.
        Decided by the value, not by the receiver of an attribute read."""
        owner = method.__self__
        if type(method) is types.BuiltinMethodType:
            name = method.__name__
            if name in self._format_stand_ins and isinstance(owner, str):
                return self._safe_format_method(owner, name)
            return None
        function = method.__func__
        if function is UserString.format or function is UserString.format_map:
            return self._safe_format_method(str(owner.data), function.__name__)
        return None


class CheckedContext:
    """A context manager whose __enter__ result goes through the value check."""

    __slots__ = ("_guards", "_manager")

    def __init__(self, manager: Any, guards: Guards) -> None:
        self._manager = manager
        self._guards = guards

    def __enter__(self) -> Any:
        return self._guards.check_result(type(self._manager).__enter__(self._manager))

    def __exit__(self, *details: Any) -> Any:
        return type(self._manager).__exit__(self._manager, *details)


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


def refusing_stand_in(qualified: str) -> Callable[..., Any]:
    """A stand-in that refuses when called (for names `import *` cannot hand out)."""
    def refused(*_args: Any, **_kwargs: Any) -> Any:
        deny(f"{qualified} is not available in the restricted backend (it can run arbitrary "
             f"code or reach the system); {ELSEWHERE}")
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
