"""Argument validation before anything runs: exact, structured details for every problem."""

from __future__ import annotations

import datetime
import math
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel

from runner import tool
from runner.functions import ArgumentErrors, validate_arguments


class Point(BaseModel):
    x: float
    y: float


@tool
def loan(principal: float, months: int, rate: Annotated[float, "yearly"] = 0.05,
         mode: Literal["fixed", "annuity"] = "annuity", tags: list[str] | None = None,
         where: Point | None = None) -> float:
    """A loan."""
    return principal / months


SPEC = loan.spec


def check(arguments):
    data, problems = validate_arguments(SPEC, arguments)
    return data, problems


def test_valid_arguments_pass_and_are_what_the_sandbox_receives():
    data, problems = check({"principal": 1000, "months": 12, "tags": ("a", "b")})
    assert problems is None
    assert data == {"principal": 1000, "months": 12, "tags": ["a", "b"]}  # the JSON round trip


def test_missing_unexpected_and_wrongly_typed_arguments_are_each_named():
    data, problems = check({"principal": "1000", "rate": None, "month": 12, "extra": True})
    assert data == {}
    assert isinstance(problems, ArgumentErrors)
    assert problems.function == "loan"
    assert problems.missing == ["months"]
    assert problems.unexpected == ["month", "extra"]
    assert [(p.argument, p.path, p.expected, p.got) for p in problems.wrong_type] == [
        ("principal", "principal", "number", "string"),
        ("rate", "rate", "number", "null"),
    ]
    assert problems.invalid == []
    assert problems.parameters == SPEC.parameters  # the valid schema comes with the refusal
    message = problems.message()
    assert message.startswith("invalid arguments for loan: missing required argument 'months'; "
                              "unexpected arguments 'month', 'extra'; "
                              "argument 'principal' must be number, got string; "
                              "argument 'rate' must be number, got null. ")
    assert "loan takes: principal (number, required), months (integer, required), rate (number)" in message


def test_constraint_failures_and_nested_problems_have_paths():
    _, problems = check({"principal": 1, "months": 2, "mode": "balloon",
                         "tags": ["ok", 3], "where": {"x": "left", "z": 1}})
    assert problems is not None
    # inside an Optional[...] the problems are reported within the alternative that fits
    assert [(p.path, p.expected, p.got) for p in problems.wrong_type] == [
        ("tags[1]", "string", "integer"), ("where.x", "number", "string")]
    assert problems.missing == ["where.y"]
    assert [(p.path, p.message) for p in problems.invalid] == [
        ("mode", "'balloon' is not one of ['fixed', 'annuity']")]
    assert "argument 'where.x' must be number, got string" in problems.message()
    assert "missing required argument 'where.y'" in problems.message()


def test_a_value_fitting_no_alternative_is_invalid_with_the_validator_message():
    from runner import FunctionSpec

    spec = FunctionSpec(name="f", code="def f(v):\n    return v\n", parameters={
        "type": "object", "properties": {"v": {"anyOf": [{"type": "integer", "minimum": 10},
                                                          {"type": "integer", "multipleOf": 3}]}}})
    _, problems = validate_arguments(spec, {"v": 5})
    assert problems is not None
    assert [(p.path, p.message) for p in problems.invalid] == [
        ("v", "5 is not valid under any of the given schemas")]


def test_optional_model_argument_type_errors_name_both_types():
    _, problems = check({"principal": 1, "months": 2, "where": 5})
    assert problems is not None
    assert [(p.path, p.expected, p.got) for p in problems.wrong_type] == [("where", "object|null", "integer")]


def test_integers_are_numbers_but_booleans_and_floats_are_not_integers():
    assert check({"principal": 10, "months": 3})[1] is None
    for months in (True, 3.5, "3"):
        _, problems = check({"principal": 10, "months": months})
        assert problems is not None
        assert [p.path for p in problems.wrong_type] == ["months"], months


@pytest.mark.parametrize(("value", "words"), [
    (datetime.date(2024, 1, 1), ["date", "not JSON data"]),
    (math.nan, ["nan", "JSON cannot carry"]),
    ({1, 2}, ["set"]),
])
def test_values_that_are_not_json_are_refused(value, words):
    _, problems = check({"principal": value, "months": 1})
    assert problems is not None
    assert [p.argument for p in problems.wrong_type] == ["principal"]
    assert problems.missing == []  # it was given, just not as JSON
    for word in words:
        assert word in problems.wrong_type[0].message


@pytest.mark.parametrize(("arguments", "message"), [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    (["principal"], "must be a JSON object mapping argument names to values, got array"),
    (42, "got integer"),
])
def test_arguments_that_are_not_an_object_are_refused(arguments, message):
    _, problems = check(arguments)
    assert problems is not None
    assert len(problems.invalid) == 1 and problems.invalid[0].argument is None
    assert message in problems.invalid[0].message


def test_json_text_and_none_are_accepted():
    assert check('{"principal": 5, "months": 1}') == ({"principal": 5, "months": 1}, None)

    @tool
    def nothing() -> int:
        return 1

    assert validate_arguments(nothing.spec, None) == ({}, None)
    _, problems = validate_arguments(nothing.spec, {"x": 1})
    assert problems is not None and problems.unexpected == ["x"]
    assert problems.message().endswith("nothing takes no arguments.")


def test_non_string_keys_are_unexpected():
    _, problems = check({"principal": 1, "months": 1, 7: "x"})
    assert problems is not None and problems.unexpected == ["7"]


def test_extra_arguments_are_allowed_only_when_the_schema_says_so():
    from runner import FunctionSpec

    open_schema = FunctionSpec(name="f", code="def f(**kw):\n    return kw\n",
                               parameters={"type": "object", "properties": {},
                                           "additionalProperties": {"type": "integer"}})
    assert validate_arguments(open_schema, {"a": 1}) == ({"a": 1}, None)
    _, problems = validate_arguments(open_schema, {"a": "x"})
    assert problems is not None and [p.path for p in problems.wrong_type] == ["a"]
    # no additionalProperties at all: the function receives arguments by name, so extras are refused
    silent = FunctionSpec(name="f", code="def f(a):\n    return a\n",
                          parameters={"type": "object", "properties": {"a": {}}})
    _, problems = validate_arguments(silent, {"a": 1, "b": 2})
    assert problems is not None and problems.unexpected == ["b"]


def test_the_detail_is_json():
    import json

    _, problems = check({"months": "x"})
    assert problems is not None
    detail = problems.model_dump(mode="json")
    assert json.loads(json.dumps(detail)) == detail
    assert set(detail) == {"function", "missing", "unexpected", "wrong_type", "invalid", "parameters"}
