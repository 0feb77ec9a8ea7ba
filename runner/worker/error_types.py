"""The error types a result can carry (`ExecutionResult.error.type`) that the runner itself
names, defined once beside the wire format.

The worker writes some of them into its replies, the host's backends and callers add the
rest, and the feedback code, replay and the optimizer's smoke check read them back: plain
string constants in a stdlib-only module, so the worker can import them too. An exception
raised by user code keeps its own class name (`ZeroDivisionError`), which is not listed.
`tests/test_error_types.py` checks that every error type written anywhere in the package
is one of these, and that the feedback code words each of them.
"""

from __future__ import annotations

# -- judged by the worker's supervisor or reported by its child ---------------------------
TIMEOUT = "Timeout"  # wall-clock or CPU limit (status timeout)
MEMORY_ERROR = "MemoryError"  # the memory limit (status memory_limit); Python's own name
CRASH = "Crash"  # killed or died otherwise (status crashed)
DENIED = "Denied"  # the policy refused an import, attribute or call (status denied)
WORKER_ERROR = "WorkerError"  # the worker itself failed (status crashed)
RESULT_ERROR = "ResultError"  # a value that could not be sent back (status error)
FUNCTION_NOT_DEFINED = "FunctionNotDefined"  # a call of a name the code did not define
SYNTAX_ERROR = "SyntaxError"  # the code did not compile; Python's own name
INPUT_FILES = "InputFilesError"  # the files handed to the run could not be written (error)

# -- the host: packages, engine, worker pool, sessions ------------------------------------
NO_FILES = "NoFiles"  # files handed to a tier whose runs have none (restricted; denied)
PACKAGE_UNAVAILABLE = "PackageUnavailable"  # a package refused by the backend (status denied)
INSTALL_FAILED = "InstallFailed"  # packages could not be installed (status install_failed)
ENGINE_UNAVAILABLE = "EngineUnavailable"  # no Docker engine (status crashed)
PROTOCOL_ERROR = "ProtocolError"  # the worker sent a malformed result (status crashed)
WORKER_LOST = "WorkerLost"  # the worker died mid-run (status crashed)
INVALID_REQUEST = "InvalidRequest"  # a request that cannot be sent as JSON (invalid_args)
INTERRUPTED = "Interrupted"  # Ctrl-C stopped the run (status crashed)
CANCELLED = "Cancelled"  # its caller cancelled it (runner.cancellation; status crashed)

# -- a cluster: the run was lost, not judged ------------------------------------------------
NODE_LOST = "NodeLost"  # its node went away (status crashed)
NO_CAPACITY = "NoCapacity"  # no node could take it (status crashed)

# -- function calls refused before anything ran (status invalid_args) ---------------------
INVALID_ARGUMENTS = "InvalidArguments"
UNKNOWN_FUNCTION = "UnknownFunction"

# Runs the backend lost: they say nothing about the code and may be run once more.
LOST_RUN = frozenset({NODE_LOST, NO_CAPACITY})
# Calls the host refused before running anything: a replay has nothing to run again.
REFUSED_BEFORE_RUNNING = frozenset({INVALID_ARGUMENTS, UNKNOWN_FUNCTION})

ALL = frozenset({
    TIMEOUT, MEMORY_ERROR, CRASH, DENIED, WORKER_ERROR, RESULT_ERROR, FUNCTION_NOT_DEFINED,
    SYNTAX_ERROR, INPUT_FILES, NO_FILES, PACKAGE_UNAVAILABLE, INSTALL_FAILED, ENGINE_UNAVAILABLE, PROTOCOL_ERROR,
    WORKER_LOST, INVALID_REQUEST, INTERRUPTED, CANCELLED, NODE_LOST, NO_CAPACITY, INVALID_ARGUMENTS,
    UNKNOWN_FUNCTION,
})
