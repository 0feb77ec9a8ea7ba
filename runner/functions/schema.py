"""JSON Schemas from Python callables, and the function's source for the sandbox.

Supported annotations: `str`, `int`, `float`, `bool`, `None`, `Any`, `list[X]` (also
`List`, `Sequence`), `dict[str, X]` (also `Dict`, `Mapping`), `Optional[X]`, unions
(`X | Y`), `Literal[...]` (an enum), `Enum` subclasses with str/int values,
`Annotated[X, "description"]` (or a pydantic `Field(description=...)`), and pydantic
models. Everything the sandbox receives is JSON, so these are exactly the types whose
values JSON can carry; a pydantic model arrives in the sandbox as a plain dict.

Descriptions come from `Annotated` first, then from the docstring's arguments (Google,
NumPy, Sphinx or Epydoc style, read by docstring_parser); the function's description is
the docstring's first paragraph.
Everything that cannot work (`*args`, `**kwargs`, positional-only parameters, missing
or unsupported annotations, a source that cannot be read) raises
`FunctionDefinitionError` here, when the function is decorated, not when it is called.
"""

from __future__ import annotations

import ast
import builtins
import collections.abc
import enum
import inspect
import json
import sys
import textwrap
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import docstring_parser
from docstring_parser import google
from pydantic import BaseModel

from ..errors import FunctionDefinitionError
from .source import clean_code, find_def, parse, strip_annotations, strip_tool_decorators
from .spec import FunctionSpec

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                               type(None): "null"}
_LIST_ORIGINS = (list, collections.abc.Sequence, collections.abc.MutableSequence)
_DICT_ORIGINS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_SUPPORTED = ("str, int, float, bool, None, Any, list[...], dict[str, ...], Optional[...], "
              "unions, Literal[...], Enum, Annotated[..., 'description'] and pydantic models")


class _Unsupported(Exception):
    """An annotation with no JSON form; the message names it."""


# -- annotations -> JSON Schema -------------------------------------------------------------


class _SchemaBuilder:
    """Turns annotations into JSON Schema, collecting pydantic `$defs` for the top level."""

    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}

    def schema(self, annotation: Any) -> dict[str, Any]:
        if annotation is Any or annotation is object:
            return {}
        if annotation is None or annotation is type(None):
            return {"type": "null"}
        if annotation in _JSON_TYPES:
            return {"type": _JSON_TYPES[annotation]}
        origin = get_origin(annotation)
        args = get_args(annotation)
        if origin is Annotated:
            schema = self.schema(args[0])
            description = _annotated_description(args[1:])
            return {**schema, "description": description} if description else schema
        if origin is Literal:
            return _literal_schema(args)
        if origin is Union or origin is types.UnionType:
            return _union([self.schema(arg) for arg in args])
        if annotation in _LIST_ORIGINS or origin in _LIST_ORIGINS:
            if origin is not None and origin is not list and not args:
                raise _Unsupported(_type_name(annotation))
            return {"type": "array", "items": self.schema(args[0])} if args else {"type": "array"}
        if annotation in _DICT_ORIGINS or origin in _DICT_ORIGINS:
            if not args:
                return {"type": "object"}
            if args[0] is not str:
                raise _Unsupported(f"{_type_name(annotation)} (JSON object keys are strings: "
                                   "use dict[str, ...])")
            return {"type": "object", "additionalProperties": self.schema(args[1])}
        if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
            return _enum_schema(annotation)
        if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
            return self._model_schema(annotation)
        raise _Unsupported(_type_name(annotation))

    def _model_schema(self, model: type[BaseModel]) -> dict[str, Any]:
        schema = dict(model.model_json_schema())
        for name, definition in schema.pop("$defs", {}).items():
            if self.defs.setdefault(name, definition) != definition:
                raise _Unsupported(f"two different pydantic models named {name!r}")
        return schema


def _annotated_description(metadata: tuple[Any, ...]) -> str | None:
    for item in metadata:
        if isinstance(item, str):
            return item.strip()
        description = getattr(item, "description", None)  # pydantic Field(description=...)
        if isinstance(description, str):
            return description.strip()
    return None


def _literal_schema(values: tuple[Any, ...]) -> dict[str, Any]:
    flat: list[Any] = []
    for value in values:  # Literal[Literal[1], 2] is flattened by typing, enums are not
        flat.append(value.value if isinstance(value, enum.Enum) else value)
    for value in flat:
        if not (value is None or isinstance(value, (str, int, float, bool))):
            raise _Unsupported(f"Literal[{value!r}]")
    kinds = {_JSON_TYPES.get(type(v)) for v in flat}
    schema: dict[str, Any] = {}
    if len(kinds) == 1 and None not in kinds:
        schema["type"] = kinds.pop()
    schema["enum"] = flat
    return schema


def _enum_schema(enum_type: type[enum.Enum]) -> dict[str, Any]:
    values = [member.value for member in enum_type]
    if not values or not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in values):
        raise _Unsupported(f"{enum_type.__name__} (only enums whose values are all str or int)")
    kinds = {"string" if isinstance(v, str) else "integer" for v in values}
    schema: dict[str, Any] = {"type": kinds.pop()} if len(kinds) == 1 else {}
    schema["enum"] = values
    return schema


