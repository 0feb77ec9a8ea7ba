"""The currency of every backend: limits, requests and results.

`ExecutionRequest` goes in, `ExecutionResult` comes out, whatever the isolation tier.
Both are frozen pydantic models because results cross a trust boundary (they are
parsed from what a worker process sends back) and everything above the backends
(functions, agents, logs) relies on one shape and one status vocabulary.
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    field_validator,
    model_validator,
)

from .worker import wire
from .worker.protocol import BLOBS


class Status(StrEnum):
    """What user code did. Never an exception: always data in the result."""

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    DENIED = "denied"
    INVALID_ARGS = "invalid_args"
    INSTALL_FAILED = "install_failed"
    CRASHED = "crashed"

    def __repr__(self) -> str:  # reads as the value it is: ('ok', '4\n')
        return repr(self.value)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Limits(_Frozen):
    """Resource limits applied to one run. Every field has a safe default.

    `timeout_s` is wall-clock time, enforced from outside the process with SIGKILL.
    `cpu_s` defaults to the wall-clock timeout (a process cannot use more CPU than
    wall time on one core; on Docker, threads can, so the CPU limit still matters).
    `memory_mb` bounds what the run allocates on top of the warm interpreter.
    `disk_mb` bounds the jail tier's working directory and /tmp (a tmpfs of the run's own,
    held in memory besides `memory_mb`, gone when the run ends).
    """

    timeout_s: float = Field(default=10.0, gt=0, le=3600)
    cpu_s: float | None = Field(default=None, gt=0, le=3600)
    memory_mb: int = Field(default=256, ge=16, le=65536)
    max_output_bytes: int = Field(default=1_000_000, ge=1024, le=256_000_000)
    max_processes: int = Field(default=32, ge=1, le=4096)
    max_open_files: int = Field(default=64, ge=16, le=65536)
    max_file_size_mb: int = Field(default=16, ge=1, le=65536)
    disk_mb: int = Field(default=wire.DEFAULT_DISK_MB, ge=1, le=65536)
    # MB of the files a run made or changed that come back with its result (whole files,
    # in name order, while they fit; the rest are listed as left out). 0: none.
    max_returned_files_mb: int = Field(default=16, ge=0, le=wire.MAX_RETURNED_FILES_MB)

    @model_validator(mode="wrap")
    @classmethod
    def _bad_limits_are_configuration_errors(cls, data: Any, handler: ModelWrapValidatorHandler[Limits]
                                             ) -> Limits:
        """The caller's mistake, said with the valid range: a RunnerError, not pydantic's."""
        try:
            return handler(data)
        except ValidationError as exc:
            from .errors import ConfigurationError
            from .ranges import describe_errors

            raise ConfigurationError(f"invalid limits: {describe_errors(cls, exc)}",
                                     fix="pass values in those ranges, e.g. Limits(timeout_s=10)"
                                     ) from None

    @property
    def effective_cpu_s(self) -> float:
        return self.cpu_s if self.cpu_s is not None else self.timeout_s

    def with_overrides(self, **changes: Any) -> Limits:
        """A copy with the given fields replaced; `None` values are ignored."""
        data = self.model_dump()
        data.update({k: v for k, v in changes.items() if v is not None})
        return Limits(**data)


class ErrorInfo(_Frozen):
    """An exception raised by user code, or the reason a run was refused or killed."""

    type: str
    message: str
    traceback: str = ""
    # Structured facts behind the message, as JSON (e.g. an invalid call's missing,
    # unexpected and wrongly typed arguments and the schema); None for most errors.
    detail: dict[str, Any] | None = None


# The tiers that run on this host, in the jail (restricted: with the policy above it).
LOCAL_TIERS = ("jail", "restricted")


class Isolation(_Frozen):
    """The layers that confined a run, as its worker saw them before the run started (so a
    reviewer can tell a fully confined run from one on a kernel without Landlock)."""

    tier: str = ""
    namespaces: tuple[str, ...] = ()  # the local tiers' jail's own namespaces
    per_run: tuple[str, ...] = ()     # namespaces (and the directory) each run has of its own
    unprivileged: bool = False        # no capabilities, not root, no_new_privs
    landlock_abi: int = 0             # 0: the kernel has no Landlock
    seccomp: str | None = None        # "allow-list", or None when not in place
    policy: bool = False              # the restricted policy (RestrictedPython + guards)
    audit_hook: bool = False
    container: bool = False

    def summary(self) -> str:
        """One line naming each layer, and what was missing."""
        parts = [self.tier or "?"]
        if self.container:
            parts.append("container")
        if self.namespaces:
            parts.append(f"namespaces ({', '.join(self.namespaces)})")
        if self.per_run:
            parts.append(f"per run ({', '.join(self.per_run)})")
        parts.append("unprivileged" if self.unprivileged else "PRIVILEGED")
        if self.tier in LOCAL_TIERS:
            parts.append(f"landlock v{self.landlock_abi}" if self.landlock_abi else "NO landlock")
        parts.append(f"seccomp {self.seccomp}" if self.seccomp else "NO seccomp")
        if self.tier == "restricted":
            parts.append("policy" if self.policy else "NO policy (test mode)")
            parts.append("audit hook" if self.audit_hook else "NO audit hook (test mode)")
        return ", ".join(parts)


class Resources(_Frozen):
    cpu_ms: int = 0
    max_rss_kb: int = 0
    node: str | None = None  # the cluster node that ran it (the ray backend); None: this host
    isolation: Isolation | None = None


class FunctionCall(_Frozen):
    """Call a function the request's code defines, with keyword arguments (JSON data)."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class SourceFile(_Frozen):
    """Source run before the request's code, in the same namespace (e.g. a function set)."""

    filename: str
    code: str


