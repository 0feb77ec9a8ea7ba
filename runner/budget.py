"""A time budget shared by several runs: the blocks of a session, the actions of an agent run.

The budget counts sandbox time (the sum of the runs' durations). Each run's wall-clock
limit is cut to what is left, and once less than `MIN_RUN_S` is left nothing more runs:
a run given a few milliseconds could not even start its process, and "the budget is used
up" is a clearer answer than a timeout it could never have avoided.
"""

from __future__ import annotations

import math

from .errors import ConfigurationError
from .types import ExecutionResult, Limits

MIN_RUN_S = 0.01


class TimeBudget:
    """`total_s` seconds of sandbox time, or no budget at all for None."""

    def __init__(self, total_s: float | None) -> None:
        if total_s is not None and (isinstance(total_s, bool) or not isinstance(total_s, (int, float))
                                    or not math.isfinite(total_s) or total_s <= 0):
            raise ConfigurationError(f"a time budget must be a positive number of seconds, got "
                                     f"{total_s!r}", fix="pass e.g. budget_s=60, or None for no budget")
        self.total_s = None if total_s is None else float(total_s)
        self.used_s = 0.0

    @property
    def remaining_s(self) -> float | None:
        return None if self.total_s is None else self.total_s - self.used_s

    @property
    def exhausted(self) -> bool:
        remaining = self.remaining_s
        return remaining is not None and remaining < MIN_RUN_S

    def limits_for(self, limits: Limits) -> Limits:
        """`limits` with the wall-clock limit cut to what is left of the budget."""
        remaining = self.remaining_s
        if remaining is None or remaining >= limits.timeout_s:
            return limits
        return limits.with_overrides(timeout_s=max(remaining, MIN_RUN_S))

    def charge(self, result: ExecutionResult) -> None:
        self.used_s += result.duration_ms / 1000

    def used_up_message(self) -> str:
        return (f"the time budget of {self.total_s:g} s is used up ({self.used_s:.2f} s of sandbox "
                "time ran)")
