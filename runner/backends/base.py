"""What every backend is: the interface, and how a run the backend lost is recognised.

Backends receive an `ExecutionRequest` and return an `ExecutionResult`; nothing above
them knows which isolation tier ran the code. `runner.backends.registry` picks one by
name; this module names no implementation, so every implementation can import it.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..cancellation import Cancellation
from ..types import ExecutionRequest, ExecutionResult, Status
from ..worker import error_types


class Backend(Protocol):
    name: str

    def run(self, request: ExecutionRequest, *, run_id: str,
            cancel: Cancellation | None = None) -> ExecutionResult: ...

    def warm(self) -> None: ...

    def open_session(self, template: ExecutionRequest) -> Any: ...

    def close(self) -> None: ...


# Error types of `crashed` results whose run the backend lost: its cluster node (or the
# actor holding the sandbox there) went away mid-run, or no node could take the run. They
# say nothing about the code, and a sandboxed run leaves nothing behind, so a caller that
# counts outcomes (an evaluation) runs such a request again instead of counting it.
LOST_RUN_ERRORS = error_types.LOST_RUN


def run_was_lost(result: ExecutionResult) -> bool:
    """Whether the backend lost this run (see LOST_RUN_ERRORS): run it again, once."""
    return result.status is Status.CRASHED and result.error is not None and \
        result.error.type in LOST_RUN_ERRORS


# The tier every entry point uses unless told otherwise: real Python in the jail.
DEFAULT_BACKEND = "jail"
# The tiers a ray backend's actors can hold on the cluster's nodes.
RAY_INNER_BACKENDS = ("jail", "restricted", "docker")
