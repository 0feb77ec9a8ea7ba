"""Solving one math problem with a model: MathChat, and the two baselines it is measured against.

    from runner.math import solve
    solution = solve("Find the sum of all x with x^2-5x+6=0.", model="m",
                     base_url="http://127.0.0.1:8000/v1", gold="5")
    solution.answer, solution.correct, solution.run_id

Methods (all answers go through the same checker):

- `mathchat`: a conversation in which the model reasons and writes Python blocks (sympy)
  that run in one sandbox session per problem, so state carries over and earlier blocks
  never re-run; the answer is the `\\boxed{}` of a reply without code. Its variants
  (`VARIANTS`, recorded with every solution and evaluation):
  - `default` and `python`: MathChat as the paper and AutoGen's `MathUserProxyAgent` define
    it (`runner.math.mathchat_proxy`): AutoGen's prompt of that name in the first user
    message (`default` with the paper's three strategies), "Continue" for a reply with
    neither code nor answer, the last expression of a block printed when it prints
    nothing, AutoGen's texts for errors, missing and too long output, a repeated result
    and invalid replies, AutoGen's rule for when a reply ends the conversation, 5 s per
    block unless a timeout is given, at most 16 model messages. `two_tools` needs Wolfram Alpha and is
    refused with that reason.
  - `guided`: this project's own code-block agent, with MathChat's turn limit and stop
    rule: a system prompt with the method, structured feedback with error codes (a block
    that fails or prints nothing is told to fix or print; after three failing blocks in a
    row, to reason the step out), long output cut with a warning, a malformed reply
    refused, a repeated failing block ending the run, TERMINATE ending it without an
    answer, at most 15 model messages.
- `pot` (Program of Thoughts): one program whose printed output is the answer.
- `vanilla`: no code at all; the answer is the reply's `\\boxed{}`.

Learned functions (a `FunctionSet`) are defined in the session, so blocks call them like
any Python function, and are offered as native tool calls too (dropped for the rest of
the conversation if the server refuses them).

Everything runs through the agent loop (`runner.agent`), so each conversation, its
executions and what the model was told are in the log.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict

from ..agent.feedback import functions_reference
from ..agent.loop import Agent, LogTarget
from ..agent.protocols import AnswerProtocol, CodeProtocol, ReplyProtocol
from ..agent.run import AgentRun, AgentStatus, AgentTurn
from ..backends.base import DEFAULT_BACKEND
from ..errors import ConfigurationError
from ..functions import FunctionSet
from ..sandbox import Sandbox
from ..types import Limits
from .checker import Checker, Verdict, asks_for_decimal, check
from .datasets import Problem
from .extract import last_boxed
from .mathchat_proxy import BLOCK_TIMEOUT_S, WOLFRAM_UNREACHABLE, MathChatProxyProtocol

if TYPE_CHECKING:
    from ..agent.llm import ChatModel

__all__ = ["DEFAULT_MAX_TURNS", "DEFAULT_VARIANT", "METHODS", "VARIANTS", "Method", "Solution",
           "Variant", "default_max_turns", "make_agent", "math_protocol", "solve"]

Method = Literal["mathchat", "pot", "vanilla"]
METHODS: tuple[str, ...] = get_args(Method)
Variant = Literal["default", "python", "two_tools", "guided"]
VARIANTS: tuple[str, ...] = get_args(Variant)
DEFAULT_VARIANT = "default"
# Model messages per conversation at most. MathChat's guided variant stops a conversation
# after 15; AutoGen's proxy makes 15 automatic replies, so 16 messages; the baselines are
# single replies by definition.
DEFAULT_MAX_TURNS: dict[str, int] = {"mathchat": 15, "pot": 1, "vanilla": 1}
_PROXY_MAX_TURNS = 16
REASON_AFTER_FAILURES = 3
DEFAULT_MAX_OUTPUT_CHARS = 2000  # what the model reads of one block's output
STOP_WORD = "TERMINATE"

_MATHCHAT_PROMPT = """\
You solve competition math problems together with a Python interpreter.

