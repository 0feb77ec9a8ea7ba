"""The restricted tier's policy: what compiled user code may name, import, read and call.

A generic mechanism, and per-library declarations:

- names.py: the rules of Python itself as the policy sees them (dunders, private names,
  the interpreter's own modules, what C code imports lazily);
- modules.py: the allowlist, with each library's declaration folded in;
- checks.py: the one value check, applied wherever a value reaches user code;
- wrappers.py: what a wrapper (partial, staticmethod, map object, ...) holds, which the
  check judges instead of the wrapper's class;
- plumbing.py: C iteration that calls functions (map, reduce, sorted's key, ...), with
  every value crossing it between library callables checked;
- compiled.py: which code the policy compiled (the user's own functions);
- guards.py: the hooks compiled code calls (attributes, items, iteration, writes, calls,
  function entry, imports, formatting);
- builtins.py: the builtins user code sees;
- transformer.py: the compiler (RestrictedPython's transformer, plus hooks as parameters
  and checks on entry of every user function);
- inline.py: the checks the compiler can prove, compiled inline instead of hook calls;
- direct_calls.py: user code's calls of its own top-level functions, without entry checks;
- hooks.py: running compiled code, the hooks passed in as arguments;
- refusals.py: how a refusal is raised, announced and recorded;
- libraries/: what each library adds (sympy: curated subpackages, refused corners and
  callables, patches of its string-to-code paths, its warm-up);
- sinks.py: every known library sink, how it is closed, and the test that attacks it.

The policy gives clear `denied` messages and depth; the restricted tier's promises rest
on the kernel layer beneath it (see SECURITY.md).
"""

from __future__ import annotations

from .guards import Guards
from .hooks import evaluate, new_namespace, run_module
from .modules import Policy
from .names import DEFAULT_ALLOWED_MODULES, LAZY_IMPORTS, REFUSED_PARTS
from .refusals import Denied, clear_denials, deny, recorded_denials, set_announcer
from .sinks import SINKS, Sink
from .transformer import HOOK_NAMES, compile_user_code, compile_user_expression

__all__ = [
    "DEFAULT_ALLOWED_MODULES",
    "HOOK_NAMES",
    "LAZY_IMPORTS",
    "REFUSED_PARTS",
    "SINKS",
    "Denied",
    "Guards",
    "Policy",
    "Sink",
    "clear_denials",
    "compile_user_code",
    "compile_user_expression",
    "deny",
    "evaluate",
    "new_namespace",
    "recorded_denials",
    "run_module",
    "set_announcer",
]
