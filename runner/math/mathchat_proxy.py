"""MathChat as the paper and AutoGen define it: the user proxy agent's prompt and rules.

MathChat (Wu et al., "MathChat: Converse to Tackle Challenging Math Problems with LLM
Agents", 2023) is a conversation between the model and a user proxy agent that runs the
model's queries and guides it. AutoGen ships the proxy as `MathUserProxyAgent`; the texts
and rules here are those of AG2 0.9.10's `autogen/agentchat/contrib/math_user_proxy_agent.py`
(Apache-2.0; portions MIT, from microsoft/autogen), on this project's sandbox and loop:

- The system message is "You are a helpful assistant."; the first user message is the
  prompt of the chosen variant followed by the problem. `default` offers the paper's three
  strategies (a direct program, reasoning alone, step by step with queries); `python` asks
  for the step-by-step process with Python queries only. `two_tools` also offers Wolfram
  Alpha, which needs an app id and the network: the sandbox has neither, so it is refused
  with that reason (`ConfigurationError`).
- A reply ends the conversation when AutoGen's `_is_termination_msg_mathchat` says so: it
  has no closed block tagged exactly `python` (or `wolfram`), and AutoGen's `get_answer`
  reads a non-empty answer, which is then the answer (`autogen_answer`): the last
  `\\boxed{...}` written with its brace right after `\\boxed`. So a box beside an untagged,
  `text` or `py` block ends it (the block does not run); `\\fbox{3}`, `\\boxed 3`, `\\boxed {3}`
  and `\\boxed{}` are no answer; of `\\boxed{6} ... \\fbox{10}` the answer is 6. A reply
  with neither code nor an answer is a reasoning step: it is answered with AutoGen's
  "Continue. Please keep solving the problem until you need to query. (If you get to the
  answer, put it in \\boxed{}.)".
- Every closed ```python block runs, in order, in one sandbox session per problem, with
  AutoGen's 5 s per block (`BLOCK_TIMEOUT_S`, unless the caller sets `Limits.timeout_s`).
  A block that calls no `print` has its last statement printed when it is an expression
  (AutoGen wraps the last line in `print()` when the block has no `print(` and that line
  has no `=` or tab; here the block's syntax decides, so `a == b` and a multi-line last
  expression are printed too, and `x = 1` is not). A block in any other language gets
  "Error: Unknown language.".
- Deliberate differences from AutoGen: it runs the earlier blocks' code again before each
  block (after re-running them without `print` to see whether they still work); a live
  session keeps the same state without running anything twice, which is faster and gives
  the same results for deterministic code. When a block is stopped (a timeout) the
  session's process goes with it, and the message says so after AutoGen's "Error:
  Timeout". A block tagged `py`, `python3`, `Python` or `sympy` runs here, where AutoGen
  answers "Error: Unknown language." (its prompt asks for ```python; the other tags name
  the same language).
- What the model reads of each block is AutoGen's: the printed output; "Error: " and the
  error (traceback lines naming files removed); "No output found. Make sure you print the
  results." (an invalid query) when a block without `print` printed nothing, "No output
  found." when it has one; and for output over 2,000 characters "Your requested query
  response is too long. You might have made a mistake. Please revise your reasoning and
  query." (an invalid query). The outputs of a reply's blocks are joined by newlines.
- The same result twice in a row gets "Your query or result is same from the last, please
  try a new approach." appended, and the conversation goes on.
- Invalid replies (a reply with at least one invalid query): AutoGen counts them over the
  whole conversation (a valid reply does not reset the count, and a repeated result is not
  counted); when the count passes `max_invalid_per_step` (3), that is on the fourth, the
  reply's results are replaced by "Please revisit the problem statement and your
  reasoning. If you think this step is correct, solve it yourself and continue the next
  step. Otherwise, correct this step." and the count starts again. The paper describes the
  limit as invalid queries within one step; the code released with it
  (yiranwu0/MathChat, `math_chat.py`) counts invalid replies in a row (a valid reply resets
  the count, a repeated query counts as invalid) and replaces the third. This module
  follows AutoGen.
- The conversation ends after AutoGen's 15 automatic replies, so with at most 16 model
  messages.

A reply cut off at the model's token limit is read like any other, as AutoGen reads it: a
block left open is not a query (then it is a reasoning step), a box left open no answer.

Learned functions are defined in the session and listed after the system message (and
offered as native tool calls when the server takes them), as the AgentOptimizer's
functions are registered with the proxy in AutoGen.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from ..agent.actions import Action, AnswerAction, CodeAction, ParsedReply
from ..agent.feedback import ActionReport, notes_text
from ..agent.llm import ChatReply, Message
from ..agent.parsing import fenced_blocks
from ..agent.protocols.base import ConversationRules, ReplyProtocol
from ..agent.protocols.code import PYTHON
from ..agent.protocols.tools import tool_call_actions, tool_messages
from ..errors import ConfigurationError
from ..last_expression import parsed, wrap_last_expression
from ..types import ExecutionResult, Status

if TYPE_CHECKING:
    from ..functions import FunctionSet

__all__ = ["BLOCK_TIMEOUT_S", "CONTINUE", "INVALID_LIMIT", "MAX_OUTPUT_CHARS", "PROMPTS", "REVISIT", "SAME_RESULT",
           "SYSTEM_MESSAGE", "TOO_LONG", "MathChatProxyProtocol", "PromptVariant",
           "autogen_answer", "ends_conversation", "print_last_expression"]

PromptVariant = Literal["default", "python", "two_tools"]

SYSTEM_MESSAGE = "You are a helpful assistant."

_QUERY_REQUIREMENTS = "\n".join([
    "Query requirements:",
    "You should always use the 'print' function for the output and use fractions/radical "
    "forms instead of decimals.",
    "You can use packages like sympy to help you.",
    "You must follow the formats below to write your code:",
    "```python",
    "# your code",
    "```",
    ""])

_PROCESS = "\n".join([
    "1. Solve the problem step by step (do not over-divide the steps).",
    "2. Take out any queries that can be asked through Python (for example, any calculations "
    "or equations that can be calculated).",
    "3. Wait for me to give the results.",
    "4. Continue if you think the result is correct. If the result is invalid or unexpected, "
    "please correct your query or reasoning.",
    ""])

_ANSWER = "\nAfter all the queries are run and you get the answer, put the answer in \\boxed{}.\n\n"

# AutoGen's prompts, word for word; the problem follows each.
PROMPTS: dict[str, str] = {
    "default": "\n".join([
        "Let's use Python to solve a math problem.",
        "",
        _QUERY_REQUIREMENTS,
        "First state the key idea to solve the problem. You may choose from three ways to solve "
        "the problem:",
        "Case 1: If the problem can be solved with Python code directly, please write a program "
        "to solve it. You can enumerate all possible arrangements if needed.",
        "Case 2: If the problem is mostly reasoning, you can solve it by yourself directly.",
        "Case 3: If the problem cannot be handled in the above two ways, please follow this "
        "process:",
        _PROCESS]) + _ANSWER + "Problem:\n",
    "python": "\n".join([
        "Let's use Python to solve a math problem.",
        "",
        _QUERY_REQUIREMENTS,
        "Please follow this process:",
        _PROCESS]) + _ANSWER + "Problem: ",
}

CONTINUE = ("Continue. Please keep solving the problem until you need to query. "
            "(If you get to the answer, put it in \\boxed{}.)")
TOO_LONG = ("Your requested query response is too long. You might have made a mistake. "
            "Please revise your reasoning and query.")
SAME_RESULT = "Your query or result is same from the last, please try a new approach."
REVISIT = ("Please revisit the problem statement and your reasoning. If you think this step "
           "is correct, solve it yourself and continue the next step. Otherwise, correct this "
           "step.")
NO_OUTPUT_NO_PRINT = "No output found. Make sure you print the results."
NO_OUTPUT = "No output found."
UNKNOWN_LANGUAGE = "Error: Unknown language."
MAX_OUTPUT_CHARS = 2000  # AutoGen's limit on one block's output
INVALID_LIMIT = 3  # AutoGen's max_invalid_q_per_step
BLOCK_TIMEOUT_S = 5.0  # AutoGen's `execute_code(..., timeout=5)` for each query
WOLFRAM_UNREACHABLE = (
    "the two_tools prompt needs Wolfram Alpha (an app id and network access from the "
    "user proxy); the sandbox has no network and runner has no Wolfram client")

# The tag of a fence as written (AutoGen's `(\w+)?`, case kept): only `python` and
# `wolfram` make a reply a query rather than a final answer.
_FENCE_TAG = re.compile(r"[ \t]*`{3,}[ \t]*(\w*)")
_QUERY_TAGS = frozenset({"python", "wolfram"})
_BOX = "\\boxed"

# A traceback line naming a file, which AutoGen removes from errors.
_FILE_LINE = re.compile(r'File "[^"]+", line \d+, in .+\n')


def print_last_expression(code: str) -> str:
    """`code` with its last statement printed, when the block calls no `print` and that
    statement is an expression (AutoGen's rule, read from the block's syntax). Code that
    does not parse is returned as it is: running it shows the error."""
    tree = parsed(code)
    if tree is None:
        return code
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            return code
    return wrap_last_expression(code, "print", tree)


def autogen_answer(text: str) -> str | None:
    """The answer AutoGen's `math_utils.get_answer` reads (from the MATH repository's
    `last_boxed_only_string` and `remove_boxed`): from the last `\\boxed` (or, with none,
    the last `\\fbox`) to where its braces balance, counted from there; an answer only
    when that reads `\\boxed{...}`. So `\\fbox{3}`, `\\boxed 3` and `\\boxed {3}` give
    None and `\\boxed{}` gives "". Linear in the text's length."""
    start = text.rfind(_BOX)
    if start < 0:
        start = text.rfind("\\fbox")
        if start < 0:
            return None
    depth = 0
    for index in range(start, len(text)):
        character = text[index]
        if character == "{":
            depth += 1
        elif character == "}":
            depth -= 1
            if depth == 0:
                boxed = text[start:index + 1]
                return boxed[len(_BOX) + 1:-1] if boxed.startswith(_BOX + "{") else None
    return None