How to work:
1. Think step by step, one step at a time. When a step needs computing (algebra, \
counting, checking cases), write it as one ```python block and wait for its output before \
you go on. Never write the output yourself.
2. The blocks of a problem run in one Python session: variables, imports and functions \
from earlier blocks are still defined. Build on them; do not repeat earlier code.
3. Use sympy for exact work: fractions (Rational), radicals (sqrt) and pi rather than \
decimals, and simplify results. print() every result you need: only printed output comes \
back to you.
4. If a block fails, read the error and fix it. If code keeps failing for a step, work \
that step out by reasoning instead.
5. When you have the answer, reply without any code and put the final answer in \
\\boxed{}, in its simplest exact form (for example \\boxed{\\frac{3}{4}} or \
\\boxed{2\\sqrt{5}}), or as a decimal only if the problem asks for one.
6. If the problem cannot be solved, reply with the word TERMINATE."""

_POT_PROMPT = """\
You solve math problems by writing one Python program.

Reply with a single ```python block: a complete program that computes the answer (use \
sympy for exact work: fractions, radicals and pi rather than decimals) and prints only the \
final answer, on its last line, in its simplest exact form (for example 3/4 or \
2*sqrt(5)). The program runs once and what it prints last is taken as your answer; you \
will not see its output."""

_VANILLA_PROMPT = """\
You solve math problems by careful reasoning, without running any code.

Think step by step in words and formulas. End your reply with the final answer in \
\\boxed{}, in its simplest exact form (for example \\boxed{\\frac{3}{4}} or \
\\boxed{2\\sqrt{5}}), or as a decimal only if the problem asks for one."""


def default_max_turns(method: str, variant: str | None = None) -> int:
    """Model messages per conversation at most, for a method (and MathChat variant)."""
    if method == "mathchat" and (variant or DEFAULT_VARIANT) != "guided":
        return _PROXY_MAX_TURNS
    return DEFAULT_MAX_TURNS[method]


def _functions_text(functions: FunctionSet, *, native: bool, json_calls: bool = True) -> str:
    if not len(functions):
        return ""
    how = ("call them in your Python blocks like any function. You may also call one on its own "
           "through the tool-calling interface" if native else
           "call them in your Python blocks like any function")
    json = (', or with a ```json block holding {"function": "<name>", "arguments": {...}}'
            if json_calls else "")
    return ("\n\nThese functions are already defined in the Python session; " + how + json
            + ".\n" + functions_reference(functions))


class GuidedProtocol(CodeProtocol):
    """MathChat's guided variant: the code protocol with this project's feedback (see the
    module docstring)."""

    def __init__(self, *, native_tools: bool = True) -> None:
        super().__init__(last_boxed, require_output=True,
                         reason_after_failures=REASON_AFTER_FAILURES, stop_word=STOP_WORD,
                         native_tools=native_tools)

    def system_prompt(self, functions: FunctionSet) -> str:
        return _MATHCHAT_PROMPT + _functions_text(functions, native=self.native_tools)

    def template(self, functions: FunctionSet) -> str:
        return ("Put code in one ```python block and print() the results. When you have the final "
                "answer, reply with it as \\boxed{<answer>} and no code block (or TERMINATE if "
                "the problem cannot be solved).")

    def task_message(self, task: str) -> str:
        return f"Problem: {task}"


class ProgramProtocol(CodeProtocol):
    """Program of Thoughts: one program, whose last printed line is the answer."""

    def __init__(self) -> None:
        super().__init__(last_boxed, output_answer=True)

    def system_prompt(self, functions: FunctionSet) -> str:
        return _POT_PROMPT + _functions_text(functions, native=False)

    def template(self, functions: FunctionSet) -> str:
        return "Reply with one ```python program that prints only the final answer."

    def task_message(self, task: str) -> str:
        return f"Problem: {task}"


class VanillaProtocol(AnswerProtocol):
    """No code: the answer is the reply's last `\\boxed{}`."""

    def __init__(self) -> None:
        super().__init__(last_boxed)

    def system_prompt(self, functions: FunctionSet) -> str:
        return _VANILLA_PROMPT

    def task_message(self, task: str) -> str:
        return f"Problem: {task}"