def _union(schemas: list[dict[str, Any]]) -> dict[str, Any]:
    """`{"type": [..]}` when every member is a bare type, `anyOf` otherwise."""
    unique: list[dict[str, Any]] = []
    for schema in schemas:
        if schema == {}:
            return {}  # Any absorbs everything
        if schema not in unique:
            unique.append(schema)
    if len(unique) == 1:
        return unique[0]
    if all(set(s) == {"type"} and isinstance(s["type"], str) for s in unique):
        return {"type": [s["type"] for s in unique]}
    return {"anyOf": unique}


def _allows_null(schema: dict[str, Any]) -> bool:
    if schema == {}:
        return True
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if None in schema.get("enum", [object()]):
        return True
    return any(_allows_null(s) for s in schema.get("anyOf", ()))


def _with_null(schema: dict[str, Any]) -> dict[str, Any]:
    """`x: int = None` means "int or nothing", as typing once assumed."""
    if _allows_null(schema):
        return schema
    description = schema.get("description")
    core = {k: v for k, v in schema.items() if k != "description"}
    merged = _union([core, {"type": "null"}])
    return {**merged, "description": description} if description else merged


def _type_name(annotation: Any) -> str:
    if inspect.isclass(annotation):
        module = annotation.__module__
        return annotation.__qualname__ if module == "builtins" else f"{module}.{annotation.__qualname__}"
    return repr(annotation).replace("typing.", "")


# -- docstrings -------------------------------------------------------------------------------

# Google style as docstring_parser reads it, plus the headings it does not know, so that
# their text is not taken for arguments (keyword arguments are arguments too).
_GOOGLE = google.GoogleParser(sections=[
    *google.DEFAULT_SECTIONS,
    *(google.Section(title, "param", google.SectionType.MULTIPLE)
      for title in ("Keyword Args", "Keyword Arguments")),
    *(google.Section(title, "notes", google.SectionType.SINGULAR)
      for title in ("Return", "Yield", "Note", "Notes", "See Also", "Todo", "Warning", "Warnings")),
])


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(first paragraph, {argument: description}) from a docstring in Google, NumPy, Sphinx
    (reST) or Epydoc style; continuation lines are joined with single spaces."""
    if not doc:
        return "", {}
    text = inspect.cleandoc(doc)
    try:
        parsed = _GOOGLE.parse(text)
        if not parsed.params:  # another style, or none: the one that finds the most
            parsed = docstring_parser.parse(text)
    except docstring_parser.ParseError:
        parsed = docstring_parser.Docstring()
        parsed.short_description = text.split("\n\n", 1)[0]
    summary = parsed.short_description or ""
    if parsed.long_description and not parsed.blank_after_short_description:
        summary += "\n" + parsed.long_description.split("\n\n", 1)[0]
    descriptions = {param.arg_name.lstrip("*"): _one_line(param.description or "")
                    for param in parsed.params if param.args[0] == "param"}
    return _one_line(summary), descriptions


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


# -- source -------------------------------------------------------------------------------------


def function_source(function: Callable[..., Any], *, decorator_names: frozenset[str] = frozenset()
                    ) -> str:
    """The `def` as it will run in the sandbox: no tool decorator, no annotations, and an
    import line for each module (or module-level object) it uses from its own globals."""
    try:
        raw = inspect.getsource(function)
    except (OSError, TypeError) as exc:
        raise FunctionDefinitionError(
            f"cannot read the source of {function.__qualname__}: {exc}",
            fix="define the function in a .py file (not in an interactive session or exec), or "
                "build a FunctionSpec with code=... yourself") from None
    code = strip_tool_decorators(clean_code(raw), function.__name__, decorator_names)
    tree = parse(code)
    if tree is None or find_def(tree, function.__name__) is None:
        raise FunctionDefinitionError(
            f"the source of {function.__qualname__} does not parse as a def statement",
            fix="define it with a plain `def` statement (not a lambda)")
    code = strip_annotations(code, function.__name__)
    imports = _import_lines(function, code)
    return clean_code("\n".join(imports) + "\n\n\n" + code) if imports else code


def _import_lines(function: Callable[..., Any], code: str) -> list[str]:
    """`import x` / `from m import y` for the global names the code reads that name a
    module, or a class or function importable from a module other than the caller's own."""
    from .tool import Tool

    tree = parse(code)
    if tree is None:
        return []
    own_module = getattr(function, "__module__", None)
    namespace = getattr(inspect.unwrap(function), "__globals__", {})
    bound = _bound_names(tree)
    lines: list[str] = []
    for name in _loaded_names(tree):
        if name in bound or name not in namespace:
            continue
        value = namespace[name]
        if isinstance(value, Tool):
            continue  # another function of the set: it is in the same namespace there
        if isinstance(value, types.ModuleType):
            module_name = value.__name__
            lines.append(f"import {module_name}" if module_name == name
                         else f"import {module_name} as {name}")
            continue
        module = getattr(value, "__module__", None)
        qualname = getattr(value, "__qualname__", None)
        if (not isinstance(module, str) or not isinstance(qualname, str) or "." in qualname
                or module in (own_module, "__main__", "builtins")):
            continue
        if getattr(sys.modules.get(module), qualname, None) is not value:
            continue
        alias = "" if qualname == name else f" as {name}"
        lines.append(f"from {module} import {qualname}{alias}")
    return lines


