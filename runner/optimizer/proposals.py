"""The optimizer's three actions, and the checks a proposed action passes on the host.

`add_function`, `revise_function` and `remove_function` are offered to the optimizer model
as tools (`ACTION_SPECS`). What a model proposes is untrusted input, so `read_proposal`
checks it before anything runs, and says what is wrong in a `Feedback` of
`runner.agent.feedback` (the loop sends it back as the next turn):

- the arguments are an object with the fields the action needs; they load leniently, as a
  function file does (`FunctionSpec.from_dict`: `arguments` as a schema, a properties
  object or either as JSON text; `packages` as a list or one string), so a valid name, a
  valid bounded JSON Schema object and readable package requirements are checked there;
- packages are plain requirements: no URL, path, option or environment marker;
- the code compiles, and defines exactly one top-level function, the named one (so the
  name that is registered is the code that runs), whose parameters agree with the schema;
- a revised or removed function exists in the list; an added one does not, and does not
  take the name of a Python builtin (it would hide it in the agent's session); a revision
  changes something; a removed function is not called by another one of the list.

Running the function once (`runner.optimizer.smoke`) comes after these checks.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import Any, Literal

from ..agent.feedback import ErrorCode, Feedback
from ..errors import FunctionSpecError
from ..functions import FunctionSet, FunctionSpec
from ..functions.source import read_signature
from ..packages import PackageRequestError, parse_requirement

Kind = Literal["add", "revise", "remove"]
ADD, REVISE, REMOVE = "add_function", "revise_function", "remove_function"
KINDS: dict[str, Kind] = {ADD: "add", REVISE: "revise", REMOVE: "remove"}
MAX_CODE_CHARS = 50_000  # one function's code; a longer one is no helper a model can use
# The functions are defined in the agent's session: one named `print` or `len` would
# break every later block that uses the builtin.
_BUILTIN_NAMES = frozenset(dir(builtins))
_SPEC_FIELDS = ("name", "description", "arguments", "packages", "code")

_NAME = {"type": "string", "description": "The function's name: a Python identifier."}
_FIELDS: dict[str, dict[str, Any]] = {
    "description": {"type": "string",
                    "description": "What the function does, what it returns and when to use it."},
    "arguments": {"type": "object",
                  "description": 'The JSON Schema of its parameters, e.g. {"type": "object", '
                                 '"properties": {"n": {"type": "integer", "description": '
                                 '"..."}}, "required": ["n"]} (or only the properties).'},
    "packages": {"type": "array", "items": {"type": "string"},
                 "description": 'Packages its code imports, e.g. ["sympy"]: plain names, '
                                "optionally with a version; [] for none."},
    "code": {"type": "string",
             "description": "Python source that defines exactly this one function at top "
                            "level (helpers go inside it) and returns a JSON-serialisable value."},
}


def _spec(name: str, description: str, properties: dict[str, Any], code: str) -> FunctionSpec:
    return FunctionSpec(name=name, description=description, code=code, parameters={
        "type": "object", "properties": properties, "required": list(properties),
        "additionalProperties": False})


# The tools the optimizer model is offered. Their calls are carried out on the host
# (`runner.agent.host`); the code says what a call amounts to: the proposal, as data.
ACTION_SPECS: tuple[FunctionSpec, ...] = (
    _spec(ADD, "Add a new function to the list (List B).", {"name": _NAME, **_FIELDS},
          "def add_function(name, description, arguments, packages, code):\n"
          "    return {'action': 'add_function', 'name': name}\n"),
    _spec(REVISE, "Replace a function of the list (List B) with a better version of the same "
                  "name: give its whole new definition.", {"name": _NAME, **_FIELDS},
          "def revise_function(name, description, arguments, packages, code):\n"
          "    return {'action': 'revise_function', 'name': name}\n"),
    _spec(REMOVE, "Remove a function from the list (List B).", {"name": _NAME},
          "def remove_function(name):\n"
          "    return {'action': 'remove_function', 'name': name}\n"),
)


def action_set() -> FunctionSet:
    """The optimizer's tools as a function set (nothing of it is ever logged as a change)."""
    return FunctionSet("optimizer", ACTION_SPECS, log_store=False)