def check_method(method: str) -> Method:
    if method not in METHODS:
        raise ConfigurationError(f"unknown method {method!r}",
                                 fix=f"use one of: {', '.join(METHODS)}")
    return method  # type: ignore[return-value]


def check_variant(method: str, variant: str | None) -> str | None:
    """The MathChat variant a method runs with (None for the baselines)."""
    if method != "mathchat":
        if variant not in (None, DEFAULT_VARIANT):
            raise ConfigurationError(f"variant {variant!r} is MathChat's; method {method!r} has none",
                                     fix="leave out the variant, or use --method mathchat")
        return None
    chosen = variant or DEFAULT_VARIANT
    if chosen not in VARIANTS:
        raise ConfigurationError(f"unknown MathChat variant {chosen!r}",
                                 fix=f"use one of: {', '.join(VARIANTS)}")
    if chosen == "two_tools":
        raise ConfigurationError(f"MathChat's two_tools variant cannot run here: {WOLFRAM_UNREACHABLE}",
                                 fix="use --variant default or --variant python")
    return chosen


def math_protocol(method: str, *, native_tools: bool = True, variant: str | None = None,
                  functions: FunctionSet | None = None) -> ReplyProtocol:
    """The reply protocol of a method (and MathChat variant)."""
    chosen = check_method(method)
    variant = check_variant(chosen, variant)
    if chosen == "mathchat":
        if variant == "guided":
            return GuidedProtocol(native_tools=native_tools)
        return MathChatProxyProtocol(variant, native_tools=native_tools,
                                     functions_text=_functions_text(
                                         functions, native=native_tools, json_calls=False)
                                     if functions is not None else "")
    if chosen == "pot":
        return ProgramProtocol()
    return VanillaProtocol()


def load_functions(functions: FunctionSet | str | Path | None) -> FunctionSet | None:
    """A FunctionSet as given, or loaded from its file (`--functions learned.json`)."""
    if functions is None or isinstance(functions, FunctionSet):
        return functions
    # Reading a file changes no function, so nothing goes to the function history.
    return FunctionSet.load(functions, log_store=False)


