"""Schemas from Python callables: each annotation form against its expected JSON Schema,
docstrings, decoration-time errors, and the source captured for the sandbox."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Annotated, Any, Dict, List, Literal, Optional, Union  # noqa: UP035

import pytest
from pydantic import BaseModel, Field

from runner import FunctionSpec, tool
from runner.errors import FunctionDefinitionError, RunnerError
from runner.functions import parameters_schema, parse_docstring
from runner.functions.tool import Tool


def one_parameter_schema(annotation: Any, **default: Any) -> dict[str, Any]:
    """The property schema of a function `f(x: annotation [= default])`."""

    def f(x):  # type: ignore[no-untyped-def]
        return x

    f.__annotations__ = {"x": annotation}
    if default:
        f.__defaults__ = (default["default"],)
    return parameters_schema(f)["properties"]["x"]


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Point(BaseModel):
    x: float
    y: float = 0.0


class Segment(BaseModel):
    start: Point
    end: Point


@pytest.mark.parametrize(("annotation", "expected"), [
    (str, {"type": "string"}),
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (type(None), {"type": "null"}),
    (None, {"type": "null"}),
    (Any, {}),
    (list[int], {"type": "array", "items": {"type": "integer"}}),
    (List[str], {"type": "array", "items": {"type": "string"}}),  # noqa: UP006
    (Sequence[float], {"type": "array", "items": {"type": "number"}}),
    (list, {"type": "array"}),
    (list[list[int]], {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}),
    (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
    (Dict[str, list[str]], {"type": "object",  # noqa: UP006
                            "additionalProperties": {"type": "array", "items": {"type": "string"}}}),
    (dict, {"type": "object"}),
    (Optional[int], {"type": ["integer", "null"]}),  # noqa: UP045
    (int | None, {"type": ["integer", "null"]}),
    (Union[int, str], {"type": ["integer", "string"]}),  # noqa: UP007
    (int | list[int], {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}]}),
    (int | Any, {}),
    (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
    (Literal[1, 4, 12], {"type": "integer", "enum": [1, 4, 12]}),
    (Literal[True], {"type": "boolean", "enum": [True]}),
    (Literal["a", 1], {"enum": ["a", 1]}),
    (Literal["a", None], {"enum": ["a", None]}),
    (Optional[Literal["x", "y"]], {"anyOf": [{"type": "string", "enum": ["x", "y"]},  # noqa: UP045
                                             {"type": "null"}]}),
    (Color, {"type": "string", "enum": ["red", "green"]}),
    (Level, {"type": "integer", "enum": [1, 2]}),
    (Annotated[float, "annual rate, 0.05 = 5%"], {"type": "number", "description": "annual rate, 0.05 = 5%"}),
    (Annotated[list[int], "the values"], {"type": "array", "items": {"type": "integer"},
                                          "description": "the values"}),
    (Annotated[int, Field(description="from a Field")], {"type": "integer", "description": "from a Field"}),
    (Optional[Annotated[str, "a name"]], {"anyOf": [{"type": "string", "description": "a name"},  # noqa: UP045
                                                    {"type": "null"}]}),
])
def test_annotation_forms_give_the_expected_schema(annotation, expected):
    assert one_parameter_schema(annotation) == expected


def test_pydantic_model_parameter_is_its_json_schema():
    assert one_parameter_schema(Point) == {
        "type": "object", "title": "Point",
        "properties": {"x": {"type": "number", "title": "X"},
                       "y": {"type": "number", "title": "Y", "default": 0.0}},
        "required": ["x"],
    }


def test_nested_pydantic_models_put_their_defs_at_the_top_level():
    def f(segment: Segment, points: list[Point]) -> None:
        return None

    schema = parameters_schema(f)
    assert schema["properties"]["segment"]["properties"]["start"] == {"$ref": "#/$defs/Point"}
    assert schema["properties"]["points"]["items"]["properties"]["x"] == {"type": "number", "title": "X"}
    assert set(schema["$defs"]) == {"Point"}
    assert "$defs" not in schema["properties"]["segment"]
    # the $ref resolves: a valid call validates, an invalid nested one does not
    from runner.functions import validate_arguments
    spec = FunctionSpec(name="f", parameters=schema, code="def f(segment, points):\n    return 1\n")
    ok, problems = validate_arguments(spec, {"segment": {"start": {"x": 1}, "end": {"x": 2}}, "points": []})
    assert problems is None
    _, problems = validate_arguments(spec, {"segment": {"start": {"x": "a"}, "end": {}}, "points": []})
    assert problems is not None
    assert [p.path for p in problems.wrong_type] == ["segment.start.x"]
    assert problems.missing == ["segment.end.x"]


def test_whole_function_schema_from_the_issue_example():
    @tool
    def compound_principal(future_value: float, rate: Annotated[float, "annual rate, 0.05 = 5%"],
                           years: int, periods: Literal[1, 4, 12] = 4) -> float:
        """Principal needed to reach future_value with compound interest.

        Args:
            future_value: the amount wanted at the end.
            years: how many years.
        """
        return future_value / (1 + rate / periods) ** (periods * years)

    spec = compound_principal.spec
    assert isinstance(spec, FunctionSpec)
    assert spec.name == "compound_principal"
    assert spec.description == "Principal needed to reach future_value with compound interest."
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "future_value": {"type": "number", "description": "the amount wanted at the end."},
            "rate": {"type": "number", "description": "annual rate, 0.05 = 5%"},
            "years": {"type": "integer", "description": "how many years."},
            "periods": {"type": "integer", "enum": [1, 4, 12], "default": 4},
        },
        "required": ["future_value", "rate", "years"],
        "additionalProperties": False,
    }
    assert spec.to_openai_tool() == {"type": "function", "function": {
        "name": "compound_principal", "description": spec.description, "parameters": spec.parameters}}
    # still an ordinary function on the host
    assert compound_principal(1000, 0.05, 3) == pytest.approx(861.5086, rel=1e-5)
    assert compound_principal.__name__ == "compound_principal"
    assert compound_principal.__wrapped__(1000, 0.0, 3, periods=1) == 1000


def test_keyword_only_parameters_defaults_and_none_defaults():
    def f(a: int, *, b: str = "x", c: int = None, d: int | None = None) -> None:  # type: ignore[assignment]
        return None

    schema = parameters_schema(f)
    assert schema["required"] == ["a"]
    assert schema["properties"]["b"] == {"type": "string", "default": "x"}
    # `c: int = None` accepts null, as its default says
    assert schema["properties"]["c"] == {"type": ["integer", "null"], "default": None}
    assert schema["properties"]["d"] == {"type": ["integer", "null"], "default": None}


def test_defaults_that_json_cannot_carry_are_left_out_of_the_schema():
    def f(x: float = math.inf, y: Any = Fraction(1, 2), z: list[int] = (1, 2)) -> None:  # type: ignore[assignment]
        return None

    properties = parameters_schema(f)["properties"]
    assert properties["x"] == {"type": "number"}
    assert properties["y"] == {}
    assert properties["z"]["default"] == [1, 2]


def test_a_function_without_parameters():
    def now() -> int:
        return 1

    assert parameters_schema(now) == {"type": "object", "properties": {}, "additionalProperties": False}


# -- docstrings ---------------------------------------------------------------------------------


def test_google_docstring_args_and_first_paragraph():
    doc = """Add two numbers
    across two lines.

    More detail that is not the description.

    Args:
        a (int): the first
            number, continued.
        b: the second.
        *rest: ignored kind.

    Returns:
        int: the sum. a: not an argument
    """
    summary, args = parse_docstring(doc)
    assert summary == "Add two numbers across two lines."
    assert args == {"a": "the first number, continued.", "b": "the second.", "rest": "ignored kind."}


def test_docstring_without_sections_and_none():
    assert parse_docstring("Just one line.") == ("Just one line.", {})
    assert parse_docstring(None) == ("", {})


def test_numpy_and_sphinx_docstrings_and_keyword_args():
    numpy = """Scale a value.

    Parameters
    ----------
    x : float
        the value,
        in metres.
    factor
        how much.
    """
    assert parse_docstring(numpy) == ("Scale a value.", {"x": "the value, in metres.",
                                                         "factor": "how much."})
    sphinx = """Scale a value.

    :param x: the value.
    :param factor: how much.
    :returns: the product.
    """
    assert parse_docstring(sphinx) == ("Scale a value.", {"x": "the value.", "factor": "how much."})
    google = """Scale.

    Args:
        x: the value.

    Keyword Args:
        factor: how much.

    Notes:
        y: not an argument.
    """
    assert parse_docstring(google) == ("Scale.", {"x": "the value.", "factor": "how much."})


def test_annotated_description_wins_over_the_docstring():
    @tool
    def f(x: Annotated[int, "from Annotated"], y: int) -> int:
        """Do it.

        Args:
            x: from the docstring.
            y: only in the docstring.
        """
        return x + y

    properties = f.spec.parameters["properties"]
    assert properties["x"]["description"] == "from Annotated"
    assert properties["y"]["description"] == "only in the docstring."


def test_decorator_arguments_override_name_description_and_set_packages():
    @tool(name="renamed", description="Custom text.", packages="sympy")
    def original(x: int) -> int:
        """Docstring text."""
        return x

    assert original.spec.name == "renamed"
    assert original.spec.description == "Custom text."
    assert original.spec.packages == ("sympy",)
    assert "renamed = original" in original.spec.code  # the sandbox finds it by its new name
    assert original(3) == 3


# -- errors at decoration time --------------------------------------------------------------------


def _define(source: str) -> Any:
    """Decorate a function written in a real module file, so its source can be read."""
    import importlib.util
    import pathlib
    import tempfile

    directory = pathlib.Path(tempfile.mkdtemp())
    path = directory / "defined_here.py"
    path.write_text("from typing import *\nfrom runner import tool\n" + source)
    module_spec = importlib.util.spec_from_file_location("defined_here", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("source", "words"), [
    ("@tool\ndef f(*values: int) -> int:\n    return 0\n", ["*values", "list"]),
    ("@tool\ndef f(**options: int) -> int:\n    return 0\n", ["**options", "dict[str, Any]"]),
    ("@tool\ndef f(x: int, /) -> int:\n    return 0\n", ["positional-only", "'x'"]),
    ("@tool\ndef f(x) -> int:\n    return 0\n", ["'x'", "no type annotation"]),
    ("import datetime\n@tool\ndef f(when: datetime.datetime) -> int:\n    return 0\n",
     ["'when'", "datetime.datetime", "no JSON form"]),
    ("@tool\ndef f(x: set[int]) -> int:\n    return 0\n", ["'x'", "set[int]", "no JSON form"]),
    ("@tool\ndef f(x: dict[int, str]) -> int:\n    return 0\n", ["dict[str, ...]"]),
    ("@tool\ndef f(x: bytes) -> int:\n    return 0\n", ["bytes"]),
    ("@tool\ndef f(x: 'Undefined') -> int:\n    return 0\n", ["annotations", "Undefined"]),
    ("@tool\nasync def f(x: int) -> int:\n    return 0\n", ["async"]),
    ("def outer():\n    k = 2\n    @tool\n    def f(x: int) -> int:\n        return x * k\n    return f\n"
     "outer()\n", ["enclosing", "k"]),
])
def test_unsupported_definitions_fail_at_decoration_time(source, words):
    with pytest.raises(FunctionDefinitionError) as caught:
        _define(source)
    error = caught.value
    assert isinstance(error, RunnerError)
    text = str(error)
    for word in words:
        assert word in text, text
    assert error.fix  # every such error says how to fix it


def test_a_function_whose_source_cannot_be_read():
    namespace: dict[str, Any] = {}
    exec("def f(x: int) -> int:\n    return x\n", namespace)  # noqa: S102
    with pytest.raises(FunctionDefinitionError, match="source"):
        tool(namespace["f"])


# -- the captured source --------------------------------------------------------------------------


def test_source_drops_the_decorator_and_annotations_and_keeps_comments():
    module = _define(
        "import math\n"
        "from fractions import Fraction as F\n"
        "@tool(packages=['sympy'])\n"
        "def area(radius: Annotated[float, 'the radius'],\n"
        "         exact: Literal[True, False] = False) -> Optional[float]:\n"
        "    # a comment that must survive\n"
        "    if exact:\n"
        "        return str(F(22, 7) * radius ** 2)\n"
        "    return math.pi * radius ** 2\n")
    code = module.area.spec.code
    assert "@tool" not in code
    assert "Annotated" not in code and "Literal" not in code and "Optional" not in code
    assert "->" not in code
    assert "# a comment that must survive" in code
    assert "def area(radius,\n         exact = False):" in code
    # the modules and importable objects it uses from its module come along
    assert code.startswith("import math\nfrom fractions import Fraction as F\n\n\ndef area(")
    assert module.area(1.0) == pytest.approx(math.pi)


def test_aliased_decorator_and_sibling_tools_are_not_imported():
    module = _define(
        "from runner import tool as expose\n"
        "@expose\n"
        "def helper(x: int) -> int:\n"
        "    return x + 1\n"
        "@expose\n"
        "def main(x: int) -> int:\n"
        "    return helper(x) * 2\n")
    assert isinstance(module.main, Tool)
    assert "@expose" not in module.helper.spec.code
    assert module.main.spec.code.startswith("def main(x):")  # no import of helper: same set
    assert module.main(1) == 4


def test_from_callable_is_the_same_as_the_decorator():
    def f(x: int) -> int:
        """Double."""
        return 2 * x

    assert FunctionSpec.from_callable(f) == tool(f).spec
