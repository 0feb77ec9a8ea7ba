"""runner in smolagents (`pip install runner-sandbox[smolagents]`): an executor for `CodeAgent`.

    from smolagents import CodeAgent, OpenAIServerModel
    from runner.integrations.smolagents import RunnerPythonExecutor

    imports = ["sympy"]
    agent = CodeAgent(tools=[...], model=OpenAIServerModel(...),
                      additional_authorized_imports=imports,
                      executor=RunnerPythonExecutor(additional_authorized_imports=imports))

- State: every step's code runs in one runner session, so variables, imports and
  functions carry from step to step (and from run to run, until `cleanup()`).
- `final_answer(value)` ends the run with `value`: in the sandbox it raises
  `FinalAnswerException` carrying the value in smolagents' safe serialization (what its
  own remote executors do), which the executor turns into `CodeOutput(is_final_answer=True)`:
  tuples, sets, bytes, dates, arrays and PIL images come back as themselves, read as
  hostile (runner/integrations/smolagents_values.py); other values as their `str()`.
- Files and images: a step's printed output names the files it made (name, size, type);
  the images among them (a `plt.show()` figure is saved as figure-N.png) are the step's
  output, as PIL images, as smolagents' own executors return an image result, and
  `attach_images` (a step callback) shows them to a vision model. `work_dir=` keeps a
  host directory in step with the session's (runner/integrations/work_dir.py).
- `send_variables`: the agent's variables (`additional_args`) are set in the session from
  serialized text pasted as a string literal, so no value can become code: JSON for JSON
  data, else smolagents' own safe serialization (as its remote executors send them, so
  tuples, sets, dates and bytes keep their types); a value neither carries is a clear
  error.
- Tools (runner/integrations/smolagents_tools.py): a tool made with smolagents' `@tool`
  from a plain function is a runner function: its source is defined in the session and
  called there, never on the host. A `Tool` subclass (smolagents' documented way, and how
  its own tools are written) is shipped as smolagents' Docker and E2B executors ship it:
  its class's source, checked by smolagents' own `validate_tool_attributes`, defined in
  the session and instantiated there with its defaults. A tool that cannot run there
  (one that reads a name it does not define, such as a module constant of the host; a
  managed agent) is refused with the reason when the run starts; pass such functions as
  a runner `FunctionSet` (`functions=`) instead.
- `additional_authorized_imports` map onto what the sandbox can allow. On the restricted
  tier, the modules it offers (math, cmath, fractions, decimal, statistics, itertools,
  functools, collections, re, json, datetime, random, sympy); anything else, or "*", is a
  `ConfigurationError` naming what cannot be allowed. Elsewhere (the jail tier, the
  default, and Docker), the standard library is there and every other name becomes a
  package of the sandbox's package set (installed for it, never imported on the host);
  "*" cannot be allowed. smolagents' always-authorised base modules that the
  restricted tier does not offer (queue, stat, time, unicodedata) are refused by the
  sandbox when imported, with a message the model reads.
- A step whose code fails, is refused, floods its output or runs out of time raises an
  exception with runner's account of it (output, then the error), which smolagents records
  as the step's error for the model to read; the run goes on, and so does the sandbox.

Every run's log row names the integration (`{"integration": "smolagents"}`).
"""

from __future__ import annotations

import ast
import json
import keyword
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from smolagents.local_python_executor import CodeOutput, PythonExecutor
from smolagents.serialization import SafeSerializer, SerializationError
from smolagents.tools import Tool

from ..backends.base import DEFAULT_BACKEND
from ..errors import ConfigurationError, FunctionDefinitionError
from ..functions import FunctionSet, FunctionSpec
from ..last_expression import parsed, wrap_last_expression
from ..sandbox import Sandbox
from ..types import ExecutionResult, Limits, Status
from ..worker.policy.names import DEFAULT_ALLOWED_MODULES
from .common import (
    DEFAULT_MAX_OUTPUT_CHARS,
    LazyBlocks,
    block_limits,
    block_output,
    functions_source,
    printed_output,
)
from .smolagents_tools import checked_tool_class, is_tool_class, tool_classes_source, tool_spec
from .smolagents_values import LAST_VALUE, SANDBOX_SOURCE, decode_answer, images_of, last_value

