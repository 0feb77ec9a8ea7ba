"""The feedback text: every error code, its message, details and reminder, and the cut of
long output. Built from ExecutionResults as the backends report them."""

from __future__ import annotations

import pytest

from runner.agent import feedback
from runner.agent.feedback import ErrorCode, Feedback
from runner.functions import FunctionSpec, validate_arguments
from runner.types import ErrorInfo, ExecutionResult, Limits, Status

WEATHER = FunctionSpec(
    name="get_current_weather", description="Current weather at a place.",
    parameters={"type": "object", "properties": {
        "latitude": {"type": "number"}, "longitude": {"type": "number"},
        "temperature_unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["latitude", "longitude", "temperature_unit"], "additionalProperties": False},
    code="def get_current_weather(latitude, longitude, temperature_unit):\n    return 30\n")
CALCULATE = FunctionSpec(
    name="calculate", description="Evaluate an arithmetic expression given as Python syntax, such as '3.7 * 0.54'.",
    parameters={"type": "object", "properties": {"formula": {"type": "string"}}, "required": ["formula"]},
    code="def calculate(formula):\n    return eval(formula)\n")
TEMPLATE = 'Reply with one JSON object: {"thought": ..., "action": {...}}'


def result(status: Status, *, error: ErrorInfo | None = None, stdout: str = "", stderr: str = "",
           return_value=None, **extra) -> ExecutionResult:
    return ExecutionResult(id="01TESTEXECUTION0000000000", backend="restricted", status=status,
                           error=error, stdout=stdout, stderr=stderr, return_value=return_value,
                           **extra)


def test_invalid_arguments_name_missing_and_unexpected_and_show_the_schema():
    _, problems = validate_arguments(WEATHER, {"lat": -6.2, "lon": 106.6})
    r = result(Status.INVALID_ARGS, error=ErrorInfo(type="InvalidArguments", message=problems.message(),
                                                    detail=problems.model_dump(mode="json")))
    observation = feedback.observe(r, label="get_current_weather(...)", spec=WEATHER, template=TEMPLATE)
    assert observation.codes == ["INVALID_ARGUMENTS"]
    assert not observation.ok
    text = observation.text
    assert text.startswith("[INVALID_ARGUMENTS] invalid arguments for get_current_weather")
    assert "missing: latitude, longitude, temperature_unit" in text
    assert "unexpected: lat, lon" in text
    assert '"temperature_unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}' in text
    assert TEMPLATE in text
    assert observation.problems[0].details["missing"] == ["latitude", "longitude", "temperature_unit"]


def test_wrong_types_are_listed_with_expected_and_got():
    _, problems = validate_arguments(CALCULATE, {"formula": 3.7})
    r = result(Status.INVALID_ARGS, error=ErrorInfo(type="InvalidArguments", message=problems.message(),
                                                    detail=problems.model_dump(mode="json")))
    text = feedback.observe(r, label="calculate(...)", spec=CALCULATE, template=TEMPLATE).text
    assert "wrong type: formula: expected string, got number" in text


def test_unknown_function_lists_the_available_ones():
    r = result(Status.INVALID_ARGS, error=ErrorInfo(
        type="UnknownFunction", message="there is no function 'calc' in set 's'; the functions are: calculate",
        detail={"function": "calc", "set": "s", "available": ["calculate"]}))
    observation = feedback.observe(r, label="calc({})", template=TEMPLATE)
    assert observation.codes == ["UNKNOWN_FUNCTION"]
    assert "available: calculate" in observation.text
    assert observation.text.endswith("Reminder: " + TEMPLATE)


def test_execution_failed_gives_the_exception_the_traceback_tail_and_the_valid_input():
    error = ErrorInfo(type="SyntaxError", message="invalid syntax. Perhaps you forgot a comma? (line 1)",
                      traceback='  File "<string>", line 1\n    1 km/h = 0.54 knots\n      ^^^^\nSyntaxError: invalid syntax')
    r = result(Status.ERROR, error=error, exit_code=1, stdout="partial\n")
    observation = feedback.observe(r, label='calculate({"formula": "1 km/h = 0.54 knots"})', spec=CALCULATE,
                                   template=TEMPLATE)
    text = observation.text
    assert observation.codes == ["EXECUTION_FAILED"]
    assert text.startswith('[EXECUTION_FAILED] calculate({"formula": "1 km/h = 0.54 knots"}) failed with SyntaxError')
    assert "error: SyntaxError: invalid syntax" in text
    assert "    1 km/h = 0.54 knots" in text  # the traceback's last lines
    assert "output: partial" in text
    assert "such as '3.7 * 0.54'" in text  # the function's description of a valid input


@pytest.mark.parametrize("status, error_type, code, words", [
    (Status.TIMEOUT, "Timeout", ErrorCode.TIMEOUT, "time limit s: 2"),
    (Status.MEMORY_LIMIT, "MemoryError", ErrorCode.MEMORY_LIMIT, "memory limit mb: 256"),
    (Status.DENIED, "Denied", ErrorCode.DENIED, "was refused"),
    (Status.DENIED, "PackageUnavailable", ErrorCode.PACKAGE_UNAVAILABLE, "use only the modules"),
    (Status.INSTALL_FAILED, "InstallFailed", ErrorCode.PACKAGE_UNAVAILABLE, "failed"),
    (Status.ERROR, "ModuleNotFoundError", ErrorCode.PACKAGE_UNAVAILABLE, "ModuleNotFoundError"),
    (Status.CRASHED, "Crashed", ErrorCode.EXECUTION_FAILED, "crashed with"),
])
def test_each_status_has_its_code(status, error_type, code, words):
    r = result(status, error=ErrorInfo(type=error_type, message="the message"),
               limits=Limits(timeout_s=2), stdout="line 1\nline 2\n")
    observation = feedback.observe(r, label="The block", kind="code", template="Use ```python blocks.")
    assert observation.problems[0].code is code
    assert observation.text.startswith(f"[{code}]")
    assert words in observation.text
    assert "Use ```python blocks." in observation.text


def test_a_success_shows_the_return_value_and_output():
    r = result(Status.OK, return_value={"knots": 2.0}, stdout="computing\n")
    observation = feedback.observe(r, label='calculate({"formula": "1"})', spec=CALCULATE)
    assert observation.ok and observation.problems == ()
    assert observation.text == 'Result of calculate({"formula": "1"}): {"knots": 2.0}\nOutput:\ncomputing'
    block = feedback.observe(result(Status.OK), label="Block 2", kind="code")
    assert block.text == "Block 2 ran and printed nothing (print() what you want to see)."


def test_long_output_is_cut_for_the_model_with_a_marker_and_flagged():
    long = "".join(f"line {i}\n" for i in range(2000))
    r = result(Status.OK, stdout=long)
    observation = feedback.observe(r, label="The block", kind="code", max_chars=500)
    assert observation.ok
    assert observation.codes == ["OUTPUT_TRUNCATED"]
    assert "line 0\n" in observation.text and "line 1999" in observation.text
    assert "characters cut; the whole text is in the log (execution 01TESTEXECUTION0000000000)" in observation.text
    assert "this message shows only the start and the end" in observation.text
    assert len(observation.text) < 1200


def test_output_cut_by_the_sandbox_is_flagged_too():
    r = result(Status.OK, stdout="x" * 10, stdout_truncated=True, limits=Limits(max_output_bytes=2048))
    observation = feedback.observe(r, label="The block", kind="code")
    assert observation.codes == ["OUTPUT_TRUNCATED"]
    assert "kept only 2,048 bytes" in observation.text


def test_render_layout_and_clip():
    item = Feedback(code=ErrorCode.MALFORMED_RESPONSE, message="the reply holds no JSON object",
                    details={"objects": 0, "tried": ["fence", "prose"], "empty": []}, reminder=TEMPLATE)
    assert feedback.render(item) == (
        "[MALFORMED_RESPONSE] the reply holds no JSON object\nDetails:\n  objects: 0\n"
        "  tried: fence, prose\nReminder: " + TEMPLATE)
    text, cut = feedback.clip("a" * 100 + "b" * 100, 50)
    assert cut and text.startswith("a" * 30) and text.endswith("b" * 20) and "150 characters cut" in text
    assert feedback.clip("short", 50) == ("short", False)


def test_call_label_is_short():
    assert feedback.call_label("f", {}) == "f()"
    assert feedback.call_label("f", {"a": 1}) == 'f({"a": 1})'
    assert len(feedback.call_label("f", {"a": "x" * 1000})) < 220


def test_disabled_function_is_denied():
    item = feedback.disabled_function("calculate", 3, template=TEMPLATE)
    assert item.code is ErrorCode.DENIED
    assert "failed 3 times in a row" in feedback.render(item)


def test_a_silent_block_is_no_output_only_where_output_is_required():
    silent = result(Status.OK, stdout="  \n")
    plain = feedback.observe(silent, label="The block", kind="code", template=TEMPLATE)
    assert plain.ok and plain.codes == [] and "printed nothing" in plain.text
    required = feedback.observe(silent, label="The block", kind="code", template=TEMPLATE,
                                require_output=True)
    assert not required.ok and required.codes == ["NO_OUTPUT"]
    assert required.text.startswith("[NO_OUTPUT] The block ran but printed nothing")
    assert "print(x)" in required.text and TEMPLATE in required.text
    spoke = feedback.observe(result(Status.OK, stdout="4\n"), label="The block", kind="code",
                             require_output=True)
    assert spoke.ok and spoke.codes == []
    called = feedback.observe(result(Status.OK, return_value=None), label="f()", kind="call",
                              require_output=True)
    assert called.ok  # a function call's result is its return value, printed or not


def test_code_keeps_failing_says_to_reason_instead():
    text = feedback.render(feedback.code_keeps_failing(3))
    assert text.startswith("[CODE_KEEPS_FAILING] your last 3 code blocks in a row failed")
    assert "Solve this step by reasoning instead of code" in text
