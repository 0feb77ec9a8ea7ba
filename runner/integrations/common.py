"""What the framework integrations share: the sandbox they run in, one session of blocks,
and the text a framework's model reads of a result.

- `sandbox_for`: the caller's `Sandbox`, or one the integration opens (and closes) itself,
  whose log rows then carry the integration's name as their source;
- `BlockSession`: a framework conversation's Python blocks in one runner `Session` (state
  carries), the functions it offers defined first (and again after a block that ended the
  session's process), `restart` for a fresh one, `abandon` for a block the framework
  stopped waiting for; every block's log row names the integration in its meta;
- `LazyBlocks`: an executor's one `BlockSession`, opened with its first block and closed
  with the executor (its sandbox too, when the executor opened it); `SessionExecutor`:
  the settings and session AG2's and AutoGen's executors share, `BlockOutputs` what a
  call of theirs reports;
- `block_output` and `exit_code`: a result as the terminal-like text and exit code that
  AG2's and AutoGen's executors report (their conventions: 124 and "Timeout" for a block
  that ran out of time, 125 and "Cancelled" for one the caller cancelled, "unknown
  language" for a block the executor does not run), with control characters made
  visible (frameworks print this text to a terminal) and long output cut in the middle;
  the log keeps every byte.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..agent.feedback import clip, files_made
from ..backends.base import DEFAULT_BACKEND
from ..backends.registry import check_backend
from ..cancellation import Cancellation
from ..errors import ConfigurationError
from ..functions import FunctionSet
from ..packages import PackageRequestError, parse_requirements
from ..sandbox import INTEGRATION_META_KEY, Sandbox
from ..session import Session
from ..terminal import sanitize_for_terminal
from ..types import ExecutionResult, Limits, Status
from .conversation_log import ConversationRecord
from .work_dir import WorkDir, agents_files, work_dir_argument

INTEGRATION = INTEGRATION_META_KEY  # the meta key that names the integration a run came through
PYTHON_LANGUAGES = frozenset({"python", "py", "python3", "py3"})
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})  # as AG2's executors read them
TIMEOUT_EXIT_CODE = 124  # what `timeout` exits with; AG2's and AutoGen's executors use it
CANCELLED_EXIT_CODE = 125  # AutoGen's local executor, for a block its caller cancelled
TIMEOUT_MARK = "Timeout"  # AG2's TIMEOUT_MSG; AutoGen writes the same word
CANCELLED_MARK = "Cancelled"
DEFAULT_MAX_OUTPUT_CHARS = 20_000  # of one result, for the model; the log keeps all of it
# Statuses after which the session's process is gone: the next block starts a fresh one.
KILLED = frozenset({Status.TIMEOUT, Status.MEMORY_LIMIT, Status.CRASHED})


def integration_meta(integration: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The meta every run made through `integration` carries in the log."""
    return {INTEGRATION: integration, **(extra or {})}


def sandbox_for(integration: str, sandbox: Sandbox | None, backend: str,
                options: Mapping[str, Any] | None = None) -> tuple[Sandbox, bool]:
    """(the sandbox to run in, whether the integration opened it and so closes it)."""
    if sandbox is not None:
        if not isinstance(sandbox, Sandbox):
            raise ConfigurationError(f"sandbox must be a runner.Sandbox, got {type(sandbox).__name__}",
                                     fix="pass Sandbox(...) or leave it out")
        return sandbox, False
    return Sandbox(backend=backend, source=integration, **dict(options or {})), True


def block_limits(sandbox: Sandbox | None, limits: Limits | None, timeout: float | None) -> Limits:
    """A block's limits: `limits` (else the sandbox's, else the defaults), `timeout` over them."""
    base = limits if limits is not None else (sandbox.limits if sandbox is not None else Limits())
    return base.with_overrides(timeout_s=timeout)


def functions_source(functions: FunctionSet | None) -> str:
    """The source that defines a set's functions in a session ("" for none)."""
    source = "\n\n".join(spec.code.rstrip("\n") for spec in functions or ())
    return source + "\n" if source else ""


def is_python(language: str) -> bool:
    return language.strip().lower() in PYTHON_LANGUAGES


def is_shell(language: str) -> bool:
    return language.strip().lower() in SHELL_LANGUAGES


