"""Kernel-enforced confinement of a restricted-tier child: Landlock, then seccomp.

One call, made in the child just before user code first runs (after its limits are set,
before the audit hook): afterwards nothing the child does, however it got its hands on
Python's internals, reaches files outside the Python installation, the network, other
processes or the kernel's state. See landlock.py and seccomp.py for what each covers.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import landlock, seccomp


class Confinement:
    """Both layers, built once in the zygote (children inherit the Landlock ruleset's fd
    and the filter's template); `apply`, in a child, is a few system calls."""

    def __init__(self, readable: Iterable[str]) -> None:
        self._ruleset = landlock.build(readable)
        self._filter = seccomp.build()

    def inherited_fds(self) -> tuple[int, ...]:
        """Descriptors a child must keep open until it applies the confinement."""
        return (self._ruleset.fd,) if self._ruleset is not None else ()

    def apply(self) -> bool:
        # Landlock first: seccomp then forbids nothing the Landlock call still needs.
        files = self._ruleset.apply() if self._ruleset is not None else False
        calls = self._filter.apply() if self._filter is not None else False
        return files and calls


def confine(readable: Iterable[str]) -> bool:
    """Confine this process for good. True when both layers are in place."""
    return Confinement(readable).apply()