__all__ = ["FINAL_ANSWER_EXCEPTION", "RunnerPythonExecutor", "StepFailed", "authorized_packages",
           "tool_spec", "variables_code"]

INTEGRATION = "smolagents"
FINAL_ANSWER_EXCEPTION = "FinalAnswerException"  # smolagents' remote executors' name for it
_FINAL_ANSWER = f'''\
import json as _runner_json


class {FINAL_ANSWER_EXCEPTION}(BaseException):
    """Raised by final_answer: it ends the step, and the run, with the answer."""


{SANDBOX_SOURCE}

def final_answer(answer):
    """Ends the task with `answer` as its result."""
    raise {FINAL_ANSWER_EXCEPTION}(_runner_answer_text(answer))
'''
# Import names whose package has another name on the package index.
_PACKAGE_NAMES = {"PIL": "pillow", "sklearn": "scikit-learn", "cv2": "opencv-python-headless",
                  "bs4": "beautifulsoup4", "yaml": "pyyaml", "dateutil": "python-dateutil"}


class StepFailed(Exception):
    """A step's code did not finish normally; the message is what the model reads."""

    def __init__(self, message: str, result: ExecutionResult) -> None:
        super().__init__(message)
        self.result = result


class RunnerPythonExecutor(PythonExecutor):  # type: ignore[misc]  # smolagents ships no types
    """Runs a CodeAgent's code in runner's sandbox; see the module docstring.

    `sandbox`: a `Sandbox` to run in (else one of `backend` with `backend_options` is
    opened on first use and closed by `cleanup`). `timeout` (seconds) is each step's
    wall-clock limit, over `limits`. `packages` are installed for the sandbox; `functions`
    (a `FunctionSet`) are defined in the session with the agent's tools. `work_dir`, a
    host directory, is kept in step with the session's working directory (its files are
    there for the steps; the files they save are written back).
    """

    def __init__(self, sandbox: Sandbox | None = None, *, backend: str = DEFAULT_BACKEND,
                 additional_authorized_imports: Iterable[str] = (), timeout: float | None = None,
                 limits: Limits | None = None, packages: Iterable[str] = (),
                 functions: FunctionSet | None = None,
                 max_print_outputs_length: int = DEFAULT_MAX_OUTPUT_CHARS,
                 work_dir: str | os.PathLike[str] | None = None,
                 **backend_options: Any) -> None:
        self.limits = block_limits(sandbox, limits, timeout)
        tier = sandbox.backend if sandbox is not None else backend
        self.packages = tuple(packages) + authorized_packages(additional_authorized_imports, tier)
        self.functions = functions if functions is not None else FunctionSet(
            "smolagents-tools", log_store=False)
        self.tools: list[FunctionSpec] = []
        self.tool_classes: dict[str, Tool] = {}  # Tool subclasses, shipped as their source
        self.max_print_outputs_length = max_print_outputs_length
        self.last_images: list[Any] = []  # PIL images the last step made
        self._blocks = LazyBlocks(INTEGRATION, sandbox, backend, backend_options,
                                  limits=self.limits, packages=self.packages,
                                  functions=self.functions, work_dir=work_dir)
        self._blocks.setup_code = self._setup_code  # final_answer, the functions, the tools

    # -- smolagents' protocol ---------------------------------------------------------------------

    def send_tools(self, tools: dict[str, Tool]) -> None:
        """Define the agent's tools in the session (final_answer is the executor's own)."""
        specs: list[FunctionSpec] = []
        classes: dict[str, Tool] = {}
        refused: list[str] = []
        for name, tool in tools.items():
            if name == "final_answer":
                continue
            try:
                if is_tool_class(tool):
                    classes[name] = checked_tool_class(name, tool)
                else:
                    specs.append(tool_spec(name, tool))
            except FunctionDefinitionError as exc:
                refused.append(f"{name}: {exc.message}")
        if refused:
            raise ConfigurationError(
                "these tools cannot run in runner's sandbox: " + "; ".join(refused),
                fix="define every name a tool reads inside it (its imports and constants), or "
                    "pass it as a runner FunctionSet (functions=...)")
        if specs == self.tools and list(classes.items()) == list(self.tool_classes.items()):
            return
        self.tools, self.tool_classes = specs, classes
        blocks = self._blocks.opened
        if blocks is not None:  # the session is open (send_variables came first)
            blocks.setup_code = self._setup_code()
            source = functions_source(FunctionSet("smolagents-tools", specs, log_store=False)) \
                + tool_classes_source(classes)
            if source:
                result = blocks.run(source, meta={"smolagents": "tools"}, record=False).result
                if result.status is not Status.OK:
                    raise StepFailed(block_output(result), result)

    def send_variables(self, variables: dict[str, Any]) -> None:
        """Set the variables in the session, from JSON data."""
        if not variables:
            return
        result = self._blocks.get().run(variables_code(variables), meta={"smolagents": "variables"},
                                        record=False).result
        if result.status is not Status.OK:
            raise StepFailed(block_output(result), result)

    def __call__(self, code_action: str) -> CodeOutput:
        """Run one step's code: its printed output (and the files it made, named), with the
        final answer if it gave one, else the images it made (a figure from `plt.show()`
        or `savefig`: one PIL image, or a list of them), as smolagents' own executors
        return an image result."""
        run = self._blocks.get().run(_with_last_value(code_action), meta={"smolagents": "step"},
                                     shown=code_action)
        result = run.result
        self.last_images = images_of(result.files)
        # (its last newline kept: smolagents follows the logs with its own line)
        logs = printed_output(result, max_chars=self.max_print_outputs_length, notes=run.file_notes,
                              keep_newline=True)
        if result.status is Status.ERROR and result.error is not None \
                and result.error.type == FINAL_ANSWER_EXCEPTION:
            return CodeOutput(output=decode_answer(result.error.message, result), logs=logs,
                              is_final_answer=True)
        if result.status is Status.OK:
            images = self.last_images
            output = last_value(result)
            if output is None and images:
                output = images[0] if len(images) == 1 else images
            return CodeOutput(output=output, logs=logs, is_final_answer=False)
        raise StepFailed(block_output(result, setup=run.setup, max_chars=self.max_print_outputs_length,
                                      notes=run.file_notes), result)

    def attach_images(self, memory_step: Any, agent: Any = None) -> None:
        """A step callback for vision models (`CodeAgent(..., step_callbacks=[executor.attach_images])`):
        the images the step made join its observation (`observations_images`), which the
        model sees with the step's output, as smolagents' browser agents attach screenshots."""
        if self.last_images and hasattr(memory_step, "observations_images"):
            memory_step.observations_images = [*(memory_step.observations_images or []),
                                               *self.last_images]
        self.last_images = []

    def cleanup(self) -> None:
        """End the session, and close the sandbox if this executor opened it."""
        owned = self._blocks.close()
        if owned is not None:
            owned.close()

    def __enter__(self) -> RunnerPythonExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # -- runner's side --------------------------------------------------------------------------------

    @property
    def sandbox(self) -> Sandbox:
        return self._blocks.get().sandbox

    @property
    def session_id(self) -> str | None:
        return self._blocks.session_id

    @property
    def work_dir(self) -> Path | None:
        """Where the steps' files are (None until a step saved one, when none was given)."""
        return self._blocks.work_dir.path

    def restart(self) -> None:
        """The next step starts in a fresh session (variables gone; tools defined again)."""
        self._blocks.restart()

    def _setup_code(self) -> str:
        """What each session defines first: final_answer, the functions, the tools."""
        tools = FunctionSet("smolagents-tools", [*self.functions, *self.tools], log_store=False)
        return _FINAL_ANSWER + "\n\n" + functions_source(tools) + tool_classes_source(self.tool_classes)