def _loaded_names(tree: ast.AST) -> list[str]:
    names: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) \
                and not hasattr(builtins, node.id):
            names[node.id] = None
    return list(names)


def _bound_names(tree: ast.AST) -> set[str]:
    """Names the code binds itself (parameters, assignments, imports, defs): not globals."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
    # `global x` means x is shared with the module, but that module is not in the sandbox
    return bound


# -- callables -> FunctionSpec ------------------------------------------------------------------


def parameters_schema(function: Callable[..., Any]) -> dict[str, Any]:
    """The JSON Schema (type object) of the keyword arguments `function` accepts."""
    name = getattr(function, "__qualname__", repr(function))
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        raise FunctionDefinitionError(f"cannot read the signature of {name}: {exc}") from None
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as exc:  # NameError for an undefined string annotation, and others
        raise FunctionDefinitionError(
            f"cannot resolve the type annotations of {name}: {type(exc).__name__}: {exc}",
            fix="make every name used in an annotation importable where the function is defined"
        ) from None
    _, documented = parse_docstring(inspect.getdoc(function))
    builder = _SchemaBuilder()
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in signature.parameters.values():
        where = f"parameter {parameter.name!r} of {name}"
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            raise FunctionDefinitionError(
                f"{name} takes *{parameter.name}; a sandboxed function is called with named "
                "JSON arguments only", fix=f"replace *{parameter.name} with a named list parameter, "
                f"e.g. {parameter.name}: list[float]")
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            raise FunctionDefinitionError(
                f"{name} takes **{parameter.name}; every argument of a sandboxed function must be "
                "named in its schema", fix=f"replace **{parameter.name} with named parameters, or "
                f"with one parameter {parameter.name}: dict[str, Any]")
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise FunctionDefinitionError(
                f"{where} is positional-only; sandboxed functions are called with keyword arguments",
                fix="remove the `/` from the parameter list")
        if parameter.name not in hints:
            raise FunctionDefinitionError(
                f"{where} has no type annotation, so it has no schema",
                fix=f"annotate it, e.g. {parameter.name}: str (typing.Any accepts any JSON value)")
        try:
            schema = builder.schema(hints[parameter.name])
        except _Unsupported as exc:
            raise FunctionDefinitionError(
                f"{where} has type {exc}, which has no JSON form", fix=f"use one of: {_SUPPORTED}"
            ) from None
        if "description" not in schema and documented.get(parameter.name):
            schema = {**schema, "description": documented[parameter.name]}
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
        else:
            if parameter.default is None:
                schema = _with_null(schema)
            default = _json_default(parameter.default)
            if default is not _NO_DEFAULT:
                schema = {**schema, "default": default}
        properties[parameter.name] = schema
    result: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        result["required"] = required
    result["additionalProperties"] = False
    if builder.defs:
        result["$defs"] = builder.defs
    return result


_NO_DEFAULT = object()


def _json_default(value: Any) -> Any:
    """The default as JSON, or _NO_DEFAULT when JSON has no faithful form for it (a
    Fraction is not its string). The default still applies in the sandbox either way."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    elif isinstance(value, enum.Enum):
        value = value.value
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return _NO_DEFAULT


def spec_from_callable(function: Callable[..., Any], *, name: str | None = None,
                       description: str | None = None, packages: Any = (),
                       decorator_names: frozenset[str] = frozenset()) -> FunctionSpec:
    """The FunctionSpec of a plain Python function, checked now rather than at call time."""
    target = inspect.unwrap(function)
    if inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target):
        raise FunctionDefinitionError(f"{target.__qualname__} is async; sandboxed functions are "
                                      "called synchronously", fix="define it with a plain def")
    if not inspect.isfunction(target):
        raise FunctionDefinitionError(f"{function!r} is not a Python function",
                                      fix="decorate a function defined with def")
    if target.__code__.co_freevars:
        raise FunctionDefinitionError(
            f"{target.__qualname__} uses variables of an enclosing function "
            f"({', '.join(target.__code__.co_freevars)}), which do not exist in the sandbox",
            fix="define it at module level, or pass those values as arguments")
    parameters = parameters_schema(target)
    summary, _ = parse_docstring(inspect.getdoc(target))
    code = function_source(target, decorator_names=decorator_names)
    function_name = target.__name__
    if name is not None and name != function_name:
        # the sandbox calls the function by the name its code defines
        code = code + f"\n\n{name} = {function_name}\n"
    data = {"name": name or function_name,
            "description": textwrap.dedent(description) if description is not None else summary,
            "parameters": parameters, "packages": packages, "code": code}
    return FunctionSpec.from_dict(data)
