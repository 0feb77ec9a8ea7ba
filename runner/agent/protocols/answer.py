"""Plain answers: the model reasons in text and gives its final answer in \\boxed{}; nothing
runs. The baseline against which tool-using protocols are measured (MathChat's "vanilla"
prompting). Code the model writes is only text here.

A reply without an answer is a MALFORMED_RESPONSE (with one turn, the run simply ends
without an answer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..actions import AnswerAction, ParsedReply, ReplyProblem
from ..llm import ChatReply
from ..parsing import last_boxed
from .base import ReplyProtocol
from .code import AnswerRule

if TYPE_CHECKING:
    from ...functions import FunctionSet


class AnswerProtocol(ReplyProtocol):
    name = "answer"

    def __init__(self, answer_rule: AnswerRule = last_boxed, *,
                 answer_format: str = "\\boxed{<answer>}") -> None:
        self.answer_rule = answer_rule
        self.answer_format = answer_format

    def system_prompt(self, functions: FunctionSet) -> str:
        return ("You are a careful assistant. Work out the user's task step by step in words "
                "and formulas. " + self.template(functions))

    def template(self, functions: FunctionSet) -> str:
        return f"End your reply with the final answer as {self.answer_format}."

    def parse(self, reply: ChatReply, functions: FunctionSet) -> ParsedReply:
        answer = self.answer_rule(reply.content)
        if answer is not None and answer.strip():
            return ParsedReply(actions=(AnswerAction(answer=answer.strip()),))
        return ParsedReply(problems=(ReplyProblem(
            message=f"the reply has no final answer in {self.answer_format}"),))
