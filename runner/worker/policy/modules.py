"""Which modules user code may import and reach: the allowlist, with each library's
declaration (its curated subpackages, refused corners, value-only packages) folded in.
Stdlib only.
"""

from __future__ import annotations

import builtins
import importlib
import operator
from collections.abc import Iterable
from typing import Any

from .libraries import Library, declaration
from .names import (
    DEFAULT_ALLOWED_MODULES,
    INTERNAL_MODULES,
    REFUSED_PARTS,
    REFUSED_STDLIB_MODULES,
    identity,
)
from .refusals import ELSEWHERE

# The real builtins and helpers that must never reach user code through some library's
# attribute: they read any attribute, import by name, run strings or open files.
DANGEROUS_OBJECTS = (
    builtins.getattr, builtins.setattr, builtins.delattr, builtins.eval, builtins.exec,
    builtins.compile, builtins.open, builtins.__import__, builtins.globals, builtins.locals,
    builtins.vars, builtins.breakpoint, builtins.input, operator.attrgetter,
    operator.methodcaller, importlib.import_module,
    # The real `type` (a library value may be it): three arguments make a class without a
    # class statement's checks. User code's `type` is the guarded one.
    builtins.type,
)


class Policy:
    """The allowed modules, and what follows from them."""

    def __init__(self, allowed_modules: Iterable[str] = DEFAULT_ALLOWED_MODULES) -> None:
        self.allowed = tuple(sorted(set(allowed_modules)))
        self.libraries: tuple[Library, ...] = tuple(
            library for library in (declaration(name) for name in self.allowed)
            if library is not None)
        exact = set(self.allowed)
        prefixes: list[str] = []
        refused = list(REFUSED_STDLIB_MODULES)
        value_only: list[str] = []
        declared = {library.root: library for library in self.libraries}
        for name in self.allowed:
            library = declared.get(name)
            if library is None:
                prefixes.append(name)
                continue
            exact |= library.packages
            prefixes.extend(library.subpackages)
            refused.extend(library.refused_modules)
            value_only.extend(library.value_only)
        self.exact = frozenset(exact)
        self.prefixes = tuple(prefixes)
        self.refused_modules = tuple(refused)
        self.value_only = tuple(value_only)
        self._value_only_roots = frozenset(prefix.rstrip(".") for prefix in value_only)
        self._verdicts: dict[str, bool] = {}
        self._usable: dict[str, bool] = {}
        self._denied: dict[int, tuple[Any, str]] = {}
        for obj in DANGEROUS_OBJECTS:
            self.deny_object(obj, f"it can run arbitrary code or reach the system; {ELSEWHERE}")

    def deny_library_objects(self) -> None:
        """Each declared library's refused callables (once the libraries are imported)."""
        for library in self.libraries:
            for obj, why in library.refused():
                self.deny_object(obj, why)

    def allowed_text(self) -> str:
        return ", ".join(self.allowed)

    def module_denied(self, name: str) -> bool:
        """A refused corner of an allowed package (or a test suite)."""
        return any(name == prefix or name.startswith(prefix + ".")
                   for prefix in self.refused_modules) \
            or any(part in name for part in REFUSED_PARTS)

    def module_allowed(self, name: str) -> bool:
        verdict = self._verdicts.get(name)
        if verdict is None:
            verdict = type(name) is str and not self.module_denied(name) and (
                name in self.exact
                or any(name == p or name.startswith(p + ".") for p in self.prefixes))
            if len(self._verdicts) < 10_000:
                self._verdicts[name] = verdict
        return verdict

    def module_usable(self, name: str) -> bool:
        """Objects defined in module `name` may be held: an allowed module's, the
        interpreter's own, or a value-only package's."""
        # Asked for every library object user code touches: found once per module name.
        verdict = self._usable.get(name) if type(name) is str else None
        if verdict is None:
            if name in INTERNAL_MODULES or self.value_only_module(name):
                verdict = not self.module_denied(name)
            else:
                verdict = self.module_allowed(name)
            if type(name) is str and len(self._usable) < 10_000:
                self._usable[name] = verdict
        return verdict

    def value_only_module(self, name: str) -> bool:
        return bool(self.value_only) and (name.startswith(self.value_only)
                                          or name in self._value_only_roots)

    def deny_object(self, obj: Any, why: str) -> None:
        """Refuse this very object (by identity, kept alive here) wherever it appears."""
        self._denied[identity(obj)] = (obj, why)

    def denies_instances_of(self, kind: type) -> bool:
        """Some object refused by identity is an instance of exactly `kind`."""
        return any(type(obj) is kind for obj, _ in self._denied.values())

    def denial_of(self, obj: Any) -> str | None:
        entry = self._denied.get(identity(obj))
        return entry[1] if entry is not None and entry[0] is obj else None
