"""`Optimizer.step`: one round of changes to a function list, proposed by a model and checked.

    from runner.optimizer import Optimizer, conversations_from_log
    with Optimizer(OpenAIChat("m2", base_url=...), backend="restricted") as optimizer:
        result = optimizer.step(conversations, None, functions)
    result.actions, result.rejected, result.functions   # accepted, refused with reasons, List B

Each action is one conversation with the optimizer model, run by the agent loop
(`runner.agent.Agent`, logged like every agent run): the request (`runner.optimizer.prompt`)
shows List A (`functions`), List B (after the actions accepted so far in this step), the
results and the conversations; the model answers with a call of `add_function`,
`revise_function` or `remove_function` (`runner.optimizer.proposals`), carried out on the
host by a handler (`runner.agent.host`) that checks it and runs it once in the sandbox
(`runner.optimizer.smoke`). A refused call goes back to the model as a feedback turn with
the reason, up to `max_tries` replies per action; the first accepted one ends that
conversation and the next action starts from a fresh request. The step ends after
`max_actions` accepted actions, when the model says TERMINATE, when an action found no
valid proposal in `max_tries` replies, or when the model's server fails.

`protocol`: `tools` (native tool calls), `json` (one JSON object per reply, for models
served without tool calling), or `auto`: tool calls, and the JSON protocol from the first
request the server refuses because of them.

`step` never changes `functions`: List B is a copy. `apply` carries the accepted actions out
on a set (logged, with their author); a training does that as each conversation ends
(`on_run`), so an interrupted step keeps what it had accepted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from ..agent.feedback import ErrorCode, Feedback
from ..agent.host import HostCall, HostOutcome
from ..agent.loop import Agent, LogTarget
from ..agent.run import AgentRun, AgentStatus
from ..backends.base import DEFAULT_BACKEND
from ..functions import FunctionSet, FunctionSpec
from ..jsonlimits import ARGUMENT_BOUNDS, json_problem
from ..logs.functions import Author
from ..ranges import Range, require
from ..sandbox import Sandbox
from ..types import Limits
from .prompt import DEFAULT_HISTORY_TOKENS, Conversation, RolledBack, Statistics, build_task
from .proposals import KINDS, Change, action_set, apply_change, read_proposal
from .replies import optimizer_protocol, protocol_names
from .smoke import smoke_test

if TYPE_CHECKING:
    from ..agent.llm import ChatModel

DEFAULT_MAX_ACTIONS = 3
DEFAULT_MAX_TRIES = 3
SMOKE_LIMITS = Limits(timeout_s=10)
# Feedback the loop gives before a handler sees a call: these refuse a proposal too.
_LOOP_REFUSALS = frozenset({ErrorCode.MALFORMED_RESPONSE, ErrorCode.TRUNCATED_REPLY})


class Proposal(BaseModel):
    """One action the optimizer proposed, and whether it was accepted (or why not)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: str | None  # add_function, revise_function, remove_function; None: unreadable
    function: str | None = None
    accepted: bool
    code: str | None = None  # the feedback code when refused
    reason: str = ""  # why it was refused, or what its smoke call showed
    spec: dict[str, Any] | None = None  # the function proposed (add, revise)
    arguments: Any = None  # as the model gave them (within the argument bounds)
    run_id: str
    turn: int | None = None

    def summary(self) -> dict[str, Any]:
        """As `--json` prints it."""
        data: dict[str, Any] = {"action": self.action, "function": self.function}
        if self.accepted:
            data["note"] = self.reason
        else:
            data.update(code=self.code, reason=self.reason)
        return data


