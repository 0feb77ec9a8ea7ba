"""`runner mcp` (runner.integrations.mcp) driven by the official `mcp` SDK's own client: over
stdio (the command started as a desktop assistant starts it) and over streamable HTTP (on
loopback, and off loopback with its token). Tools, sessions, the function set, resources,
the log and the viewer, and hostile code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra: pip install 'runner-sandbox[mcp]'")

import httpx2  # noqa: E402
from integration_cases import HOSTILE, logged  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from runner.logs import LogStore  # noqa: E402
from runner.paths import log_db_path  # noqa: E402

RUNNER = str(Path(sys.executable).with_name("runner"))
FUNCTIONS = str(Path(__file__).parent.parent / "examples" / "learned_functions.json")


def environment() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RUNNER_HOME": os.environ["RUNNER_HOME"],
            "HOME": os.environ.get("HOME", "/root")}


def structured(result) -> dict:
    """A run's result; the reply is a tool error exactly when the run did not end ok, and
    its text (what a model reads) starts with the status."""
    data = result.structured_content
    assert data is not None and "status" in data, result.content
    assert result.is_error == (data["status"] != "ok"), (result.is_error, data["status"])
    assert result.content[0].text.startswith(f"status: {data['status']}; execution {data['id']}")
    return data


async def exercise(client: Client) -> dict[str, dict]:
    """Every tool and resource once; returns the results by name."""
    tools = {tool.name for tool in (await client.list_tools()).tools}
    assert tools == {"run_python", "open_session", "close_session", "list_sessions", "list_functions",
                     "call_function", "list_executions"}
    seen: dict[str, dict] = {}
    seen["run"] = structured(await client.call_tool("run_python", {"code": "print(2 ** 10)"}))
    opened = (await client.call_tool("open_session", {"timeout_s": 5})).structured_content
    session_id = opened["session_id"]
    await client.call_tool("run_python", {"code": "x = 41", "session_id": session_id})
    seen["session"] = structured(await client.call_tool("run_python", {"code": "print(x + 1)",
                                                                       "session_id": session_id}))
    closed = await client.call_tool("close_session", {"session_id": session_id})
    assert closed.structured_content["closed"] is True
    gone = await client.call_tool("run_python", {"code": "print(x)", "session_id": session_id})
    assert gone.is_error and "no open session" in gone.content[0].text
    listed = (await client.call_tool("list_functions", {})).structured_content
    assert {f["name"] for f in listed["result"]} == {"simplify_expression", "loan_payment"}
    seen["call"] = structured(await client.call_tool(
        "call_function", {"name": "loan_payment",
                          "arguments": {"principal": 1200, "annual_rate": 0, "months": 12}}))
    seen["invalid"] = structured(await client.call_tool(
        "call_function", {"name": "loan_payment", "arguments": {"principal": "a lot"}}))
    bad_limits = await client.call_tool("run_python", {"code": "print(1)", "timeout_s": -1})
    assert bad_limits.is_error and "timeout_s" in bad_limits.content[0].text
    # the fix speaks of tool arguments, not of the Python API the client cannot use
    assert "Limits(" not in bad_limits.content[0].text
    assert "give timeout_s above 0 and at most 10" in bad_limits.content[0].text
    for name, code in HOSTILE.items():
        seen[name] = structured(await client.call_tool("run_python", {"code": code, "timeout_s": 1}))
    seen["after"] = structured(await client.call_tool("run_python", {"code": "print('still here')"}))
    resources = await client.list_resources()
    assert [str(r.uri) for r in resources.resources] == []  # nothing to browse: see list_executions
    one = json.loads((await client.read_resource(seen["run"]["uri"])).contents[0].text)
    assert one["result"]["stdout"] == "1024\n" and one["meta"]["integration"] == "mcp"
    # the id alone opens nothing: ids sort, and one can be guessed from another
    with pytest.raises(Exception, match="no execution"):
        await client.read_resource(f"runner://executions/{seen['run']['id']}")
    seen["listed"] = (await client.call_tool("list_executions", {})).structured_content["result"]
    return seen


def check(seen: dict[str, dict], *, connection: bool = True) -> None:
    """`connection`: whether the client had one (stdio; the handshake over HTTP), so that
    list_executions shows its runs; a client of one request at a time gets none listed
    (each reply carries its run's uri)."""
    assert seen["run"]["status"] == "ok" and seen["run"]["stdout"] == "1024\n"
    assert {"id", "status", "stdout", "stderr", "error", "exit_code", "limits"} <= set(seen["run"])
    assert seen["session"]["stdout"] == "42\n"
    assert seen["call"]["status"] == "ok" and seen["call"]["return_value"] == 100
    assert seen["invalid"]["status"] == "invalid_args" and "months" in seen["invalid"]["error"]["message"]
    # The server's default tier (the jail) runs real Python: the escapes run, and the one
    # that tries to write a host file through a shell reaches nothing (no process starts).
    assert seen["escape"]["status"] == "ok" and seen["escape_classic"]["status"] == "ok"
    assert not Path("/tmp/runner-integration-escape").exists()
    assert seen["flood"]["status"] == "ok" and seen["flood"]["stdout_truncated"] is True
    assert seen["hang"]["status"] == "timeout"
    assert seen["after"]["stdout"] == "still here\n"
    listed = [run["id"] for run in seen["listed"]]
    if connection:  # this client's, newest first
        assert listed[0] == seen["after"]["id"] and seen["run"]["id"] in listed
        assert all(run["uri"].startswith(f"runner://executions/{run['id']}.") for run in seen["listed"])
    else:
        assert listed == []
    with LogStore(log_db_path()) as store:
        for key in ("run", "call", "hang"):
            record = store.get_execution(seen[key]["id"])
            assert record.source == "mcp"
            logged(store, seen[key]["id"], "mcp")


def test_stdio_with_the_sdks_client():
    server = StdioServerParameters(command=RUNNER, args=["mcp", "--functions", FUNCTIONS],
                                   env=environment())

    async def scenario() -> dict[str, dict]:
        async with Client(server) as client:
            return await exercise(client)

    check(anyio.run(scenario))


def start_http(*args: str) -> tuple[subprocess.Popen[str], str, list[str]]:
    process = subprocess.Popen([RUNNER, "mcp", "--http", "--port", "0", "--functions", FUNCTIONS, *args],
                               env=environment(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               text=True)
    assert process.stderr is not None
    lines = [process.stderr.readline()]
    match = re.search(r"(http://\S+/mcp)", lines[0])
    assert match, lines
    if "--host" in args:
        lines += [process.stderr.readline(), process.stderr.readline()]
    return process, match.group(1), lines


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_for(url: str, headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx2.get(url, headers=headers or {}, timeout=1)
            return
        except httpx2.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"{url} never answered")


def test_streamable_http_on_loopback_with_the_sdks_client():
    process, url, _ = start_http()
    try:
        wait_for(url)

        async def scenario() -> dict[str, dict]:
            async with Client(url) as client:
                return await exercise(client)

        check(anyio.run(scenario), connection=False)
        # a page that rebinds its own name to 127.0.0.1 is turned away
        rebound = httpx2.post(url, headers={"Host": "evil.example"}, json={})
        assert rebound.status_code == 421
    finally:
        stop(process)


def test_streamable_http_off_loopback_needs_the_token():
    process, url, lines = start_http("--host", "0.0.0.0")
    try:
        token = re.search(r"token (\S+)", lines[1]).group(1)
        local = url.replace("0.0.0.0", "127.0.0.1")
        wait_for(local, {"Authorization": f"Bearer {token}"})
        assert httpx2.post(local, json={}).status_code == 401
        assert httpx2.post(local, json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401

        async def scenario() -> str:
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                    Client(_transport(local, http)) as client:
                result = await client.call_tool("run_python", {"code": "print('with token')"})
                return structured(result)["stdout"]

        assert anyio.run(scenario) == "with token\n"
    finally:
        stop(process)


def _transport(url: str, http: httpx2.AsyncClient):
    return streamable_http_client(url, http_client=http)


def test_the_operators_limits_are_ceilings_a_client_cannot_raise():
    """`runner mcp --timeout 2 --memory 64`: a call (a model) may ask for less, never more;
    the tool schema says what the most is; a run with no limits of its own gets the server's."""
    server = StdioServerParameters(command=RUNNER, args=["mcp", "--timeout", "2", "--memory", "64"],
                                   env=environment())

    async def scenario() -> dict[str, object]:
        async with Client(server) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            seen: dict[str, object] = {"schema": tools["run_python"].input_schema["properties"],
                                       "session schema": tools["open_session"].input_schema["properties"]}
            for name, arguments in (("long", {"timeout_s": 3600}), ("big", {"memory_mb": 65536})):
                refused = await client.call_tool("run_python", {"code": "print(1)", **arguments})
                seen[name] = (refused.is_error, refused.content[0].text)
            opened = await client.call_tool("open_session", {"timeout_s": 3600})
            seen["session"] = (opened.is_error, opened.content[0].text)
            seen["lower"] = structured(await client.call_tool(
                "run_python", {"code": "print(1)", "timeout_s": 1, "memory_mb": 32}))
            seen["spin"] = structured(await client.call_tool("run_python", {"code": "while True: pass"}))
            return seen

    seen = anyio.run(scenario)
    for key, most in (("timeout_s", 2), ("memory_mb", 64)):
        for schema in (seen["schema"], seen["session schema"]):
            assert schema[key]["maximum"] == most and f"at most {most}" in schema[key]["description"]
    # (the schema's maximum answers first, in one line; the Python API's check says the same)
    assert seen["long"][0] and "argument timeout_s: 3600 is greater than the maximum of 2" in seen["long"][1]
    assert seen["big"][0] and "argument memory_mb: 65536 is greater than the maximum of 64" in seen["big"][1]
    assert seen["session"][0] and "timeout_s: 3600 is greater than the maximum" in seen["session"][1]
    assert seen["lower"]["status"] == "ok" and seen["lower"]["limits"]["timeout_s"] == 1
    assert seen["lower"]["limits"]["memory_mb"] == 32
    assert seen["spin"]["status"] == "timeout" and seen["spin"]["limits"]["timeout_s"] == 2


def test_a_reply_is_sized_for_a_model_and_the_log_keeps_the_output():
    """A 10 MB print over streamable HTTP: the official client takes the reply (an event
    over 1 MiB would fail it), the model reads head and tail with a note saying what was
    cut and where the whole is, once in each form; the log keeps what the run returned.
    A failed run is a tool error; an unknown execution names no host path."""
    process, url, _ = start_http()
    try:
        wait_for(url)

        async def scenario():
            async with Client(url) as client:
                flood = await client.call_tool("run_python", {
                    "code": "import sys\nsys.stdout.write('a' * 5_000_000 + 'END')\n"
                            "print('x' * 5_000_000)"})
                failed = await client.call_tool("run_python", {"code": "1 / 0"})
                with pytest.raises(Exception) as unknown:
                    await client.read_resource("runner://executions/01NOSUCHEXECUTION.0000")
                return flood, failed, str(unknown.value)

        flood, failed, unknown = anyio.run(scenario)
    finally:
        stop(process)
    data = structured(flood)
    text = flood.content[0].text
    assert len(text) < 25_000 and len(json.dumps(data)) < 30_000, (len(text), len(json.dumps(data)))
    # (the sandbox kept the first 1,000,000 bytes: the note says so, never "the whole text")
    assert (f"characters cut; runner's log ({data['uri']}) keeps the first "
            "1,000,000 bytes of each stream the run printed; the sandbox dropped the rest") \
        in data["stdout"] and "whole" not in text
    assert data["stdout"].startswith("aaaa") and "cut" in text and "passed the sandbox's limit" in text
    assert data["status"] == "ok" and data["stdout_truncated"] is True
    with LogStore(log_db_path()) as store:
        record = store.get_execution(data["id"])
    kept = record.result.stdout
    # (the run's own cap: its first max_output_bytes, then the worker's mark)
    assert len(kept) >= record.result.limits.max_output_bytes > 20 * len(data["stdout"])
    failure = structured(failed)
    assert failed.is_error and failure["status"] == "error" and "ZeroDivisionError" in failed.content[0].text
    assert "no execution '01NOSUCHEXECUTION' made through this server" in unknown
    assert "runner.db" not in unknown and os.environ["RUNNER_HOME"] not in unknown


def test_sessions_are_their_clients_and_end_with_them():
    """Over HTTP: a client with a lasting connection (the handshake) lists its sessions,
    and when it disconnects they close, so a full table frees up for the next client;
    another client cannot find a session's handle (not in list_sessions, not in the log's
    resources; the session's log id is no handle); an idle session closes by itself and
    says so when named."""
    # (idle sessions close only after ten minutes here: what frees the table is the end of
    # the first client's connection)
    process, url, _ = start_http("--max-sessions", "2", "--session-idle", "600")
    try:
        wait_for(url)

        async def scenario():
            seen = {}
            async with Client(url, mode="legacy") as first:
                ids = [(await first.call_tool("open_session", {})).structured_content["session_id"]
                       for _ in range(2)]
                ran = await first.call_tool("run_python", {"code": "secret = 'first client'",
                                                           "session_id": ids[0]})
                full = await first.call_tool("open_session", {})
                seen["full"] = (full.is_error, full.content[0].text)
                seen["first lists"] = (await first.call_tool("list_sessions", {})).structured_content
                async with Client(url) as second:
                    seen["second lists"] = (await second.call_tool("list_sessions", {})).structured_content
                    seen["second's runs"] = (await second.call_tool("list_executions", {})
                                             ).structured_content["result"]
                    recent = (await second.read_resource(ran.structured_content["uri"])).contents[0].text
                    seen["handles in the log"] = [h for h in ids if h in recent]
                    log_id = json.loads(recent)["meta"]["session"]
                    used = await second.call_tool("run_python", {"code": "print(secret)",
                                                                 "session_id": log_id})
                    seen["log id"] = (log_id, ran.structured_content["id"], used.is_error,
                                      used.content[0].text)
                still = await first.call_tool("run_python", {"code": "print(secret)",
                                                             "session_id": ids[0]})
                seen["still"] = structured(still)["stdout"]
            # the first client is gone: its sessions close, and the table has room again
            deadline = time.monotonic() + 30
            async with Client(url) as third:
                while True:
                    opened = await third.call_tool("open_session", {})
                    if not opened.is_error or time.monotonic() > deadline:
                        break
                    await anyio.sleep(0.2)
                seen["third"] = (opened.is_error, opened.content[0].text)
            return ids, seen

        ids, seen = anyio.run(scenario)
    finally:
        stop(process)
    process, url, _ = start_http("--session-idle", "2")
    try:
        wait_for(url)

        async def idle() -> tuple[bool, str]:
            async with Client(url) as client:
                opened = await client.call_tool("open_session", {})
                idle_id = opened.structured_content["session_id"]
                await anyio.sleep(3.5)  # past --session-idle 2 (the sweeper looks every 0.5 s)
                late = await client.call_tool("run_python", {"code": "print(1)", "session_id": idle_id})
                return late.is_error, late.content[0].text

        seen["idle"] = anyio.run(idle)
    finally:
        stop(process)
    assert seen["full"][0] and "2 sessions are open, the most this server keeps" in seen["full"][1]
    assert [s["session_id"] for s in seen["first lists"]["result"]] == ids
    assert seen["first lists"]["result"][0]["blocks"] == 1
    assert seen["second lists"]["result"] == [] and seen["handles in the log"] == []
    log_id, _, is_error, text = seen["log id"]
    assert log_id and log_id not in ids and is_error and "no open session" in text
    assert "first client" not in text
    assert seen["still"] == "first client\n"
    assert not seen["third"][0], seen["third"]
    assert seen["idle"][0] and "was closed after 2 s without a block" in seen["idle"][1]


def _logged_spin(marker: str, deadline_s: float = 30) -> list:
    deadline = time.monotonic() + deadline_s
    while True:
        with LogStore(log_db_path()) as store:
            found = [r for r in store.list_executions(source="mcp", limit=None)
                     if marker in r.request.code]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


@pytest.mark.parametrize("how", ["cancel", "client exits"])
def test_a_cancelled_call_stops_its_run_and_the_log_says_so(how):
    """A run under a 60 s limit whose call the client cancels, or whose client goes away,
    is stopped then and logged as cancelled (not a timeout a minute later, not lost)."""
    marker = f"spin_{how.replace(' ', '_')}_{os.getpid()}"
    code = f"{marker} = 1\nwhile True:\n    pass"
    server = StdioServerParameters(command=RUNNER, args=["mcp", "--timeout", "60"], env=environment())

    async def scenario() -> float:
        started = time.monotonic()
        async with Client(server) as client:
            if how == "cancel":
                with anyio.move_on_after(1.5):
                    await client.call_tool("run_python", {"code": code})
                after = await client.call_tool("run_python", {"code": "print('next')"})
                assert structured(after)["stdout"] == "next\n"
            else:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(client.call_tool, "run_python", {"code": code})
                    await anyio.sleep(1.5)
                    tasks.cancel_scope.cancel()
        return time.monotonic() - started

    took = anyio.run(scenario)
    assert took < 30
    spun = _logged_spin(marker)
    assert spun, "the cancelled run is not in the log"
    result = spun[0].result
    assert result.error is not None and result.error.type == "Cancelled", result
    assert result.duration_ms < 20_000


def test_arguments_a_tool_does_not_take_are_refused_in_a_line_a_model_can_act_on():
    """The SDK ignored unknown arguments and answered type errors with pydantic's report
    and a link; here a call names what is wrong, and the schema forbids extra arguments."""
    server = StdioServerParameters(command=RUNNER, args=["mcp"], env=environment())

    async def scenario():
        async with Client(server) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            unknown = await client.call_tool("run_python", {"code": "print(1)", "timout_s": 3})
            wrong = await client.call_tool("run_python", {"code": "print(1)", "timeout_s": "soon"})
            missing = await client.call_tool("run_python", {})
            return tools, unknown, wrong, missing

    tools, unknown, wrong, missing = anyio.run(scenario)
    assert all(tool.input_schema["additionalProperties"] is False for tool in tools.values())
    assert unknown.is_error and unknown.content[0].text == (
        "run_python takes no argument 'timout_s'; it takes: code, timeout_s, memory_mb, packages, "
        "session_id, files")
    assert wrong.is_error and "run_python: argument timeout_s: 'soon' is not valid" in wrong.content[0].text
    assert missing.is_error and "'code' is a required property" in missing.content[0].text
    for reply in (unknown, wrong, missing):
        assert "pydantic" not in reply.content[0].text and "http" not in reply.content[0].text


def test_the_python_api_keeps_the_same_ceilings():
    """RunnerMCP used from Python (no schema in between) refuses the same asks, with the fix."""
    from runner import Limits, Sandbox
    from runner.errors import ConfigurationError
    from runner.integrations.mcp import RunnerMCP

    with Sandbox(log_store=False, limits=Limits(timeout_s=2, memory_mb=64)) as box:
        state = RunnerMCP(box)
        with pytest.raises(ConfigurationError) as refused:
            state.run_python("print(1)", timeout_s=3600)
        assert "timeout_s=3600 is above this server's limit of 2" in str(refused.value)
        assert "ask for 2 or less" in str(refused.value)
        state.close()


def test_a_run_is_read_only_through_the_uri_its_own_reply_gave(tmp_path):
    """The handle in a reply's uri is the server's seal on the execution id: another
    server (a restart) or a client with only an id (ids sort and can be guessed from one
    another) reads nothing, and a client with no lasting connection lists nothing."""
    from runner import Sandbox
    from runner.errors import NotFoundError
    from runner.integrations.mcp import RunnerMCP

    with LogStore(tmp_path / "runner.db") as store, Sandbox(log_store=store) as sandbox:
        first, second = RunnerMCP(sandbox), RunnerMCP(sandbox)
        ran = first.run_python("open('secret.csv', 'w').write('ALICE,123')", owner="client-a")
        uri = ran.structured_content["uri"]
        handle = uri.removeprefix("runner://executions/")
        execution_id = ran.structured_content["id"]
        assert handle.startswith(execution_id + ".")
        assert first.execution_file(handle, 0) == b"ALICE,123"
        for reader, asked in ((second, handle), (first, execution_id),
                              (first, execution_id + ".0" * 16), (first, handle[:-1] + ("1" if handle.endswith("0") else "0"))):
            with pytest.raises(NotFoundError, match="made through this server"):
                reader.execution_file(asked, 0)
        assert [run["id"] for run in first.list_executions(owner="client-a")] == [execution_id]
        assert first.list_executions(owner="client-b") == []
        assert first.list_executions(owner=None) == []
        first.close()
        second.close()
