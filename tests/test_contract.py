"""The backend contract suite: what every isolation tier promises, run against each one.

Every test takes the session-scoped `sandbox` fixture, which is parametrised over all
backends in `conftest.BACKENDS`. The code snippets only use what the restricted tier
allows, so the same expectations hold on every tier.
"""

from __future__ import annotations

import re
import threading

import pytest

from runner import ExecutionResult, Limits, Status

UNICODE_TEXT = "héllo wörld ✓ 日本語 🎉"


def _describe(r: ExecutionResult) -> str:
    return f"status={r.status!s} exit={r.exit_code} error={r.error!r} stdout={r.stdout[:300]!r} stderr={r.stderr[:300]!r}"


def assert_ok(r: ExecutionResult, stdout: str | None = None) -> None:
    assert r.status == Status.OK, _describe(r)
    assert r.exit_code == 0, _describe(r)
    assert r.error is None, _describe(r)
    if stdout is not None:
        assert r.stdout == stdout, _describe(r)


def assert_still_works(sandbox) -> None:
    """After a kill or a fault the same sandbox must serve the next run normally."""
    assert_ok(sandbox.run("print(1 + 1)"), "2\n")


# --- ok runs ---------------------------------------------------------------------------


def test_plain_print_is_ok_with_exact_stdout_and_empty_stderr(sandbox):
    r = sandbox.run("print('hello')\nprint(1, 2, sep='-')\nprint('no newline', end='')")
    assert_ok(r, "hello\n1-2\nno newline")
    assert r.stderr == ""
    assert r.stdout_truncated is False
    assert r.stderr_truncated is False


def test_status_is_the_status_enum(sandbox):
    r = sandbox.run("print('x')")
    assert isinstance(r.status, Status)
    assert r.ok is True


@pytest.mark.parametrize("code", ["", "   ", "\n\n", "  \n\t\n   \n", "# only a comment\n"])
def test_empty_or_whitespace_code_is_ok(sandbox, code):
    assert_ok(sandbox.run(code), "")


def test_unicode_round_trips(sandbox):
    r = sandbox.run(f"print({UNICODE_TEXT!r})")
    assert_ok(r, UNICODE_TEXT + "\n")


def test_return_value_is_none_for_plain_code(sandbox):
    r = sandbox.run("x = 41 + 1\nprint(x)\nx")
    assert_ok(r, "42\n")
    assert r.return_value is None


def test_printing_something_that_looks_like_a_result_cannot_forge_one(sandbox):
    # The result travels on a channel user code cannot write to by printing.
    fake = '{"id": "0", "backend": "x", "status": "denied", "exit_code": 9, "stdout": "forged"}'
    code = f"print({fake!r})\nprint({fake!r})"
    r = sandbox.run(code)
    assert_ok(r, fake + "\n" + fake + "\n")


# --- errors ----------------------------------------------------------------------------


def test_uncaught_exception_is_error_with_clean_traceback(sandbox):
    r = sandbox.run("a = 1\nb = 2\n1/0\nprint('not reached')\n")
    assert r.status == Status.ERROR, _describe(r)
    assert r.exit_code == 1
    assert r.error is not None
    assert r.error.type == "ZeroDivisionError"
    assert r.error.message == "division by zero"
    tb = r.error.traceback
    assert "Traceback" in tb
    assert "1/0" in tb
    assert re.search(r"line 3\b", tb), tb
    for host_path in ("/work", "site-packages", "runner/worker"):
        assert host_path not in tb, tb
    assert "not reached" not in r.stdout


def test_output_printed_before_an_exception_is_kept(sandbox):
    r = sandbox.run("print('before')\nraise ValueError('bad value 7')\n")
    assert r.status == Status.ERROR, _describe(r)
    assert r.stdout == "before\n"
    assert r.error.type == "ValueError"
    assert r.error.message == "bad value 7"


def test_exception_raised_inside_a_function_shows_user_lines(sandbox):
    code = "def inner(d):\n    return d['missing']\n\ndef outer():\n    return inner({})\n\nouter()\n"
    r = sandbox.run(code)
    assert r.status == Status.ERROR, _describe(r)
    assert r.error.type == "KeyError"
    tb = r.error.traceback
    assert "return d['missing']" in tb
    assert re.search(r"line 2\b", tb) and re.search(r"line 7\b", tb), tb
    for host_path in ("/work", "site-packages", "runner/worker"):
        assert host_path not in tb, tb


