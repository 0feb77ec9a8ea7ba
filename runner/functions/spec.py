"""`FunctionSpec`: a function a model (or a person) wrote, as data: name, description,
JSON-schema parameters, packages and the code that defines it.

Loading is lenient about the shapes models and the AgentOptimizer produce:
- `arguments` instead of `parameters`, as a bare properties dict or that dict encoded
  as a JSON string (then `required` comes from the `def` line: the parameters without a
  default, and `additionalProperties` is false unless the function takes `**kwargs`);
  `arguments` or `parameters` may also be a whole JSON-schema object;
- `packages` as a list or as one comma/space separated string (possibly empty);
- `code` with a tool-registration decorator above the `def` (dropped), inside a Markdown
  fence, or indented.
Saving (`to_dict`) is canonical: always `parameters`, a list of normalised requirements,
and the cleaned code.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import re
from collections.abc import Callable
from typing import Any

from packaging.markers import InvalidMarker, Marker
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from ..errors import FunctionSpecError
from ..jsonlimits import JsonBounds, json_problem
from ..packages import PackageRequestError, parse_requirement
from .bounded_schema import SchemaProblem, check_schema
from .source import clean_code, read_signature, strip_tool_decorators

NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")  # a Python name OpenAI also accepts
_FIELDS = ("name", "description", "parameters", "packages", "code")
# One spec as data (code included); its schema has tighter bounds of its own.
SPEC_BOUNDS = JsonBounds(max_chars=4_000_000, max_depth=64, max_items=50_000)

# One requirement inside a free-text package list: a name, optional extras, optional
# comma-joined version specifiers ("numpy>=1.2,<2" is one requirement, not two).
_OP = r"(?:===|==|!=|<=|>=|~=|<|>)"
_SPECIFIER = rf"\s*{_OP}\s*[A-Za-z0-9.*+!_-]+"
_REQUIREMENT = re.compile(
    rf"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\s*\[[^\]]*\])?(?:{_SPECIFIER}(?:\s*,{_SPECIFIER})*)?")
_SEPARATORS = re.compile(r"[\s,;]+")


def split_packages(text: str) -> list[str]:
    """'sympy, numpy>=1.2,<2 scipy' -> ['sympy', 'numpy>=1.2,<2', 'scipy'].

    A requirement may carry an environment marker after `;` (`requests; os_name == "posix"`);
    a `;` not followed by a marker separates requirements, like a comma."""
    found: list[str] = []
    position = 0
    while position < len(text):
        separator = _SEPARATORS.match(text, position)
        if separator:
            position = separator.end()
            continue
        match = _REQUIREMENT.match(text, position)
        if not match:
            rest = text[position:].split()[0]
            raise ValueError(f"cannot read a package requirement at {rest!r} in packages {text!r}")
        requirement, position = match.group(0), match.end()
        semicolon = re.compile(r"\s*;").match(text, position)
        if semicolon:
            end = _marker_end(text, semicolon.end())
            if end is not None:
                requirement = f"{requirement}; {text[semicolon.end():end].strip()}"
                position = end
        found.append(requirement)
    return found


_MARKER_VARIABLES = frozenset({
    "os_name", "sys_platform", "platform_machine", "platform_python_implementation",
    "platform_release", "platform_system", "platform_version", "python_version",
    "python_full_version", "implementation_name", "implementation_version", "extra",
    "os.name", "sys.platform", "platform.version", "platform.machine",
    "platform.python_implementation", "python_implementation"})
_MARKER_TOKEN = re.compile(r"""\s*(\(|\)|'[^']*'|"[^"]*"|===|==|!=|<=|>=|~=|<|>|"""
                           r"""not\s+in\b|in\b|and\b|or\b|[A-Za-z_][A-Za-z0-9_.]*)""")
_MARKER_OPERATORS = frozenset({"===", "==", "!=", "<=", ">=", "~=", "<", ">", "in"})


