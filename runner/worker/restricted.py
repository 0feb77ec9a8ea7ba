"""The restricted tier's executor: RestrictedPython compile, guarded namespace, no escape.

Runs inside the forked child (see child.py). The zygote builds one `RestrictedExecutor`
before forking, so the policy, the preloaded modules and the sympy hardening are
inherited by every child for free.
"""

from __future__ import annotations

import ast
import os
import builtins
import importlib
import operator
from collections.abc import Iterable
from typing import Any

from . import audit
from .confine import Confinement
from . import guards as guard_module
from .guards import DEFAULT_ALLOWED_MODULES, Denied, Guards, Policy, compile_user_code, make_globals
from .execution import Refused, run_request

# Real builtins and helpers that must never reach user code through some library attribute.
_DANGEROUS_OBJECTS = (
    builtins.getattr, builtins.setattr, builtins.delattr, builtins.eval, builtins.exec,
    builtins.compile, builtins.open, builtins.__import__, builtins.globals, builtins.locals,
    builtins.vars, builtins.breakpoint, builtins.input, operator.attrgetter,
    operator.methodcaller, importlib.import_module,
)


class RestrictedExecutor:
    name = "restricted"
    uses_files = False  # no file access at all: runs need no working directory

    def __init__(self, allowed_modules: Iterable[str] = DEFAULT_ALLOWED_MODULES) -> None:
        self.policy = Policy(allowed_modules)
        self.policy.deny_objects(_DANGEROUS_OBJECTS)
        self.guards = Guards(self.policy)
        self.preloaded: list[str] = []
        self._confined = False
        self._confinement: Confinement | None = None
        self.kernel_confined = False

    def preload(self) -> list[str]:
        """Import the allowed modules once, in the parent, and close sympy's eval paths."""
        for name in self.policy.allowed:
            try:
                importlib.import_module(name)
            except ImportError:
                continue
            self.preloaded.append(name)
        if "sympy" in self.preloaded:
            from .sympy_hardening import harden_sympy

            harden_sympy(self.guards)
            self._warm_sympy()
        audit.prepare()
        self._confinement = Confinement(audit.readable_roots())  # once, for every child
        self.guards.builtins_table()  # built once here, shared copy-on-write by children
        return self.preloaded

    def _warm_sympy(self) -> None:
        """Fill sympy's caches and lazy imports once, so children do not pay for them."""
        import sympy

        x = sympy.Symbol("x")
        sympy.solve(x**2 - 4, x)
        sympy.simplify(sympy.sympify("(x**2 - 1)/(x - 1)"))
        sympy.integrate(sympy.sin(x), x)
        sympy.factorint(2**32 + 1)
        sympy.Matrix([[1, 2], [3, 4]]).det()
        sympy.N(sympy.pi, 20)
        sympy.nsolve(x**2 - 2, x, 1)

    def _compile(self, tree: ast.Module, filename: str) -> Any:
        compiled = compile_user_code(tree, filename)
        if compiled.errors:
            raise Refused("the restricted backend refused this code: "
                          + "; ".join(compiled.errors)
                          + f". Allowed modules: {self.policy.allowed_text()}; use the docker "
                            "backend for unrestricted Python.")
        return compiled.code

    def inherited_fds(self) -> tuple[int, ...]:
        """Descriptors children keep: the confinement's Landlock ruleset."""
        return self._confinement.inherited_fds() if self._confinement is not None else ()

    def new_namespace(self) -> dict[str, Any]:
        return make_globals(self.guards)

    def execute(self, request: dict[str, Any], namespace: dict[str, Any] | None = None
                ) -> dict[str, Any]:
        guard_module.clear_denials()  # a session child runs many requests
        if not self._confined:  # in the child: the zygote never executes requests itself
            confinement = self._confinement or Confinement(audit.readable_roots())
            self.kernel_confined = confinement.apply()
            for fd in confinement.inherited_fds():  # applied: this child needs it no more
                os.close(fd)
            audit.install()
            self._confined = True
        return run_request(request, compile_source=self._compile,
                           namespace=namespace if namespace is not None else self.new_namespace(),
                           refusal=Denied, refusals_recorded=guard_module.recorded_denials)