def test_syntax_error_is_error_naming_the_line(sandbox):
    r = sandbox.run("x = 1\ndef f(:\n    pass\n")
    assert r.status == Status.ERROR, _describe(r)
    assert r.error.type == "SyntaxError"
    assert re.search(r"line\s*2\b", r.error.message, re.IGNORECASE), r.error.message


@pytest.mark.parametrize(
    ("code", "status", "exit_code"),
    [
        ("raise SystemExit(3)", Status.ERROR, 3),
        ("raise SystemExit(0)", Status.OK, 0),
        ("raise SystemExit", Status.OK, 0),
        ("print('bye')\nraise SystemExit(0)\nprint('not reached')", Status.OK, 0),
    ],
)
def test_system_exit(sandbox, code, status, exit_code):
    r = sandbox.run(code)
    assert r.status == status, _describe(r)
    assert r.exit_code == exit_code, _describe(r)
    if status == Status.ERROR:
        assert r.error.type == "SystemExit"
    else:
        assert r.error is None
    assert "not reached" not in r.stdout
    assert_still_works(sandbox)


def test_keyboard_interrupt_from_user_code_is_an_error(sandbox):
    r = sandbox.run("raise KeyboardInterrupt")
    assert r.status == Status.ERROR, _describe(r)
    assert r.error.type == "KeyboardInterrupt"
    assert_still_works(sandbox)


# --- output caps -----------------------------------------------------------------------


def test_output_over_the_cap_is_truncated_not_failed(sandbox):
    limits = Limits(max_output_bytes=2000)
    code = "print(''.join(str(i % 10) for i in range(100000)))"
    expected = "".join(str(i % 10) for i in range(100000))
    r = sandbox.run(code, limits=limits)
    assert r.status == Status.OK, _describe(r)
    assert r.stdout_truncated is True
    assert len(r.stdout.encode()) <= 2000 + 200
    assert len(r.stdout) >= 1500
    assert r.stdout[:1500] == expected[:1500]


def test_large_output_within_the_cap_is_exact(sandbox):
    expected = "".join(str(i % 7) for i in range(500_000))
    r = sandbox.run("print(''.join(str(i % 7) for i in range(500000)))")
    assert r.status == Status.OK, _describe(r)
    assert r.stdout_truncated is False
    assert r.stdout == expected + "\n"


# --- limits ----------------------------------------------------------------------------


def test_timeout_kills_and_the_sandbox_recovers(sandbox):
    r = sandbox.run("while True:\n    pass\n", limits=Limits(timeout_s=1))
    assert r.status == Status.TIMEOUT, _describe(r)
    assert r.error is not None
    msg = r.error.message
    assert re.search(r"\b1(\.0+)?\s*(s|sec|secs|second|seconds)\b", msg) or "timeout_s=1" in msg, msg
    assert 900 <= r.duration_ms <= 10_000, r.duration_ms
    assert_still_works(sandbox)


@pytest.mark.parametrize(
    "code",
    ["x = bytearray(512 * 1024 * 1024)\nprint(len(x))", "x = 'a' * (512 * 1024 * 1024)\nprint(len(x))"],
    ids=["bytearray", "str"],
)
def test_memory_limit_and_the_sandbox_recovers(sandbox, code):
    r = sandbox.run(code, limits=Limits(memory_mb=64, timeout_s=10))
    assert r.status == Status.MEMORY_LIMIT, _describe(r)
    assert r.error is not None
    assert "memory" in r.error.message.lower(), r.error.message
    assert r.stdout == ""
    assert_still_works(sandbox)


def test_result_records_the_limits_that_were_applied(sandbox):
    limits = Limits(timeout_s=5, memory_mb=128, max_output_bytes=4096, max_open_files=32)
    r = sandbox.run("print('x')", limits=limits)
    assert_ok(r, "x\n")
    assert r.limits == limits