def _marker_end(text: str, start: int) -> int | None:
    """Where a PEP 508 environment marker starting at `start` ends, or None if none starts
    there. Reads `atom (and|or atom)*`, where an atom is `value op value` or `( ... )`."""

    def token(at: int) -> tuple[str, int] | None:
        match = _MARKER_TOKEN.match(text, at)
        return (" ".join(match.group(1).split()), match.end()) if match else None

    def value(at: int) -> int | None:
        found = token(at)
        if found and (found[0] in _MARKER_VARIABLES or found[0][:1] in "'\""):
            return found[1]
        return None

    def atom(at: int) -> int | None:
        found = token(at)
        if found and found[0] == "(":
            inner = expression(found[1])
            closing = token(inner) if inner is not None else None
            return closing[1] if closing and closing[0] == ")" else None
        left = value(at)
        operator = token(left) if left is not None else None
        if operator is None or (operator[0] not in _MARKER_OPERATORS and operator[0] != "not in"):
            return None
        return value(operator[1])

    def expression(at: int) -> int | None:
        end = atom(at)
        while end is not None:
            joiner = token(end)
            if not joiner or joiner[0] not in ("and", "or"):
                break
            following = atom(joiner[1])
            if following is None:
                break
            end = following
        return end

    end = expression(start)
    if end is None:
        return None
    try:
        Marker(text[start:end])
    except InvalidMarker:
        return None
    return end


def _json_if_string(value: Any, field: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ValueError(f"`{field}` is a string but not valid JSON: {exc}") from None


_OBJECT_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties",
                              "patternProperties", "description", "title", "$defs", "definitions",
                              "$schema", "$id"})


def _is_schema_object(value: dict[str, Any]) -> bool:
    """A whole JSON schema rather than a bare properties dict (whose values are schemas)."""
    if value.get("type") == "object":
        return True
    properties = value.get("properties")
    return (isinstance(properties, dict) and set(value) <= _OBJECT_KEYWORDS
            and not isinstance(value.get("type"), dict)
            and all(isinstance(schema, (dict, bool)) for schema in properties.values()))


