"""What the framework integration tests share: hostile blocks, and the checks that a run is
in the log under its integration's name and opens in the viewer."""

from __future__ import annotations

from starlette.testclient import TestClient

from runner.logs import LogStore
from runner.logs.viewer import create_app

# Blocks that go through every integration's door: one that tries to leave the sandbox,
# one that floods its output, one that never ends. Each must come back as an ordinary
# result, and the sandbox must run the next block normally.
ESCAPE = "import os\nos.system('echo escaped > /tmp/runner-integration-escape')\n"
ESCAPE_CLASSIC = "print(().__class__.__base__.__subclasses__())\n"
FLOOD = "print('x' * 3_000_000)\n"
HANG = "while True:\n    pass\n"
HOSTILE = {"escape": ESCAPE, "escape_classic": ESCAPE_CLASSIC, "flood": FLOOD, "hang": HANG}
# What a terminal must never receive raw: a window retitle and a clipboard write.
TERMINAL_ATTACK = "print('\\x1b]0;pwned\\x07\\x1b]52;c;ZXZpbA==\\x07done')\n"


def logged(store: LogStore, execution_id: str, integration: str) -> None:
    """The execution is in the log, its meta and its source name the integration (also in a
    sandbox the user made, whose source was left as it is), and the viewer shows it."""
    record = store.get_execution(execution_id)
    assert record.meta.get("integration") == integration, record.meta
    assert record.source == integration, record.source
    assert execution_id in {r.id for r in store.list_executions(source=integration, limit=None)}
    client = TestClient(create_app(store.path), base_url="http://127.0.0.1")
    page = client.get(f"/executions/{execution_id}")
    assert page.status_code == 200
    assert execution_id in page.text and integration in page.text