def ends_conversation(content: str) -> str | None:
    """The final answer when a reply ends the conversation as AutoGen's
    `_is_termination_msg_mathchat` decides (no closed block tagged `python` or `wolfram`,
    and a non-empty `autogen_answer`), else None."""
    for block in fenced_blocks(content):
        tag = _FENCE_TAG.match(content, block.start)
        if block.closed and tag is not None and tag.group(1) in _QUERY_TAGS:
            return None
    answer = autogen_answer(content)
    return answer if answer else None


class MathChatProxyProtocol(ReplyProtocol):
    """MathChat's conversation, with the user proxy agent's rules (see the module docstring)."""

    name = "mathchat"
    reads_cut_replies = True  # AutoGen reads a reply cut at the token limit like any other

    def __init__(self, variant: str | None = "default", *, native_tools: bool = True,
                 functions_text: str = "") -> None:
        if variant == "two_tools":
            raise ConfigurationError(f"MathChat's two_tools prompt cannot run here: {WOLFRAM_UNREACHABLE}",
                                     fix="use --variant default or --variant python")
        if variant is None or variant not in PROMPTS:
            raise ConfigurationError(f"unknown MathChat prompt {variant!r}",
                                     fix="use one of: default, python")
        self.variant: str = variant
        self.native_tools = native_tools
        self.tools_optional = native_tools
        self.functions_text = functions_text

    def system_prompt(self, functions: FunctionSet) -> str:
        return SYSTEM_MESSAGE + self.functions_text

    def task_message(self, task: str) -> str:
        return PROMPTS[self.variant] + task

    def template(self, functions: FunctionSet) -> str:
        return ("Put each query in a ```python block and print its results; when you have the "
                "answer, put it in \\boxed{}.")

    def tools(self, functions: FunctionSet) -> list[dict[str, object]] | None:
        if self.native_tools and len(functions):
            return functions.to_openai_tools()
        return None

    def parse(self, reply: ChatReply, functions: FunctionSet) -> ParsedReply:
        if not reply.tool_calls:
            answer = ends_conversation(reply.content)
            if answer is not None:
                return ParsedReply(actions=(AnswerAction(answer=answer),))
        actions: list[Action] = []
        calls, problems = tool_call_actions(reply) if reply.tool_calls else ([], [])
        actions += calls
        for block in fenced_blocks(reply.content):
            if not block.closed:
                continue  # AutoGen reads closed blocks only: a cut-off one is not a query
            language = "python" if block.language in PYTHON and _is_python(block) else block.language
            actions.append(CodeAction(code=block.body, language=language or "unknown"))
        if actions or problems:
            return ParsedReply(actions=tuple(actions), problems=tuple(problems))
        return ParsedReply()  # a reasoning step: answered with CONTINUE

    def conversation_rules(self) -> ConversationRules:
        return ProxyRules()


