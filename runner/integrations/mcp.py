"""runner as a Model Context Protocol server (`pip install runner-sandbox[mcp]`; `runner mcp`).

Built on the official `mcp` SDK (`MCPServer`). Any MCP client (a desktop assistant, an IDE,
an agent SDK) gets these tools:

- `run_python(code, timeout_s, memory_mb, packages, session_id, files)`: run a block; with a
  `session_id`, in that session (state carries); `files` are in its directory when it
  starts, and the files it saves come back as content (runner/integrations/mcp_files.py);
- `open_session(timeout_s, memory_mb, packages, budget_s)` -> `{"session_id"}`,
  `close_session(session_id)` and `list_sessions()`: a session's id is an unguessable
  handle only its client gets; it closes when the client's connection ends (where the
  protocol has one) or after `--session-idle` seconds without a block (mcp_sessions.py);
- `list_functions()` and `call_function(name, arguments)`: the functions of the set the
  server was started with (`--functions FILE`), arguments validated before anything runs.

Every result is runner's `ExecutionResult` as JSON (`status`, `stdout`, `stderr`, `error`,
`exit_code`, `return_value`, `limits`, ... : what `runner exec --json` prints), whatever the
code did; a request the server cannot carry out (an unknown session, limits out of range,
limits above the server's own: the operator's `--timeout` and `--memory` are ceilings a
client may lower, never raise) is an MCP tool error that says why. Resources:
`runner://executions/{handle}` (one run in full, as `runner logs show --json` prints it,
files without their bytes) and `runner://executions/{handle}/files/{position}` (the bytes
of a file it made), where the handle, given only in the run's reply (its `uri`), is the
execution's id sealed by this server (an HMAC under a key made at start): a client reads
what its own runs made, never another client's, and ids (which sort, and so can be
guessed from one another) open nothing. `list_executions()` lists the runs of the calling
connection (where the protocol has one). Every run is in the log with source `mcp` and
`{"integration": "mcp", "mcp_tool": ...}` in its meta.

Transports: stdio (what desktop assistants start), or streamable HTTP (`--http`) behind the
log viewer's guard: on loopback, only requests that name a loopback host (no DNS
rebinding); on any other address, a token made at start, shown once, required on every
request (`Authorization: Bearer TOKEN`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import inspect
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
import anyio.to_thread
from jsonschema import Draft202012Validator
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import Field

from .. import __version__
from ..cancellation import Cancellation
from ..errors import ConfigurationError, NotFoundError, RunnerError
from ..functions import FunctionSet
from ..ids import new_id
from ..logs import LogStore
from ..logs.execution_files import OUT, file_row
from ..sandbox import Sandbox
from ..terminal import sanitize_for_terminal
from ..types import ExecutionResult, Limits
from .common import integration_meta
from .mcp_files import EXECUTION_URI, FILE_URI, FileArgument, given_files, reply
from .mcp_sessions import DEFAULT_IDLE_S, MAX_SESSIONS, OwnedSessions

__all__ = ["RunnerMCP", "create_server", "serve_http", "serve_stdio"]

INTEGRATION = "mcp"
T = TypeVar("T")
_CLOSE_WAIT_S = 10.0  # how long the server's end waits for cancelled runs to be logged
_OWNER_KEY = "runner_mcp_owner"
RECENT = 20  # executions list_executions shows
_REMEMBERED_OWNERS = 1024  # connections whose runs are remembered for list_executions
HTTP_PATH = "/mcp"

_FILES = ("files for the run's directory, there before the code starts: "
          "[{'name': 'data.csv', 'text': '...'}] or {'name', 'base64'}")
_INSTRUCTIONS = """\
Runs Python in runner's sandbox (restricted interpreter or Docker), with hard limits; nothing \
reaches the host. Use run_python for one-off code; open_session and run_python with its \
session_id when state should carry from block to block (close it when done). print() what \
you need: results carry stdout, stderr and the error. list_functions / call_function use the \
server's function set. Every run is logged (runner://executions)."""


class RunnerMCP:
    """The server's state: the sandbox, its open sessions, the function set."""

    def __init__(self, sandbox: Sandbox, functions: FunctionSet | None = None, *,
                 max_sessions: int = MAX_SESSIONS, session_idle_s: float = DEFAULT_IDLE_S) -> None:
        self.sandbox = sandbox
        self.functions = functions if functions is not None else FunctionSet("mcp", log_store=False)
        self.sessions = OwnedSessions(max_sessions=max_sessions, idle_s=session_idle_s)
        self._lock = threading.Lock()
        self._inflight: dict[Cancellation, threading.Event] = {}  # runs a request waits for
        self._seal_key = secrets.token_bytes(32)
        self.sole_owner: str | None = None  # the one client there is (stdio), if so
        self._made: OrderedDict[str, deque[str]] = OrderedDict()  # owner -> execution ids

    # -- the tools -------------------------------------------------------------------------------

    def run_python(self, code: str, timeout_s: float | None = None, memory_mb: int | None = None,
                   packages: list[str] | None = None, session_id: str | None = None,
                   files: list[FileArgument] | None = None, *,
                   cancel: Cancellation | None = None, owner: str | None = None) -> CallToolResult:
        meta = integration_meta(INTEGRATION, {"mcp_tool": "run_python"})
        given = given_files(files)
        if session_id is None:
            limits = self._limits(self.sandbox.limits, timeout_s, memory_mb)
            return self._reply(self.sandbox.run(code, limits=limits, packages=packages,
                                                meta=meta, files=given, cancel=cancel), owner)
        session = self.sessions.use(session_id)
        try:
            if packages and tuple(packages) != session.packages:
                raise ConfigurationError(f"session {session_id} was opened with packages "
                                         f"{list(session.packages)}; a block cannot change them",
                                         fix="open another session with those packages")
            limits = self._limits(session.limits, timeout_s, memory_mb)
            result = session.run(code, limits=limits, meta=meta, files=given, cancel=cancel)
        finally:
            self.sessions.done(session_id)
        return self._reply(result, owner, {"session_id": session_id})

    def open_session(self, timeout_s: float | None = None, memory_mb: int | None = None,
                     packages: list[str] | None = None, budget_s: float | None = None, *,
                     owner: str | None = None) -> dict[str, Any]:
        limits = self._limits(self.sandbox.limits, timeout_s, memory_mb)
        session = self.sandbox.session(limits=limits, packages=packages, budget_s=budget_s)
        session_id = self.sessions.add(owner, session)
        return {"session_id": session_id, "limits": limits.model_dump(), "packages": list(session.packages),
                "budget_s": budget_s, "closes_when_idle_for_s": self.sessions.idle_s}

    def close_session(self, session_id: str) -> dict[str, Any]:
        session = self.sessions.close(session_id)
        return {"session_id": session_id, "closed": True, "blocks": session.blocks}

    def list_sessions(self, *, owner: str | None = None) -> list[dict[str, Any]]:
        return self.sessions.listed(owner)

    def list_functions(self) -> list[dict[str, Any]]:
        return [{"name": spec.name, "description": spec.description, "parameters": spec.parameters,
                 "version": self.functions.version(spec.name)} for spec in self.functions]

    def call_function(self, name: str, arguments: dict[str, Any] | None = None,
                      files: list[FileArgument] | None = None, *,
                      owner: str | None = None) -> CallToolResult:
        result = self.sandbox.call(self.functions, name, arguments or {}, files=given_files(files),
                                   meta=integration_meta(INTEGRATION, {"mcp_tool": "call_function"}))
        return self._reply(result, owner)

    # -- the resources -----------------------------------------------------------------------------

    def list_executions(self, *, owner: str | None = None) -> list[dict[str, Any]]:
        """The newest runs made over the calling connection (none for a client without
        one: its replies carry each run's uri)."""
        with self._lock:
            ids = list(self._made.get(owner, ())) if owner is not None else []
        store = self._store()
        records = []
        for execution_id in reversed(ids):
            with contextlib.suppress(NotFoundError):  # pruned from the log meanwhile
                records.append(store.get_execution(execution_id))
        return [{"id": r.id, "started_at": r.result.started_at.isoformat(), "status": r.result.status,
                 "tool": r.meta.get("mcp_tool"), "session": r.meta.get("session"),
                 "function": r.meta.get("function"), "duration_ms": r.result.duration_ms,
                 "code": r.request.code[:200],
                 "uri": EXECUTION_URI.format(execution=self.handle(r.id))}
                for r in records]

    def handle(self, execution_id: str) -> str:
        """The name of a run in this server's resource URIs: its id and this server's seal
        on it, so only a client given the reply can name it."""
        seal = hmac.new(self._seal_key, execution_id.encode(), hashlib.sha256).hexdigest()[:32]
        return f"{execution_id}.{seal}"

    def execution(self, handle: str) -> dict[str, Any]:
        execution_id = self._unsealed(handle)
        missing = NotFoundError(f"no execution {execution_id[:80]!r} made through this server",
                                fix="read the uri a run's reply gives")
        try:
            record = self._store().get_execution(execution_id)
        except NotFoundError:  # its message names the log's file: no host path for a client
            raise missing from None
        if record.source != INTEGRATION:  # the rest of the log is not this server's to show
            raise missing
        shown = record.model_dump(mode="json")
        for kind in ("request", "result"):  # the bytes are read one file at a time
            for made in shown[kind].get("files", []):
                made.pop("data", None)
        return shown

    def execution_file(self, handle: str, position: int) -> bytes:
        """The bytes of a file a run made through this server, from the log."""
        self.execution(handle)  # one of this server's runs, or NotFoundError
        execution_id = self._unsealed(handle)
        found = self._store().read(lambda conn: file_row(conn, execution_id, OUT, position))
        if found is None:
            raise NotFoundError(f"execution {execution_id} made no file {position}",
                                fix="the result's files list each file's uri")
        if found["data"] is None:
            raise NotFoundError(f"the log recorded file {found['name']!r} without its bytes "
                                "(its cap for files, RUNNER_LOG_FILES_MB, was reached)",
                                fix="raise RUNNER_LOG_FILES_MB, or prune the log")
        data: bytes = found["data"]
        return data

    # -- the server's side ------------------------------------------------------------------------

    def _reply(self, result: ExecutionResult, owner: str | None,
               extra: dict[str, Any] | None = None) -> CallToolResult:
        if owner is not None:
            with self._lock:
                made = self._made.pop(owner, None) or deque(maxlen=RECENT)
                made.append(result.id)
                self._made[owner] = made  # the newest owner last; the oldest forgotten first
                while len(self._made) > _REMEMBERED_OWNERS:
                    self._made.popitem(last=False)
        return reply(result, extra, handle=self.handle(result.id))

    def _unsealed(self, handle: str) -> str:
        """The execution id a handle names, if this server sealed it; else NotFoundError
        (one message whatever is wrong: a client learns nothing from it)."""
        execution_id, _, _ = handle.partition(".")
        if not hmac.compare_digest(self.handle(execution_id), handle):
            raise NotFoundError(f"no execution {execution_id[:80]!r} made through this server",
                                fix="read the uri a run's reply gives")
        return execution_id

    def _limits(self, base: Limits, timeout_s: float | None, memory_mb: int | None) -> Limits:
        """`base` with what a call asked for: lower limits are the client's to choose, the
        server's own (its operator's --timeout and --memory) are the ceiling."""
        ceiling = self.sandbox.limits
        for name, asked, most in (("timeout_s", timeout_s, ceiling.timeout_s),
                                  ("memory_mb", memory_mb, ceiling.memory_mb)):
            if asked is not None and asked > most:
                raise ConfigurationError(
                    f"{name}={asked:g} is above this server's limit of {most:g}",
                    fix=f"ask for {most:g} or less, or leave {name} out for the server's limit")
        try:
            return base.with_overrides(timeout_s=timeout_s, memory_mb=memory_mb)
        except ConfigurationError as exc:  # its fix is Python; a client sets tool arguments
            raise ConfigurationError(exc.message, fix=(
                f"give timeout_s above 0 and at most {ceiling.timeout_s:g}, memory_mb at most "
                f"{ceiling.memory_mb}, or leave them out for the server's limits")) from None

    def _store(self) -> LogStore:
        store = self.sandbox.log_store
        if store is None:
            raise ConfigurationError("this server keeps no log", fix="start it with a log store")
        return store

    async def cancellable(self, work: Callable[[Cancellation], T]) -> T:
        """`work` in a worker thread, stopped when the request is cancelled (the client
        cancelled it, or went away): its run is killed then and logged as cancelled."""
        cancel = Cancellation()
        done = threading.Event()
        with self._lock:
            self._inflight[cancel] = done

        def run() -> T:
            try:
                return work(cancel)
            finally:
                done.set()

        try:
            return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            cancel.cancel()
            raise
        finally:
            if done.is_set():
                with self._lock:
                    self._inflight.pop(cancel, None)

    def close(self) -> None:
        """Stop the runs in progress (each is logged as cancelled), then the sessions."""
        with self._lock:
            inflight = list(self._inflight.items())
        for cancel, _ in inflight:
            cancel.cancel()
        deadline = time.monotonic() + _CLOSE_WAIT_S
        for _, done in inflight:
            done.wait(max(0.0, deadline - time.monotonic()))
        self.sessions.close_all()


def create_server(state: RunnerMCP) -> MCPServer[Any]:
    """The MCP server over `state`: its tools and resources (see the module docstring)."""
    server: MCPServer[Any] = _CheckedServer("runner", version=__version__, instructions=_INSTRUCTIONS)

    def tool(function: Callable[..., Any], description: str) -> None:
        server.add_tool(_tool_errors(function), name=function.__name__, description=description)

    ceiling = state.sandbox.limits
    timeout_field = Field(description=f"wall-clock limit, seconds: at most {ceiling.timeout_s:g}, "
                                      "the server's limit and its default",
                          json_schema_extra={"maximum": ceiling.timeout_s})
    memory_field = Field(description=f"memory limit, MB: at most {ceiling.memory_mb}, the "
                                     "server's limit and its default",
                         json_schema_extra={"maximum": ceiling.memory_mb})

    async def run_python(code: Annotated[str, Field(description="Python source to run")],
                   timeout_s: float | None = None, memory_mb: int | None = None,
                   packages: Annotated[list[str] | None, Field(description="requirements, e.g. ['sympy']")] = None,
                   session_id: Annotated[str | None, Field(description="run in this session")] = None,
                   files: Annotated[list[FileArgument] | None, Field(description=_FILES)] = None,
                   ctx: Context | None = None) -> Annotated[CallToolResult, dict[str, Any]]:
        owner = _owner(state, ctx)
        return await state.cancellable(lambda cancel: state.run_python(
            code, timeout_s, memory_mb, packages, session_id, files, cancel=cancel, owner=owner))

    def open_session(timeout_s: float | None = None, memory_mb: int | None = None,
                     packages: list[str] | None = None, budget_s: float | None = None,
                     ctx: Context | None = None) -> dict[str, Any]:
        return state.open_session(timeout_s, memory_mb, packages, budget_s, owner=_owner(state, ctx))

    # The ceilings are this server's, known only now: the annotations are set as objects
    # (this module's string annotations cannot name a local).
    for limited in (run_python, open_session):
        limited.__annotations__.update(timeout_s=Annotated[float | None, timeout_field],
                                       memory_mb=Annotated[int | None, memory_field])

    def close_session(session_id: str) -> dict[str, Any]:
        return state.close_session(session_id)

    def list_sessions(ctx: Context | None = None) -> list[dict[str, Any]]:
        return state.list_sessions(owner=_owner(state, ctx))

    def list_functions() -> list[dict[str, Any]]:
        return state.list_functions()

    def call_function(name: str, arguments: dict[str, Any] | None = None,
                      files: Annotated[list[FileArgument] | None, Field(description=_FILES)] = None,
                      ctx: Context | None = None) -> Annotated[CallToolResult, dict[str, Any]]:
        return state.call_function(name, arguments, files, owner=_owner(state, ctx))

    def list_executions(ctx: Context | None = None) -> list[dict[str, Any]]:
        return state.list_executions(owner=_owner(state, ctx))

    tool(run_python, "Run Python in the sandbox. Returns the result: status (ok, error, timeout, "
                     "memory_limit, denied, ...), stdout, stderr, error, exit_code, duration_ms, "
                     "and the files the code saved in its directory (images as images; "
                     "plt.show() saves each figure).")
    tool(open_session, "Open a session: blocks run with its session_id share variables. Returns "
                       "the session_id.")
    tool(close_session, "Close a session opened with open_session.")
    tool(list_sessions, "The sessions this connection opened (none for a client that makes each "
                        "request on its own: keep the session_id open_session gives): "
                        "session_id, blocks run, packages, limits, seconds idle. A session "
                        "closes when its connection ends or after "
                        f"{state.sessions.idle_s:g} s without a block.")
    tool(list_functions, "The functions call_function can call: name, description, parameters "
                         "(JSON Schema).")
    tool(call_function, "Call a function of the server's set with arguments (an object matching "
                        "its parameters). Returns the result; its value is return_value.")
    tool(list_executions, f"The {RECENT} newest runs this connection made (none for a client "
                          "that makes each request on its own: each reply gives its run's "
                          "uri): id, status, tool, code, and the uri to read it in full.")

    @server.resource(FILE_URI, name="execution file", mime_type="application/octet-stream",
                     description="A file a run made through this server, as the log kept it "
                                 "(its uri is in the run's reply).")
    def one_file(execution: str, position: str) -> bytes:
        try:
            return state.execution_file(execution, int(position) if position.isdigit() else -1)
        except RunnerError as exc:
            raise ResourceError(f"[{exc.code}] {exc}") from None

    @server.resource(EXECUTION_URI, name="execution", mime_type="application/json",
                     description="One run made through this server: request, result, meta "
                                 "(its uri is in the run's reply).")
    def one(execution: str) -> dict[str, Any]:
        try:
            return state.execution(execution)
        except RunnerError as exc:
            raise ResourceError(f"[{exc.code}] {exc}") from None

    return server


class _CheckedServer(MCPServer[Any]):
    """The SDK's server, whose tools refuse arguments they do not take (the SDK ignores
    them) and say what is wrong with an argument in one line a model can act on (the SDK
    answers with pydantic's report and a link); each tool's schema says so too."""

    async def list_tools(self) -> list[Any]:
        return [tool.model_copy(update={"input_schema": {**tool.input_schema,
                                                         "additionalProperties": False}})
                for tool in await super().list_tools()]

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context | None = None) -> Any:
        schema = next((tool.input_schema for tool in await self.list_tools() if tool.name == name),
                      None)
        problem = argument_problem(name, arguments, schema) if schema is not None else None
        if problem is not None:
            raise ToolError(problem)
        return await super().call_tool(name, arguments, context)


