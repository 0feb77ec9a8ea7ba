"""C iteration that calls functions: values crossing between library callables are checked.

`map(g, map(f, xs))`, `functools.reduce(f, xs)`, `sorted(xs, key=f)`, `iter(f, stop)`:
the interpreter calls `f` on values and hands what it returns straight to `g` (or back to
`f`), in C, where no hook of compiled code runs. Two library callables so composed pass
values to each other that user code never held: a library helper's result (a function's
`__globals__`, say) becomes the next one's argument, and only the last result is ever
checked. So the C callables that call a function on values get stand-ins here that hand
C a `CheckedCall` instead of the function: every argument it receives and every result it
gives passes the value check, exactly as if user code had made each call itself. User
functions need none (they check their own arguments on entry, and return what user code
held), nor do the plain types (`map(int, xs)` makes plain values).

The stand-ins keep the C iteration (a subclass of `map` is still a map, still lazy): only
the function changes. The real ones are substituted by identity wherever they appear
(the builtins, itertools' and functools' attributes, `type()` of a real map object), so
there is no way back to the unchecked ones. Stdlib only.
"""

from __future__ import annotations

import builtins
import functools
import itertools
from collections.abc import Iterable
from typing import Any

from .checks import PLAIN_TYPES, ValueRule
from .compiled import is_policy_function

_BETWEEN = "a value passed between library functions by C iteration"


class CheckedCall:
    """A library callable as C iteration calls it: arguments and result checked."""

    __slots__ = ("_function", "_values")

    def __init__(self, function: Any, values: ValueRule) -> None:
        self._function = function
        self._values = values

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = self._values
        held, check = values.held, values.check
        for value in args:
            if type(value) not in held:
                check(value, _BETWEEN)
        for value in kwargs.values():
            if type(value) not in held:
                check(value, _BETWEEN)
        result = self._function(*args, **kwargs)
        return result if type(result) in held else check(result, _BETWEEN)


def make_plumbing(values: ValueRule) -> dict[Any, Any]:
    """The stand-ins, keyed by the real callable each replaces."""

    def through(function: Any) -> Any:
        """What C gets to call in place of `function`."""
        if function is None or (type(function) is type and function in PLAIN_TYPES) or is_policy_function(function):
            return function
        return CheckedCall(values.check(function, "a function given to C iteration"), values)

    class Map(map):  # type: ignore[type-arg]  # (not subscriptable at run time)
        """map(function, *iterables), the function's arguments and results checked."""

        def __new__(cls, function: Any, *iterables: Any) -> Any:
            return map.__new__(cls, through(function), *iterables)

    class Filter(filter):  # type: ignore[type-arg]  # (not subscriptable at run time)
        def __new__(cls, function: Any, iterable: Any) -> Any:
            return filter.__new__(cls, through(function), iterable)

    class Starmap(itertools.starmap):  # type: ignore[type-arg]  # (not subscriptable at run time)
        def __new__(cls, function: Any, iterable: Any) -> Any:
            return itertools.starmap.__new__(cls, through(function), iterable)

    class Filterfalse(itertools.filterfalse):  # type: ignore[type-arg]  # (not subscriptable at run time)
        def __new__(cls, function: Any, iterable: Any) -> Any:
            return itertools.filterfalse.__new__(cls, through(function), iterable)

    class Takewhile(itertools.takewhile):  # type: ignore[type-arg]  # (not subscriptable at run time)
        def __new__(cls, predicate: Any, iterable: Any) -> Any:
            return itertools.takewhile.__new__(cls, through(predicate), iterable)

    class Dropwhile(itertools.dropwhile):  # type: ignore[type-arg]  # (not subscriptable at run time)
        def __new__(cls, predicate: Any, iterable: Any) -> Any:
            return itertools.dropwhile.__new__(cls, through(predicate), iterable)

    class Accumulate(itertools.accumulate):  # type: ignore[type-arg]  # (not subscriptable at run time)
        def __new__(cls, iterable: Any, func: Any = None, *, initial: Any = None) -> Any:
            return itertools.accumulate.__new__(cls, iterable, through(func), initial=initial)

    class Groupby(itertools.groupby):  # type: ignore[type-arg]  # (not subscriptable at run time)
        def __new__(cls, iterable: Any, key: Any = None) -> Any:
            return itertools.groupby.__new__(cls, iterable, through(key))

    def sorted_(iterable: Iterable[Any], /, *, key: Any = None, reverse: bool = False) -> list[Any]:
        return sorted(iterable, key=through(key), reverse=reverse)

    def min_(*args: Any, **kwargs: Any) -> Any:
        if "key" in kwargs:
            kwargs["key"] = through(kwargs["key"])
        return min(*args, **kwargs)

    def max_(*args: Any, **kwargs: Any) -> Any:
        if "key" in kwargs:
            kwargs["key"] = through(kwargs["key"])
        return max(*args, **kwargs)

    def iter_(source: Any, *sentinel: Any) -> Any:
        return iter(through(source), *sentinel) if sentinel else iter(source)

    def reduce_(function: Any, iterable: Any, *initial: Any) -> Any:
        return functools.reduce(through(function), iterable, *initial)

    def cmp_to_key_(function: Any) -> Any:
        # Its result is opaque (what it calls cannot be read back): checked going in.
        return functools.cmp_to_key(through(function))

    stand_ins: dict[Any, Any] = {
        builtins.map: Map,
        builtins.filter: Filter,
        itertools.starmap: Starmap,
        itertools.filterfalse: Filterfalse,
        itertools.takewhile: Takewhile,
        itertools.dropwhile: Dropwhile,
        itertools.accumulate: Accumulate,
        itertools.groupby: Groupby,
        builtins.sorted: sorted_,
        builtins.min: min_,
        builtins.max: max_,
        builtins.iter: iter_,
        functools.reduce: reduce_,
        functools.cmp_to_key: cmp_to_key_,
    }
    for real, stand_in in stand_ins.items():
        # Shown as the real one (`<class 'map'>`); the value check knows it by identity.
        stand_in.__name__ = stand_in.__qualname__ = real.__name__
        stand_in.__module__ = real.__module__
        stand_in.__doc__ = real.__doc__
    return stand_ins


def install(values: ValueRule, builtins_table: dict[str, Any]) -> None:
    """Substitute the stand-ins for the real callables: in the builtins user code sees, and
    wherever the real ones appear as values."""
    stand_ins = make_plumbing(values)
    values.allow_class(CheckedCall)  # what it calls, and with what, is checked on each call
    for real, stand_in in stand_ins.items():
        values.substitute(real, stand_in)
        values.allow(stand_in)
        name = getattr(real, "__name__", "")
        if builtins_table.get(name) is real:
            builtins_table[name] = stand_in