def _is_python(block: object) -> bool:
    """A block marked python, or unmarked and valid Python (AutoGen's `infer_lang`)."""
    language = getattr(block, "language", "")
    if language:
        return True
    try:
        ast.parse(getattr(block, "body", ""))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


class ProxyRules(ConversationRules):
    """One conversation's state under the proxy's rules: the last reply and the count of
    invalid replies."""

    def __init__(self, *, max_invalid: int = INVALID_LIMIT,
                 max_output_chars: int = MAX_OUTPUT_CHARS) -> None:
        self.max_invalid = max_invalid
        self.max_output_chars = max_output_chars
        self.last_reply: str | None = None
        self.invalid_replies = 0

    def code_to_run(self, action: CodeAction) -> str | None:
        if action.language != "python":
            return None
        return print_last_expression(action.code)

    def report(self, action: CodeAction, result: ExecutionResult | None) -> ActionReport:
        if result is None:
            return ActionReport(text=UNKNOWN_LANGUAGE, ok=False)
        ok = result.status is Status.OK
        if not ok:
            text = "Error: " + _error_text(result)
        elif result.stdout == "":
            printing = "print" in print_last_expression(action.code)
            text, ok = (NO_OUTPUT, True) if printing else (NO_OUTPUT_NO_PRINT, False)
        else:
            text = result.stdout
        if len(text) > self.max_output_chars or result.stdout_truncated:
            text, ok = TOO_LONG, False
        return ActionReport(text=text, ok=ok, execution_id=result.id)

    def respond(self, reply: ChatReply, observations: Sequence[ActionReport],
                notes: Sequence[str]) -> list[Message]:
        blocks = [observation for observation in observations if observation.call_id is None]
        if not blocks and not reply.tool_calls:
            return [{"role": "user", "content": _with_notes(CONTINUE, notes)}]
        if not blocks:
            return tool_messages(reply, observations, notes)
        text = "".join(observation.text + "\n" for observation in blocks).strip()
        if text == self.last_reply:
            text += "\n" + SAME_RESULT
        else:
            self.last_reply = text
            if not all(observation.ok for observation in blocks):
                self.invalid_replies += 1
                if self.invalid_replies > self.max_invalid:
                    self.invalid_replies = 0
                    text = REVISIT
        if reply.tool_calls:
            calls = [observation for observation in observations if observation.call_id is not None]
            return tool_messages(reply, [*calls, ActionReport(text=text, ok=True)], notes)
        return [{"role": "user", "content": _with_notes(text, notes)}]


def _with_notes(text: str, notes: Sequence[str]) -> str:
    return text + ("\n\n" + notes_text(notes) if notes else "")


def _error_text(result: ExecutionResult) -> str:
    """The error as the model reads it after "Error: ": the traceback (file lines removed),
    or what stopped the block."""
    if result.status is Status.TIMEOUT:
        return "Timeout"
    error = result.error
    if error is None:
        return str(result.status)
    if error.traceback:
        return _FILE_LINE.sub("", error.traceback).rstrip("\n")
    return f"{error.type}: {error.message}" if error.type else error.message