def _schema_from_properties(properties: dict[str, Any], code: Any, name: Any) -> dict[str, Any]:
    """A whole schema for a bare properties dict, completed from the function's signature."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    signature = read_signature(code, name) if isinstance(code, str) and isinstance(name, str) else None
    if signature is None:
        return schema
    required = [p for p in signature.required if p in properties]
    if required:
        schema["required"] = required
    if not signature.accepts_any_keyword:
        schema["additionalProperties"] = False
    return schema


class FunctionSpec(BaseModel):
    """A sandboxed function: what a model sees (name, description, parameters) and what runs.

    Build one from a model's JSON with `FunctionSpec.from_dict`, from a Python function
    with `@tool` (or `FunctionSpec.from_callable`), or directly with keywords.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    parameters: dict[str, Any]
    packages: tuple[str, ...] = ()
    code: str

    def __init__(self, **data: Any) -> None:
        """Keywords as for `from_dict`; problems raise FunctionSpecError, not pydantic's error."""
        # pydantic calls an overridden __init__ from model_validate too, so this is the one
        # place where its ValidationError becomes a FunctionSpecError.
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _Invalid(data, _problems(exc)) from None

    # -- lenient input ---------------------------------------------------------------

    @model_validator(mode="before")
    @classmethod
    def _accept_model_shapes(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        name, code = data.get("name"), data.get("code")
        if isinstance(code, str):
            code = clean_code(code)
            if isinstance(name, str):
                code = strip_tool_decorators(code, name)
            data["code"] = code
        if "parameters" in data:
            data["parameters"] = _json_if_string(data["parameters"], "parameters")
        if "arguments" in data:
            arguments = _json_if_string(data.pop("arguments"), "arguments")
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, dict):
                raise ValueError("`arguments` must be a JSON object mapping argument names to "
                                 f"schemas, got {type(arguments).__name__}")
            schema = arguments if _is_schema_object(arguments) else \
                _schema_from_properties(arguments, code, name)
            if "parameters" in data and data["parameters"] != schema:
                raise ValueError("give `parameters` or `arguments`, not both with different content")
            data["parameters"] = schema
        elif "parameters" not in data:
            data["parameters"] = _schema_from_properties({}, code, name)
        packages = data.get("packages")
        if packages is None:
            data["packages"] = ()
        elif isinstance(packages, str):
            data["packages"] = split_packages(packages)
        if data.get("description") is None:
            data["description"] = ""
        return data

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not NAME_PATTERN.match(value) or keyword.iskeyword(value):
            raise ValueError(f"{value!r} is not a usable function name: use letters, digits and "
                             "underscores, not starting with a digit, at most 64 characters, "
                             "and not a Python keyword")
        return value

    @field_validator("description")
    @classmethod
    def _strip_description(cls, value: str) -> str:
        return value.strip()

    @field_validator("parameters")
    @classmethod
    def _check_parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        schema = dict(value)
        if "type" not in schema:
            schema = {"type": "object", **schema}
        if schema.get("type") != "object":
            raise ValueError("`parameters` must be a JSON schema of type object, got type "
                             f"{schema.get('type')!r}")
        properties = schema.setdefault("properties", {})
        if not isinstance(properties, dict):
            raise ValueError("`parameters.properties` must be an object")
        for argument, argument_schema in properties.items():
            if not NAME_PATTERN.match(argument) or keyword.iskeyword(argument):
                raise ValueError(f"argument name {argument!r} is not a Python name, so the function "
                                 "could not receive it")
            if not isinstance(argument_schema, (dict, bool)):
                raise ValueError(f"the schema of argument {argument!r} must be an object, "
                                 f"got {type(argument_schema).__name__}")
        try:
            check_schema(schema)
        except SchemaProblem as exc:
            raise ValueError(f"`parameters` cannot be used: {exc}") from None
        return schema

    @field_validator("packages")
    @classmethod
    def _check_packages(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for text in value:
            if not text.strip():
                continue
            try:
                seen[str(parse_requirement(text))] = None
            except PackageRequestError as exc:
                raise ValueError(str(exc)) from None
        return tuple(seen)

    @field_validator("code")
    @classmethod
    def _check_code(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("`code` is empty: it must define the function")
        return value

    # -- constructors ------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "") -> FunctionSpec:
        """Load any accepted shape; problems raise FunctionSpecError naming each field."""
        if not isinstance(data, dict):
            raise FunctionSpecError(f"{where or 'a function spec'} must be a JSON object, "
                                    f"got {type(data).__name__}", fix=_SHAPE_HINT)
        too_big = json_problem(data, SPEC_BOUNDS)
        if too_big is not None:
            raise FunctionSpecError(f"{_label(data, where)} is not usable: {too_big.message}",
                                    fix=f"a spec may have {SPEC_BOUNDS.describe()}")
        unknown = sorted(set(data) - set(_FIELDS) - {"arguments"})
        if unknown:
            raise FunctionSpecError(
                f"{_label(data, where)} has unknown field(s) {', '.join(unknown)}", fix=_SHAPE_HINT)
        try:
            return cls.model_validate(data)
        except _Invalid as exc:
            raise _Invalid(data, exc.problems, where=where) from None

    @classmethod
    def from_callable(cls, function: Callable[..., Any], **overrides: Any) -> FunctionSpec:
        """The spec of a Python function (see `runner.functions.schema`)."""
        from .schema import spec_from_callable

        return spec_from_callable(function, **overrides)

    # -- output ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The canonical JSON shape (what a saved function set holds)."""
        return {"name": self.name, "description": self.description,
                "parameters": self.parameters, "packages": list(self.packages),
                "code": self.code}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=2)

    def to_openai_tool(self) -> dict[str, Any]:
        """The tool definition for an OpenAI-compatible chat API."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}}

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical JSON: the same spec always has the same digest."""
        text = json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def argument_summary(self) -> list[tuple[str, str, bool, str]]:
        """(name, type text, required, description) for each argument, for people to read."""
        required = set(self.parameters.get("required") or ())
        rows = []
        for argument, schema in self.parameters.get("properties", {}).items():
            schema = schema if isinstance(schema, dict) else {}
            rows.append((argument, schema_type_text(schema), argument in required,
                         str(schema.get("description", ""))))
        return rows


def schema_type_text(schema: dict[str, Any]) -> str:
    """A short human name for a JSON schema's type: 'integer', 'string|null', 'array[number]', ..."""
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return f"exactly {json.dumps(schema['const'])}"
    for union in ("anyOf", "oneOf"):
        if union in schema:
            return "|".join(schema_type_text(s) for s in schema[union] if isinstance(s, dict))
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind)
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array[{schema_type_text(schema['items'])}]"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object[string, {schema_type_text(schema['additionalProperties'])}]"
    return str(kind) if kind else "any"


_SHAPE_HINT = ("a function spec is a JSON object with name, description, parameters (a JSON "
               "schema object) or arguments (a properties object, or that object as a JSON "
               "string), packages (a list or a comma/space separated string) and code")


class _Invalid(FunctionSpecError):
    """A spec pydantic refused; `problems` names each field's problem."""

    def __init__(self, data: dict[str, Any], problems: str, *, where: str = "") -> None:
        super().__init__(f"{_label(data, where)} is not valid: {problems}", fix=_SHAPE_HINT)
        self.problems = problems


def _label(data: dict[str, Any], where: str) -> str:
    name = data.get("name")
    label = f"function {name!r}" if isinstance(name, str) else "a function spec"
    return f"{label} ({where})" if where else label


def _problems(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        location = ".".join(str(p) for p in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)