def runs_shell(sandbox: Sandbox) -> bool:
    """Whether the sandbox's runs may start programs: the Docker tier's container has a
    shell and lets a run start processes under its limits; the local tiers start none."""
    return sandbox.backend_name == "docker"


def shell_as_python(language: str, code: str) -> str:
    """A shell block as the Python that runs it in the run's own process tree (so the
    run's limits hold for it), its output printed and its exit status the block's."""
    shell = "/bin/bash" if language.strip().lower() == "bash" else "/bin/sh"
    return ("import subprocess as _runner_subprocess, sys as _runner_sys\n"
            f"_runner_shell = _runner_subprocess.run([{shell!r}, '-c', {code!r}], "
            "capture_output=True, text=True, errors='replace')\n"
            "_runner_sys.stdout.write(_runner_shell.stdout)\n"
            "_runner_sys.stderr.write(_runner_shell.stderr)\n"
            "if _runner_shell.returncode:\n"
            "    raise SystemExit(_runner_shell.returncode)\n")


def refusal_text(language: str) -> str:
    """What a model reads for a block in a language the executor does not run."""
    shown = sanitize_for_terminal(language.strip()[:40]) or "(none given)"
    if is_shell(language):
        return (f"{shown} blocks do not run here: this sandbox starts no other program (no "
                "shell, no pip; the packages the task needs are installed for it). Write this "
                "step as a ```python block: os and pathlib for files, print() for output.")
    return (f"unknown language {shown}: this executor runs Python only, in runner's sandbox "
            "(state carries from block to block; no shell, no pip). Write this step as a "
            "```python block.")


@dataclass
class BlockRun:
    """One block's result, and the result of defining the session's functions first (when
    that happened just before it)."""

    result: ExecutionResult
    setup: ExecutionResult | None = None
    fresh: bool = False  # the block ran in a new session (the first, or after a restart)
    saved: list[Path] = field(default_factory=list)  # its files, as written to the work_dir
    # What the model should know of the files: those not handed in, those not written back.
    file_notes: list[str] = field(default_factory=list)


@dataclass
class _Current:
    session: Session
    record: ConversationRecord
    needs_setup: bool = True
    empty_dir: bool = True  # the session's directory holds nothing the work_dir handed it
    blocks: int = 0


