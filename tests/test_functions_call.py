"""Calling sandboxed functions, on every backend in conftest.BACKENDS.

Each test takes the `sandbox` fixture, so adding "docker" to BACKENDS runs all of them
on Docker too; where the tiers rightly differ (packages), the test says what each must do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import pytest

from runner import ExecutionResult, FunctionSet, FunctionSpec, Limits, Status, tool
from runner.errors import ConfigurationError

LEARNED = Path(__file__).parents[1] / "examples/learned_functions.json"


def describe(r: ExecutionResult) -> str:
    return (f"status={r.status!s} error={r.error!r} return={r.return_value!r} "
            f"stdout={r.stdout[:300]!r} stderr={r.stderr[:300]!r}")


def make(name: str, code: str, arguments: dict | None = None, packages: str | list[str] = "") -> FunctionSpec:
    return FunctionSpec.from_dict({"name": name, "description": "", "arguments": arguments or {},
                                   "packages": packages, "code": code})


def logged(sandbox, result: ExecutionResult):
    return sandbox.log_store.get_execution(result.id)


@pytest.fixture(scope="module")
def learned() -> FunctionSet:
    return FunctionSet.load(LEARNED, log_store=False)


# --- ok calls ------------------------------------------------------------------------------


def test_the_optimizer_functions_run_and_return_json(sandbox, learned):
    r = sandbox.call(learned, "simplify_expression", {"expression": "(x**2 - 1)/(x - 1)"})
    assert r.status is Status.OK, describe(r)
    assert r.return_value == "x + 1"
    assert r.return_repr is None and r.return_is_repr is False
    assert r.packages.get("sympy")  # the set's packages were provided, and their versions recorded

    r = sandbox.call(learned, "loan_payment", {"principal": 1000, "annual_rate": 0.05, "months": 12})
    assert r.status is Status.OK, describe(r)
    assert r.return_value == pytest.approx(85.6074817884)
    r = sandbox.call(learned, "loan_payment", {"principal": 1200, "annual_rate": 0, "months": 12})
    assert r.return_value == 100


def test_the_issue_example_runs_from_a_tool(sandbox):
    @tool
    def compound_principal(future_value: float, rate: Annotated[float, "annual rate, 0.05 = 5%"],
                           years: int, periods: Literal[1, 4, 12] = 4) -> float:
        """Principal needed to reach future_value with compound interest."""
        return future_value / (1 + rate / periods) ** (periods * years)

    r = sandbox.call(compound_principal.spec, {"future_value": 1000, "rate": 0.05, "years": 3})
    assert r.status is Status.OK, describe(r)
    assert r.return_value == pytest.approx(compound_principal(1000, 0.05, 3))
    r = sandbox.call(compound_principal, {"future_value": 1000, "rate": 0.05, "years": 3, "periods": 1})
    assert r.return_value == pytest.approx(1000 / 1.05 ** 3)


def test_printed_output_is_separate_from_the_return_value(sandbox):
    fake = json.dumps({"kind": "ok", "return_value": "forged"})
    f = make("talk", f"def talk():\n    print({fake!r})\n    print('hello')\n    return 7\n")
    r = sandbox.call(f, {})
    assert r.status is Status.OK, describe(r)
    assert r.return_value == 7  # from the result channel, never parsed out of stdout
    assert r.stdout == fake + "\nhello\n"


def test_json_text_arguments_as_tool_calls_carry_them(sandbox, learned):
    r = sandbox.call(learned, "loan_payment", '{"principal": 1200, "annual_rate": 0, "months": 12}')
    assert r.status is Status.OK, describe(r)
    assert r.return_value == 100


def test_a_set_of_one_needs_no_name_and_a_set_of_many_does(sandbox, learned):
    single = FunctionSet("one", [make("one", "def one():\n    return 1\n")], log_store=False)
    assert sandbox.call(single, {}).return_value == 1
    with pytest.raises(ConfigurationError, match="which function"):
        sandbox.call(learned, {"expression": "x"})
    with pytest.raises(ConfigurationError, match="'other'"):
        sandbox.call(make("one", "def one():\n    return 1\n"), "other", {})


# --- errors ---------------------------------------------------------------------------------


def test_a_body_that_raises_is_an_error_with_a_traceback_of_its_own_lines(sandbox):
    f = make("ratio", "def ratio(a, b):\n    scaled = a * 2\n    return scaled / b\n",
             {"a": {"type": "number"}, "b": {"type": "number"}})
    r = sandbox.call(f, {"a": 1, "b": 0})
    assert r.status is Status.ERROR, describe(r)
    assert r.error is not None
    assert r.error.type == "ZeroDivisionError"
    assert r.error.message == "division by zero"
    traceback = r.error.traceback
    assert traceback.startswith("Traceback (most recent call last):\n")
    assert "return scaled / b" in traceback and ", in ratio" in traceback
    for foreign in ("runner/", "execution.py", "site-packages", "/usr/lib"):
        assert foreign not in traceback, traceback
    assert r.return_value is None


def test_errors_in_another_function_of_the_set_show_that_function_by_name(sandbox):
    functions = FunctionSet("chain", [
        make("helper", "def helper(x):\n    return 10 // x\n"),
        make("outer", "def outer(x):\n    return helper(x) + 1\n", {"x": {"type": "integer"}}),
    ], log_store=False)
    r = sandbox.call(functions, "outer", {"x": 0})
    assert r.status is Status.ERROR, describe(r)
    assert r.error is not None and r.error.type == "ZeroDivisionError"
    assert 'File "<function helper>", line 2, in helper' in r.error.traceback
    assert "return 10 // x" in r.error.traceback
    assert "return helper(x) + 1" in r.error.traceback


def test_code_that_defines_a_different_name_says_what_it_defines(sandbox):
    f = make("area", "def compute_area(r):\n    return 3 * r * r\n\ndef unit():\n    return 1\n",
             {"r": {"type": "number"}})
    r = sandbox.call(f, {"r": 2})
    assert r.status is Status.ERROR, describe(r)
    assert r.error is not None and r.error.type == "FunctionNotDefined"
    assert "'area'" in r.error.message
    assert "compute_area" in r.error.message and "unit" in r.error.message


def test_a_package_that_is_not_available(sandbox):
    f = make("uses_it", "import runner_no_such_package_xyz\n\ndef uses_it():\n    return 1\n",
             packages="runner-no-such-package-xyz")
    r = sandbox.call(f, {})
    assert r.error is not None
    if sandbox.backend == "restricted":
        assert r.status is Status.DENIED, describe(r)
        assert "runner-no-such-package-xyz" in r.error.message
        assert "jail" in r.error.message  # the hint: the jail tier installs packages
    else:
        assert r.status is Status.INSTALL_FAILED, describe(r)
        assert "runner-no-such-package-xyz" in r.error.message


def test_importing_a_module_that_is_not_declared_or_installed(sandbox):
    f = make("uses_it", "def uses_it():\n    import runner_no_such_module_xyz\n    return 1\n")
    r = sandbox.call(f, {})
    assert r.error is not None
    assert "runner_no_such_module_xyz" in r.error.message
    if sandbox.backend == "restricted":
        assert r.status is Status.DENIED, describe(r)
        assert "jail" in r.error.message
    else:
        assert r.status is Status.ERROR, describe(r)
        assert r.error.type == "ModuleNotFoundError"


def test_a_function_that_runs_too_long_is_killed(sandbox):
    f = make("spin", "def spin():\n    while True:\n        pass\n")
    r = sandbox.call(f, {}, limits=Limits(timeout_s=1))
    assert r.status is Status.TIMEOUT, describe(r)
    assert r.limits.timeout_s == 1


# --- sets --------------------------------------------------------------------------------------


def test_functions_call_functions_of_the_same_set(sandbox):
    functions = FunctionSet("geometry", [
        make("square", "def square(x):\n    return x * x\n", {"x": {"type": "number"}}),
        make("hypotenuse", "import math\n\ndef hypotenuse(a, b):\n    return math.sqrt(square(a) + square(b))\n",
             {"a": {"type": "number"}, "b": {"type": "number"}}),
        make("uses_later", "def uses_later():\n    return defined_after() * 2\n"),
        make("defined_after", "def defined_after():\n    return 21\n"),
    ], log_store=False)
    r = sandbox.call(functions, "hypotenuse", {"a": 3, "b": 4})
    assert r.status is Status.OK, describe(r)
    assert r.return_value == 5.0
    r = sandbox.call(functions, "uses_later", {})
    assert r.status is Status.OK, describe(r)
    assert r.return_value == 42


def test_the_called_function_wins_over_a_sibling_defining_the_same_name(sandbox):
    functions = FunctionSet("shadow", [
        make("a", "def a():\n    return 'a'\n\ndef b():\n    return 'b from a'\n"),
        make("b", "def b():\n    return 'b'\n"),
    ], log_store=False)
    assert sandbox.call(functions, "b", {}).return_value == "b"


def test_one_request_carries_the_set_and_its_packages(sandbox, learned):
    r = sandbox.call(learned, "loan_payment", {"principal": 1, "annual_rate": 0, "months": 1})
    record = logged(sandbox, r)
    request = record.request
    assert request.code == learned["loan_payment"].code
    assert [(s.filename, s.code) for s in request.preamble] == [
        ("<function simplify_expression>", learned["simplify_expression"].code)]
    assert request.packages == ("sympy",)  # the whole set's, though loan_payment needs none
    assert request.call is not None and request.call.name == "loan_payment"


# --- return values ------------------------------------------------------------------------------


@pytest.mark.parametrize(("expression", "value", "return_repr"), [
    ("{'a': [1, 2.5, None, True, 'x']}", {"a": [1, 2.5, None, True, "x"]}, None),
    ("Fraction(1, 4)", 0.25, "Fraction(1, 4)"),
    ("Fraction(6, 3)", 2, "Fraction(2, 1)"),
    ("Decimal('1.5')", 1.5, "Decimal('1.5')"),
    ("Decimal('10')", 10, "Decimal('10')"),
    ("(1, 'two', (3,))", [1, "two", [3]], "(1, 'two', (3,))"),
    ("{3, 1, 2}", [1, 2, 3], "{1, 2, 3}"),
    ("frozenset()", [], "frozenset()"),
    ("sympy.Rational(1, 3)", pytest.approx(1 / 3), "1/3"),
    ("sympy.Integer(12)", 12, "12"),
    ("sympy.sqrt(8)", pytest.approx(8 ** 0.5), "2*sqrt(2)"),
    ("sympy.Symbol('x') + 1", "x + 1", "x + 1"),
    ("sympy.Matrix([[1, 2], [3, 4]])", [[1, 2], [3, 4]], "Matrix([\n[1, 2],\n[3, 4]])"),
    ("{1: 'one', (2, 3): 'pair'}", {"1": "one", "(2, 3)": "pair"}, "{1: 'one', (2, 3): 'pair'}"),
    ("float('inf')", "inf", "inf"),
])
def test_return_values_are_converted_to_json_with_the_repr_kept(sandbox, expression, value, return_repr):
    code = (f"from fractions import Fraction\nfrom decimal import Decimal\nimport sympy\n\n"
            f"def produce():\n    return {expression}\n")
    r = sandbox.call(make("produce", code, packages="sympy"), {})
    assert r.status is Status.OK, describe(r)
    assert r.return_value == value
    assert r.return_repr == return_repr
    assert r.return_is_repr is False


def test_an_object_without_a_json_form_becomes_its_repr_flagged(sandbox):
    code = ("class Opaque:\n    pass\n\ndef produce():\n    return Opaque()\n")
    r = sandbox.call(make("produce", code), {})
    assert r.status is Status.OK, describe(r)
    assert r.return_is_repr is True
    assert isinstance(r.return_value, str) and "Opaque object at" in r.return_value
    assert r.return_repr == r.return_value


def test_none_and_no_return(sandbox):
    r = sandbox.call(make("nothing", "def nothing():\n    pass\n"), {})
    assert r.status is Status.OK, describe(r)
    assert r.return_value is None and r.return_repr is None and r.return_is_repr is False


# --- arguments are data ------------------------------------------------------------------------------

INJECTIONS = [
    "__import__('os').system('touch {marker}')",
    "'); __import__('os').system('touch {marker}'); ('",
    '"); __import__("os").system("touch {marker}"); ("',
    "\"\"\"\n__import__('os').system('touch {marker}')\n\"\"\"",
    "x\n    import os\n    os.system('touch {marker}')",
    "{{0.__class__.__mro__}}",
    "${{__import__('os')}}",
    "\\'; exec('print(1)') #",
    "\x00\u202e\ud7ff",
]


@pytest.mark.parametrize("template", INJECTIONS)
def test_strings_that_look_like_code_are_passed_as_data(sandbox, tmp_path, template):
    marker = tmp_path / "pwned"
    text = template.format(marker=marker)
    echo = make("echo", "def echo(text, nested):\n    return [text, len(text), nested]\n",
                {"text": {"type": "string"}, "nested": {"type": "object"}})
    r = sandbox.call(echo, {"text": text, "nested": {"code": text, "list": [text]}})
    assert r.status is Status.OK, describe(r)
    assert r.return_value == [text, len(text), {"code": text, "list": [text]}]
    assert r.stdout == ""
    assert not marker.exists()


@pytest.mark.parametrize("name", ["x); __import__('os').system('id'); (", "__class__", "**kwargs", "a b"])
def test_argument_names_that_look_like_code_are_refused_before_running(sandbox, name):
    echo = make("echo", "def echo(text):\n    return text\n", {"text": {"type": "string"}})
    r = sandbox.call(echo, {"text": "fine", name: 1})
    assert r.status is Status.INVALID_ARGS, describe(r)
    assert r.error is not None and r.error.detail is not None
    assert r.error.detail["unexpected"] == [name]
    assert r.duration_ms == 0 and r.stdout == ""


# --- invalid calls -------------------------------------------------------------------------------------


def test_invalid_arguments_never_run_and_come_back_structured_and_logged(sandbox, learned):
    r = sandbox.call(learned, "loan_payment", {"principal": "a lot", "months": 12, "rate": 0.05})
    assert r.status is Status.INVALID_ARGS, describe(r)
    assert r.backend == sandbox.backend
    assert r.exit_code is None and r.duration_ms == 0
    assert r.error is not None and r.error.type == "InvalidArguments"
    assert r.error.message.startswith(
        "invalid arguments for loan_payment: missing required argument 'annual_rate'; "
        "unexpected argument 'rate'; argument 'principal' must be number, got string.")
    detail = r.error.detail
    assert detail is not None
    assert detail["missing"] == ["annual_rate"]
    assert detail["unexpected"] == ["rate"]
    assert [(p["argument"], p["expected"], p["got"]) for p in detail["wrong_type"]] == [
        ("principal", "number", "string")]
    assert detail["parameters"] == learned["loan_payment"].parameters
    # the JSON a CLI or an agent sees carries the same detail
    assert r.to_json_dict()["error"]["detail"] == detail

    record = logged(sandbox, r)
    assert record.result.status is Status.INVALID_ARGS
    assert record.meta["function"] == "loan_payment" and record.meta["version"] == 1
    assert record.meta["set"] == "learned_functions"
    assert record.meta["arguments"] == {"principal": "a lot", "months": 12, "rate": 0.05}
    assert record.meta["invalid_arguments"] == detail


def test_an_unknown_function_name_is_refused_with_the_names_there_are(sandbox, learned):
    r = sandbox.call(learned, "solve_everything", {"x": 1})
    assert r.status is Status.INVALID_ARGS, describe(r)
    assert r.error is not None and r.error.type == "UnknownFunction"
    assert "simplify_expression, loan_payment" in r.error.message
    assert r.error.detail == {"function": "solve_everything", "set": "learned_functions",
                              "available": ["simplify_expression", "loan_payment"]}
    assert logged(sandbox, r).meta["unknown_function"] == r.error.detail


# --- logging -------------------------------------------------------------------------------------------


def test_every_call_is_logged_with_name_version_arguments_and_result(sandbox, tmp_path):
    functions = FunctionSet("logged", [make("twice", "def twice(x):\n    return 2 * x\n",
                                            {"x": {"type": "integer"}})], log_store=tmp_path / "h.db")
    functions.replace(make("twice", "def twice(x):\n    return x + x\n", {"x": {"type": "integer"}}))
    r = sandbox.call(functions, "twice", {"x": 21})
    assert r.status is Status.OK, describe(r)
    record = logged(sandbox, r)
    assert record.meta == {"function": "twice", "version": 2, "set": "logged",
                           "spec_sha256": functions["twice"].digest, "arguments": {"x": 21}}
    assert record.result.return_value == 42
    assert record.request.code == functions["twice"].code

    single = sandbox.call(make("one", "def one():\n    return 1\n"), {})
    assert logged(sandbox, single).meta["version"] is None  # a lone spec has no version


def test_a_closed_sandbox_refuses_calls_even_invalid_ones(tmp_path):
    from runner import Sandbox
    from runner.errors import SandboxClosedError

    f = make("one", "def one():\n    return 1\n")
    sb = Sandbox(log_store=False)
    sb.close()
    with pytest.raises(SandboxClosedError):
        sb.call(f, {})
    with pytest.raises(SandboxClosedError):
        sb.call(f, {"unexpected": 1})


def test_numpy_return_values_where_numpy_exists(sandbox):
    code = ("import numpy\n\ndef produce():\n"
            "    return {'array': numpy.arange(3), 'scalar': numpy.float64(0.5), 'int': numpy.int64(7)}\n")
    r = sandbox.call(make("produce", code, packages="numpy"), {})
    if sandbox.backend == "restricted":  # numpy is not on the restricted allowlist
        assert r.status is Status.DENIED, describe(r)
        assert r.error is not None and "numpy" in r.error.message and "jail" in r.error.message
        return
    assert r.status is Status.OK, describe(r)
    assert r.return_value == {"array": [0, 1, 2], "scalar": 0.5, "int": 7}
    assert r.return_repr is not None and "array([0, 1, 2])" in r.return_repr
    assert r.return_is_repr is False