@dataclass(frozen=True)
class Change:
    """A proposal that passed the host-side checks."""

    kind: Kind
    name: str
    spec: FunctionSpec | None  # None for remove
    ignored: tuple[str, ...] = ()  # fields of the call that are not part of a function

    @property
    def action(self) -> str:
        return {"add": ADD, "revise": REVISE, "remove": REMOVE}[self.kind]


def _refused(action: str, name: Any, message: str, *, code: ErrorCode = ErrorCode.INVALID_ARGUMENTS,
             details: dict[str, Any] | None = None, reminder: str = "") -> Feedback:
    who = f"{action}({name!r})" if isinstance(name, str) and name else action
    return Feedback(code=code, message=f"{who} was refused: {message}", details=details or {},
                    reminder=reminder)


def read_proposal(action: str, arguments: Any, working: FunctionSet, *, reminder: str = ""
                  ) -> Change | Feedback:
    """The change a call of `action` proposes to `working` (List B), or why it is refused."""
    kind = KINDS[action]
    if not isinstance(arguments, dict):
        return _refused(action, None, "its arguments must be a JSON object with the fields "
                                      f"{', '.join(_fields(kind))}", reminder=reminder)
    name = arguments.get("name")
    missing = [field for field in _required(kind) if arguments.get(field) in (None, "")]
    if missing:
        return _refused(action, name, f"it lacks {', '.join(missing)}",
                        details={"missing": missing}, reminder=reminder)
    if not isinstance(name, str):
        return _refused(action, None, f"`name` must be a string, got {type(name).__name__}",
                        reminder=reminder)
    name = name.strip()
    if kind in ("revise", "remove") and name not in working:
        return _refused(action, name, f"there is no function {name!r} in List B; the functions "
                        f"are: {', '.join(working.names) or 'none'}",
                        code=ErrorCode.UNKNOWN_FUNCTION, details={"available": working.names},
                        reminder=reminder)
    if kind == "remove":
        callers = [spec.name for spec in working if spec.name != name and name in _names_used(spec.code)]
        if callers:
            return _refused(action, name, f"{', '.join(callers)} call{'s' if len(callers) == 1 else ''} "
                            f"it: revise or remove {'it' if len(callers) == 1 else 'them'} first",
                            reminder=reminder)
        return Change(kind=kind, name=name, spec=None, ignored=_ignored(arguments, kind))
    if kind == "add" and name in _BUILTIN_NAMES:
        return _refused(action, name, f"{name!r} is a Python builtin: a function of that name "
                        "would hide it in the agent's session; choose another name",
                        reminder=reminder)
    if kind == "add" and name in working:
        return _refused(action, name, f"List B already has a function {name!r}: use "
                        f"{REVISE} to change it, or choose another name", reminder=reminder)
    code = arguments.get("code")
    if isinstance(code, str) and len(code) > MAX_CODE_CHARS:
        return _refused(action, name, f"its code has {len(code):,} characters; at most "
                        f"{MAX_CODE_CHARS:,} are accepted", reminder=reminder)
    data = {field: arguments[field] for field in _SPEC_FIELDS if field in arguments}
    data["name"] = name
    try:
        spec = FunctionSpec.from_dict(data, where=f"the {action} call")
    except FunctionSpecError as exc:
        problems = getattr(exc, "problems", None) or exc.message
        return _refused(action, name, f"the function cannot be read: {problems}",
                        reminder=reminder)
    problems = _code_problems(spec) + _package_problems(spec)
    if problems:
        return _refused(action, name, "; ".join(problems), reminder=reminder)
    if kind == "revise" and working[name] == spec:
        return _refused(action, name, "it is identical to the function in List B: change "
                        "something, or take another action", reminder=reminder)
    return Change(kind=kind, name=name, spec=spec, ignored=_ignored(arguments, kind))