def _with_last_value(code: str) -> str:
    """The step with its last expression's value kept for its output (a last `print(...)`
    or `final_answer(...)` has none to keep: left as the model wrote it, as most steps
    end, so the log shows the model's own code)."""
    tree = parsed(code)
    last = tree.body[-1] if tree is not None and tree.body else None
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) \
            and isinstance(last.value.func, ast.Name) \
            and last.value.func.id in ("print", "final_answer"):
        return code
    return wrap_last_expression(code, LAST_VALUE, tree)


def authorized_packages(imports: Iterable[str], tier: str) -> tuple[str, ...]:
    """The packages the sandbox needs for `imports`; a ConfigurationError for what it cannot allow."""
    wanted = [name.strip() for name in imports if name.strip()]
    tops = list(dict.fromkeys(name.split(".")[0] for name in wanted))
    if tier == "restricted":
        refused = [name for name in tops if name not in DEFAULT_ALLOWED_MODULES]
        if refused:
            raise ConfigurationError(
                f"additional_authorized_imports {', '.join(repr(n) for n in refused)} cannot be "
                f"allowed on the restricted backend, which offers only: "
                f"{', '.join(DEFAULT_ALLOWED_MODULES)}",
                fix="drop them, or use backend='jail' (the default), where packages are "
                    "installed for the sandbox")
        return ()
    if "*" in tops:
        raise ConfigurationError("additional_authorized_imports ['*'] cannot be allowed: the "
                                 "sandbox installs the packages it is told, not any import",
                                 fix="name the packages the agent may import")
    return tuple(_PACKAGE_NAMES.get(name, name) for name in tops if name not in sys.stdlib_module_names)


