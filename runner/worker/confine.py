"""Kernel-enforced confinement of a restricted-tier child: Landlock, then seccomp.

One call, made in the child just before user code first runs (after its limits are set,
before the audit hook): afterwards nothing the child does, however it got its hands on
Python's internals, reaches files outside the Python installation, the network, other
processes or the kernel's state. See landlock.py and seccomp.py for what each covers.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from . import landlock, seccomp


def confine(readable: Iterable[str]) -> bool:
    """Confine this process for good. True when both layers are in place."""
    files = landlock.restrict(readable)
    calls = seccomp.install(os.getpid())
    return files and calls