class Solution(BaseModel):
    """How one problem went: the conversation's end, the answer, and the verdict if a gold
    answer was given."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    method: str
    variant: str | None = None  # MathChat's variant (see VARIANTS); None for the baselines
    problem: str
    status: AgentStatus
    answer: str | None = None
    stop_reason: str | None = None
    error: dict[str, Any] | None = None
    turns: int = 0
    code_blocks: int = 0
    sandbox_ms: int = 0
    gold: str | None = None
    correct: bool | None = None
    verdict: Verdict | None = None
    run: AgentRun

    def summary_dict(self) -> dict[str, Any]:
        """The solution as `runner math solve --json` prints it (the run without its
        messages; `runner logs show RUN_ID --json` has them)."""
        data = self.model_dump(mode="json", exclude={"run"})
        data["conversation"] = self.run.summary_dict()["turns"]
        return data


def make_agent(llm: ChatModel, *, method: str = "mathchat", variant: str | None = None,
               functions: FunctionSet | None = None,
               sandbox: Sandbox | None = None, max_turns: int | None = None,
               limits: Limits | None = None, budget_s: float | None = 120.0,
               native_tools: bool = True, max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
               on_turn: Callable[[AgentTurn], None] | None = None,
               log: LogTarget = True) -> Agent:
    """The agent that solves problems by `method` (one per evaluation; safe to share by
    threads, each run has its own conversation and session)."""
    chosen = check_method(method)
    variant = check_variant(chosen, variant)
    protocol = math_protocol(chosen, native_tools=native_tools, variant=variant, functions=functions)
    if isinstance(protocol, MathChatProxyProtocol):
        limits = proxy_limits(limits, sandbox)
    return Agent(llm, functions, protocol=protocol,
                 sandbox=sandbox, max_turns=max_turns or default_max_turns(chosen, variant),
                 budget_s=budget_s, limits=limits, max_feedback_chars=max_output_chars,
                 log=log, on_turn=on_turn)


def proxy_limits(limits: Limits | None, sandbox: Sandbox | None) -> Limits:
    """The limits of AutoGen's proxy: its 5 s per block (`BLOCK_TIMEOUT_S`) unless the
    caller set a timeout itself (in `limits`, or in the sandbox's own limits)."""
    base = limits if limits is not None else sandbox.limits if sandbox is not None else Limits()
    if "timeout_s" in base.model_fields_set:
        return base
    return base.model_copy(update={"timeout_s": BLOCK_TIMEOUT_S})


def solution_from_run(run: AgentRun, *, method: str, problem: str, gold: str | None,
                      verdict: Verdict | None, variant: str | None = None) -> Solution:
    blocks = sum(1 for turn in run.turns for action in turn.actions if action.get("kind") == "code")
    return Solution(run_id=run.id, method=method, variant=variant, problem=problem, status=run.status,
                    answer=run.final_answer, stop_reason=run.stop_reason, error=run.error,
                    turns=len(run.turns), code_blocks=blocks, sandbox_ms=run.sandbox_ms,
                    gold=gold, correct=None if verdict is None else verdict.equal,
                    verdict=verdict, run=run)


def judge_answer(problem: str, gold: str, answer: str | None, checker: Checker | None = None,
                 *, method: str = "mathchat") -> Verdict:
    """The checker's verdict on `answer`, decimals allowed when the problem asks for one; a
    `pot` answer is what the program printed, read as Python's or sympy's output."""
    allow_decimal = asks_for_decimal(problem)
    printed = method == "pot"
    if checker is not None:
        return checker.check(gold, answer, allow_decimal=allow_decimal, printed=printed)
    return check(gold, answer, allow_decimal=allow_decimal, printed=printed)


def solve(problem: str | Problem, *, llm: ChatModel | None = None, model: str | None = None,
          base_url: str | None = None, api_key: str | None = None, method: str = "mathchat",
          variant: str | None = None,
          functions: FunctionSet | str | Path | None = None, sandbox: Sandbox | None = None,
          backend: str = DEFAULT_BACKEND, max_turns: int | None = None, limits: Limits | None = None,
          budget_s: float | None = 120.0, native_tools: bool = True,
          max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS, gold: str | None = None,
          checker: Checker | None = None, on_turn: Callable[[AgentTurn], None] | None = None,
          log: LogTarget = True) -> Solution:
    """Solve one problem (text, or a dataset `Problem`, whose answer is then the gold).

    The model is `llm`, or an `OpenAIChat` made from `model`, `base_url` and `api_key`
    (which fall back to RUNNER_MODEL, OPENAI_BASE_URL and OPENAI_API_KEY). Without a
    `sandbox`, one of `backend` is opened for this problem and closed after. With a `gold`
    answer the solution carries the checker's verdict. `variant` is MathChat's (see
    `VARIANTS`; default `default`).
    """
    variant = check_variant(check_method(method), variant)
    if llm is None:
        from ..agent.llm import OpenAIChat

        llm = OpenAIChat(model, base_url=base_url, api_key=api_key)
    text = problem.problem if isinstance(problem, Problem) else problem
    if isinstance(problem, Problem) and gold is None:
        gold = problem.answer
    function_set = load_functions(functions)
    owns_sandbox = sandbox is None
    box = sandbox if sandbox is not None else Sandbox(backend=backend, source="math")
    try:
        agent = make_agent(llm, method=method, variant=variant, functions=function_set, sandbox=box,
                           max_turns=max_turns, limits=limits, budget_s=budget_s,
                           native_tools=native_tools, max_output_chars=max_output_chars,
                           on_turn=on_turn, log=log)
        run = agent.run(text)
    finally:
        if owns_sandbox:
            box.close()
    verdict = judge_answer(text, gold, run.final_answer, checker, method=method) \
        if gold is not None else None
    return solution_from_run(run, method=method, problem=text, gold=gold, verdict=verdict,
                             variant=variant)
