"""What the optimizer model reads: the lists, the results and the conversations, within a budget.

The training history is any agent runs: `Conversation` is a logged run with whether it
succeeded (and, optionally, a label and what went wrong), so math problems and any other
task train alike. `Statistics` are the per-task results and the success rate.

`build_task` writes one optimizer request: List A (the current functions, the ones the
conversations used), List B (after the actions taken so far in this step: the one the
next action changes), changes rolled back before because the success rate fell with them,
the results, and the conversations as transcripts, failures first, cut to fit a budget
(tokens estimated at four characters each); what was left out is said. The log keeps
every conversation whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..agent.feedback import clip
from ..agent.run import AgentRun, conversation_text
from ..functions import FunctionSet, FunctionSpec
from ..logs.store import LogStore

CHARS_PER_TOKEN = 4  # a rough rule for English and code; no tokenizer of the model is at hand
DEFAULT_HISTORY_TOKENS = 6000
_MIN_TRANSCRIPT_CHARS = 400  # a conversation cut shorter than this says too little to include
_RESULT_LINE_CHARS = 200
_CODE_CHARS = 3000  # of one function's code in a list


class Conversation(BaseModel):
    """One logged agent run of the training history, and whether it succeeded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run: AgentRun
    success: bool
    label: str = ""  # e.g. the problem's id
    detail: str = ""  # e.g. "answered 5, expected 6"

    @property
    def title(self) -> str:
        return self.label or self.run.id


class ProblemResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    success: bool
    detail: str = ""


class Statistics(BaseModel):
    """Per-task results of the current list, and the success rate they make."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    results: list[ProblemResult] = Field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def solved(self) -> int:
        return sum(1 for result in self.results if result.success)

    @property
    def success_rate(self) -> float:
        return self.solved / self.total if self.total else 0.0

    @classmethod
    def of(cls, conversations: Iterable[Conversation]) -> Statistics:
        return cls(results=[ProblemResult(label=c.title, success=c.success, detail=c.detail)
                            for c in conversations])


class RolledBack(BaseModel):
    """Changes made in an earlier step and undone because the success rate fell with them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epoch: int
    success_rate: float  # with the changes
    before: float  # without them
    changes: list[dict[str, Any]]  # {"action", "function", "spec"}


def conversations_from_log(outcomes: Mapping[str, bool], *,
                           log_store: LogStore | Path | str | None = None,
                           labels: Mapping[str, str] | None = None) -> list[Conversation]:
    """The logged runs `outcomes` names (run id -> success), for `Optimizer.step`: any agent
    runs in the log store can be a training history."""
    from ..logs.agent import AgentLog

    log = AgentLog(log_store)
    return [Conversation(run=log.get(run_id), success=success,
                         label=(labels or {}).get(run_id, ""))
            for run_id, success in outcomes.items()]


# -- rendering -------------------------------------------------------------------------------


def render_functions(functions: FunctionSet | Sequence[FunctionSpec]) -> str:
    """A list as the optimizer reads it: each function's five elements, code indented."""
    specs = list(functions)
    if not specs:
        return "(no functions)"
    blocks = []
    for spec in specs:
        code, _ = clip(spec.code.rstrip("\n"), _CODE_CHARS)
        blocks.append("\n".join([
            f"- name: {spec.name}",
            f"  description: {spec.description or '(none)'}",
            f"  arguments: {json.dumps(spec.parameters, ensure_ascii=False)}",
            f"  packages: {json.dumps(list(spec.packages))}",
            "  code:", *("    " + line for line in code.splitlines())]))
    return "\n".join(blocks)


def transcript(conversation: Conversation) -> str:
    """A conversation as text: the task, then each turn's model reply and the runner's answer."""
    run = conversation.run
    lines = [f"[task] {run.task.strip()}"]
    for turn in run.turns:
        for speaker, text in conversation_text(turn):
            lines.append(f"[{'assistant' if speaker == 'model' else speaker}] {text}")
    ending = f"[end] {run.status}"
    if run.final_answer is not None:
        ending += f", final answer: {run.final_answer}"
    elif run.stop_reason:
        ending += f": {run.stop_reason}"
    lines.append(ending)
    return "\n".join(lines)


