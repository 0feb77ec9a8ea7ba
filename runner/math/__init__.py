"""Math answers: extraction from replies, equivalence checking, and MATH-format datasets.

    from runner.math import extract_answer, is_equivalent, check
    answer = extract_answer(reply)                 # the last \\boxed{...}, or None
    answer = extract_answer(output, fallback=True) # a whole output's answer, wherever it is
    is_equivalent("\\frac{1}{4}", answer)           # True / False, never raises
    verdict = check(gold, answer)                 # Verdict: equal, rule, reason, forms, version

    from runner.math import load_dataset
    dataset = load_dataset("math", split="test").filter(types=["Number Theory"], levels=[5])

    from runner.math import solve, evaluate
    solution = solve("Find x if 2x = 6.", model="m", gold="3")   # MathChat, in the sandbox
    report = evaluate("math500", model="m", limit=50, concurrency=4)

    from runner.math import train                    # AgentOptimizer training of functions
    result = train("math:train:Algebra", limit=20, epochs=5, model="m", out="learned.json")
    result.functions, result.history

`Checker` owns the worker processes behind the symbolic step; the module-level functions
share one. Solving: `runner.math.mathchat`; evaluation: `runner.math.evaluation`;
training: `runner.math.training` (all loaded on first use, since they stand on the
agent, which itself reads answers with this package). Rules and limits:
`runner.math.checker`; normalisation: `runner.math.normalize` and `runner.math.numerals`;
extraction: `runner.math.extract` (whole outputs: `runner.math.reading`); datasets:
`runner.math.datasets` and `runner.math.data`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .checker import (
    Checker,
    Verdict,
    asks_for_decimal,
    check,
    check_many,
    checker_version,
    is_equivalent,
)
from .checker_pool import CheckerUnavailableError
from .datasets import (
    Dataset,
    DatasetError,
    LineError,
    Problem,
    dataset_names,
    load_dataset,
    load_jsonl,
)
from .extract import extract_answer

if TYPE_CHECKING:
    from .evaluation import (
        EvaluationError,
        evaluate,
        evaluation_report,
        resume_evaluation,
    )
    from .mathchat import METHODS, Solution, solve
    from .report import EvaluationReport
    from .training import TrainingError, resume_training, train, training_report
    from .training_report import TrainingReport

# name -> the module that defines it, imported when the name is first used
_LAZY = {"solve": "mathchat", "Solution": "mathchat", "METHODS": "mathchat",
         "evaluate": "evaluation", "resume_evaluation": "evaluation",
         "evaluation_report": "evaluation", "EvaluationError": "evaluation",
         "EvaluationReport": "report", "train": "training", "resume_training": "training",
         "training_report": "training", "TrainingError": "training",
         "TrainingReport": "training_report",
         # the names of `train` and `resume_training` before "training" was the one word
         "optimize": "training", "resume_optimization": "training"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "METHODS",
    "Checker",
    "CheckerUnavailableError",
    "Dataset",
    "DatasetError",
    "EvaluationError",
    "EvaluationReport",
    "LineError",
    "Problem",
    "Solution",
    "TrainingError",
    "TrainingReport",
    "Verdict",
    "asks_for_decimal",
    "check",
    "check_many",
    "checker_version",
    "dataset_names",
    "evaluate",
    "evaluation_report",
    "extract_answer",
    "is_equivalent",
    "load_dataset",
    "load_jsonl",
    "resume_evaluation",
    "resume_training",
    "solve",
    "train",
    "training_report",
]
