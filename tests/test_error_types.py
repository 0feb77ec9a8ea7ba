"""The error types are a checked contract: every type the package writes into a result is one
of `runner.worker.error_types`, and the feedback code words every one of them as intended.

The scan reads the source (worker and host alike) for the places that name an error type:
`ErrorInfo(type=...)`, an error dict `{"type": ..., "message"/"traceback": ...}`, the
judge's `_fail(status, type, ...)` and a backend's `RequestRefused(status, type, ...)`. A new
literal type that is not a constant fails here, and so does a constant whose feedback was
never decided (the table below must cover them all).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from runner.agent.feedback import ErrorCode, problem_for_result
from runner.types import ErrorInfo, ExecutionResult, Status
from runner.worker import error_types

PACKAGE = Path(__file__).resolve().parent.parent / "runner"

# What each type comes with, and what the model is told about it.
EXPECTED = {
    error_types.TIMEOUT: (Status.TIMEOUT, ErrorCode.TIMEOUT),
    error_types.MEMORY_ERROR: (Status.MEMORY_LIMIT, ErrorCode.MEMORY_LIMIT),
    error_types.CRASH: (Status.CRASHED, ErrorCode.EXECUTION_FAILED),
    error_types.DENIED: (Status.DENIED, ErrorCode.DENIED),
    error_types.WORKER_ERROR: (Status.CRASHED, ErrorCode.EXECUTION_FAILED),
    error_types.RESULT_ERROR: (Status.ERROR, ErrorCode.EXECUTION_FAILED),
    error_types.FUNCTION_NOT_DEFINED: (Status.ERROR, ErrorCode.EXECUTION_FAILED),
    error_types.SYNTAX_ERROR: (Status.ERROR, ErrorCode.EXECUTION_FAILED),
    error_types.PACKAGE_UNAVAILABLE: (Status.DENIED, ErrorCode.PACKAGE_UNAVAILABLE),
    error_types.INSTALL_FAILED: (Status.INSTALL_FAILED, ErrorCode.PACKAGE_UNAVAILABLE),
    error_types.ENGINE_UNAVAILABLE: (Status.CRASHED, ErrorCode.EXECUTION_FAILED),
    error_types.PROTOCOL_ERROR: (Status.CRASHED, ErrorCode.EXECUTION_FAILED),
    error_types.WORKER_LOST: (Status.CRASHED, ErrorCode.EXECUTION_FAILED),
    error_types.INVALID_REQUEST: (Status.INVALID_ARGS, ErrorCode.INVALID_ARGUMENTS),
    error_types.INTERRUPTED: (Status.CRASHED, ErrorCode.EXECUTION_FAILED),
    error_types.CANCELLED: (Status.CRASHED, ErrorCode.EXECUTION_FAILED),
    error_types.INPUT_FILES: (Status.ERROR, ErrorCode.EXECUTION_FAILED),
    error_types.NO_FILES: (Status.DENIED, ErrorCode.DENIED),
    error_types.NODE_LOST: (Status.CRASHED, ErrorCode.EXECUTION_FAILED),
    error_types.NO_CAPACITY: (Status.CRASHED, ErrorCode.EXECUTION_FAILED),
    error_types.INVALID_ARGUMENTS: (Status.INVALID_ARGS, ErrorCode.INVALID_ARGUMENTS),
    error_types.UNKNOWN_FUNCTION: (Status.INVALID_ARGS, ErrorCode.UNKNOWN_FUNCTION),
}


def _text(node: ast.expr | None) -> str | None:
    """A literal type, or one named through the constants (`error_types.TIMEOUT`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id == "error_types":
        value = getattr(error_types, node.attr, None)
        return value if isinstance(value, str) else f"error_types.{node.attr} (undefined)"
    return None


def _named_types(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, literal) of every place in a module that writes a literal error type."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else \
                node.func.attr if isinstance(node.func, ast.Attribute) else ""
            if name == "ErrorInfo":
                found += [(node.lineno, text) for keyword in node.keywords
                          if keyword.arg == "type" and (text := _text(keyword.value))]
            elif name in ("_fail", "RequestRefused") and len(node.args) >= 2 and (text := _text(node.args[1])):
                found.append((node.lineno, text))
        elif isinstance(node, ast.Dict):
            keys = {_text(key): value for key, value in zip(node.keys, node.values, strict=True)}
            if "type" in keys and ({"message", "traceback"} & keys.keys()) and \
                    (text := _text(keys["type"])):
                found.append((node.lineno, text))
    return found


def test_every_error_type_written_in_the_package_is_a_declared_one():
    unknown, seen = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, text in _named_types(ast.parse(path.read_text(), str(path))):
            seen.add(text)
            if text not in error_types.ALL:
                unknown.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}")
    assert not unknown, "error types missing from runner/worker/error_types.py:\n" + "\n".join(unknown)
    assert seen, "the scan found nothing: it no longer recognises how error types are written"


def test_the_table_covers_every_declared_type():
    assert set(EXPECTED) == error_types.ALL
    assert error_types.LOST_RUN <= error_types.ALL
    assert error_types.REFUSED_BEFORE_RUNNING <= error_types.ALL


@pytest.mark.parametrize("error_type", sorted(EXPECTED))
def test_the_feedback_words_every_declared_type(error_type: str):
    status, code = EXPECTED[error_type]
    result = ExecutionResult(id="01TEST", backend="restricted", status=status,
                             error=ErrorInfo(type=error_type, message="what happened"))
    problem = problem_for_result(result, label="the code", kind="code")
    assert problem is not None and problem.code is code, problem
    assert "what happened" in problem.message or "what happened" in str(problem.details)