class _Bytes(_Frozen):
    """Models with bytes, which JSON carries as base64 (the result of `runner exec --json`,
    the log's spool and export lines)."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64",
                              val_json_bytes="base64")


class InputFile(_Bytes):
    """A file handed to a run: it is in the run's working directory when its code starts.
    `name` is a relative path inside that directory (runner.files.check_name)."""

    name: str
    data: bytes

    @field_validator("name")
    @classmethod
    def _a_name_inside_the_directory(cls, name: str) -> str:
        from .worker.run_files import name_problem

        problem = name_problem(name)
        if problem is not None:
            raise ValueError(f"file name {name[:80]!r} {problem}")
        return name


class OutputFile(_Bytes):
    """A file a run made or changed in its working directory, as the host read it: size,
    type (sniffed from the content, never the name) and digest are the host's own."""

    name: str
    size: int
    media_type: str
    sha256: str
    data: bytes
    # False for a file the log recorded without its bytes (its cap for files was reached).
    kept: bool = True


class ExecutionRequest(_Bytes):
    """One unit of work for a backend."""

    code: str
    limits: Limits = Field(default_factory=Limits)
    packages: tuple[str, ...] = ()
    preamble: tuple[SourceFile, ...] = ()
    call: FunctionCall | None = None
    filename: str | None = None  # how tracebacks name `code` (default "<code>")
    files: tuple[InputFile, ...] = ()  # written into the run's directory before it starts

    def worker_message(self, run_id: str, kind: str = wire.RUN) -> dict[str, Any]:
        """The request as the worker program reads it (fields: wire.REQUEST_FIELDS)."""
        work: dict[str, Any] = {
            "code": self.code,
            "limits": self.limits.model_dump(),
            "preamble": [[source.filename, source.code] for source in self.preamble] or None,
            "call": self.call.model_dump() if self.call is not None else None,
            "filename": self.filename,
            # Each file's bytes travel as an attachment of the frame (protocol.BLOBS).
            "files": [[file.name, index] for index, file in enumerate(self.files)] or None,
        }
        assert tuple(work) == wire.REQUEST_FIELDS, "wire.REQUEST_FIELDS and this must agree"
        message = {"type": kind, "id": run_id,
                   **{key: value for key, value in work.items() if value is not None}}
        if self.files:
            message[BLOBS] = [file.data for file in self.files]
        return message


class ExecutionResult(_Bytes):
    """What happened when a request ran. The same fields on every backend."""

    id: str
    backend: str
    status: Status
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    error: ErrorInfo | None = None
    return_value: Any = None
    return_repr: str | None = None  # set when the return value was converted to fit JSON
    return_is_repr: bool = False  # the return value had no JSON form: it is its repr
    duration_ms: int = 0
    limits: Limits = Field(default_factory=Limits)
    resources: Resources = Field(default_factory=Resources)
    packages: dict[str, str] = Field(default_factory=dict)
    image: str | None = None  # the Docker tier's image id
    started_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    # The files the run made or changed in its directory; the ones that did not fit the
    # limit (or that the host refused, with the reason) are named in files_left_out.
    files: tuple[OutputFile, ...] = ()
    files_truncated: bool = False
    files_left_out: tuple[str, ...] = ()

    @field_validator("stdout", "stderr", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_json_dict(self) -> dict[str, Any]:
        """The result as plain JSON types (what `runner exec --json` prints)."""
        return self.model_dump(mode="json")
