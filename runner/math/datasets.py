"""MATH-format datasets: load JSONL with per-line errors, name the fetched ones, filter.

A MATH-format JSONL file has one JSON object per line:

    {"problem": "...", "solution": "... \\\\boxed{2} ...", "level": "Level 3", "type": "Algebra",
     "id": "optional"}

- `problem` (or `question`, as GSM8K names it) is required;
- the answer is the `answer` field when present (a GSM8K-style `... #### 18` answer gives
  `18`), else the last `\\\\boxed{}` of `solution`; a line with neither is an error;
- `level` is optional: 1-5, `"Level 3"`, or `"Level ?"` (unknown);
- `type` is optional (`subject` is read too, as MATH-500 names it);
- `id` is optional (`unique_id` is read too); without one a problem is named by its line
  number. Ids must be unique. Other fields are ignored. Blank lines are skipped.

Bad lines are never dropped silently: with `on_error="stop"` (the default) loading raises
`DatasetLineError` listing every bad line; with `on_error="skip"` the good lines load and
`Dataset.skipped` lists the others, for the caller to report.

Named datasets (fetched by `runner math data` into `$RUNNER_HOME/data`): `math` (splits
`test`, `train`), `math500` (`test`), `gsm8k` (`test`). Anything else is a file path.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..errors import ConfigurationError, NotFoundError, RunnerError
from ..paths import runner_home
from .extract import last_boxed

__all__ = ["DATASETS", "Dataset", "DatasetError", "DatasetLineError", "DatasetNotFoundError",
           "LineError", "Problem", "UnknownFilterError", "data_dir", "dataset_names",
           "load_dataset", "load_jsonl", "parse_record"]

# name -> its splits, the first being the default
DATASETS: dict[str, tuple[str, ...]] = {"math": ("test", "train"), "math500": ("test",),
                                        "gsm8k": ("test",)}
OnError = Literal["stop", "skip"]
# A stop-mode error message lists this many bad lines, then counts the rest.
_ERRORS_SHOWN = 10


class DatasetError(RunnerError):
    """A dataset cannot be used as given."""

    code = "DATASET"


class DatasetLineError(DatasetError):
    """Lines of a dataset file are not MATH-format records; `errors` lists them all."""

    code = "DATASET_LINE"

    def __init__(self, message: str, errors: Sequence[LineError], *, fix: str) -> None:
        super().__init__(message, fix=fix)
        self.errors = list(errors)


class DatasetNotFoundError(DatasetError, NotFoundError):
    code = "DATASET_NOT_FOUND"


class UnknownFilterError(DatasetError, ConfigurationError):
    """A split, type or level name that the dataset does not have; the message lists them."""

    code = "UNKNOWN_FILTER"


class Problem(BaseModel):
    """One problem with its gold answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    problem: str
    answer: str
    solution: str | None = None
    level: int | None = None
    type: str | None = None


class LineError(BaseModel):
    """A line that is not a usable record, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


_LEVEL_TEXT = re.compile(r"(?:level\s*)?(\d+|\?)", re.IGNORECASE)
_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


class _RecordError(ValueError):
    """Why one record is unusable (becomes a LineError with the line number)."""


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in blocks: what a dataset's manifest pins, and what an
    evaluation or a training records so that a resume can tell its problems changed."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _text_field(record: dict[str, Any], *names: str, required: bool = False) -> str | None:
    for name in names:
        if name in record and record[name] is not None:
            value = record[name]
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise _RecordError(f"`{name}` must be text, got {type(value).__name__}")
            text = str(value)
            if required and not text.strip():
                raise _RecordError(f"`{name}` is empty")
            return text
    if required:
        raise _RecordError(f"no `{names[0]}` field")
    return None


def _level(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        match = _LEVEL_TEXT.fullmatch(value.strip())
        if match:
            return None if match.group(1) == "?" else int(match.group(1))
    raise _RecordError(f"`level` must be a number or 'Level N', got {json.dumps(value)[:40]}")


def parse_record(record: Any, default_id: str) -> Problem:
    """One MATH-format record as a Problem; ValueError says what is wrong with it."""
    if not isinstance(record, dict):
        raise _RecordError(f"expected a JSON object, got {type(record).__name__}")
    problem = _text_field(record, "problem", "question", required=True)
    solution = _text_field(record, "solution")
    answer = _text_field(record, "answer")
    if answer is not None:
        gsm8k = _GSM8K_ANSWER.search(answer)
        if gsm8k:  # GSM8K writes the worked solution in `answer`, the result after ####
            solution = solution or answer
            answer = gsm8k.group(1).replace(",", "")
        answer = answer.strip()
    elif solution is not None:
        answer = last_boxed(solution)
        if answer is None:
            raise _RecordError("the solution has no usable \\boxed{} answer (missing, empty or "
                               "unbalanced) and there is no `answer` field")
    if not answer:
        raise _RecordError("no answer: give an `answer` field or a `solution` with a "
                           "\\boxed{} answer")
    kind = _text_field(record, "type", "subject")
    identifier = _text_field(record, "id", "unique_id") or default_id
    assert problem is not None
    return Problem(id=identifier, problem=problem, answer=answer, solution=solution,
                   level=_level(record.get("level")), type=kind.strip() if kind else None)


def _type_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", name.lower().replace("&", " and ")).strip()


@dataclass(frozen=True)
class Dataset:
    """Problems from one file (a named dataset's split, or a path), possibly filtered."""

    name: str
    split: str | None
    path: Path
    problems: tuple[Problem, ...]
    skipped: tuple[LineError, ...] = ()  # bad lines left out under on_error="skip"
    filters: dict[str, tuple[str | int, ...]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.problems)

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.problems)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.split})" if self.split else self.name

    def types(self) -> list[str]:
        return sorted({problem.type for problem in self.problems if problem.type})

    def levels(self) -> list[int]:
        return sorted({problem.level for problem in self.problems if problem.level is not None})

    def filter(self, *, types: Iterable[str] | None = None,
               levels: Iterable[int | str] | None = None) -> Dataset:
        """The problems of the given types and levels. Type names match case-insensitively
        and loosely (`number_theory`, `counting and probability`); levels are 1-5 or
        `"Level 5"`. A name the dataset does not have raises UnknownFilterError listing
        the ones it has."""
        problems = self.problems
        filters = dict(self.filters)
        if types is not None:
            wanted = list(types)
            known = {_type_key(name): name for name in self.types()}
            chosen = set()
            for name in wanted:
                if _type_key(name) not in known:
                    have = ", ".join(self.types()) or "no types at all"
                    raise UnknownFilterError(f"{self.label} has no type {name!r}; it has: {have}",
                                             fix="use one of the listed types")
                chosen.add(known[_type_key(name)])
            problems = tuple(problem for problem in problems if problem.type in chosen)
            filters["types"] = tuple(sorted(chosen))
        if levels is not None:
            chosen_levels = set()
            for value in levels:
                level = _parse_level_filter(value)
                if level is None or level not in self.levels():
                    have = ", ".join(str(level) for level in self.levels()) or "no levels at all"
                    raise UnknownFilterError(f"{self.label} has no level {value!r}; it has: "
                                             f"{have}", fix="use one of the listed levels")
                chosen_levels.add(level)
            problems = tuple(problem for problem in problems if problem.level in chosen_levels)
            filters["levels"] = tuple(sorted(chosen_levels))
        return replace(self, problems=problems, filters=filters)