class OptimizerRun(BaseModel):
    """One conversation of a step: how it ended and what was proposed in it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    status: AgentStatus
    stop_reason: str | None = None
    error: dict[str, Any] | None = None
    turns: int = 0  # replies of the model
    proposals: list[Proposal]

    @property
    def accepted(self) -> Proposal | None:
        return next((p for p in self.proposals if p.accepted), None)


@dataclass
class StepResult:
    """What one step did: List B at its end, and every conversation with its proposals."""

    functions: FunctionSet
    runs: list[OptimizerRun] = field(default_factory=list)
    terminated: bool = False  # the optimizer said TERMINATE
    ended: str = ""  # why the step ended, in words
    error: dict[str, Any] | None = None  # the model server's error that ended it

    @property
    def proposals(self) -> list[Proposal]:
        return [p for run in self.runs for p in run.proposals]

    @property
    def actions(self) -> list[Proposal]:
        """The accepted actions, in order."""
        return [p for p in self.proposals if p.accepted]

    @property
    def rejected(self) -> list[Proposal]:
        return [p for p in self.proposals if not p.accepted]


def change_of(proposal: Proposal) -> Change:
    """The change an accepted proposal makes."""
    if proposal.action is None or proposal.function is None or not proposal.accepted:
        raise ValueError("only an accepted proposal makes a change")
    spec = FunctionSpec.from_dict(proposal.spec) if proposal.spec is not None else None
    return Change(kind=KINDS[proposal.action], name=proposal.function, spec=spec)


class Optimizer:
    """Proposes and checks changes to a function list; see the module docstring.

    `llm` is the optimizer model. Smoke runs use `sandbox` (or one of `backend`, opened on
    first use and closed by `close`), with `limits`; `log` is where the conversations go
    (as for `Agent`). `history_tokens` bounds the conversations and results in a request.
    """

    def __init__(self, llm: ChatModel, *, sandbox: Sandbox | None = None,
                 backend: str = DEFAULT_BACKEND, protocol: str = "auto",
                 max_actions: int = DEFAULT_MAX_ACTIONS, max_tries: int = DEFAULT_MAX_TRIES,
                 history_tokens: int = DEFAULT_HISTORY_TOKENS, limits: Limits | None = None,
                 log: LogTarget = True) -> None:
        require("max_actions", max_actions, Range(1, False, 1000, integer=True),
                fix="pass a positive number of actions per step")
        require("max_tries", max_tries, Range(1, False, 1000, integer=True),
                fix="pass a positive number of replies per action")
        require("history_tokens", history_tokens, Range(100, False, 10_000_000, integer=True),
                fix="pass a number of tokens, e.g. 6000")
        if protocol not in protocol_names():
            optimizer_protocol(protocol)  # raises the error that lists the choices
        self.llm = llm
        self.protocol = protocol
        self.active_protocol = "tools" if protocol == "auto" else protocol
        self.max_actions = max_actions
        self.max_tries = max_tries
        self.history_tokens = history_tokens
        self.limits = limits or SMOKE_LIMITS
        self.log = log
        self._backend = backend
        self._sandbox = sandbox
        self._owns_sandbox = sandbox is None
        self._actions = action_set()

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = Sandbox(backend=self._backend, source="optimizer")
        return self._sandbox

    def close(self) -> None:
        if self._owns_sandbox and self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def __enter__(self) -> Optimizer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- the step --------------------------------------------------------------------------------

    def step(self, conversations: Sequence[Conversation], statistics: Statistics | None = None,
             functions: FunctionSet | Iterable[Any] | None = None, *,
             start: FunctionSet | None = None, actions_taken: int = 0,
             rolled_back: Sequence[RolledBack] = (), max_actions: int | None = None,
             on_run: Callable[[OptimizerRun], None] | None = None) -> StepResult:
        """Ask for up to `max_actions` changes to `functions` (List A); see the module docstring.

        `statistics` default to the conversations' own results. A step that goes on from
        an interrupted one passes `start` (List B as it was) and `actions_taken` (how many
        of its actions were accepted). `rolled_back` are earlier changes that lowered the
        success rate, shown so that they are not proposed again. `on_run` is called after
        each conversation, with its proposals.
        """
        current = functions if isinstance(functions, FunctionSet) else \
            FunctionSet("functions", list(functions or ()), log_store=False)
        working = _copy(start if start is not None else current)
        stats = statistics if statistics is not None else Statistics.of(conversations)
        limit = self.max_actions if max_actions is None else max_actions
        result = StepResult(functions=working)
        accepted = 0
        while accepted < limit:
            task = build_task(current=current, working=working,
                              actions_taken=actions_taken + accepted, conversations=conversations,
                              statistics=stats, rolled_back=rolled_back,
                              history_tokens=self.history_tokens, remaining=limit - accepted)
            run, change = self._ask(task, working)
            if (self.protocol == "auto" and self.active_protocol == "tools"
                    and run.status is AgentStatus.LLM_ERROR and run.error is not None
                    and run.error.get("code") == "TOOLS_UNSUPPORTED"):
                self.active_protocol = "json"  # the server has no tool calling: ask again
                run, change = self._ask(task, working)
            result.runs.append(run)
            if change is not None:
                apply_change(change, working)
                accepted += 1
            if on_run is not None:
                on_run(run)
            if change is not None:
                continue
            if run.status is AgentStatus.TERMINATED:
                result.terminated = True
                result.ended = "the optimizer answered TERMINATE: List B needs no further change"
            elif run.status in (AgentStatus.LLM_ERROR, AgentStatus.CRASHED):
                result.error = run.error
                message = (run.error or {}).get("message") or run.stop_reason
                result.ended = f"the optimizer's conversation ended with {run.status}: {message}"
            else:
                result.ended = (f"no acceptable action in {run.turns} "
                                f"repl{'y' if run.turns == 1 else 'ies'} ({run.status})")
            return result
        result.ended = f"{limit} action{'s' if limit != 1 else ''} accepted"
        return result

    @staticmethod
    def apply(actions: Iterable[Proposal], function_set: FunctionSet, *,
              by: Author | str | None = None, note: str = "") -> None:
        """Carry out accepted actions on `function_set` (each change logged with `by`)."""
        for proposal in actions:
            apply_change(change_of(proposal), function_set, by=by, note=note)

    # -- one conversation ------------------------------------------------------------------------

    def _ask(self, task: str, working: FunctionSet) -> tuple[OptimizerRun, Change | None]:
        state = _State(working)
        handlers = {name: functools.partial(self._handle, state) for name in KINDS}
        agent = Agent(self.llm, self._actions, protocol=optimizer_protocol(self.active_protocol),
                      sandbox=self.sandbox, max_turns=self.max_tries,
                      max_consecutive_failures=1000, budget_s=None, log=self.log,
                      handlers=handlers, max_context_chars=max(60_000, 2 * len(task)))
        run = agent.run(task)
        proposals = [p.model_copy(update={"run_id": run.id}) for p in state.proposals]
        proposals += _loop_refusals(run)
        proposals.sort(key=lambda p: p.turn or 0)
        record = OptimizerRun(run_id=run.id, status=run.status, stop_reason=run.stop_reason,
                              error=run.error, turns=len(run.turns), proposals=proposals)
        return record, state.accepted if run.status is AgentStatus.ANSWERED else None

    def _handle(self, state: _State, call: HostCall) -> HostOutcome:
        action = call.function
        turn = call.meta.get("agent_turn")
        arguments = _loggable(call.arguments)
        change = read_proposal(action, call.arguments, state.working, reminder=call.template)
        name = call.arguments.get("name") if isinstance(call.arguments, dict) else None

        def refused(problem: Feedback, spec: FunctionSpec | None = None) -> HostOutcome:
            state.proposals.append(Proposal(
                action=action, function=name if isinstance(name, str) else None, accepted=False,
                code=str(problem.code), reason=problem.message,
                spec=spec.to_dict() if spec is not None else None, arguments=arguments,
                run_id="", turn=turn if isinstance(turn, int) else None))
            return HostOutcome(problem=problem)

        if isinstance(change, Feedback):
            return refused(change)
        note = ""
        if change.spec is not None:
            candidate = _copy(state.working)
            apply_change(change, candidate)
            smoke = smoke_test(call.sandbox, change.spec, candidate, action=action, meta=call.meta,
                               execution_ids=call.execution_ids, limits=self.limits,
                               template=call.template)
            if smoke.problem is not None:
                return refused(smoke.problem, change.spec)
            note = smoke.note
        state.accepted = change
        state.proposals.append(Proposal(
            action=action, function=change.name, accepted=True, reason=note,
            spec=change.spec.to_dict() if change.spec is not None else None,
            arguments=arguments, run_id="", turn=turn if isinstance(turn, int) else None))
        text = f"{action}({change.name!r}) was accepted" + (f": {note}" if note else ".")
        if change.ignored:
            text += f" (ignored field{'s' if len(change.ignored) != 1 else ''}: {', '.join(change.ignored)})"
        return HostOutcome(text=text, finish=text)


@dataclass
class _State:
    """One conversation's List B, what was proposed in it, and the change it accepted."""

    working: FunctionSet
    proposals: list[Proposal] = field(default_factory=list)
    accepted: Change | None = None


def _copy(function_set: FunctionSet) -> FunctionSet:
    return FunctionSet.from_data(function_set.to_dict(), log_store=False)


def _loggable(arguments: Any) -> Any:
    if json_problem(arguments, ARGUMENT_BOUNDS, types=False) is None:
        return arguments
    return "[not kept: beyond the argument bounds]"


def _loop_refusals(run: AgentRun) -> list[Proposal]:
    """Replies the loop refused before any handler saw them: unreadable calls, cut-off replies,
    replies without an action, calls of an action that does not exist."""
    found = []
    for turn in run.turns:
        calls = (turn.reply or {}).get("tool_calls") or []
        names = [str((c.get("function") or {}).get("name") or "") for c in calls]
        for item in turn.feedback:
            code = item.get("code")
            if code in _LOOP_REFUSALS or (code == ErrorCode.UNKNOWN_FUNCTION and item.get("execution_id")):
                guess = names[0] if len(names) == 1 and names[0] in KINDS else None
                found.append(Proposal(action=guess, accepted=False, code=str(code),
                                      reason=str(item.get("message") or ""), run_id=run.id,
                                      turn=turn.number))
    return found
