"""`@tool`: turn a Python function into a sandboxed function spec, at decoration time.

The decorated object is still callable on the host, exactly like the function (useful in
tests and for trusted callers); `.spec` is the `FunctionSpec` whose code runs in the
sandbox. Every problem with the function (no annotation, `*args`, an unsupported type,
unreadable source) raises `FunctionDefinitionError` when the module is imported.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, Generic, ParamSpec, TypeVar, overload

from .spec import FunctionSpec

P = ParamSpec("P")
R = TypeVar("R")


class Tool(Generic[P, R]):
    """A Python function together with its FunctionSpec."""

    def __init__(self, function: Callable[P, R], spec: FunctionSpec) -> None:
        self.__wrapped__ = function
        self.spec = spec
        functools.update_wrapper(self, function)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.__wrapped__(*args, **kwargs)

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        return f"<tool {self.spec.name}>"


@overload
def tool(function: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(*, name: str | None = None, description: str | None = None,
         packages: Iterable[str] | str = ()) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(function: Callable[..., Any] | None = None, /, *, name: str | None = None,
         description: str | None = None, packages: Iterable[str] | str = ()) -> Any:
    """Decorate a function to run it in the sandbox: `@tool` or `@tool(packages=["sympy"])`.

    `name` and `description` override the function's name and the docstring's first
    paragraph; `packages` are the requirements its code imports.
    """

    def decorate(target: Callable[..., Any]) -> Tool[Any, Any]:
        from .schema import spec_from_callable

        aliases = _aliases_of_tool(target)
        spec = spec_from_callable(target, name=name, description=description,
                                  packages=packages if isinstance(packages, str) else list(packages),
                                  decorator_names=aliases)
        return Tool(target, spec)

    if function is not None:
        return decorate(function)
    return decorate


def _aliases_of_tool(function: Callable[..., Any]) -> frozenset[str]:
    """Names this decorator has in the function's module (`from runner import tool as expose`)."""
    namespace = getattr(function, "__globals__", {})
    return frozenset(key for key, value in namespace.items() if value is tool)
