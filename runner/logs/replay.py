"""Re-running what the log says ran, and saying whether the same thing happened.

`runner logs replay EXECUTION_ID` sends the logged request again (the same code, function
call and arguments, preamble, limits and packages, on the same backend) through a real
`Sandbox`, records the replay as a new execution whose `replay_of` names the original, and
compares the two:

- `identical`: same status, output, return value and error;
- `different_output`: same status, something else differs (the diff says what);
- `different_status`: the status itself changed.

`runner logs replay RUN_ID` replays an agent run (`runner agent`, `math solve`, a
framework's conversation) turn by turn: the executions each turn caused, in order, each
as logged. The model's part is taken from the log, never from a model: the actions the
logged replies asked for are the logged requests, so no model server is contacted and
the replay cannot drift with a model's sampling. Code blocks that shared a session share
one again (one replay session per original session, the same blocks in the same order,
the function definitions block included), so state carries over as it did. The first
turn whose outcome differs is where the conversation diverges: the model would have read
other feedback there and its later replies would not follow, so the replay stops after
that turn and says so (`Divergence`). `backend` and `packages` replay on another tier or
package set (the question a new release or a new numpy asks).

Two kinds of log rows are not replayed, with a warning: calls refused before anything ran
(invalid arguments, an unknown function: the refusal was the host's, from a spec that the
log does not keep), and rows whose request cannot be rebuilt.

On Docker the replay runs in the current sandbox image; when its id differs from the one
the original ran in, every outcome carries a warning saying so.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field

from ..agent.run import AgentRun
from ..errors import NotFoundError
from ..types import ExecutionResult, Status
from ..worker import error_types
from .agent import find_agent_run
from .store import ExecutionRecord, LogStore

# Errors that mean "refused by the host before running" (runner.functions.call).
_REFUSED_BEFORE_RUNNING = error_types.REFUSED_BEFORE_RUNNING


class ReplayVerdict(StrEnum):
    IDENTICAL = "identical"
    DIFFERENT_OUTPUT = "different_output"
    DIFFERENT_STATUS = "different_status"


class ReplayOutcome(BaseModel):
    """One replayed execution, compared with its original."""

    model_config = ConfigDict(frozen=True)

    original: str
    replay: str
    turn: int | None = None  # of the agent run replayed, when it is one
    verdict: ReplayVerdict
    original_status: str
    replay_status: str
    diff: str = ""  # unified diffs of the parts that differ
    warnings: list[str] = Field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Divergence(BaseModel):
    """Where an agent run's replay stopped: the first turn whose outcome differs."""

    model_config = ConfigDict(frozen=True)

    run: str
    turn: int
    turns: int  # the run's turns in all
    reason: str = ("the model read this turn's feedback; with different feedback its later "
                   "replies would not follow, so the later turns are not replayed")


class NotReplayed(BaseModel):
    """A logged execution that a replay left out, and why."""

    model_config = ConfigDict(frozen=True)

    original: str
    reason: str


def compare(original: ExecutionResult, replay: ExecutionResult) -> tuple[ReplayVerdict, str]:
    """The verdict, and a unified diff of every part that differs ('' when none does)."""
    parts = [
        ("status", str(original.status), str(replay.status)),
        ("stdout", original.stdout, replay.stdout),
        ("stderr", original.stderr, replay.stderr),
        ("output truncated", _flags(original), _flags(replay)),
        ("return value", _pretty_json(original.return_value), _pretty_json(replay.return_value)),
        ("error", _error(original), _error(replay)),
    ]
    diffs = []
    for name, before, after in parts:
        if before != after:
            lines = difflib.unified_diff(_lines(before), _lines(after),
                                         fromfile=f"original {name}", tofile=f"replay {name}")
            diffs.append("".join(lines))
    if original.status != replay.status:
        return ReplayVerdict.DIFFERENT_STATUS, "".join(diffs)
    return (ReplayVerdict.DIFFERENT_OUTPUT if diffs else ReplayVerdict.IDENTICAL), "".join(diffs)


def _lines(text: str) -> list[str]:
    return [line if line.endswith("\n") else line + "\n" for line in text.splitlines(keepends=True)]


def _flags(result: ExecutionResult) -> str:
    return f"stdout {result.stdout_truncated}, stderr {result.stderr_truncated}"


def _pretty_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, indent=1, default=repr)


def _error(result: ExecutionResult) -> str:
    if result.error is None:
        return ""
    return f"{result.error.type}: {result.error.message}\n{result.error.traceback}"


