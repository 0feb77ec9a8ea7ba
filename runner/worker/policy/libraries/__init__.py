"""Per-library declarations: what each allowed library adds to the generic policy.

The mechanism (the transformer, the guards, the value check) knows nothing of any one
library. A library that hands out more than plain values (sympy: string parsing, code
generation, printers that call methods by name, class factories) gets a declaration
module here listing, for reviewers to check row by row: which of its subpackages may be
imported, which of its modules are refused and why, whose values may be held but not
imported, which of its callables are refused outright, the patches that close its
code-running corners, and a warm-up that fills its caches in the worker. Each sink it
closes has a row in `policy.sinks.SINKS`, with the test that attacks it. Adding a
library, or upgrading sympy, is a diff of one declaration module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..guards import Guards


@dataclass(frozen=True)
class Library:
    root: str
    # Modules below the root that may be imported (each, and everything below it).
    subpackages: tuple[str, ...]
    # Package modules that may be reached (for the allowed modules inside them) but whose
    # other submodules are not allowed.
    packages: frozenset[str] = frozenset()
    # Modules (and everything they define) refused though they lie below an allowed one.
    refused_modules: tuple[str, ...] = ()
    # Packages whose values may be held, though they may not be imported ("mpmath.").
    value_only: tuple[str, ...] = ()
    # Callables refused outright, with the reason the user is told (resolved once the
    # library is imported).
    refused: Callable[[], Iterable[tuple[Any, str]]] = field(default=lambda: ())
    # Patches that close the library's code-running corners, applied once in the worker.
    prepare: Callable[[Guards], None] | None = None
    # Fills the library's caches and lazy imports in the worker, before any child.
    warm_up: Callable[[], None] | None = None


# Allowed module -> the declaration module in this package.
_DECLARATIONS = {"sympy": "sympy"}


def declaration(name: str) -> Library | None:
    module = _DECLARATIONS.get(name)
    if module is None:
        return None
    library: Library = importlib.import_module(f"{__name__}.{module}").LIBRARY
    return library