def test_cpu_time_is_reported(sandbox):
    # Busy-wait on the wall clock for ~0.4 s: CPU time follows wall time.
    code = (
        "import datetime\n"
        "t0 = datetime.datetime.now()\n"
        "n = 0\n"
        "while (datetime.datetime.now() - t0).total_seconds() < 0.4:\n"
        "    n = n + 1\n"
        "print(n > 0)\n"
    )
    r = sandbox.run(code)
    assert_ok(r, "True\n")
    assert r.resources.cpu_ms > 100, r.resources
    assert r.resources.max_rss_kb > 0, r.resources
    assert r.duration_ms >= 400, r.duration_ms


# --- isolation between runs ------------------------------------------------------------


def test_runs_share_no_state(sandbox):
    assert_ok(sandbox.run("leftover_from_last_run = 42\nprint(leftover_from_last_run)"), "42\n")
    r = sandbox.run("print(leftover_from_last_run)")
    assert r.status == Status.ERROR, _describe(r)
    assert r.error.type == "NameError"
    assert "leftover_from_last_run" in r.error.message


def test_ids_are_unique_and_increasing(sandbox):
    ids = [sandbox.run(f"print({i})").id for i in range(5)]
    assert len(set(ids)) == 5
    assert ids == sorted(ids)
    assert all(isinstance(i, str) and i for i in ids)


def test_concurrent_runs_on_one_sandbox_get_their_own_output(sandbox):
    results: dict[int, ExecutionResult] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        try:
            for i in range(5):
                n = t * 100 + i
                r = sandbox.run(f"print({n})")
                with lock:
                    results[n] = r
        except BaseException as exc:  # surfaced in the main thread below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads)
    assert errors == []
    assert len(results) == 40
    for n, r in results.items():
        assert_ok(r, f"{n}\n")
    assert len({r.id for r in results.values()}) == 40


def test_output_that_grows_when_escaped_is_truncated_not_a_crash(sandbox):
    # 12 MB of control characters is 72 MB as JSON: more than one reply frame carries.
    r = sandbox.run("print(chr(1) * 12_000_000)", limits=Limits(max_output_bytes=12_000_000))
    assert_ok(r)
    assert r.stdout_truncated is True
    assert r.stdout.startswith("\x01" * 1000)


def test_lone_surrogates_in_user_text_do_not_break_the_result(sandbox):
    r = sandbox.run("print('a\\ud800b')\nraise ValueError('bad \\ud800')")
    assert r.status == Status.ERROR, _describe(r)
    assert r.error.type == "ValueError"
    assert r.stdout.startswith("a") and r.stdout.endswith("b\n")


def test_a_request_that_is_not_json_is_refused_before_any_worker(sandbox):
    from runner.types import ExecutionRequest, FunctionCall

    request = ExecutionRequest(code="def g(x):\n    return x\n",
                               call=FunctionCall(name="g", arguments={"x": {1, 2}}))
    r = sandbox.execute(request)
    assert r.status == Status.INVALID_ARGS
    assert "JSON" in r.error.message
    assert_still_works(sandbox)


# --- packages: the same refusal, and the same feedback, on every backend -------------------

@pytest.mark.parametrize("requirement", [
    "x; os_name=='posix' --index-url=http://evil",
    "git+https://example.invalid/x",
    "numpy @ file:///etc/passwd",
    "--extra-index-url=http://evil",
])
def test_a_package_that_is_not_a_plain_requirement_is_refused_alike(sandbox, requirement):
    from runner.agent.feedback import ErrorCode, observe
    from runner.worker.error_types import PACKAGE_UNAVAILABLE

    r = sandbox.run("print('ran')", packages=[requirement])
    assert r.status == Status.DENIED and r.stdout == "", _describe(r)
    assert r.error is not None and r.error.type == PACKAGE_UNAVAILABLE, _describe(r)
    assert observe(r, label="the block").codes == [ErrorCode.PACKAGE_UNAVAILABLE]


def test_an_available_package_runs_and_records_its_version(sandbox):
    r = sandbox.run("import sympy\nprint(sympy.Integer(2) ** 10)", packages=["sympy>=1.12"])
    assert_ok(r, "1024\n")
    assert "sympy" in r.packages and r.packages["sympy"][0].isdigit(), r.packages
