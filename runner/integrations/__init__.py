"""runner inside the agent frameworks people already use: each a drop-in part of its framework.

- `runner.integrations.ag2` (`pip install runner-sandbox[ag2]`): a `CodeExecutor` for
  `code_execution_config={"executor": ...}`, a MathChat mixin for `MathUserProxyAgent`, a
  `function_map` from a `FunctionSet`, and an `AgentOptimizer` whose learned functions are
  checked, smoke-run and kept as versions of a `FunctionSet`;
- `runner.integrations.autogen` (`runner-sandbox[autogen]`): an AutoGen 0.7 `CodeExecutor`
  (async; sessions, restart, cancellation tokens);
- `runner.integrations.smolagents` (`runner-sandbox[smolagents]`): an executor for
  `CodeAgent(executor=...)`;
- `runner.integrations.mcp` (`runner-sandbox[mcp]`): a Model Context Protocol server (`runner mcp`).

Each maps its framework's interface onto `Sandbox`, sessions and functions, and adds
nothing the core owns: every run is an ordinary execution in the log store, whose meta
names the integration (`{"integration": "ag2", ...}`; a sandbox the integration opens
itself also logs it as the row's source). `common` holds what they share. Importing this
package imports no framework; each module needs only its own extra.
"""

from __future__ import annotations

__all__: list[str] = []
