"""What each framework integration adds per code block, over the same block run through a
`Sandbox` session directly.

Target (issue 22): at most 1 ms per block. The baseline, measured in the same run, is the
same block run with `Session.run` on the same warm restricted sandbox (both log every run
to the same store). Each path runs its blocks in one session of its own (state carries,
as in a conversation). The two run in pairs, one block each, which goes first alternating,
so drift of a shared machine hits both alike; the added time is the median of the pairs'
differences, and the ratio that of the medians. Paths: AG2's executor
(`execute_code_blocks`), AutoGen's (its async `execute_code_blocks`, from a running event
loop, through a worker thread), smolagents' (`executor(code)`), and the MCP server's
`run_python` tool in a session (the tool's own work; the transport is the client's). The
MCP protocol's in-process round trip (the SDK's client and server, JSON-RPC included) is
printed for information.

Run: `make bench` (or `.venv/bin/python bench/bench_integrations.py [--pairs N]`).
Exits non-zero if a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from autogen.coding import CodeBlock as AG2Block
from autogen_core import CancellationToken
from autogen_core.code_executor import CodeBlock as AutoGenBlock
from mcp import Client

from runner import Limits, Sandbox
from runner.integrations.ag2 import RunnerCodeExecutor as AG2Executor
from runner.integrations.autogen import RunnerCodeExecutor as AutoGenExecutor
from runner.integrations.mcp import RunnerMCP, create_server
from runner.integrations.smolagents import RunnerPythonExecutor
from runner.logs import LogStore

TARGET_MS = 1.0
CODE = "total = 6 * 7\nprint(total)\n"


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


async def timed_async(action: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await action()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=300, help="block pairs per integration")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as home, LogStore(Path(home) / "log.db") as store, \
            Sandbox(backend="restricted", log_store=store, limits=Limits(timeout_s=10)) as sandbox:
        session = sandbox.session()
        direct = functools.partial(session.run, CODE)
        ag2 = AG2Executor(sandbox)
        autogen = AutoGenExecutor(sandbox)
        smol = RunnerPythonExecutor(sandbox)
        mcp_state = RunnerMCP(sandbox)
        mcp_session = mcp_state.open_session()["session_id"]
        token = CancellationToken()
        paths: dict[str, Callable[[], object]] = {
            "ag2 executor": lambda: ag2.execute_code_blocks([AG2Block(code=CODE, language="python")]),
            "smolagents executor": lambda: smol(CODE),
            "mcp run_python (tool)": lambda: mcp_state.run_python(CODE, session_id=mcp_session),
        }
        rows = {name: _pairs(direct, action, args.pairs) for name, action in paths.items()}

        async def autogen_pairs() -> tuple[list[float], list[float]]:
            ones, others = [], []
            block = [AutoGenBlock(code=CODE, language="python")]
            for index in range(args.pairs + 5):
                first_direct = index % 2 == 0
                if first_direct:
                    base = timed(direct)
                value = await timed_async(lambda: autogen.execute_code_blocks(block, token))
                if not first_direct:
                    base = timed(direct)
                if index >= 5:  # the first pairs warm the path
                    ones.append(base)
                    others.append(value)
            return ones, others

        rows["autogen executor (in a running loop)"] = asyncio.run(autogen_pairs())
        protocol = _mcp_protocol_round_trip(mcp_state, direct, args.pairs // 3)
        for closing in (ag2.close, smol.cleanup, mcp_state.close, session.close):
            closing()

    missed = 0
    print(f"per block: {args.pairs} pairs per integration, each pair the same block through "
          "Session.run and through the integration, in alternating order (restricted tier, "
          "every run logged)")
    print(f"{'path':<38} {'direct':>8} {'through it':>11} {'added':>9} {'ratio':>6}  target")
    for name, (bases, values) in [*rows.items(), ("mcp via the SDK's client (in process)", protocol)]:
        base, value = statistics.median(bases), statistics.median(values)
        added = statistics.median(v - b for b, v in zip(bases, values, strict=True)) * 1000
        if name.startswith("mcp via"):
            verdict = "information: JSON-RPC round trip of the protocol included"
        else:
            ok = added <= TARGET_MS
            missed += not ok
            verdict = f"<= {TARGET_MS:g} ms added {'OK' if ok else 'MISSED'}"
        print(f"{name:<38} {base * 1000:>6.2f}ms {value * 1000:>9.2f}ms {added:>+7.3f}ms "
              f"{value / base:>6.3f}  {verdict}")
    return 1 if missed else 0


def _pairs(direct: Callable[[], object], action: Callable[[], object], pairs: int
           ) -> tuple[list[float], list[float]]:
    """(direct times, integration times), pair by pair, which one goes first alternating."""
    bases, values = [], []
    for index in range(pairs + 5):
        if index % 2 == 0:
            base, value = timed(direct), timed(action)
        else:
            value, base = timed(action), timed(direct)
        if index >= 5:  # the first pairs warm the path
            bases.append(base)
            values.append(value)
    return bases, values


def _mcp_protocol_round_trip(state: RunnerMCP, direct: Callable[[], object], pairs: int
                             ) -> tuple[list[float], list[float]]:
    server = create_server(state)

    async def run() -> tuple[list[float], list[float]]:
        async with Client(server) as client:
            session_id = (await client.call_tool("open_session", {})).structured_content["session_id"]
            arguments = {"code": CODE, "session_id": session_id}
            bases, values = [], []
            for index in range(pairs + 5):
                base = timed(direct)
                value = await timed_async(lambda: client.call_tool("run_python", arguments))
                if index >= 5:
                    bases.append(base)
                    values.append(value)
            await client.call_tool("close_session", {"session_id": session_id})
            return bases, values

    return anyio.run(run)


if __name__ == "__main__":
    sys.exit(main())