def argument_problem(tool: str, arguments: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """What is wrong with a call's arguments, in one line, or None."""
    taken = list((schema.get("properties") or {}).keys())
    unknown = [str(name)[:40] for name in arguments if name not in taken]
    if unknown:
        return (f"{tool} takes no argument {', '.join(map(repr, unknown))}; it takes: "
                f"{', '.join(taken) or 'none'}")
    errors = sorted(Draft202012Validator(schema).iter_errors(arguments),
                    key=lambda error: list(map(str, error.absolute_path)))
    if not errors:
        return None
    error = errors[0]
    where = ".".join(str(part) for part in error.absolute_path) or "arguments"
    return sanitize_for_terminal(f"{tool}: argument {where}: {error.message}"[:300])


def _owner(state: RunnerMCP, ctx: Context | None) -> str | None:
    """The owner of what this request opens: its client connection when the protocol
    keeps one (a handshake), whose teardown then closes the connection's sessions
    (registered with the first request that asks); None for a request on its own. Over
    stdio there is one client, whose connection is the process: it owns everything."""
    if state.sole_owner is not None:
        return state.sole_owner
    # The SDK's request context reaches its connection only through the session's private
    # attribute (mcp 2.3); a test opens sessions over a handshake to keep this honest.
    connection = getattr(getattr(ctx, "session", None), "_connection", None) if ctx else None
    scratch = getattr(connection, "state", None)
    teardown = getattr(connection, "exit_stack", None)
    if not isinstance(scratch, dict) or teardown is None \
            or getattr(connection, "protocol_version", None) not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None
    owner = scratch.get(_OWNER_KEY)
    if not isinstance(owner, str):
        owner = scratch[_OWNER_KEY] = new_id()
        # Closing a session stops its worker: off the event loop, which runs the teardown.
        teardown.callback(lambda: threading.Thread(target=state.sessions.close_owner, args=(owner,),
                                                   name="runner-mcp-client-gone", daemon=True).start())
    return owner


def _tool_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """A request the server cannot carry out (a RunnerError: an unknown session, limits out
    of range) becomes an MCP tool error with runner's message and fix, for the client to
    read; what the code did is never an error here, it is the result."""

    if inspect.iscoroutinefunction(function):
        @functools.wraps(function)
        async def waited(*args: Any, **kwargs: Any) -> Any:
            try:
                return await function(*args, **kwargs)
            except RunnerError as exc:
                raise ToolError(f"[{exc.code}] {exc}") from None

        return waited

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except RunnerError as exc:
            raise ToolError(f"[{exc.code}] {exc}") from None

    return call


def serve_stdio(state: RunnerMCP) -> None:
    """Serve on standard input and output until the client closes them: one client, which
    owns every session and run (whatever its protocol says of connections)."""
    state.sole_owner = "stdio"
    create_server(state).run("stdio")


def serve_http(state: RunnerMCP, *, host: str = "127.0.0.1", port: int = 8000,
               announce: Callable[[str], None] = print) -> None:
    """Serve streamable HTTP at http://HOST:PORT/mcp until interrupted, behind the viewer's
    guard (loopback host names only; off loopback, a token on every request)."""
    import uvicorn

    from ..logs.viewer import bind, is_loopback
    from ..logs.viewer.app import Guard

    token = None if is_loopback(host) else secrets.token_urlsafe(24)
    app = create_server(state).streamable_http_app(
        streamable_http_path=HTTP_PATH, host=host,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    sock = bind(host, port)
    shown_host = f"[{host.strip('[]')}]" if ":" in host else host
    url = f"http://{shown_host}:{sock.getsockname()[1]}{HTTP_PATH}"
    announce(f"runner mcp: {url} (streamable HTTP; Ctrl-C stops it)")
    if token is not None:
        announce(f"runner mcp: token {token}")
        announce(f"it listens on {host}, not loopback: every request needs the header "
                 "'Authorization: Bearer <token>' (shown once; a new one is made each start). "
                 "Anyone who can reach this address and has the token can run code in the sandbox.")
    config = uvicorn.Config(Guard(app, token=token), log_level="warning", server_header=False,
                            date_header=False, proxy_headers=False, access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
