"""What a wrapper holds: the callables and values a wrapper object calls or hands on.

A wrapper's own class says nothing about its power: `functools.partial(<the real
getattr>)` is an instance of functools' partial, as harmless-looking as
`partial(sympy.sin)`, and calling it calls the real getattr. So the value check
(checks.py) judges a wrapper by what it wraps, never by its class alone: every part
listed here is checked like a value user code would hold, and a wrapper of anything
refused is refused.

Wrappers, and where their parts are read from (always through the C type's own
descriptors or `__reduce__`, never through an attribute lookup a subclass could
redefine):

- functools.partial, functools.partialmethod: the function, its arguments and keywords;
- staticmethod, classmethod: the function; property: its getter, setter and deleter;
  functools.cached_property: its function;
- functools' cache wrappers (lru_cache, cache): the cached function;
- C iteration that calls a function on the values it takes (map, filter, and
  itertools' starmap, filterfalse, takewhile, dropwhile, accumulate, groupby;
  `iter(callable, sentinel)`): the function and what it iterates;
- a library function made by functools.wraps (sympy's decorators): its `__wrapped__`.

Stdlib only.
"""

from __future__ import annotations

import functools
import itertools
import types
from typing import Any, cast

_LRU_WRAPPER: type = type(functools.lru_cache(maxsize=None)(len))
_CALLABLE_ITERATOR: type = type(iter(int, 0))

# C iterators that call a function on what they take: their parts come from __reduce__
# (the constructor's arguments: the function and the iterators).
REDUCED_TYPES: tuple[type, ...] = (
    map,
    filter,
    itertools.starmap,
    itertools.filterfalse,
    itertools.takewhile,
    itertools.dropwhile,
    itertools.accumulate,
    itertools.groupby,
    _CALLABLE_ITERATOR,
)
WRAPPER_TYPES: tuple[type, ...] = (
    functools.partial,
    functools.partialmethod,
    staticmethod,
    classmethod,
    property,
    functools.cached_property,
    _LRU_WRAPPER,
    *REDUCED_TYPES,
)

_PARTIAL_FUNC = functools.partial.func
_PARTIAL_ARGS = functools.partial.args
_PARTIAL_KEYWORDS = functools.partial.keywords
_STATIC_FUNC = staticmethod.__dict__["__func__"]
_CLASS_FUNC = classmethod.__dict__["__func__"]
_PROPERTY_PARTS = tuple(property.__dict__[name] for name in ("fget", "fset", "fdel"))
_INSTANCE_DICT = object.__getattribute__


class Opaque(Exception):
    """The wrapper's parts cannot be read (it is refused, not trusted)."""


def _own_dict(value: Any) -> dict[str, Any]:
    try:
        found = _INSTANCE_DICT(value, "__dict__")
    except (AttributeError, TypeError):
        return {}
    return found if type(found) is dict else {}


def wrapped_parts(value: Any) -> tuple[Any, ...]:
    """The parts of a wrapper (an instance of WRAPPER_TYPES or a subclass); Opaque if they
    cannot be read."""
    try:
        if isinstance(value, functools.partial):
            keywords = _PARTIAL_KEYWORDS.__get__(value, functools.partial) or {}
            return (
                _PARTIAL_FUNC.__get__(value, functools.partial),
                *_PARTIAL_ARGS.__get__(value, functools.partial),
                *dict.values(keywords),
            )
        if isinstance(value, staticmethod):
            return (_STATIC_FUNC.__get__(value, staticmethod),)
        if isinstance(value, classmethod):
            return (_CLASS_FUNC.__get__(value, classmethod),)
        if isinstance(value, property):
            return tuple(part.__get__(value, property) for part in _PROPERTY_PARTS)
        if isinstance(value, functools.partialmethod):
            own = _own_dict(value)
            return (own.get("func"), *own.get("args", ()), *dict.values(own.get("keywords", {})))
        if isinstance(value, functools.cached_property):
            return (_own_dict(value).get("func"),)
        if isinstance(value, _LRU_WRAPPER):
            return (_own_dict(value).get("__wrapped__"),)
        for kind in REDUCED_TYPES:
            if isinstance(value, kind):
                reduced = cast(Any, kind).__reduce__(value)
                return tuple(reduced[1]) if type(reduced[1]) is tuple else (reduced[1],)
    except Exception as error:  # a hostile subclass, a state __reduce__ cannot show
        raise Opaque(str(error)) from None
    raise Opaque(f"not a wrapper: {type(value).__name__}")


def library_wrapped(value: Any) -> Any:
    """What a library function made by functools.wraps wraps (its `__wrapped__`, read from
    its own dict), or None."""
    if type(value) is not types.FunctionType:
        return None
    return _own_dict(value).get("__wrapped__")
