"""Which code the policy compiled: a function whose code is one of these is the user's own
code (or code a library generated and the policy compiled: lambdify's, parse_expr's),
whatever its `__module__` says (a library decorator's real functools.wraps copies that).

Its own module because both the compiler (which records) and the value check (which
asks) need it. Stdlib only.
"""

from __future__ import annotations

import types
from typing import Any

from .names import identity

# Every code object compiled under the policy in this process (kept alive, so an id stays
# its code's).
_POLICY_CODE: dict[int, types.CodeType] = {}


def remember_code(code: types.CodeType) -> None:
    """Record `code` and every code object nested in it."""
    pending = [code]
    while pending:
        current = pending.pop()
        _POLICY_CODE[identity(current)] = current
        pending.extend(c for c in current.co_consts if isinstance(c, types.CodeType))


def is_policy_function(value: Any) -> bool:
    """A function whose code the policy compiled."""
    if type(value) is not types.FunctionType:
        return False
    code = value.__code__
    return _POLICY_CODE.get(identity(code)) is code
