"""MATH-format datasets: loading the committed sample, counting, filters, and bad lines that
are reported (stop or skip), never dropped silently."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from runner.math import DatasetError, load_dataset, load_jsonl
from runner.math.datasets import (
    DatasetLineError,
    DatasetNotFoundError,
    UnknownFilterError,
)

DATA = Path(__file__).parent / "data"
MATH_SAMPLE = DATA / "math_sample.jsonl"
GSM8K_SAMPLE = DATA / "gsm8k_sample.jsonl"
TYPES = ["Algebra", "Counting & Probability", "Geometry", "Intermediate Algebra",
         "Number Theory", "Prealgebra", "Precalculus"]


def test_the_sample_loads_with_answers_from_the_boxes():
    dataset = load_jsonl(MATH_SAMPLE)
    assert len(dataset) == 35 and not dataset.skipped
    assert dataset.types() == TYPES
    assert dataset.levels() == [1, 2, 3, 4, 5]
    assert Counter(problem.type for problem in dataset) == {name: 5 for name in TYPES}
    assert Counter(problem.level for problem in dataset) == {level: 7 for level in range(1, 6)}
    first = dataset.problems[0]
    assert first.id.startswith("math/test/") and first.solution and "\\boxed" in first.solution
    assert first.answer == "3"
    assert [problem.answer for problem in dataset][-2:] == ["[-2,0]", "\\frac{4036082}{4036081}"]


def test_gsm8k_answers_come_after_the_hashes():
    dataset = load_jsonl(GSM8K_SAMPLE)
    assert [problem.answer for problem in dataset] == ["4", "71", "360", "3", "5", "720", "120",
                                                       "32"]
    assert all(problem.type is None and problem.level is None for problem in dataset)
    assert all("####" in (problem.solution or "") for problem in dataset)


def test_filters_by_type_and_level_with_loose_names():
    dataset = load_jsonl(MATH_SAMPLE)
    number_theory = dataset.filter(types=["number_theory"])
    assert len(number_theory) == 5 and {p.type for p in number_theory} == {"Number Theory"}
    hard = dataset.filter(types=["counting and probability", "Geometry"], levels=["Level 5"])
    assert len(hard) == 2 and {p.level for p in hard} == {5}
    assert hard.filters == {"types": ("Counting & Probability", "Geometry"), "levels": (5,)}
    assert len(dataset.filter(levels=[1, 2])) == 14


def test_unknown_type_or_level_lists_the_valid_ones():
    dataset = load_jsonl(MATH_SAMPLE)
    with pytest.raises(UnknownFilterError) as caught:
        dataset.filter(types=["Numbr Theory"])
    assert "Numbr Theory" in caught.value.message
    assert all(name in caught.value.message for name in TYPES)
    with pytest.raises(UnknownFilterError) as caught:
        dataset.filter(levels=[9])
    assert "1, 2, 3, 4, 5" in caught.value.message
    with pytest.raises(UnknownFilterError, match="no types at all"):
        load_jsonl(GSM8K_SAMPLE).filter(types=["Algebra"])


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


BAD_LINES = [
    json.dumps({"problem": "1+1?", "answer": "2", "id": "a"}),  # 1: fine
    "{not json",  # 2
    json.dumps({"problem": "x?", "solution": "no box here"}),  # 3
    json.dumps({"problem": "y?", "solution": "it is \\boxed{}"}),  # 4: empty box
    json.dumps({"question": "z?", "answer": "#### 7"}),  # 5: fine (GSM8K style)
    "",  # 6: blank, ignored
    json.dumps({"problem": "w?", "answer": "1", "level": "hard"}),  # 7
    json.dumps(["a", "list"]),  # 8
    json.dumps({"problem": "again", "answer": "3", "id": "a"}),  # 9: duplicate id
    json.dumps({"solution": "\\boxed{1}"}),  # 10: no problem
    json.dumps({"problem": "v?", "answer": "4", "level": "Level ?", "type": "Algebra"}),  # 11
]


def test_bad_lines_stop_the_load_and_are_all_named(tmp_path):
    path = _write(tmp_path / "mine.jsonl", BAD_LINES)
    with pytest.raises(DatasetLineError) as caught:
        load_jsonl(path)
    assert [error.line for error in caught.value.errors] == [2, 3, 4, 7, 8, 9, 10]
    message = caught.value.message
    assert "7 bad lines" in message and f"{path}:2: not valid JSON" in message
    assert "duplicate id 'a' (first on line 1)" in message
    assert "on_error" in (caught.value.fix or "")


def test_bad_lines_can_be_skipped_and_are_still_reported(tmp_path):
    path = _write(tmp_path / "mine.jsonl", BAD_LINES)
    dataset = load_jsonl(path, on_error="skip")
    assert [problem.answer for problem in dataset] == ["2", "7", "4"]
    assert [problem.id for problem in dataset] == ["a", "5", "11"]  # line numbers as ids
    assert dataset.problems[2].level is None and dataset.problems[2].type == "Algebra"
    assert [error.line for error in dataset.skipped] == [2, 3, 4, 7, 8, 9, 10]
    assert str(dataset.skipped[0]).startswith(f"{path}:2: ")


def test_non_utf8_lines_are_named(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"problem": "caf\xe9", "answer": "1"}\n')
    with pytest.raises(DatasetLineError, match="line|:1: not UTF-8"):
        load_jsonl(path)


def test_named_datasets_and_splits(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_HOME", str(tmp_path / "home"))
    with pytest.raises(DatasetNotFoundError) as caught:
        load_dataset("math500")
    assert "runner math data" in (caught.value.fix or "")
    with pytest.raises(UnknownFilterError, match="train, test|test, train"):
        load_dataset("math", split="validation")
    with pytest.raises(UnknownFilterError, match="has no split"):
        load_dataset("gsm8k", split="train")
    with pytest.raises(DatasetNotFoundError, match="no dataset named"):
        load_dataset("math-600")
    assert len(load_dataset(str(MATH_SAMPLE))) == 35
    with pytest.raises(UnknownFilterError, match="no splits"):
        load_dataset(str(MATH_SAMPLE), split="test")
    # A named dataset in place reads like any file.
    target = tmp_path / "data" / "math" / "train.jsonl"
    target.parent.mkdir(parents=True)
    target.write_bytes(MATH_SAMPLE.read_bytes())
    dataset = load_dataset("math", split="train", directory=tmp_path / "data")
    assert (dataset.name, dataset.split, len(dataset)) == ("math", "train", 35)
    assert isinstance(caught.value, DatasetError)