class Replayer:
    """Replays into `store` (the replays are logged there), one Sandbox per backend.

    `sandbox_options` are passed to every Sandbox it opens (e.g. labels for containers).
    Use as a context manager: it closes the sandboxes and sessions it opened.
    """

    def __init__(self, store: LogStore, *, sandbox_options: dict[str, Any] | None = None,
                 backend: str | None = None, packages: list[str] | None = None) -> None:
        self.store = store
        self._options = dict(sandbox_options or {})
        self.backend = backend  # every replay on this tier instead of the original's
        self.packages = packages  # every replay with this package set instead
        self._sandboxes: dict[str, Any] = {}
        self._sessions: dict[tuple[str, str], Any] = {}

    def _sandbox(self, backend: str) -> Any:
        # Imported here: runner.sandbox imports runner.logs, which must not import it back.
        from ..sandbox import Sandbox

        if backend not in self._sandboxes:
            self._sandboxes[backend] = Sandbox(backend=backend, log_store=self.store,
                                               source="replay", **self._options)
        return self._sandboxes[backend]

    def refusal(self, record: ExecutionRecord) -> NotReplayed | None:
        """Why `record` cannot be replayed, or None when it can."""
        error = record.result.error
        if record.result.status is Status.INVALID_ARGS and error is not None \
                and error.type in _REFUSED_BEFORE_RUNNING:
            return NotReplayed(original=record.id, reason=(
                f"the call was refused before running ({error.type}); the log does not keep "
                "the spec that refused it"))
        return None

    def execution(self, record: ExecutionRecord, *, meta: dict[str, Any] | None = None,
                  in_session: bool = False, turn: int | None = None) -> ReplayOutcome:
        """Replay one logged execution (in its replay session when `in_session` and it
        was a session block) and compare."""
        request = record.request
        if self.packages is not None:
            request = request.model_copy(update={"packages": tuple(self.packages)})
        backend = self.backend or record.result.backend
        replay_meta = {**(meta or {}), "replay_of": record.id}
        warnings: list[str] = []
        if backend != record.result.backend:
            warnings.append(f"replayed on {backend}; the original ran on {record.result.backend}")
        session_id = record.meta.get("session")
        if in_session and isinstance(session_id, str) and request.call is None:
            session = self._session(backend, session_id, record)
            result = session.run(request.code, limits=request.limits, meta=replay_meta)
        else:
            block = record.meta.get("block")
            if isinstance(session_id, str) and isinstance(block, int) and block > 0:
                warnings.append(f"it was block {block} of session {session_id}; it ran alone, "
                                "without the state the blocks before it had made")
            result = self._sandbox(backend).execute(request, meta=replay_meta)
        if record.result.image and result.image and record.result.image != result.image:
            warnings.append(f"the sandbox image changed since the original ran (was "
                            f"{record.result.image}, now {result.image}): a difference may come "
                            "from the image")
        verdict, diff = compare(record.result, result)
        return ReplayOutcome(original=record.id, replay=result.id, verdict=verdict, turn=turn,
                             original_status=str(record.result.status),
                             replay_status=str(result.status), diff=diff, warnings=warnings)

    def _session(self, backend: str, session_id: str, first: ExecutionRecord) -> Any:
        key = (backend, session_id)
        if key not in self._sessions:
            self._sessions[key] = self._sandbox(backend).session(
                limits=first.request.limits,
                packages=self.packages if self.packages is not None else first.request.packages)
        return self._sessions[key]

    def agent_run(self, run: AgentRun) -> Iterator[ReplayOutcome | NotReplayed | Divergence]:
        """The run's executions turn by turn, replayed, up to the first turn whose outcome
        differs (then a `Divergence`); see the module docstring."""
        by_turn = {execution_id: turn.number for turn in run.turns
                   for execution_id in turn.execution_ids}
        diverged_at: int | None = None
        for record in run_executions(self.store, run):
            turn = by_turn.get(record.id)
            if diverged_at is not None and (turn is None or turn > diverged_at):
                yield Divergence(run=run.id, turn=diverged_at, turns=len(run.turns))
                return
            refused = self.refusal(record)
            if refused is not None:
                yield refused
                continue
            outcome = self.execution(record, meta={"replay_of_run": run.id}, in_session=True,
                                     turn=turn)
            yield outcome
            if outcome.verdict is not ReplayVerdict.IDENTICAL and diverged_at is None:
                diverged_at = turn if turn is not None else len(run.turns)
        if diverged_at is not None and diverged_at < len(run.turns):
            yield Divergence(run=run.id, turn=diverged_at, turns=len(run.turns))

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()
        for sandbox in self._sandboxes.values():
            sandbox.close()
        self._sandboxes.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_executions(store: LogStore, run: AgentRun) -> list[ExecutionRecord]:
    """The executions of a run in the order they ran: those its turns list, then any other
    row that points at the run (a turn whose row was never written)."""
    linked = store.read(lambda conn: [str(row[0]) for row in conn.execute(
        "SELECT id FROM executions WHERE agent_run_id = ? ORDER BY started_at, id",
        (run.id,)).fetchall()])
    records = []
    for execution_id in dict.fromkeys(run.execution_ids + linked):
        try:
            records.append(store.get_execution(execution_id))
        except NotFoundError:
            continue
    return records


Replayed = ReplayOutcome | NotReplayed | Divergence


def replay(store: LogStore, id_or_prefix: str, *,
           on_outcome: Callable[[Replayed], None] | None = None,
           sandbox_options: dict[str, Any] | None = None, backend: str | None = None,
           packages: list[str] | None = None) -> list[Replayed]:
    """Replay the execution or agent run that `id_or_prefix` names (see the module
    docstring), on `backend` and with `packages` when given."""
    run = find_agent_run(store, id_or_prefix)
    outcomes: list[Replayed] = []
    with Replayer(store, sandbox_options=sandbox_options, backend=backend,
                  packages=packages) as replayer:
        if run is not None:
            items: Iterator[Replayed] = replayer.agent_run(run)
        else:
            record = store.get_execution(id_or_prefix)
            refused = replayer.refusal(record)
            items = iter([refused if refused is not None else replayer.execution(record)])
        for item in items:
            outcomes.append(item)
            if on_outcome is not None:
                on_outcome(item)
    return outcomes