def _results_text(statistics: Statistics, budget_chars: int) -> str:
    head = (f"Results with List A: {statistics.solved} of {statistics.total} tasks succeeded "
            f"(success rate {statistics.success_rate * 100:.1f}%).")
    lines = []
    for result in sorted(statistics.results, key=lambda r: r.success):
        line = f"- {result.label}: {'succeeded' if result.success else 'FAILED'}"
        if result.detail:
            line += f" ({result.detail})"
        lines.append(clip(line, _RESULT_LINE_CHARS)[0].replace("\n", " "))
    body, _ = clip("\n".join(lines), budget_chars)
    return head + ("\n" + body if body else "")


def _conversations_text(conversations: Sequence[Conversation], budget_chars: int) -> str:
    """Failures first; whole transcripts while they fit, then one cut to what is left."""
    ordered = sorted(conversations, key=lambda c: c.success)  # stable: failures, then successes
    shown: list[str] = []
    left = budget_chars
    for conversation in ordered:
        outcome = "FAILED" if not conversation.success else "succeeded"
        header = f"### {conversation.title}: {outcome}" + (
            f" ({conversation.detail})" if conversation.detail else "")
        text = transcript(conversation)
        room = left - len(header) - 1
        if room < _MIN_TRANSCRIPT_CHARS:
            break
        text, _ = clip(text, room, where="the log")
        shown.append(f"{header}\n{text}")
        left -= len(header) + 1 + len(text) + 2
    omitted = len(ordered) - len(shown)
    head = (f"Conversations with List A ({len(shown)} of {len(ordered)}, failures first"
            + (f"; {omitted} left out for length" if omitted else "") + "):")
    return head + ("\n\n" + "\n\n".join(shown) if shown else "\n(none fit the budget)")


def _rolled_back_text(rolled_back: Sequence[RolledBack]) -> str:
    parts = ["Changes tried before and rolled back, because the success rate fell with them "
             "(do not make them again):"]
    for item in rolled_back:
        parts.append(f"- at epoch {item.epoch} ({item.before * 100:.1f}% -> "
                     f"{item.success_rate * 100:.1f}%):")
        for change in item.changes:
            spec = change.get("spec")
            line = f"  {change.get('action')} {change.get('function')}"
            if isinstance(spec, dict) and spec.get("description"):
                line += f": {spec['description']}"
            parts.append(clip(line, _RESULT_LINE_CHARS)[0].replace("\n", " "))
    return "\n".join(parts)


def build_task(*, current: FunctionSet, working: FunctionSet, actions_taken: int,
               conversations: Sequence[Conversation], statistics: Statistics,
               rolled_back: Sequence[RolledBack] = (), history_tokens: int = DEFAULT_HISTORY_TOKENS,
               remaining: int = 1) -> str:
    """The optimizer's request for one action (see the module docstring)."""
    budget = history_tokens * CHARS_PER_TOKEN
    sections = [
        "List A, the current functions (the ones the conversations below used):\n"
        + render_functions(current),
        f"List B, the functions after the {actions_taken} action{'s' if actions_taken != 1 else ''} "
        "taken so far in this step (your action changes List B):\n" + render_functions(working),
    ]
    if rolled_back:
        sections.append(_rolled_back_text(rolled_back))
    # The results take at most a quarter of the budget; the conversations get the rest.
    results = _results_text(statistics, budget // 4)
    sections.append(results)
    sections.append(_conversations_text(conversations, max(0, budget - len(results))))
    sections.append(
        "Take one action on List B now (up to "
        f"{remaining} more in this step): add a function that would have helped in the failed "
        "tasks, revise one that failed or misled, or remove one that does harm. If List B needs "
        "no change, reply with TERMINATE.")
    return "\n\n".join(sections)