class BlockSession:
    """A conversation's blocks in one runner session; see the module docstring.

    Thread-safe: blocks of one session run one at a time (the runner session's lock);
    `abandon` and `restart` never wait for a block in progress."""

    def __init__(self, sandbox: Sandbox, integration: str, *, limits: Limits,
                 packages: Iterable[str] = (), setup_code: str = "",
                 meta: Mapping[str, Any] | None = None, work_dir: WorkDir | None = None) -> None:
        self.sandbox = sandbox
        self.integration = integration
        self.limits = limits
        self.packages = tuple(packages)
        sandbox.check_packages(self.packages)  # refused now, not at the first block
        self.setup_code = setup_code
        self.work_dir = work_dir if work_dir is not None else WorkDir(
            None, prefix=f"runner-{integration}-")
        self.meta = integration_meta(integration, meta)
        self.sessions_opened = 0
        self._current: _Current | None = None
        self._lock = threading.Lock()  # guards _current only; never held while a block runs
        self._closed = False

    @property
    def session_id(self) -> str | None:
        """The runner session's id (None until the first block, and after a restart)."""
        current = self._current
        return current.session.id if current is not None else None

    def python_for(self, language: str, code: str) -> str | None:
        """The Python that runs a block of `language` here: itself, a shell block where the
        tier runs programs (shell_as_python), else None (refuse it: refusal_text)."""
        if is_python(language):
            return code
        if is_shell(language) and runs_shell(self.sandbox):
            return shell_as_python(language, code)
        return None

    def run(self, code: str, *, limits: Limits | None = None,
            meta: Mapping[str, Any] | None = None, cancel: Cancellation | None = None,
            record: bool = True, shown: str | None = None) -> BlockRun:
        """Run `code` in the session (opened on first use, with its functions defined);
        `cancel` stops it from another thread (logged as cancelled; the session's state
        goes with it). The block is a turn of the conversation's agent run
        (conversation_log.py), as `shown` (the model's block, where `code` wraps it), unless
        `record` is False (an integration's own plumbing)."""
        with self._lock:
            if self._closed:
                raise ConfigurationError(f"this {self.integration} executor is closed",
                                         fix="make a new executor")
            fresh = self._current is None
            if self._current is None:
                self._current = _Current(
                    self.sandbox.session(limits=self.limits, packages=self.packages),
                    ConversationRecord(self.sandbox, self.integration, {
                        "limits": self.limits.model_dump(mode="json"),
                        "packages": list(self.packages)}))
                self.sessions_opened += 1
            current = self._current
            needs_setup, current.needs_setup = current.needs_setup and bool(self.setup_code), False
            empty_dir, current.empty_dir = current.empty_dir, False
        block_meta = {**self.meta, **(meta or {})}
        setup = None
        if needs_setup:
            setup = current.session.run(self.setup_code, limits=limits,
                                        meta={**block_meta, "setup": True})
        if empty_dir or (setup is not None and setup.status in KILLED):
            self.work_dir.forget()
        handover = self.work_dir.handover()
        result = current.session.run(code, limits=limits, meta=block_meta,
                                     files=handover.files or None, cancel=cancel)
        with self._lock:
            current.blocks += 1
            if result.status in KILLED or (setup is not None and setup.status in KILLED):
                current.needs_setup = True  # the next block starts in a fresh process
                current.empty_dir = True
        saved, problems = self.work_dir.receive(result)
        notes = [note for note in (handover.note(), _not_written(problems)) if note]
        if record:
            current.record.block(shown if shown is not None else code, "python", result,
                                 block_output(result, setup=setup, notes=notes))
        return BlockRun(result=result, setup=setup, fresh=fresh, saved=saved, file_notes=notes)

    def restart(self) -> None:
        """End the session; the next block starts a fresh one (nothing of this one is left)."""
        with self._lock:
            current, self._current = self._current, None
        if current is not None:
            current.record.end()
            _close_later(current.session)

    def abandon(self) -> None:
        """Stop waiting for the block in progress (cancel it to stop it too: BlockSession.run's
        `cancel`); the next block starts a fresh session."""
        self.restart()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            current, self._current = self._current, None
        if current is not None:
            current.record.end()
            _close_later(current.session)


def _not_written(problems: list[str]) -> str:
    if not problems:
        return ""
    return "Note: these files could not be written to the working directory: " + "; ".join(problems[:5])


class LazyBlocks:
    """An executor's one `BlockSession`, opened on first use (its functions defined first,
    their packages added) in the caller's sandbox, or in one of `backend` that it opens
    and so closes; what AG2's, AutoGen's and smolagents' executors hold."""

    def __init__(self, integration: str, sandbox: Sandbox | None, backend: str,
                 backend_options: Mapping[str, Any], *, limits: Limits,
                 packages: Iterable[str], functions: FunctionSet | None,
                 work_dir: str | os.PathLike[str] | None = None) -> None:
        self.integration = integration
        wanted = tuple(packages) + (tuple(functions.packages) if functions is not None else ())
        # A mistyped tier or option, or packages the tier cannot have, are said now, not
        # at the first block in the middle of a conversation.
        if sandbox is None:
            check_backend(backend, backend_options)
            try:  # (the tier's own limits are known once it starts)
                parse_requirements(wanted)
            except PackageRequestError as exc:
                raise ConfigurationError(str(exc), fix="pass requirements such as "
                                                       "'sympy>=1.12'") from None
        else:
            sandbox.check_packages(wanted)
        self.work_dir = WorkDir(work_dir_argument(work_dir), prefix=f"runner-{integration}-")
        self._sandbox = sandbox
        self._backend = backend
        self._backend_options = dict(backend_options)
        # What builds it again (a declarative form): a sandbox given is named by its tier.
        self.backend_name = sandbox.backend_name if sandbox is not None else backend
        self.backend_options = dict(backend_options) if sandbox is None else {}
        self.limits = limits
        self.packages = tuple(packages)
        self.functions = functions
        self.setup_code: Callable[[], str] = lambda: functions_source(self.functions)
        self.opened: BlockSession | None = None  # None until the first block, and after close
        self._owns_sandbox = False

    def get(self) -> BlockSession:
        """The session of blocks, opened now if it is not yet."""
        if self.opened is None:
            box, self._owns_sandbox = sandbox_for(self.integration, self._sandbox, self._backend,
                                                  self._backend_options)
            functions = self.functions
            wanted = self.packages + (tuple(functions.packages) if functions is not None else ())
            self.opened = BlockSession(box, self.integration, limits=self.limits,
                                       packages=tuple(dict.fromkeys(wanted)),
                                       setup_code=self.setup_code(), work_dir=self.work_dir)
        return self.opened

    @property
    def session_id(self) -> str | None:
        """The current runner session (None before the first block and after a restart)."""
        return self.opened.session_id if self.opened is not None else None

    def restart(self) -> None:
        """End the session: the next block starts in a fresh one."""
        if self.opened is not None:
            self.opened.restart()

    def close(self) -> Sandbox | None:
        """End the session; the sandbox the caller must close now (the one opened here), if
        any, so that an async caller can close it off its event loop."""
        blocks, self.opened = self.opened, None
        if blocks is None:
            return None
        blocks.close()
        return blocks.sandbox if self._owns_sandbox else None