def _parse_level_filter(value: int | str) -> int | None:
    try:
        return _level(value)
    except _RecordError:
        return None


def load_jsonl(path: str | Path, *, on_error: OnError = "stop", name: str | None = None,
               split: str | None = None) -> Dataset:
    """A MATH-format JSONL file (see the module docstring)."""
    if on_error not in ("stop", "skip"):
        raise ValueError("on_error must be 'stop' or 'skip'")
    file_path = Path(path)
    try:
        handle = file_path.open("rb")
    except OSError as exc:
        raise DatasetNotFoundError(f"cannot read {file_path}: {exc.strerror}",
                                   fix="check the path") from None
    problems: list[Problem] = []
    errors: list[LineError] = []
    seen: dict[str, int] = {}
    shown_path = str(path)
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                errors.append(LineError(path=shown_path, line=number,
                                        message=f"not UTF-8 text (byte {exc.start})"))
                continue
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                errors.append(LineError(path=shown_path, line=number,
                                        message=f"not valid JSON: {exc.msg} at column "
                                                f"{exc.colno}"))
                continue
            try:
                problem = parse_record(record, default_id=str(number))
            except _RecordError as exc:
                errors.append(LineError(path=shown_path, line=number, message=str(exc)))
                continue
            if problem.id in seen:
                errors.append(LineError(path=shown_path, line=number,
                                        message=f"duplicate id {problem.id!r} (first on line "
                                                f"{seen[problem.id]})"))
                continue
            seen[problem.id] = number
            problems.append(problem)
    if errors and on_error == "stop":
        listed = "\n".join(f"  {error}" for error in errors[:_ERRORS_SHOWN])
        more = f"\n  ... and {len(errors) - _ERRORS_SHOWN} more" \
            if len(errors) > _ERRORS_SHOWN else ""
        raise DatasetLineError(
            f"{len(errors)} bad line{'s' if len(errors) != 1 else ''} in {shown_path}:\n"
            f"{listed}{more}", errors,
            fix="correct those lines, or skip them (on_error='skip' / runner math eval --on-bad-line skip)")
    return Dataset(name=name or file_path.name, split=split, path=file_path,
                   problems=tuple(problems), skipped=tuple(errors))


def data_dir() -> Path:
    """Where `runner math data` puts the named datasets: `$RUNNER_HOME/data`."""
    return runner_home() / "data"


def dataset_names() -> dict[str, tuple[str, ...]]:
    """The named datasets and their splits (the first is the default)."""
    return dict(DATASETS)


def load_dataset(name_or_path: str, split: str | None = None, *, on_error: OnError = "stop",
                 directory: Path | None = None) -> Dataset:
    """A named dataset's split (`math`/`test` by default for `math`) or a JSONL file."""
    if name_or_path in DATASETS:
        splits = DATASETS[name_or_path]
        chosen = split or splits[0]
        if chosen not in splits:
            raise UnknownFilterError(f"{name_or_path} has no split {chosen!r}; it has: "
                                     f"{', '.join(splits)}", fix="use one of the listed splits")
        path = (directory or data_dir()) / name_or_path / f"{chosen}.jsonl"
        if not path.is_file():
            raise DatasetNotFoundError(f"the {name_or_path} dataset is not on this machine "
                                       f"({path} is missing)",
                                       fix="run `runner math data` to fetch and verify it")
        return load_jsonl(path, on_error=on_error, name=name_or_path, split=chosen)
    path = Path(name_or_path)
    if not path.exists():
        raise DatasetNotFoundError(
            f"no dataset named {name_or_path!r} and no such file",
            fix=f"use one of {', '.join(DATASETS)} or the path of a MATH-format JSONL file")
    if split is not None:
        raise UnknownFilterError(f"{name_or_path} is a file and has no splits (got {split!r})",
                                 fix="leave out the split for a file")
    return load_jsonl(path, on_error=on_error)
