"""Math answers: extraction from replies, equivalence checking, and MATH-format datasets.

    from runner.math import extract_answer, is_equivalent, check
    answer = extract_answer(reply)                 # the last \\boxed{...}, or None
    is_equivalent("\\frac{1}{4}", answer)           # True / False, never raises
    verdict = check(gold, answer)                 # Verdict: equal, rule, reason, forms, version

    from runner.math import load_dataset
    dataset = load_dataset("math", split="test").filter(types=["Number Theory"], levels=[5])

`Checker` owns the worker processes behind the symbolic step; the module-level functions
share one. Rules and limits: `runner.math.checker`; normalisation: `runner.math.normalize`;
extraction: `runner.math.extract`; datasets: `runner.math.datasets` and `runner.math.data`.
"""

from __future__ import annotations

from .checker import (
    Checker,
    Verdict,
    asks_for_decimal,
    check,
    check_many,
    checker_version,
    is_equivalent,
)
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
from .pool import CheckerUnavailableError

__all__ = [
    "Checker",
    "CheckerUnavailableError",
    "Dataset",
    "DatasetError",
    "LineError",
    "Problem",
    "Verdict",
    "asks_for_decimal",
    "check",
    "check_many",
    "checker_version",
    "dataset_names",
    "extract_answer",
    "is_equivalent",
    "load_dataset",
    "load_jsonl",
]