def apply_change(change: Change, function_set: FunctionSet, *, by: Any = None, note: str = "") -> int | None:
    """Carry out an accepted change on a set; the function's version after it (None: removed)."""
    if change.kind == "remove":
        function_set.remove(change.name, by=by, note=note)
        return None
    assert change.spec is not None
    if change.kind == "add":
        return function_set.add(change.spec, by=by, note=note)
    return function_set.replace(change.spec, by=by, note=note)


def _fields(kind: Kind) -> tuple[str, ...]:
    return ("name",) if kind == "remove" else _SPEC_FIELDS


def _required(kind: Kind) -> tuple[str, ...]:
    # `arguments` and `packages` may be left out: no parameters, no packages.
    return ("name",) if kind == "remove" else ("name", "description", "code")


def _ignored(arguments: dict[str, Any], kind: Kind) -> tuple[str, ...]:
    return tuple(sorted(str(key) for key in arguments if key not in _fields(kind)))


def _code_problems(spec: FunctionSpec) -> list[str]:
    """The code compiles and defines exactly `spec.name`, with parameters the schema agrees with."""
    try:
        # Compiled, never run: SyntaxErrors that only the compiler finds (a `return` outside
        # a function, a misplaced `nonlocal`) count too.
        compile(spec.code, f"<function {spec.name}>", "exec", dont_inherit=True)
        tree = ast.parse(spec.code)
    except SyntaxError as exc:
        where = f" at line {exc.lineno}" if exc.lineno else ""
        return [f"its code does not compile: SyntaxError{where}: {exc.msg}"]
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return [f"its code does not compile: {type(exc).__name__}: {exc}"]
    defined = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    names = [node.name for node in defined]
    if not defined:
        return [f"its code defines no function: it must define `def {spec.name}(...)`"]
    if names != [spec.name]:
        if spec.name not in names:
            return [f"its code defines {_listed(names)}, not {spec.name!r}: the name must be the "
                    "name of the function the code defines"]
        return [f"its code defines {len(names)} top-level functions ({', '.join(names)}); define "
                f"exactly one, {spec.name}, and put helpers inside it"]
    if isinstance(defined[0], ast.AsyncFunctionDef):
        return [f"{spec.name} is an `async def`; it must be a plain function"]
    signature = read_signature(spec.code, spec.name)
    assert signature is not None  # the code parses and defines it
    problems = []
    properties = list(spec.parameters.get("properties") or {})
    if not signature.accepts_any_keyword:
        extra = [p for p in properties if p not in signature.parameters]
        if extra:
            problems.append(f"the schema has {_listed(extra, 'argument')} that "
                            f"def {spec.name} does not take")
    lacking = [p for p in signature.required if p not in properties]
    if lacking:
        problems.append(f"def {spec.name} needs {_listed(lacking, 'parameter')} that the schema "
                        "does not describe (add them to `arguments`, or give them defaults)")
    required = spec.parameters.get("required") or []
    unknown = [p for p in required if isinstance(p, str) and p not in properties]
    if unknown:
        problems.append(f"the schema requires {_listed(unknown, 'argument')} it does not describe")
    return problems


def _package_problems(spec: FunctionSpec) -> list[str]:
    problems = []
    for text in spec.packages:
        try:
            parse_requirement(text, allow_marker=False)
        except PackageRequestError as exc:
            problems.append(f"packages: {exc}")
    return problems


def _listed(names: list[str], noun: str = "") -> str:
    quoted = ", ".join(repr(n) for n in names)
    if not noun:
        return quoted
    return f"{noun}{'s' if len(names) != 1 else ''} {quoted}"


def _names_used(code: str) -> set[str]:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
