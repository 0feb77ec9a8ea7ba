"""FunctionSpec: lenient loading of the shapes models and the AgentOptimizer produce,
canonical saving, and clear errors for what cannot work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner import FunctionSet, FunctionSpec
from runner.errors import FunctionSpecError
from runner.functions.spec import split_packages

LEARNED = Path(__file__).parents[1] / "examples/learned_functions.json"

LOAN_CODE = ("def loan_payment(principal, annual_rate, months):\n    r = annual_rate / 12\n"
             "    if r == 0:\n        return principal / months\n"
             "    return principal * r / (1 - (1 + r) ** -months)\n")


def test_the_optimizer_file_loads_with_both_argument_shapes_and_string_packages():
    raw = json.loads(LEARNED.read_text())
    # the file really has the shapes this test is about
    assert isinstance(raw[0]["arguments"], dict) and isinstance(raw[1]["arguments"], str)
    assert raw[0]["packages"] == "sympy" and raw[1]["packages"] == ""

    functions = FunctionSet.load(LEARNED, log_store=False)
    assert functions.name == "learned_functions"
    assert functions.names == ["simplify_expression", "loan_payment"]
    simplify, loan = functions.specs
    assert simplify.packages == ("sympy",)
    assert loan.packages == ()
    assert simplify.parameters == {
        "type": "object",
        "properties": {"expression": {"type": "string",
                                      "description": "An expression such as '(x**2 - 1)/(x - 1)'."}},
        "required": ["expression"],
        "additionalProperties": False,
    }
    assert loan.parameters == {
        "type": "object",
        "properties": {
            "principal": {"type": "number", "description": "Amount borrowed."},
            "annual_rate": {"type": "number", "description": "Yearly rate as a decimal, 0.05 for 5%."},
            "months": {"type": "integer"},
        },
        "required": ["principal", "annual_rate", "months"],  # from the def line
        "additionalProperties": False,
    }
    assert simplify.code.startswith("from sympy import simplify, sympify\n\ndef simplify_expression(")
    assert loan.code == LOAN_CODE
    assert [functions.version(n) for n in functions.names] == [1, 1]


def test_required_comes_from_the_def_line_and_kwargs_allow_more_arguments():
    spec = FunctionSpec.from_dict({
        "name": "f", "description": "d",
        "arguments": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "string"}},
        "code": "def f(a, b=2, *, c, **rest):\n    return a\n"})
    assert spec.parameters["required"] == ["a", "c"]
    assert "additionalProperties" not in spec.parameters


def test_arguments_may_be_a_whole_schema_and_parameters_may_be_a_json_string():
    whole = {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}
    a = FunctionSpec.from_dict({"name": "f", "arguments": whole, "code": "def f(x):\n    return x\n"})
    b = FunctionSpec.from_dict({"name": "f", "parameters": json.dumps(whole),
                                "code": "def f(x):\n    return x\n"})
    assert a.parameters == b.parameters == whole
    assert a == b


def test_a_whole_schema_without_type_is_recognised():
    spec = FunctionSpec.from_dict({"name": "f", "code": "def f(x):\n    return x\n", "arguments": {
        "properties": {"x": {"type": "number"}}, "required": ["x"]}})
    assert spec.parameters == {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}
    # a bare properties dict may have arguments named like keywords
    bare = FunctionSpec.from_dict({"name": "f", "code": "def f(type, properties):\n    return 1\n",
                                   "arguments": {"type": {"type": "string"},
                                                 "properties": {"type": "object"}}})
    assert list(bare.parameters["properties"]) == ["type", "properties"]
    assert bare.parameters["required"] == ["type", "properties"]


def test_parameters_and_arguments_that_disagree_are_refused():
    with pytest.raises(FunctionSpecError, match="not both"):
        FunctionSpec.from_dict({"name": "f", "arguments": {"x": {"type": "number"}},
                                "parameters": {"type": "object", "properties": {}},
                                "code": "def f(x):\n    return x\n"})


@pytest.mark.parametrize(("text", "expected"), [
    ("", []),
    ("   ", []),
    ("sympy", ["sympy"]),
    ("sympy numpy", ["sympy", "numpy"]),
    ("sympy,numpy", ["sympy", "numpy"]),
    ("sympy, numpy ,  scipy", ["sympy", "numpy", "scipy"]),
    ("numpy>=1.2,<2 sympy", ["numpy>=1.2,<2", "sympy"]),
    ("numpy >= 1.2, sympy==1.14", ["numpy >= 1.2", "sympy==1.14"]),
    ("pandas[excel]>=2; python-dateutil", ["pandas[excel]>=2", "python-dateutil"]),
])
def test_package_strings_are_split_into_requirements(text, expected):
    assert split_packages(text) == expected


def test_packages_are_normalised_and_deduplicated():
    spec = FunctionSpec.from_dict({"name": "f", "arguments": {}, "code": "def f():\n    return 1\n",
                                   "packages": "numpy >= 1.2, sympy sympy"})
    assert spec.packages == ("numpy>=1.2", "sympy")
    listed = FunctionSpec.from_dict({"name": "f", "arguments": {}, "code": "def f():\n    return 1\n",
                                     "packages": ["sympy", " ", "numpy>=1.2"]})
    assert listed.packages == ("sympy", "numpy>=1.2")


@pytest.mark.parametrize("packages", ["--index-url http://evil.example/ sympy",
                                      ["sympy @ https://evil.example/sympy.whl"],
                                      ["../local/path"]])
def test_package_requests_that_choose_where_code_comes_from_are_refused(packages):
    with pytest.raises(FunctionSpecError, match="packages"):
        FunctionSpec.from_dict({"name": "f", "arguments": {}, "code": "def f():\n    return 1\n",
                                "packages": packages})


@pytest.mark.parametrize("code", [
    "@tool\ndef f(x):\n    return x\n",
    "@runner.tool(packages=['sympy'])\ndef f(x):\n    return x\n",
    "@agent.register_for_llm(\n    description='x')\n@tool\ndef f(x):\n    return x\n",
    "```python\n@tool\ndef f(x):\n    return x\n```",
    "    def f(x):\n        return x\n",
    "\n\ndef f(x):\n    return x",
])
def test_code_is_cleaned_of_tool_decorators_fences_and_indentation(code):
    spec = FunctionSpec.from_dict({"name": "f", "arguments": {"x": {}}, "code": code})
    assert spec.code == "def f(x):\n    return x\n"


def test_other_decorators_and_other_functions_are_kept():
    code = "import functools\n\n@functools.lru_cache\ndef f(x):\n    return x\n\n@tool\ndef g():\n    return 1\n"
    spec = FunctionSpec.from_dict({"name": "f", "arguments": {"x": {}}, "code": code})
    assert spec.code == code  # only the decorators of f that register tools are dropped


def test_canonical_saving_round_trips():
    raw = json.loads(LEARNED.read_text())[1]
    spec = FunctionSpec.from_dict(raw)
    saved = spec.to_dict()
    assert list(saved) == ["name", "description", "parameters", "packages", "code"]
    assert saved["packages"] == []
    assert "arguments" not in saved
    assert FunctionSpec.from_dict(json.loads(json.dumps(saved))) == spec
    assert json.loads(spec.to_json()) == saved
    assert spec.digest == FunctionSpec.from_dict(saved).digest
    assert spec.digest != spec.model_copy(update={"description": "other"}).digest


def test_to_openai_tool():
    spec = FunctionSpec.from_dict(json.loads(LEARNED.read_text())[0])
    assert spec.to_openai_tool() == {"type": "function", "function": {
        "name": "simplify_expression",
        "description": "Simplify a symbolic expression given as a string and return it as a string.",
        "parameters": spec.parameters}}


@pytest.mark.parametrize(("data", "words"), [
    ({"name": "f", "arguments": "{not json", "code": "def f():\n    pass\n"}, ["arguments", "JSON"]),
    ({"name": "f", "arguments": ["x"], "code": "def f():\n    pass\n"}, ["arguments", "list"]),
    ({"name": "my-func", "arguments": {}, "code": "def f():\n    pass\n"}, ["'my-func'", "name"]),
    ({"name": "class", "arguments": {}, "code": "def f():\n    pass\n"}, ["keyword"]),
    ({"name": "f", "arguments": {}, "code": "   \n"}, ["code", "empty"]),
    ({"name": "f", "arguments": {}}, ["code"]),
    ({"name": "f", "arguments": {"x": {"type": "nonsense"}}, "code": "def f(x):\n    pass\n"},
     ["not a valid JSON schema", "properties/x/type"]),
    ({"name": "f", "parameters": {"type": "array"}, "code": "def f():\n    pass\n"}, ["type object"]),
    ({"name": "f", "arguments": {"bad name": {}}, "code": "def f():\n    pass\n"}, ["'bad name'"]),
    ({"name": "f", "arguments": {}, "code": "def f():\n    pass\n", "extra": 1}, ["unknown", "extra"]),
    (["not", "an", "object"], ["JSON object"]),
])
def test_invalid_specs_say_what_is_wrong(data, words):
    with pytest.raises(FunctionSpecError) as caught:
        FunctionSpec.from_dict(data)
    text = str(caught.value)
    for word in words:
        assert word in text, text
    assert caught.value.fix


def test_the_spec_is_frozen():
    spec = FunctionSpec.from_dict({"name": "f", "arguments": {}, "code": "def f():\n    return 1\n"})
    with pytest.raises(Exception, match="frozen"):
        spec.name = "g"  # type: ignore[misc]
