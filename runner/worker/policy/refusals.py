"""How the policy refuses: one exception, announced before it is raised, and recorded.

A refusal raises `Denied` (a BaseException, so `except Exception` in user code does not
swallow it). Before raising, it is announced on the child's result channel (the child
installs the announcer), so the supervisor hears of it at once and nothing user code
does afterwards can take it back; it is also recorded, so a run that catches it anyway
still ends as `denied`. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

# What a refusal tells the reader (a model, or the person who reads its log) about where
# such code can run: the strict tier is a choice of whoever runs the sandbox.
ELSEWHERE = ("the strict tier (backend 'restricted') refuses it; the jail tier (backend "
             "'jail', the default) runs unrestricted Python with packages and files")


class Denied(BaseException):
    """Raised when user code asks for something the restricted tier refuses."""


class Unacceptable(Exception):
    """A value check's verdict when asked quietly (filtering what a library hands around,
    not refusing the user)."""


_denials: list[str] = []
# Called with every refusal before it is raised (the child's Reporter.denied).
_announce: Callable[[str], None] | None = None


def set_announcer(announce: Callable[[str], None] | None) -> None:
    global _announce
    _announce = announce


def deny(message: str) -> NoReturn:
    _denials.append(message)
    if _announce is not None:
        _announce(message)
    raise Denied(message)


def refuse_quietly(message: str) -> Any:
    raise Unacceptable(message)


def recorded_denials() -> list[str]:
    return list(_denials)


def clear_denials() -> None:
    _denials.clear()