class BlockOutputs:
    """What a call of AG2's or AutoGen's executor reports of its blocks, in order: their
    text (terminal-like, each cut to `max_chars`), their execution ids and the exit code
    of the last; the call stops at the first block that does not succeed."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.parts: list[str] = []
        self.ids: list[str] = []
        self.saved: list[Path] = []  # the files the blocks made, as written to the work_dir
        self.exit_code = 0

    def refuse(self, language: str) -> None:
        """A block in a language the executor does not run (exit code 1)."""
        self.stop(refusal_text(language), 1)

    def stop(self, text: str, exit_code: int) -> None:
        self.parts.append(text)
        self.exit_code = exit_code

    def add(self, run: BlockRun) -> bool:
        """Record a block that ran; whether the next may run (this one succeeded)."""
        self.ids.append(run.result.id)
        self.parts.append(block_output(run.result, setup=run.setup, max_chars=self.max_chars,
                                       notes=run.file_notes))
        self.saved += run.saved
        self.exit_code = exit_code(run.result)
        return self.exit_code == 0

    @property
    def output(self) -> str:
        return "\n".join(part for part in self.parts if part)


class SessionExecutor:
    """What AG2's and AutoGen's code executors share: their settings and the one session
    their blocks run in (`LazyBlocks`), and what they show of it. A subclass names its
    `integration` and adds its framework's protocol.

    `sandbox`: a `Sandbox` to run in (else one of `backend` with `backend_options` is
    opened on first use and closed with the executor). `timeout` (seconds) is each block's
    wall-clock limit, over `limits` (the session's memory, process and file limits).
    `packages` are installed for the sandbox (never on the host). `functions`, a
    `FunctionSet`, are defined in the session before its first block, so blocks call them.
    `work_dir`, a host directory, is kept in step with the session's working directory
    (runner/integrations/work_dir.py): its files are there for the blocks, and the files
    they save are written back; without it, saved files go to a temporary directory.
    """

    integration: ClassVar[str]

    def __init__(self, sandbox: Sandbox | None = None, *, backend: str = DEFAULT_BACKEND,
                 timeout: float | None = None, limits: Limits | None = None,
                 packages: Iterable[str] = (), functions: FunctionSet | None = None,
                 max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
                 meta: Mapping[str, Any] | None = None,
                 work_dir: str | os.PathLike[str] | None = None, **backend_options: Any) -> None:
        self.limits = block_limits(sandbox, limits, timeout)
        self.max_output_chars = max_output_chars
        self._meta = dict(meta or {})
        self._blocks = LazyBlocks(self.integration, sandbox, backend, backend_options,
                                  limits=self.limits, packages=packages, functions=functions,
                                  work_dir=work_dir)

    @property
    def work_dir(self) -> Path | None:
        """Where the blocks' files are (None until a block saved one, when none was given)."""
        return self._blocks.work_dir.path

    @property
    def timeout(self) -> float:
        return self.limits.timeout_s

    @property
    def sandbox(self) -> Sandbox:
        return self._blocks.get().sandbox

    @property
    def session_id(self) -> str | None:
        """The current runner session (None before the first block and after a restart)."""
        return self._blocks.session_id

    @property
    def functions(self) -> FunctionSet | None:
        return self._blocks.functions

    @property
    def packages(self) -> tuple[str, ...]:
        return self._blocks.packages


def _close_later(session: Session) -> None:
    """Close a session without waiting for its block in progress (close() waits for it)."""
    threading.Thread(target=session.close, name=f"close-session-{session.id}", daemon=True).start()


# -- what the framework's model reads -----------------------------------------------------


def exit_code(result: ExecutionResult) -> int:
    """The exit code a framework's executor reports for a result."""
    if result.status is Status.OK:
        return 0
    if result.status is Status.TIMEOUT:
        return TIMEOUT_EXIT_CODE
    if isinstance(result.exit_code, int) and result.exit_code != 0:
        return result.exit_code
    return 1


def block_output(result: ExecutionResult, *, setup: ExecutionResult | None = None,
                 max_chars: int = DEFAULT_MAX_OUTPUT_CHARS, notes: Iterable[str] = ()) -> str:
    """What the block printed, then what went wrong, then the files it made (and `notes`
    about them), as a terminal would show it."""
    parts: list[str] = []
    if setup is not None and setup.status is not Status.OK:
        parts.append(f"Note: defining the session's functions failed, so they are missing: "
                     f"{_problem(setup)}")
    parts += _printed(result)
    if result.status is not Status.OK:
        parts.append(_problem(result))
    return _shown(parts, result, max_chars, tail=[*_files_text(result), *notes])


def printed_output(result: ExecutionResult, *, max_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
                   notes: Iterable[str] = (), keep_newline: bool = False) -> str:
    """What the block printed (stdout, then stderr), then the files it made (and `notes`
    about them), as a terminal would show it; with `keep_newline`, ending with a newline
    when the block's output did."""
    shown = _shown(_printed(result), result, max_chars, tail=[*_files_text(result), *notes])
    printed = result.stderr or result.stdout
    if keep_newline and shown and not shown.endswith("\n") and printed.endswith("\n"):
        shown += "\n"
    return shown


def _printed(result: ExecutionResult) -> list[str]:
    parts = [text for text in (result.stdout, result.stderr) if text]
    if result.stdout_truncated or result.stderr_truncated:
        parts.append(f"Note: the output passed the sandbox's limit of "
                     f"{result.limits.max_output_bytes:,} bytes per stream and was cut there.")
    return parts


def _files_text(result: ExecutionResult) -> list[str]:
    shown = agents_files(result)
    return [files_made(shown)] if shown.files or shown.files_left_out else []


def _shown(parts: list[str], result: ExecutionResult, max_chars: int,
           tail: Iterable[str] = ()) -> str:
    """The parts, cut in the middle to `max_chars`, then `tail` (short, never cut)."""
    text = "".join(p if p.endswith("\n") else p + "\n" for p in parts).rstrip("\n")
    clipped, _ = clip(text, max_chars, note=cut_note(result, f"runner's log (execution {result.id})"))
    return sanitize_for_terminal("\n".join([clipped, *tail]) if clipped else "\n".join(tail))


def cut_note(result: ExecutionResult, where: str) -> str:
    """What a cut in the text shown of `result` says of the rest: the whole is `where`,
    unless the sandbox already cut the output (then `where` holds only its first part)."""
    if result.stdout_truncated or result.stderr_truncated:
        return (f"{where} keeps the first {result.limits.max_output_bytes:,} bytes of each "
                "stream the run printed; the sandbox dropped the rest")
    return f"the whole text is in {where}"


def _problem(result: ExecutionResult) -> str:
    error = result.error
    message = error.message if error is not None else ""
    if result.status is Status.TIMEOUT:  # runner's message says the session's state is gone
        return f"{TIMEOUT_MARK}: {message or 'the block ran past its time limit and was stopped'}"
    if result.status is Status.MEMORY_LIMIT:
        return f"MemoryError: {message or 'the block passed its memory limit and was stopped'}"
    if error is None:
        return f"{result.status}: the block did not finish normally."
    if result.status is Status.ERROR and error.traceback:
        return error.traceback.rstrip("\n")
    return f"{error.type}: {message}"
