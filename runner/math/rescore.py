"""`runner math rescore EVAL_ID`: an evaluation's recorded final answers judged again by
this installation's answer checker, without a model or a sandbox.

When the checker changes (a new release reads an answer form it used to refuse, or stops
accepting one it should not), a user wants to know which verdicts of a past evaluation
change before trusting its accuracy. Each problem that was done is judged again from what
the log keeps (its gold answer, the problem's text, the method's reading of printed
output, the final answer), all pairs in one batch on the checker's workers; the report
says how many verdicts stand, which changed (right to wrong, wrong to right, each with
the new verdict's rule and reason) and both checkers' versions. Nothing is written: the
evaluation keeps the verdicts it was judged with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..logs.evaluations import EvaluationLog, ItemRecord
from ..logs.store import LogStore
from .checker import Checker, asks_for_decimal, checker_version
from .datasets import Problem
from .jobs import opened_store

__all__ = ["RescoreReport", "VerdictChange", "rescore"]


class VerdictChange(BaseModel):
    """One problem whose verdict this checker gives differently."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    position: int
    problem_id: str
    type: str | None = None
    level: int | None = None
    gold: str
    answer: str | None
    was: bool
    now: bool
    rule: str  # the new verdict's
    reason: str


class RescoreReport(BaseModel):
    """How an evaluation's verdicts fare under this installation's checker."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    evaluation_id: str
    judged_with: str  # the checker version the evaluation recorded
    checker: str  # this installation's
    judged: int  # problems done (the pending ones have no answer to judge)
    pending: int
    unchanged: int
    right_to_wrong: list[VerdictChange]
    wrong_to_right: list[VerdictChange]
    correct_before: int
    correct_after: int

    @property
    def changed(self) -> int:
        return len(self.right_to_wrong) + len(self.wrong_to_right)

    def to_json_dict(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json"), "changed": self.changed}


def rescore(evaluation_id: str, *, log_store: LogStore | Path | str | None = None,
            workers: int = 2) -> RescoreReport:
    """Judge the evaluation's recorded answers again (see the module docstring); reads the
    log only (a read-only log, a full disk do not matter)."""
    with opened_store(log_store, read_only=True) as store:
        evaluations = EvaluationLog(store)
        record = evaluations.get(evaluation_id)
        items = evaluations.items(record.id)
    done = [item for item in items if item.status == "done"]
    method = record.method
    problems = [Problem.model_validate(item.problem) for item in done]
    with Checker(workers=workers) as checker:
        verdicts = checker.check_many(
            [(problem.answer, item.answer) for problem, item in zip(problems, done, strict=True)],
            allow_decimal=[asks_for_decimal(problem.problem) for problem in problems],
            printed=method == "pot")
    right_to_wrong: list[VerdictChange] = []
    wrong_to_right: list[VerdictChange] = []
    for item, problem, verdict in zip(done, problems, verdicts, strict=True):
        was = bool(item.correct)
        if verdict.equal == was:
            continue
        change = _change(item, problem.answer, was, verdict.equal, verdict.rule, verdict.reason)
        (right_to_wrong if was else wrong_to_right).append(change)
    before = sum(bool(item.correct) for item in done)
    return RescoreReport(
        evaluation_id=record.id, judged_with=record.checker_version, checker=checker_version(),
        judged=len(done), pending=len(items) - len(done),
        unchanged=len(done) - len(right_to_wrong) - len(wrong_to_right),
        right_to_wrong=right_to_wrong, wrong_to_right=wrong_to_right,
        correct_before=before, correct_after=before - len(right_to_wrong) + len(wrong_to_right))


def _change(item: ItemRecord, gold: str, was: bool, now: bool, rule: str, reason: str
            ) -> VerdictChange:
    return VerdictChange(position=item.position, problem_id=item.problem_id, type=item.type,
                         level=item.level, gold=gold, answer=item.answer, was=was, now=now,
                         rule=rule, reason=reason)
