"""Searching the log, from the command line and the viewer: a search with no letters or
digits says so (it used to match everything), and a part of a word is found in any script,
CJK text without spaces included (the trigram indexes of migration 9, also for a log made
before it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient
from test_logstore import make_pair

from runner.agent import Agent
from runner.cli import main
from runner.logs import LogStore
from runner.logs.agent import AgentLog
from runner.logs.migrations import MIGRATIONS
from runner.logs.viewer import create_app
from runner.testing import ScriptedChat

CJK = "我们的猫很可爱"


def logs(home: Path, *args: str):
    return CliRunner().invoke(main, ["logs", *args], env={"RUNNER_HOME": str(home)})


def listed(home: Path, query: str) -> list[str]:
    result = logs(home, "list", "-q", query, "--json")
    assert result.exit_code == 0, result.output
    return [record["result"]["stdout"] for record in json.loads(result.stdout)]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    with LogStore(tmp_path / "runner.db") as store:
        for text in (f"{CJK}\n", "ZeroDivisionError: division by zero\n", "other\n"):
            request, result = make_pair()
            store.record_execution(request, result.model_copy(update={"stdout": text}))
        Agent(ScriptedChat([f"猫が好きです so \\boxed{{1}}"]), protocol="code",
              log=AgentLog(store)).run("cats?")
    return tmp_path


@pytest.mark.parametrize("query", ["*", '"', "😀", "** ( )"])
def test_a_search_with_no_letters_or_digits_says_so(home: Path, query: str):
    result = logs(home, "list", "-q", query)
    assert result.exit_code == 2 and "has no letters or digits to look for" in result.output
    viewer = TestClient(create_app(home / "runner.db"), base_url="http://127.0.0.1")
    for page in ("/executions", "/runs"):
        response = viewer.get(page, params={"q": query})
        assert response.status_code == 200
        assert "has no letters or digits to look for" in response.text
        assert "/executions/01" not in response.text and "/runs/01" not in response.text


def test_a_part_of_a_word_is_found_in_any_script(home: Path):
    assert listed(home, "猫很") == [f"{CJK}\n"]  # shorter than a trigram: read as text
    assert listed(home, "的猫很可") == [f"{CJK}\n"]  # from the index
    assert listed(home, "猫") == [f"{CJK}\n"]
    assert listed(home, "Division") == ["ZeroDivisionError: division by zero\n"]
    assert listed(home, '"by zero"') == ["ZeroDivisionError: division by zero\n"]
    assert listed(home, "zero nothing-like-this") == []
    viewer = TestClient(create_app(home / "runner.db"), base_url="http://127.0.0.1")
    assert "<mark>的猫很可</mark>" in viewer.get("/executions", params={"q": "的猫很可"}).text
    assert "/runs/" in viewer.get("/runs", params={"q": "好きで"}).text
    assert "/runs/" in viewer.get("/runs", params={"q": "猫"}).text
    assert "/runs/" not in viewer.get("/runs", params={"q": "犬"}).text


def test_a_log_made_before_the_trigram_index_is_searched_by_parts_too(tmp_path: Path):
    path = tmp_path / "runner.db"
    with LogStore(path, migrations=MIGRATIONS[:8]) as old:
        request, result = make_pair()
        old.record_execution(request, result.model_copy(update={"stdout": CJK}))
    assert listed(tmp_path, "猫很可") == [CJK]  # migrated on open, the index rebuilt