def variables_code(variables: Mapping[str, Any]) -> str:
    """Code that sets each variable from its serialized text (a string literal: data, never
    code): JSON for JSON data (which every tier reads), else smolagents' own safe
    serialization and its deserializer, as its remote executors send variables (tuples,
    sets, dates, bytes, ... keep their types)."""
    for name in variables:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) \
                or name.startswith("_"):
            raise ConfigurationError(f"variable name {name!r} cannot be set in the sandbox",
                                     fix="use plain Python names (letters, digits, underscores, "
                                         "not starting with _)")
    texts = {name: _json_text(value) for name, value in variables.items()}
    if all(text is not None for text in texts.values()):
        lines = ["import json as _runner_json"]
        lines += [f"{name} = _runner_json.loads({text!r})" for name, text in texts.items()]
        return "\n".join(lines) + "\n"
    try:
        serialized = SafeSerializer.dumps(dict(variables), allow_pickle=False)
    except (SerializationError, TypeError, ValueError) as exc:
        raise ConfigurationError(f"the variables cannot be sent to the sandbox: {exc}",
                                 fix="send values smolagents' safe serialization carries "
                                     "(JSON data, tuples, sets, dates, bytes, Decimal, Path, "
                                     "numpy arrays, PIL images)") from None
    lines = [SafeSerializer.get_deserializer_code(allow_pickle=False),
             f"_runner_variables = _deserialize({serialized!r})"]
    lines += [f"{name} = _runner_variables[{name!r}]" for name in variables]
    return "\n".join(lines) + "\ndel _runner_variables\n"


def _json_text(value: Any) -> str | None:
    """`value` as JSON when JSON gives it back as it is (no tuple, int key, set, ...)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return text if json.loads(text) == value and _plain(value) else None


def _plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _plain(item) for key, item in value.items())
    return value is None or type(value) in (str, int, float, bool)


