"""Failures of the runner itself or of its caller, never of user code.

What user code does is reported as data in an `ExecutionResult`. These exceptions
are for the cases where no honest result exists: the configuration is wrong, the
worker program cannot start, the log database cannot be opened. Each carries a
stable `code` and a message that says how to fix the problem.
"""

from __future__ import annotations


class RunnerError(Exception):
    """Base of every exception the runner raises on purpose."""

    code = "RUNNER_ERROR"

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(f"{message} (fix: {fix})" if fix else message)


class ConfigurationError(RunnerError):
    """A setting, argument or environment variable has a value the runner cannot use."""

    code = "CONFIGURATION"


class UnknownBackendError(ConfigurationError):
    code = "UNKNOWN_BACKEND"


class BackendUnavailableError(RunnerError):
    """The chosen isolation tier cannot run on this machine right now."""

    code = "BACKEND_UNAVAILABLE"


class WorkerStartError(BackendUnavailableError):
    """The worker process did not start or did not report ready."""

    code = "WORKER_START"


class SandboxClosedError(RunnerError):
    code = "SANDBOX_CLOSED"


class LogStoreError(RunnerError):
    """The log database cannot be opened or migrated."""

    code = "LOG_STORE"


class NotFoundError(RunnerError):
    code = "NOT_FOUND"


class FunctionDefinitionError(ConfigurationError):
    """A Python callable cannot become a sandboxed function (found at decoration time)."""

    code = "FUNCTION_DEFINITION"


class FunctionSpecError(ConfigurationError):
    """A function spec (from a file, a model or code) has a shape or value runner cannot use."""

    code = "FUNCTION_SPEC"


class FunctionNotFoundError(NotFoundError):
    """A function set has no function of that name."""

    code = "FUNCTION_NOT_FOUND"


class FunctionExistsError(ConfigurationError):
    """A function set already has a function of that name."""

    code = "FUNCTION_EXISTS"


class LLMError(RunnerError):
    """The language model's server could not give a usable reply (after any retries)."""

    code = "LLM_ERROR"


class LLMUnavailableError(LLMError):
    """No answer from the server: connection refused, timed out, or kept failing (429, 5xx)."""

    code = "LLM_UNAVAILABLE"


class LLMProtocolError(LLMError):
    """The server answered, but not in the OpenAI protocol: an HTML page, a body that is not
    JSON, JSON that is not a chat completion, a completion without a choice."""

    code = "LLM_PROTOCOL"


class LLMAuthenticationError(LLMError):
    """The server refused the API key."""

    code = "LLM_AUTHENTICATION"


class LLMRequestError(LLMError):
    """The server refused the request itself (unknown model, bad parameter, context too long)."""

    code = "LLM_REQUEST"


class ToolsNotSupportedError(LLMRequestError):
    """The model or server rejects the `tools` parameter of native function calling."""

    code = "TOOLS_UNSUPPORTED"


class RunLostError(RunnerError):
    """The backend lost a run for a reason that is not the code's (a cluster node went
    away): a conversation stops there, rather than tell the model about the cluster."""

    code = "RUN_LOST"
