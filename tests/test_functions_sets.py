"""FunctionSet: order, versions, save/load round trip, and every change in the log with
its author and a diff of the code."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from runner import FunctionSet, FunctionSpec, tool
from runner.errors import FunctionExistsError, FunctionNotFoundError, FunctionSpecError, LogStoreError
from runner.logs import Author, FunctionVersionLog, LogStore

LEARNED = Path(__file__).parents[1] / "examples/learned_functions.json"


def spec(name: str, body: str = "return 1", **extra) -> FunctionSpec:
    return FunctionSpec.from_dict({"name": name, "description": f"{name} does it.", "arguments": {},
                                   "code": f"def {name}():\n    {body}\n", **extra})


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "log.db"


def test_a_set_is_ordered_and_indexed_by_name(db):
    functions = FunctionSet("tools", [spec("b"), spec("a", packages="sympy"), spec("c", packages="sympy math")],
                            log_store=db)
    assert functions.names == ["b", "a", "c"]
    assert [s.name for s in functions] == ["b", "a", "c"]
    assert len(functions) == 3 and "a" in functions and "z" not in functions
    assert functions["a"].packages == ("sympy",)
    assert functions.packages == ["sympy", "math"]
    assert functions.get("z") is None
    with pytest.raises(FunctionNotFoundError, match="b, a, c"):
        functions["z"]  # noqa: B018
    assert [t["function"]["name"] for t in functions.to_openai_tools()] == ["b", "a", "c"]


def test_duplicate_names_are_refused(db):
    with pytest.raises(FunctionExistsError):
        FunctionSet("tools", [spec("a"), spec("a", "return 2")], log_store=db)
    functions = FunctionSet("tools", [spec("a")], log_store=db)
    with pytest.raises(FunctionExistsError, match="replace"):
        functions.add(spec("a", "return 2"))


def test_versions_count_changes_and_never_repeat(db):
    functions = FunctionSet("tools", log_store=db)
    assert functions.add(spec("f")) == 1
    assert functions.replace(spec("f", "return 2")) == 2
    assert functions.replace(spec("f", "return 2")) == 2  # identical: no new version
    assert functions.put(spec("f", "return 3")) == 3
    assert functions.put(spec("g")) == 1
    functions.remove("f")
    assert "f" not in functions
    assert functions.add(spec("f", "return 4")) == 4  # back after removal: the count goes on
    assert functions.version("f") == 4 and functions.version("g") == 1
    with pytest.raises(FunctionNotFoundError):
        functions.replace(spec("nope"))
    with pytest.raises(FunctionNotFoundError):
        functions.remove("nope")


def test_every_change_is_logged_with_author_and_code_diff(db):
    functions = FunctionSet("tools", log_store=db)
    functions.add(spec("f", "return 1"), by="alice", note="first try")
    functions.replace(spec("f", "return 2"), by=Author.optimizer("run-42"))
    functions.remove("f", by=Author.person("bob"))

    history = functions.history("f")
    assert [(r.action, r.version, r.author.kind, r.author.name, r.note) for r in history] == [
        ("add", 1, "person", "alice", "first try"),
        ("replace", 2, "optimizer", "run-42", ""),
        ("remove", 2, "person", "bob", ""),
    ]
    assert history[0].code_diff == ("--- /dev/null\n+++ f v1\n@@ -0,0 +1,2 @@\n"
                                    "+def f():\n+    return 1\n")
    assert history[1].code_diff == ("--- f v1\n+++ f v2\n@@ -1,2 +1,2 @@\n def f():\n"
                                    "-    return 1\n+    return 2\n")
    assert history[2].code_diff.startswith("--- f v2\n+++ /dev/null\n")
    assert history[1].spec == spec("f", "return 2").to_dict()
    assert history[2].spec is None

    # the rows are in the log database, readable by any SQLite tool
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT set_name, function, version, action, author_kind, author "
                            "FROM function_versions ORDER BY id").fetchall()
    assert rows == [("tools", "f", 1, "add", "person", "alice"),
                    ("tools", "f", 2, "replace", "optimizer", "run-42"),
                    ("tools", "f", 2, "remove", "person", "bob")]


def test_the_default_author_is_the_current_user(db):
    import getpass

    functions = FunctionSet("tools", log_store=db)
    functions.add(spec("f"))
    (record,) = functions.history()
    assert record.author == Author(kind="person", name=getpass.getuser())


def test_constructing_and_loading_record_nothing(db, tmp_path):
    FunctionSet("tools", [spec("f")], log_store=db)
    path = tmp_path / "set.json"
    FunctionSet("tools", [spec("f")], log_store=False).save(path)
    FunctionSet.load(path, log_store=db)
    assert FunctionVersionLog(db).history() == []


def test_the_log_can_be_a_log_store_and_is_shared_with_executions(db):
    with LogStore(db) as store:
        functions = FunctionSet("tools", log_store=store)
        functions.add(spec("f"))
        assert [r.function for r in FunctionVersionLog(store).history("tools")] == ["f"]
        assert store.count_executions() == 0  # the executions table is untouched


def test_the_default_log_is_the_runner_database():
    from runner.paths import log_db_path

    functions = FunctionSet("default-log-test")
    functions.add(spec("f"))
    assert [r.action for r in FunctionVersionLog(log_db_path()).history("default-log-test")] == ["add"]


def test_a_change_that_cannot_be_logged_is_not_made(tmp_path):
    db = tmp_path / "old.db"
    LogStore(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE function_versions")
    functions = FunctionSet("tools", [spec("f")], log_store=db)
    with pytest.raises(LogStoreError, match="function history"):
        functions.replace(spec("f", "return 2"))
    assert functions["f"] == spec("f") and functions.version("f") == 1
    with pytest.raises(LogStoreError):
        functions.add(spec("g"))
    assert functions.names == ["f"]


def test_without_a_log_changes_still_count_versions():
    functions = FunctionSet("tools", log_store=False)
    functions.add(spec("f"))
    assert functions.replace(spec("f", "return 2")) == 2
    with pytest.raises(Exception, match="no history"):
        functions.history()


def test_save_and_load_round_trip(db, tmp_path):
    functions = FunctionSet.load(LEARNED, log_store=db)
    functions.replace(functions["loan_payment"].model_copy(update={"description": "Changed."}), by="me")
    path = tmp_path / "saved.json"
    functions.save(path)

    saved = json.loads(path.read_text())
    assert saved["name"] == "learned_functions"
    assert [(f["name"], f["version"]) for f in saved["functions"]] == [
        ("simplify_expression", 1), ("loan_payment", 2)]
    assert all(set(f) == {"name", "description", "parameters", "packages", "code", "version"}
               for f in saved["functions"])

    again = FunctionSet.load(path, log_store=db)
    assert again.name == "learned_functions"  # from the file, not the file name
    assert again.specs == functions.specs
    assert again.version("loan_payment") == 2
    again.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == path.read_text()  # canonical: stable
    assert again.replace(again["loan_payment"].model_copy(update={"description": "Again."})) == 3


def test_save_replaces_the_file_atomically(tmp_path):
    path = tmp_path / "set.json"
    path.write_text("old")
    FunctionSet("tools", [spec("f")], log_store=False).save(path)
    assert json.loads(path.read_text())["functions"][0]["name"] == "f"
    assert [p.name for p in tmp_path.iterdir()] == ["set.json"]  # no temporary file left


def test_tools_and_dicts_can_be_added(db):
    @tool
    def double(x: int) -> int:
        return 2 * x

    functions = FunctionSet("tools", [double], log_store=db)
    functions.add({"name": "g", "arguments": {}, "code": "def g():\n    return 1\n"})
    assert functions.names == ["double", "g"]
    assert functions["double"] == double.spec


@pytest.mark.parametrize(("content", "words"), [
    ("{not json", ["not valid JSON"]),
    ('{"functions": {}}', ["list"]),
    ('{"name": "x", "functions": [], "other": 1}', ["unknown", "other"]),
    ('[{"name": "f", "arguments": {}, "code": "def f(): pass", "version": 0}]', ["version"]),
    ('[{"name": "f", "arguments": {}, "code": ""}]', ["item 0", "code"]),
])
def test_bad_set_files_say_what_is_wrong(tmp_path, content, words):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(FunctionSpecError) as caught:
        FunctionSet.load(path, log_store=False)
    for word in words:
        assert word in str(caught.value), str(caught.value)


def test_a_missing_set_file(tmp_path):
    from runner.errors import NotFoundError

    with pytest.raises(NotFoundError):
        FunctionSet.load(tmp_path / "nope.json", log_store=False)
