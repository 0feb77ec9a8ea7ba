"""Functions as sandboxed tools: specs, schemas from Python callables, validated calls, sets.

- `spec`: `FunctionSpec`, the data form of a function (lenient loading, canonical saving);
- `schema`: JSON Schemas and sandbox source from Python callables;
- `tool`: the `@tool` decorator;
- `validation`: arguments checked against the schema, with a structured verdict;
- `sets`: `FunctionSet`, ordered and versioned, with every change logged;
- `call`: `call_function`, which validates and then runs a call in a Sandbox;
- `source`: reading and cleaning function source text.
"""

from __future__ import annotations

from ..logs.functions import Author
from .call import call_function
from .schema import parameters_schema, parse_docstring, spec_from_callable
from .sets import FunctionSet
from .spec import FunctionSpec
from .tool import Tool, tool
from .validation import ArgumentErrors, ArgumentProblem, validate_arguments

__all__ = [
    "ArgumentErrors",
    "ArgumentProblem",
    "Author",
    "FunctionSet",
    "FunctionSpec",
    "Tool",
    "call_function",
    "parameters_schema",
    "parse_docstring",
    "spec_from_callable",
    "tool",
    "validate_arguments",
]
