"""The restricted tier's executor: user code compiled under the policy, in a confined child.

Runs inside the forked child (see child.py). The worker builds one `RestrictedExecutor`
before it splits into supervisor and forkserver, so the policy, the preloaded modules,
each library's patches and the kernel confinement's prepared rules are inherited by
every child for free.

`layers` other than "full" are test modes and nothing else: "hook" runs user code with the
real builtins under the audit hook (code that escaped the policy), "kernel" with the real
builtins and no hook at all; both under the same kernel confinement and process design.
The isolation tests run in those modes too, to show that what the restricted tier
guarantees (nothing reaches the host, no run sees another, results cannot be forged,
limits cannot be changed) does not rest on the policy, nor on the hook.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from RestrictedPython import compile as restricted_compile

from . import audit, syscalls
from .child import RESULT_FD, ChildConfig, Reporter
from .execution import run_request
from .jail import View
from .jailed import JailedChildren
from .policy import (
    DEFAULT_ALLOWED_MODULES,
    LAZY_IMPORTS,
    REFUSED_PARTS,
    Denied,
    Guards,
    Policy,
    clear_denials,
    compile_user_code,
    new_namespace,
    recorded_denials,
    run_module,
    set_announcer,
)
from .policy import hooks as policy_hooks
from .policy import transformer as policy_transformer
from .policy.refusals import ELSEWHERE
from .policy.transformer import bound_names

# full: policy + audit hook + kernel; hook: audit hook + kernel; kernel: kernel only.
LAYERS = ("full", "hook", "kernel")


class RestrictedExecutor(JailedChildren):
    name = tier = "restricted"
    uses_files = False  # no file access at all: runs need no working directory

    def __init__(self, allowed_modules: Iterable[str] = DEFAULT_ALLOWED_MODULES, *,
                 layers: str = "full") -> None:
        if layers not in LAYERS:
            raise ValueError(f"layers must be one of {', '.join(LAYERS)}")
        super().__init__()
        self.policy = Policy(allowed_modules)
        self.guards = Guards(self.policy)
        self.layers = layers
        self.guarded = layers == "full"
        self.preloaded: list[str] = []
        self._hook: Callable[[str, tuple[Any, ...]], None] | None = None
        self._announce: Callable[[str], None] | None = None

    def preload(self) -> list[str]:
        """Import the allowed modules once, in the worker, apply each library's patches and
        warm it up. (Inside the jail's namespaces, before its view is sealed: the host's
        tree is still there to import from.)"""
        for name in self.policy.allowed:
            try:
                importlib.import_module(name)
            except ImportError:
                continue
            self.preloaded.append(name)
        # What C code of the allowed modules imports lazily: loaded here, it needs no
        # file once the view is sealed.
        for name in sorted(LAZY_IMPORTS):
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        self.policy.deny_library_objects()
        for library in self.policy.libraries:
            if library.root not in self.preloaded:
                continue
            if library.prepare is not None:
                library.prepare(self.guards)
            if library.warm_up is not None:
                library.warm_up()
        return self.preloaded

    def prepare_children(self, view: View) -> None:
        """Once the view is sealed: what every child inherits, built once here (the compile
        sites, the Landlock ruleset over the view, the seccomp template, the audit hook,
        the guarded builtins)."""
        readable = view.readable()
        # Who may compile code, make functions from it and run it in a child: the
        # policy's own ways in, trusted by the identity of their code.
        audit.SITES.trust(run_request)
        audit.SITES.allow_through(
            RestrictedExecutor._compile, RestrictedExecutor._execute, compile_user_code,
            policy_transformer.compile_user_expression, run_module, policy_hooks.evaluate,
            restricted_compile.compile_restricted_exec,
            restricted_compile.compile_restricted_eval,
            restricted_compile._compile_restricted_mode)
        audit.prepare(readable)
        self.prepare_jail(view, syscalls.RESTRICTED_CHILD)
        if self.layers != "kernel":
            self._hook = audit.build(
                report_fd=RESULT_FD, readable=readable,
                importable=tuple(self.policy.exact) + self.policy.prefixes,
                importable_prefixes=self.policy.prefixes,
                refused_parts=self.policy.refused_modules + REFUSED_PARTS, refusal=Denied)
        self.guards.builtins_table()  # built once here, shared copy-on-write by children

    def _compile(self, tree: ast.Module, filename: str, context: dict[str, Any]) -> Any:
        if not self.guarded:
            return compile(tree, filename, "exec")
        # Names the run's namespace binds besides this code (earlier blocks, the other
        # sources of the request): none of them is trusted to be the builtin it names.
        bound_elsewhere = frozenset(context.get("namespace", ()))
        for other in context.get("trees", ()):
            if other is not tree:
                bound_elsewhere |= bound_names(other)
        compiled = compile_user_code(tree, filename, bound_elsewhere=bound_elsewhere)
        if compiled.errors:
            raise Denied("the restricted backend refused this code: "
                          + "; ".join(compiled.errors)
                          + f". Allowed modules: {self.policy.allowed_text()}; {ELSEWHERE}.")
        return compiled.code

    def _execute(self, code: Any, namespace: dict[str, Any]) -> None:
        if not self.guarded:
            exec(code, namespace)
            return
        run_module(code, namespace, self.guards)

    def new_namespace(self) -> dict[str, Any]:
        if not self.guarded:
            return {"__name__": "__main__", "__builtins__": builtins}
        return new_namespace(self.guards)

    def before_request(self, reporter: Reporter, config: ChildConfig) -> None:
        """In the child, before its request (it already gave up every privilege): the jail's
        confinement (jailed.py), with the policy's way to announce refusals set in
        between, then the audit hook (built in the worker: nothing of it is made where
        user code runs)."""
        os.chdir("/")  # no working directory: the code cannot touch files
        self._announce = reporter.denied
        self.confine(config)
        if self._hook is not None:
            sys.addaudithook(self._hook)
        self._warm_up()

    def before_calls_confined(self) -> None:
        if self._announce is not None:
            set_announcer(self._announce)

    def _warm_up(self) -> None:
        """Run a trivial request once, in full, before the real one arrives: a fresh child
        copies each page of the worker's memory the first time it writes to it (reference
        counts), and compiling and running code writes to some three hundred. Done here,
        it is off the run's clock whenever the child had a moment to get ready."""
        run_request({"code": "pass", "filename": "<warm-up>"}, compile_source=self._compile,
                    execute=self._execute, namespace=self.new_namespace(), refusal=Denied,
                    refusals_recorded=recorded_denials)
        clear_denials()

    def isolation(self) -> dict[str, Any]:
        """The layers confining this child (asked once it is set up, before its request)."""
        return self.jail_isolation(policy=self.guarded, audit_hook=self._hook is not None)

    def execute(self, request: dict[str, Any], namespace: dict[str, Any],
                reporter: Reporter) -> dict[str, Any]:
        clear_denials()  # a session child runs many requests
        return run_request(request, compile_source=self._compile, execute=self._execute,
                           namespace=namespace, refusal=Denied,
                           refusals_recorded=recorded_denials)
