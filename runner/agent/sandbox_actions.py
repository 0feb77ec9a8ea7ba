"""Carry out the actions of one conversation in the sandbox, within its time budget.

Function calls go through `runner.functions.call_function` (arguments validated first;
an unknown name or invalid arguments come back as results and are logged like any
execution). Code blocks run in one `Session` per conversation, opened on the first block,
with the set's functions defined in it first (and again after a block that killed the
session's process, since a restart loses every definition). Every execution's log row
carries the agent run and turn in its meta. Files handed to the run are in every
function call's directory and in the session's (again after a block that ended its
process); the files the executions make are kept, newest version by name (`made`).

The budget is total sandbox time (the sum of the executions' durations), kept by a
`runner.budget.TimeBudget` (the same rule as a session's budget): each execution's
wall-clock limit is cut to what is left of it, and nothing runs once it is used up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..backends.base import run_was_lost
from ..budget import TimeBudget
from ..errors import RunLostError
from ..functions import call_function
from ..ids import new_id
from ..types import ExecutionResult, InputFile, Limits, OutputFile, Status

if TYPE_CHECKING:
    from ..functions import FunctionSet
    from ..sandbox import Sandbox
    from ..session import Session

_KILLED = frozenset({Status.TIMEOUT, Status.MEMORY_LIMIT, Status.CRASHED})


class ActionRunner:
    """Runs one conversation's function calls and code blocks; see the module docstring."""

    def __init__(self, sandbox: Sandbox, functions: FunctionSet, *, limits: Limits,
                 budget_s: float | None, files: tuple[InputFile, ...] = ()) -> None:
        self.sandbox = sandbox
        self.functions = functions
        self.limits = limits
        self.budget = TimeBudget(budget_s)
        self.used_ms = 0
        self.files = files  # in every function call's directory, and the session's
        self.made: dict[str, OutputFile] = {}  # the newest version of each file made
        self.new_files: list[OutputFile] = []  # made since the loop last took them
        self._session: Session | None = None
        self._needs_setup = True
        self._needs_files = True  # the session's directory lacks the given files

    @property
    def exhausted(self) -> bool:
        return self.budget.exhausted

    def _limits(self) -> Limits:
        return self.budget.limits_for(self.limits)

    def _charge(self, result: ExecutionResult) -> None:
        self.budget.charge(result)
        self.used_ms += result.duration_ms
        for made in result.files:
            self.made[made.name] = made
        self.new_files += result.files
        if run_was_lost(result):
            # Not something the code did, nor something the model can fix: the run ends
            # (crashed, RUN_LOST) and whoever drives it decides whether to run it again.
            raise RunLostError(
                f"the sandbox lost execution {result.id}: "
                f"{result.error.message if result.error else 'no reason given'}",
                fix="run the conversation again (an evaluation does so once by itself)")

    def call(self, function: str, arguments: Any, meta: dict[str, Any], ids: list[str]
             ) -> ExecutionResult:
        """Call a function of the set (validated first); the result, whatever happened.
        The execution's id goes into `ids` before it starts (an interrupted turn names it)."""
        ids.append(new_id())
        result = call_function(self.sandbox, self.functions, function, arguments,
                               limits=self._limits(), meta=meta, execution_id=ids[-1],
                               files=self.files)
        self._charge(result)
        return result

    def run_code(self, code: str, meta: dict[str, Any], ids: list[str]
                 ) -> tuple[ExecutionResult, ExecutionResult | None]:
        """Run a block in the conversation's session: (its result, the result of defining the
        set's functions first, when that happened before this block). Ids go into `ids` as
        for `call`."""
        session = self._open_session()
        setup = None
        if self._needs_setup:
            self._needs_setup = False
            if len(self.functions):
                ids.append(new_id())
                setup = session.run(self.setup_code(), limits=self._limits(),
                                    meta={**meta, "agent_setup": True}, execution_id=ids[-1])
                self._charge(setup)
        if setup is not None and setup.status in _KILLED:
            self._needs_files = True
        files, self._needs_files = (self.files if self._needs_files else ()), False
        ids.append(new_id())
        result = session.run(code, limits=self._limits(), meta=meta, execution_id=ids[-1],
                             files=files)
        self._charge(result)
        if result.status in _KILLED:
            # The next block starts in a fresh process, with an empty directory.
            self._needs_setup = self._needs_files = True
        return result, setup

    def take_new_files(self) -> list[OutputFile]:
        """The files made since the last call (for the turn's images)."""
        taken, self.new_files = self.new_files, []
        return taken

    def setup_code(self) -> str:
        """The set's functions, as the source that defines them in the session."""
        return "\n\n".join(spec.code.rstrip("\n") for spec in self.functions) + "\n"

    def _open_session(self) -> Session:
        if self._session is None:
            self._session = self.sandbox.session(limits=self.limits,
                                                 packages=self.functions.packages)
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
