"""The agent loop: ask the model, carry out what it asked for, tell it what happened, repeat.

`Agent(llm, functions, protocol, sandbox).run(task)` returns an `AgentRun` whose status
says how it ended:

- `answered`: the model gave a final answer (never one it wrote after an action in the
  same reply, before seeing the action's result), or, for a protocol whose program's
  output is the answer, its code printed one;
- `terminated`: the model ended the conversation without an answer (a protocol's stop
  word, such as MathChat's TERMINATE);
- `gave_up`: the orchestrator stopped because the model repeated a call (or code block,
  or malformed reply) that had already failed: it would fail again;
- `max_turns`: `max_turns` replies were used without an answer;
- `budget`: an action could not run because the sandbox-time budget was used up;
- `llm_error`: the model's server failed (after retries) or refused the request; the
  error (code, message, fix) is in `AgentRun.error`. A server that rejects native tool
  calls ends here with code TOOLS_UNSUPPORTED and a fix suggesting `--protocol json`;
- `crashed`: an exception inside the orchestrator ended the run (a RunnerError keeps its
  code and fix in `AgentRun.error`; anything else is a bug, with its traceback there);
- `interrupted`: Ctrl-C (KeyboardInterrupt, raised on after logging) or, found later, a
  process that ended without finishing the run.

A reply cut off at the model's token limit (`finish_reason: length`) is incomplete: none
of it is carried out, and the model is told so (TRUNCATED_REPLY), unless the protocol reads
cut replies by its own rules (`reads_cut_replies`, as MathChat's user proxy does). What is sent each turn
stays within `max_context_chars` (`runner.agent.context`): older long replies and outputs
are cut in the messages sent, never in the log.

A protocol with rules of its own for code blocks (`ReplyProtocol.conversation_rules`, as
MathChat's user proxy agent has) decides what runs for each block and what the model reads;
the loop still runs the blocks in the session, keeps the budget and logs every turn.

Calls of a function named in `handlers` are carried out on the host by that handler
(`runner.agent.host`), not in the sandbox; a handler may end the run with an answer.

A function that fails `max_consecutive_failures` times in a row is disabled: the model is
told, and later calls of it are refused (DENIED) without running. For protocols that ask
for it (`reason_after_failures`), that many failing code blocks in a row (an error, a
kill, or no output where output is required) earn CODE_KEEPS_FAILING: solve the step by
reasoning. A server that refuses native tool calls, under a protocol for which they are
optional, is asked again without them for the rest of the run. Every turn is logged as
soon as it is over (see `runner.logs.agent`), and the whole run again when it ends; a log
that cannot take it (full, read-only) costs one warning line, never the run: the run is
kept in the log's spool and imported the next time the log is opened, or, if even that
fails, `AgentRun.not_logged` says why it is not in the log.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..backends.base import DEFAULT_BACKEND
from ..budget import TimeBudget
from ..errors import ConfigurationError, LLMError, RunnerError, ToolsNotSupportedError
from ..files import input_files
from ..functions import FunctionSet
from ..ids import new_id
from ..logs.agent import AgentLog
from ..logs.store import LogStore
from ..ranges import Range, require
from ..sandbox import Sandbox
from ..stopping import stopped_by
from ..types import ExecutionResult, InputFile, Limits, Status
from . import feedback
from .actions import AnswerAction, CallAction, CodeAction, ParsedReply, StopAction
from .context import DEFAULT_CONTEXT_CHARS, fit
from .feedback import ActionReport
from .host import HostCall, HostFunction
from .images import drop_old_images, image_message
from .llm import ChatModel, ChatReply, Message
from .protocols import ReplyProtocol, get_protocol
from .run import AgentRun, AgentStatus, AgentTurn
from .sandbox_actions import ActionRunner

log = logging.getLogger(__name__)

LogTarget = AgentLog | LogStore | Path | str | bool


class Agent:
    """Runs tasks through a model, a reply protocol and a sandbox; see the module docstring.

    `functions` is a FunctionSet, or specs / `@tool` functions / dicts to make one of.
    Without a `sandbox`, each run gets one of its own (the default tier). `limits` apply to
    each execution (default: the sandbox's); `budget_s` bounds the sandbox time of a whole
    run. `attach_images` (for a model that reads images) shows it the images each turn's
    code made, after the turn's feedback (runner.agent.images).
    """

    def __init__(self, llm: ChatModel, functions: FunctionSet | Iterable[Any] | None = None,
                 protocol: str | ReplyProtocol = "tools", sandbox: Sandbox | None = None, *,
                 max_turns: int = 10, max_consecutive_failures: int = 3,
                 budget_s: float | None = 120.0, limits: Limits | None = None,
                 max_feedback_chars: int = feedback.DEFAULT_MAX_CHARS,
                 max_context_chars: int = DEFAULT_CONTEXT_CHARS,
                 system_prompt: str | None = None, log: LogTarget = True,
                 on_turn: Callable[[AgentTurn], None] | None = None,
                 handlers: Mapping[str, HostFunction] | None = None,
                 attach_images: bool = False) -> None:
        require("max_turns", max_turns, Range(1, False, 100_000, integer=True),
                fix="pass a positive number of turns")
        require("max_consecutive_failures", max_consecutive_failures,
                Range(1, False, 100_000, integer=True), fix="pass a positive number")
        TimeBudget(budget_s)  # refuses nan, infinities and non-positive budgets
        require("max_feedback_chars", max_feedback_chars, Range(200, False, 10_000_000, integer=True),
                fix="pass a number of characters, e.g. 3000")
        require("max_context_chars", max_context_chars, Range(1000, False, 100_000_000, integer=True),
                fix="pass a number of characters, e.g. 60000")
        self.llm = llm
        self.functions = _as_set(functions)
        self.protocol = get_protocol(protocol)
        self.sandbox = sandbox
        self.max_turns = max_turns
        self.max_consecutive_failures = max_consecutive_failures
        self.budget_s = budget_s
        self.limits = limits
        self.max_feedback_chars = max_feedback_chars
        self.max_context_chars = max_context_chars
        self.last_run: AgentRun | None = None  # also after Ctrl-C, which run() raises on
        self.system_prompt = system_prompt
        self.on_turn = on_turn
        self._log_target = log
        self.handlers = dict(handlers or {})
        self.attach_images = attach_images
        unknown = sorted(set(self.handlers) - set(self.functions.names))
        if unknown:
            raise ConfigurationError(f"handlers for functions the set does not have: {', '.join(unknown)}",
                                     fix="a host function needs its spec in the agent's functions too")

    def run(self, task: str, *, files: Any = None) -> AgentRun:
        """Work on `task` until an answer or a limit; the run, as logged. `files` ({name:
        bytes, text or a Path}) are in the directory of every execution of the run; the
        files its executions made are on the run (`files`, newest version by name)."""
        given = input_files(files)
        owns_sandbox = self.sandbox is None
        sandbox = self.sandbox or Sandbox(backend=DEFAULT_BACKEND, source="agent")
        try:
            return _Conversation(self, sandbox, task, given).run()
        finally:
            if owns_sandbox:
                sandbox.close()

    def __repr__(self) -> str:
        return (f"Agent({self.llm!r}, protocol={self.protocol.name!r}, "
                f"functions={self.functions.names})")


def _as_set(functions: FunctionSet | Iterable[Any] | None) -> FunctionSet:
    if isinstance(functions, FunctionSet):
        return functions
    return FunctionSet("agent", list(functions or ()), log_store=False)


class _Conversation:
    """The state of one run: messages so far, failures, the sandbox session."""

    def __init__(self, agent: Agent, sandbox: Sandbox, task: str,
                 files: tuple[InputFile, ...] = ()) -> None:
        self.agent = agent
        self.protocol = agent.protocol
        self.functions = agent.functions
        self.sandbox = sandbox
        self.template = self.protocol.template(self.functions)
        self.runner = ActionRunner(sandbox, self.functions, limits=agent.limits or sandbox.limits,
                                   budget_s=agent.budget_s, files=files)
        self.failures: dict[str, int] = {}
        self.disabled: set[str] = set()
        self.failed_calls: set[str] = set()
        self.failed_replies: set[str] = set()
        self.failed_code: set[str] = set()  # cleared by a block that works: state has changed
        self.failing_blocks = 0  # code blocks in a row that failed (or printed nothing)
        self.budget_announced = False
        system = agent.system_prompt or self.protocol.system_prompt(self.functions)
        self.messages: list[Message] = [{"role": "system", "content": system},
                                        {"role": "user", "content": self.protocol.task_message(task)}]
        self.tools = self.protocol.tools(self.functions)
        self.rules = self.protocol.conversation_rules()  # code blocks answered the protocol's way
        self.turns: list[AgentTurn] = []
        self._partial: _Partial | None = None
        self.log, self.log_problem = _open_log(agent._log_target, sandbox)
        self.run_record = AgentRun(
            id=new_id(), task=task, protocol=self.protocol.name,
            model=getattr(agent.llm, "model", None), base_url=getattr(agent.llm, "base_url", None),
            backend=sandbox.backend, function_set=self.functions.name if len(self.functions) else None,
            functions=self.functions.names, system_prompt=system, tools=self.tools,
            settings=_settings(agent, self.runner.limits))

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> AgentRun:
        """The run, however it ended: an exception inside the loop ends it `crashed` (and is
        not raised); Ctrl-C ends it `interrupted` and is raised on. Either way the turn in
        progress and the run's end are logged first."""
        self._write(lambda log: log.start(self.run_record))
        status = AgentStatus.MAX_TURNS
        answer: str | None = None
        reason: str | None = f"no final answer within {self.agent.max_turns} turns"
        error: dict[str, Any] | None = None
        stopped: BaseException | None = None
        try:
            for number in range(1, self.agent.max_turns + 1):
                outcome = self._turn(number)
                if outcome is not None:
                    status, answer, reason, error = outcome
                    break
        except Exception as exc:  # a bug, a sandbox that went away, a failing on_turn hook
            status, error = AgentStatus.CRASHED, _crash(exc)
            reason = f"the orchestrator failed: {error['message']}"
            log.warning("agent run %s crashed", self.run_record.id, exc_info=True)
            self._record_partial(error)
        except BaseException as exc:  # KeyboardInterrupt (Ctrl-C), SystemExit
            stopped = exc
            status = AgentStatus.INTERRUPTED
            what = stopped_by() if isinstance(exc, KeyboardInterrupt) else type(exc).__name__
            reason = f"interrupted ({what}) during turn {self._partial.number if self._partial else len(self.turns)}"
            error = {"code": "INTERRUPTED", "message": f"the run was interrupted by {what}", "fix": None}
            self._record_partial(error)
        finally:
            try:
                self.runner.close()
            except Exception:
                log.warning("could not close the sandbox session of agent run %s",
                            self.run_record.id, exc_info=True)
            run = self.run_record.model_copy(update={
                "status": status, "final_answer": answer, "stop_reason": reason, "error": error,
                "finished_at": datetime.now(UTC), "sandbox_ms": self.runner.used_ms,
                "turns": list(self.turns), "files": list(self.runner.made.values())})
            run = self._log_whole(run)
            self.agent.last_run = run
        if stopped is not None:
            raise stopped
        return run

    def _turn(self, number: int) -> tuple[AgentStatus, str | None, str | None, dict[str, Any] | None] | None:
        """One request and what follows; how the run ends, or None to go on."""
        sent = fit(drop_old_images(self.messages), self.agent.max_context_chars)
        started = datetime.now(UTC)
        partial = self._partial = _Partial(number, started, sent)
        try:
            reply = self._complete(sent)
        except LLMError as exc:
            error = {"code": exc.code, "message": exc.message, "fix": exc.fix}
            self._record(AgentTurn(number=number, started_at=started, messages_sent=sent, error=error))
            return AgentStatus.LLM_ERROR, None, f"the model's server failed: {exc.message}", error
        partial.reply = reply

        step = partial.step
        if reply.finish_reason == "length" and not self.protocol.reads_cut_replies:
            parsed = ParsedReply()
            stop = self._truncated(reply, step)
        else:
            parsed = self.protocol.parse(reply, self.functions)
            step.notes += parsed.notes
            stop = self._reply_problems(reply, parsed, step)
        partial.parsed = parsed
        answer = parsed.answer
        if stop is None and parsed.stop:
            stop = AgentStatus.TERMINATED, "the model ended the conversation without an answer"
        if stop is None and answer is None:
            stop = self._carry_out(parsed, step)
            if stop is None:
                answer = step.finish if step.finish is not None else \
                    self.protocol.answer_from_output(step.results)
        if stop is None and answer is None and self.runner.exhausted and not self.budget_announced:
            self.budget_announced = True
            step.notes.append("the sandbox time budget of this conversation is used up: nothing more "
                              "can run. Give your final answer now")
        ends = answer is not None or stop is not None
        if ends:
            feedback_messages: list[Message] = []
        elif self.rules is not None:
            feedback_messages = self.rules.respond(reply, step.observations, step.notes)
        else:
            feedback_messages = self.protocol.feedback_messages(reply, step.observations, step.notes)
        made = self.runner.take_new_files()
        shown = image_message(made) if self.agent.attach_images and not ends else None
        if shown is not None:
            feedback_messages.append(shown)
        self._record(self._turn_record(partial, feedback_messages=feedback_messages))
        self.messages += [reply.message, *feedback_messages]
        if answer is not None:
            return AgentStatus.ANSWERED, answer, None, None
        if stop is not None:
            return stop[0], None, stop[1], None
        return None

    def _turn_record(self, partial: _Partial, *, feedback_messages: list[Message],
                     error: dict[str, Any] | None = None) -> AgentTurn:
        reply, parsed, step = partial.reply, partial.parsed, partial.step
        return AgentTurn(
            number=partial.number, started_at=partial.started, messages_sent=partial.sent,
            reply=reply.message if reply else None, response=reply.response if reply else None,
            actions=[action.model_dump(mode="json") for action in parsed.actions] if parsed else [],
            feedback=[p.model_dump(mode="json") for o in step.observations for p in o.problems],
            feedback_messages=feedback_messages, notes=list(step.notes),
            execution_ids=list(step.execution_ids),
            prompt_tokens=reply.usage.prompt_tokens if reply else None,
            completion_tokens=reply.usage.completion_tokens if reply else None,
            latency_ms=reply.latency_ms if reply else 0, retries=reply.retries if reply else 0,
            error=error)

    def _record_partial(self, error: dict[str, Any]) -> None:
        """Log the turn that was in progress when the run stopped (what it had got to)."""
        partial, self._partial = self._partial, None
        if partial is None:
            return
        try:
            self._record(self._turn_record(partial, feedback_messages=[], error=error))
        except Exception:  # a hook that fails again must not hide the first failure
            log.warning("could not record the last turn of agent run %s", self.run_record.id,
                        exc_info=True)

    def _truncated(self, reply: ChatReply, step: _Step) -> tuple[AgentStatus, str] | None:
        """TRUNCATED_REPLY, answered per tool call (every call id needs its reply); stop if
        the same cut-off reply comes again."""
        item = feedback.truncated_reply(max_tokens=getattr(self.agent.llm, "max_tokens", None),
                                        template=self.template)
        text = feedback.render(item, max_chars=self.agent.max_feedback_chars)
        call_ids: list[str | None] = [call.id for call in reply.tool_calls] or [None]
        for call_id in call_ids:
            step.observations.append(ActionReport(text=text, ok=False, problems=(item,), call_id=call_id))
        key = _key("length", reply.content, [c.model_dump() for c in reply.tool_calls])
        if key in self.failed_replies:
            return AgentStatus.GAVE_UP, "the model repeated a reply that had already been cut off at its token limit"
        self.failed_replies.add(key)
        return None

    def _complete(self, sent: list[Message]) -> ChatReply:
        """The model's reply; without native tools from now on if the server refuses them
        and the protocol can do without."""
        try:
            return self.agent.llm.complete(sent, tools=self.tools)
        except ToolsNotSupportedError as exc:
            if not self.tools or not self.protocol.tools_optional:
                raise
            log.info("run %s: the server refuses native tool calls (%s); going on without them",
                     self.run_record.id, exc.message)
            self.tools = None
            self.run_record = self.run_record.model_copy(update={"settings": {
                **self.run_record.settings, "native_tools": f"refused by the server: {exc.message}"}})
            return self.agent.llm.complete(sent, tools=None)

    # -- one reply ------------------------------------------------------------------------------

    def _reply_problems(self, reply: ChatReply, parsed: ParsedReply, step: _Step
                        ) -> tuple[AgentStatus, str] | None:
        """MALFORMED_RESPONSE for each problem; stop if the same unusable reply comes again."""
        for problem in parsed.problems:
            item = feedback.malformed(problem.message, template=self.template, details=problem.details)
            step.observations.append(ActionReport(
                text=feedback.render(item, max_chars=self.agent.max_feedback_chars), ok=False,
                problems=(item,), call_id=problem.call_id))
        if parsed.problems and not parsed.actions:
            key = _key(reply.content, [c.model_dump() for c in reply.tool_calls])
            if key in self.failed_replies:
                return AgentStatus.GAVE_UP, "the model repeated a reply that had already been refused as malformed"
            self.failed_replies.add(key)
        return None

    def _carry_out(self, parsed: ParsedReply, step: _Step) -> tuple[AgentStatus, str] | None:
        blocks = 0
        for index, action in enumerate(parsed.actions):
            meta = {"agent_run": self.run_record.id, "agent_turn": step.number, "agent_action": index}
            if isinstance(action, AnswerAction):  # only with other actions: parse refuses those
                step.notes.append("the final answer in this reply was ignored, because it came with "
                                  "actions whose results you had not seen")
                continue
            if isinstance(action, StopAction):
                continue  # parse keeps a stop word only in a reply with nothing else
            if isinstance(action, CallAction):
                stop = self._call(action, meta, step)
            else:
                blocks += 1
                stop = self._code(action, meta, step, label=f"Block {blocks}" if len(parsed.actions) > 1
                                  else "The block")
            if stop is not None:
                return stop
            if step.finish is not None:  # a host function ended the run: nothing more runs
                if index + 1 < len(parsed.actions):
                    step.notes.append("the rest of this reply was not carried out: the "
                                      "conversation ended with the action before it")
                break
        return None

    def _call(self, action: CallAction, meta: dict[str, Any], step: _Step) -> tuple[AgentStatus, str] | None:
        label = feedback.call_label(action.function, action.arguments)
        key = _key(action.function, action.arguments)
        if key in self.failed_calls:
            return AgentStatus.GAVE_UP, f"the model repeated the failing call {label}"
        if action.function in self.disabled:
            item = feedback.disabled_function(action.function, self.failures[action.function],
                                              template=self.template)
            step.observations.append(ActionReport(
                text=feedback.render(item, max_chars=self.agent.max_feedback_chars), ok=False,
                problems=(item,), call_id=action.call_id))
            return None
        handler = self.agent.handlers.get(action.function)
        if handler is not None:
            observation = self._host_call(handler, action, meta, step)
        else:
            if self.runner.exhausted:
                return AgentStatus.BUDGET, (f"the sandbox time budget of {self.agent.budget_s:g} s "
                                            f"was used up before {label} could run")
            result = self.runner.call(action.function, action.arguments, meta, step.execution_ids)
            observation = feedback.observe(
                result, label=label, spec=self.functions.get(action.function),
                template=self.template, kind="call", max_chars=self.agent.max_feedback_chars,
                call_id=action.call_id)
        step.observations.append(observation)
        if observation.ok:
            self.failures[action.function] = 0
            return None
        self.failed_calls.add(key)
        if action.function in self.functions:
            count = self.failures.get(action.function, 0) + 1
            self.failures[action.function] = count
            if count >= self.agent.max_consecutive_failures:
                self.disabled.add(action.function)
                step.notes.append(feedback.disabled_notice(action.function, count))
        return None

    def _host_call(self, handler: HostFunction, action: CallAction, meta: dict[str, Any],
                   step: _Step) -> ActionReport:
        """A call carried out on the host: its outcome as an observation (see `runner.agent.host`)."""
        outcome = handler(HostCall(function=action.function, arguments=action.arguments,
                                   sandbox=self.sandbox, meta=dict(meta),
                                   execution_ids=step.execution_ids, template=self.template,
                                   call_id=action.call_id))
        step.notes += outcome.notes
        if outcome.finish is not None:
            step.finish = outcome.finish
        if outcome.problem is not None:
            return ActionReport(text=feedback.render(outcome.problem,
                                                    max_chars=self.agent.max_feedback_chars),
                               ok=False, problems=(outcome.problem,), call_id=action.call_id)
        text, _ = feedback.clip(outcome.text, self.agent.max_feedback_chars, where="the log")
        return ActionReport(text=text, ok=True, call_id=action.call_id)

    def _code(self, action: CodeAction, meta: dict[str, Any], step: _Step, *, label: str
              ) -> tuple[AgentStatus, str] | None:
        if self.rules is not None:
            return self._ruled_code(action, meta, step)
        key = _key(action.code.strip())
        if key in self.failed_code:
            return AgentStatus.GAVE_UP, "the model repeated a code block that had just failed"
        result = self._run_block(action.code, meta, step)
        if result is None:
            return AgentStatus.BUDGET, (f"the sandbox time budget of {self.agent.budget_s:g} s was "
                                        "used up before the next code block could run")
        observation = feedback.observe(
            result, label=label, template=self.template, kind="code",
            max_chars=self.agent.max_feedback_chars, require_output=self.protocol.require_output)
        step.observations.append(observation)
        self._count_failing_block(observation, step)
        if result.status is Status.OK:
            self.failed_code.clear()
            return None
        self.failed_code.add(key)
        return None

    def _run_block(self, code: str, meta: dict[str, Any], step: _Step) -> ExecutionResult | None:
        """Run a block in the session (None when the budget is used up), with notes for the
        model when the functions could not be defined or the session's process was lost."""
        if self.runner.exhausted:
            return None
        result, setup = self.runner.run_code(code, meta, step.execution_ids)
        if setup is not None and setup.status is not Status.OK:
            message = setup.error.message if setup.error else str(setup.status)
            step.notes.append(f"the functions could not be defined in the session ({message}); "
                              "calling them will fail")
        step.results.append(result)
        if result.status in (Status.TIMEOUT, Status.MEMORY_LIMIT, Status.CRASHED):
            step.notes.append("the session's process was stopped, so the next block starts in a "
                              "fresh one: variables and imports from earlier blocks are gone")
        return result

    def _ruled_code(self, action: CodeAction, meta: dict[str, Any], step: _Step
                    ) -> tuple[AgentStatus, str] | None:
        """A block under the protocol's own rules: they say what runs and what the model
        reads; the loop runs it in the session and keeps the budget."""
        assert self.rules is not None
        code = self.rules.code_to_run(action)
        if code is None:
            step.observations.append(self.rules.report(action, None))
            return None
        result = self._run_block(code, meta, step)
        if result is None:
            return AgentStatus.BUDGET, (f"the sandbox time budget of {self.agent.budget_s:g} s was "
                                        "used up before the next code block could run")
        step.observations.append(self.rules.report(action, result))
        return None

    def _count_failing_block(self, observation: ActionReport, step: _Step) -> None:
        """After `reason_after_failures` failing blocks in a row, CODE_KEEPS_FAILING."""
        limit = self.protocol.reason_after_failures
        if limit is None:
            return
        if observation.ok:
            self.failing_blocks = 0
            return
        self.failing_blocks += 1
        if self.failing_blocks >= limit:
            item = feedback.code_keeps_failing(self.failing_blocks)
            step.observations.append(ActionReport(
                text=feedback.render(item, max_chars=self.agent.max_feedback_chars), ok=False,
                problems=(item,)))
            self.failing_blocks = 0

    # -- logging -------------------------------------------------------------------------------

    def _record(self, turn: AgentTurn) -> None:
        self._partial = None
        self.turns.append(turn)
        self._write(lambda log: log.add_turn(self.run_record.id, turn))
        if self.agent.on_turn is not None:
            self.agent.on_turn(turn)

    def _write(self, work: Callable[[AgentLog], None]) -> None:
        """A write as the run goes; one that fails is made good by the run's last write
        (`_log_whole`), which writes the whole run, so it is not reported on its own."""
        if self.log is None:
            return
        try:
            work(self.log)
        except Exception:  # the run matters more than its log
            log.debug("could not write agent run %s to the log", self.run_record.id, exc_info=True)

    def _log_whole(self, run: AgentRun) -> AgentRun:
        """Write the whole run as it ended; if the log cannot take it (full, read-only, gone),
        keep it in the log's spool, imported the next time the log is opened, and say so in
        one line; if even that fails, the run says why it is not in the log."""
        if self.log is None:
            return run.model_copy(update={"not_logged": self.log_problem}) if self.log_problem \
                else run
        try:
            self.log.finish(run)
            return run
        except Exception as exc:  # the run matters more than its log
            failure = _reason(exc)
        try:
            spool = self.log.spool(run)
        except Exception as exc:
            reason = f"{failure}; nor could it be kept in the log's spool: {_reason(exc)}"
            log.warning("agent run %s is not in the log: %s", run.id, reason)
            return run.model_copy(update={"not_logged": reason})
        log.warning("could not write agent run %s to the log (%s); kept it in %s, which is "
                    "imported the next time the log is opened", run.id, failure, spool)
        return run


class _Partial:
    """The turn in progress: what was sent, and the reply and actions once there are some."""

    def __init__(self, number: int, started: datetime, sent: list[Message]) -> None:
        self.number = number
        self.started = started
        self.sent = sent
        self.reply: ChatReply | None = None
        self.parsed: ParsedReply | None = None
        self.step = _Step(number)


def _reason(exc: Exception) -> str:
    """What went wrong, in one line: a runner error's message, or the exception itself."""
    if isinstance(exc, RunnerError):
        return exc.message
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return f"{type(exc).__name__}: {exc}"


def _crash(exc: Exception) -> dict[str, Any]:
    """The error of a run that an exception ended: the runner's own code and fix when it is a
    RunnerError, else the exception and its traceback (a bug to report)."""
    if isinstance(exc, RunnerError):
        return {"code": exc.code, "message": exc.message, "fix": exc.fix,
                "type": type(exc).__name__}
    return {"code": "CRASHED", "message": f"{type(exc).__name__}: {exc}",
            "fix": "this is a bug in runner or in an on_turn hook; the traceback is in the run's "
                   "log (runner logs show RUN_ID --json)",
            "type": type(exc).__name__, "traceback": "".join(traceback.format_exception(exc))}


class _Step:
    """What one turn produced so far."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.observations: list[ActionReport] = []
        self.notes: list[str] = []
        self.execution_ids: list[str] = []
        self.results: list[ExecutionResult] = []  # of the code blocks, in order
        self.finish: str | None = None  # the final answer a host function ended the run with


def _key(*parts: Any) -> str:
    return json.dumps(parts, sort_keys=True, default=repr, ensure_ascii=False)


def _settings(agent: Agent, limits: Limits) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "max_turns": agent.max_turns, "max_consecutive_failures": agent.max_consecutive_failures,
        "budget_s": agent.budget_s, "max_feedback_chars": agent.max_feedback_chars,
        "max_context_chars": agent.max_context_chars,
        "limits": limits.model_dump(mode="json")}
    if agent.handlers:
        settings["host_functions"] = sorted(agent.handlers)
    for name in ("temperature", "max_tokens", "timeout_s", "max_retries"):
        value = getattr(agent.llm, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            settings[f"llm_{name}"] = value
    return settings


def _open_log(target: LogTarget, sandbox: Sandbox) -> tuple[AgentLog | None, str | None]:
    """The agent log to write to (None when not logging), and why it could not be opened."""
    try:
        if target is False:
            return None, None
        if target is True:
            store = sandbox.log_store
            return (AgentLog(store) if store is not None else AgentLog()), None
        if isinstance(target, AgentLog):
            return target, None
        return AgentLog(target), None
    except Exception as exc:
        reason = f"the agent log cannot be opened: {_reason(exc)}"
        log.warning("this agent run is not logged: %s", reason)
        return None, reason

