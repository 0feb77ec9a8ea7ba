"""Training a math agent's functions (runner.math.train) with scripted models (fakes in-process
for the loop's own logic, `runner.testing.FunctionChat`; for the command line, served on
127.0.0.1 through the SDK), the real sandbox, checker and log: an added function turns failures into
successes and is kept, saved, reloaded and used by the next evaluation; a revision that
does worse is rolled back (and shown to the optimizer afterwards); early stop; TERMINATE;
resume after an interruption in a step and after SIGKILL in an evaluation; the CLI's JSON,
reports, history and usage errors.

The scripted agent answers right exactly when its system prompt (which lists the functions
it is given) says the word its scenario looks for; the scripted optimizer proposes the
actions of its scenario, in order."""

from __future__ import annotations

import functools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI

from runner import FunctionSet
from runner.agent import OpenAIChat
from runner.logs import LogStore
from runner.logs.evaluations import EvaluationLog
from runner.logs.functions import FunctionVersionLog
from runner.logs.trainings import TrainingLog
from runner.math import load_jsonl
from runner.math.evaluation import evaluate
from runner.math.training import resume_training
from runner.math.training import train as run_training
from runner.testing import FunctionChat

SAMPLE = Path(__file__).parent / "data" / "math_sample.jsonl"
OPTIMIZER_PROMPT = "You improve the list of functions"


def spec(name: str, description: str, body: str = "return x") -> dict:
    return {"name": name, "description": description,
            "arguments": {"x": {"type": "integer", "description": "A number."}},
            "packages": [], "code": f"def {name}(x):\n    {body}\n"}


SOLVER = spec("solve_it", "Solves it the right way.")


@pytest.fixture
def train(tmp_path: Path) -> Path:
    """The first six problems of the sample (all Algebra, levels 1-5)."""
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(SAMPLE.read_text().splitlines()[:6]) + "\n")
    return path


@pytest.fixture
def store(tmp_path: Path):
    with LogStore(tmp_path / "log.db") as opened:
        yield opened


class Models:
    """One scripted server for the agent and the optimizer. The agent answers right when
    `knows(system prompt)`; the optimizer replies with `actions`, in order (then TERMINATE)."""

    def __init__(self, train: Path, knows: Callable[[str], bool], actions: list[dict | str],
                 delay_s: float = 0.0) -> None:
        self.gold = {p.problem: p.answer for p in load_jsonl(train)}
        self.knows = knows
        self.actions = list(actions)
        self.delay_s = delay_s
        self.optimizer_requests: list[dict] = []
        self.agent_systems: list[str] = []
        self.lock = threading.Lock()
        self.server = FakeOpenAI(responder=self.respond)

    def respond(self, body: dict) -> str | dict:
        system = body["messages"][0]["content"]
        if system.startswith(OPTIMIZER_PROMPT):
            with self.lock:
                self.optimizer_requests.append(body)
                action = self.actions.pop(0) if self.actions else "TERMINATE"
            if isinstance(action, str):
                return action
            name, arguments = next(iter(action.items()))
            return {"tool_calls": [FakeOpenAI.call(name, arguments)]}
        with self.lock:
            self.agent_systems.append(system)
        task = body["messages"][1]["content"].rpartition("Problem:")[2].lstrip(" \n")
        if not any(m["role"] == "assistant" for m in body["messages"]):
            return {"content": "```python\nprint(1 + 1)\n```", "delay_s": self.delay_s}
        answer = self.gold[task] if self.knows(system) else "\\text{no idea}"
        return f"So the answer is $\\boxed{{{answer}}}$."

    def llm(self) -> OpenAIChat:
        return OpenAIChat("fake-model", base_url=self.server.url, api_key="k", backoff_s=0.001)

    @functools.cached_property
    def fake(self) -> FunctionChat:
        """The same script as a fake model in-process (one for the agent and the optimizer),
        for the tests of the training loop itself; the command line needs the server."""
        def answer(messages: list[dict], tools) -> str | dict:
            reply = self.respond({"messages": messages})
            if isinstance(reply, str):
                return reply
            calls = [{"name": call["function"]["name"], "arguments": call["function"]["arguments"]}
                     for call in reply.get("tool_calls", [])]
            return {"content": reply.get("content", ""), **({"tool_calls": calls} if calls else {})}

        return FunctionChat(answer, model="fake-model")

    def __enter__(self) -> Models:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()


def foreign_keys_hold(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        orphans = conn.execute(
            "SELECT COUNT(*) FROM training_actions a LEFT JOIN agent_runs r ON "
            "r.id = a.agent_run_id WHERE r.id IS NULL").fetchone()[0]
        assert orphans == 0


@pytest.mark.parametrize("backend", ["restricted", pytest.param("docker", marks=pytest.mark.docker)])
def test_an_added_function_turns_failures_into_successes_and_is_kept(train, store, tmp_path,
                                                                      backend):
    from conftest import backend_options

    out = tmp_path / "learned.json"
    actions = [{"add_function": {**SOLVER, "name": "solve"}},  # refused: the code says solve_it
               {"add_function": {**SOLVER, "packages": ['x; os_name=="posix"']}},  # refused
               {"add_function": SOLVER}, "TERMINATE", "TERMINATE"]
    with Models(train, lambda system: "solve_it" in system, actions) as models:
        result = run_training(train, llm=models.fake, optimizer_llm=models.fake, epochs=3, out=out, log_store=store,
                          concurrency=2, backend=backend, backend_options=backend_options(backend))
        requests = models.optimizer_requests
    data = result.to_json_dict()
    assert data["status"] == "finished" and data["path"] == str(out)
    assert data["stop_reason"] == "the optimizer proposed no change (TERMINATE)"
    assert [(e["epoch"], e["outcome"], e["success_rate"]) for e in data["epochs"]] == [
        (0, "baseline", 0.0), (1, "improved", 1.0), (2, "unchanged", None)]
    assert data["best_success_rate"] == 1.0 and data["best_epoch"] == 1
    first = data["epochs"][1]
    assert [(a["action"], a["function"], a["rolled_back"]) for a in first["actions"]] == [
        ("add_function", "solve_it", False)]
    assert [(r["code"], r["function"]) for r in first["rejected"]] == [
        ("INVALID_ARGUMENTS", "solve"), ("INVALID_ARGUMENTS", "solve_it")]
    assert "its code defines 'solve_it', not 'solve'" in first["rejected"][0]["reason"]
    assert "environment marker" in first["rejected"][1]["reason"]
    assert first["step_end"].startswith("the optimizer answered TERMINATE")
    assert not first["rolled_back"] and len(first["optimizer_runs"]) == 2
    # the optimizer read the failures of epoch 0, with what was answered and expected
    task = requests[0]["messages"][1]["content"]
    assert "Results with List A: 0 of 6 tasks succeeded (success rate 0.0%)." in task
    assert "FAILED (answered \\text{no idea}, expected 3)" in task
    # the function is kept: the best set, saved to a file a later evaluation loads as it is
    assert result.functions.names == ["solve_it"]
    saved = FunctionSet.load(out, log_store=False)
    assert saved.name == "learned" and saved.names == ["solve_it"] and saved.version("solve_it") == 1
    models_again = Models(train, lambda system: "solve_it" in system, [])
    with models_again:
        again = evaluate(train, llm=models_again.llm(), functions=out, log_store=store)
    assert again.accuracy == 1.0 and again.record.function_set == "learned"
    assert all("solve_it" in system for system in models_again.agent_systems)
    # every conversation of every epoch is in the log, linked by foreign keys
    log = TrainingLog(store)
    epochs = log.epochs(result.id)
    for epoch in epochs[:2]:
        items = EvaluationLog(store).items(epoch.evaluation_id)
        assert len(items) == 6 and all(item.agent_run_id for item in items)
    assert epochs[1].functions["functions"][0]["name"] == "solve_it"
    (change,) = FunctionVersionLog(store).history("learned")
    assert (change.action, str(change.author), change.note) == (
        "add", f"optimizer {result.id}", "epoch 1: add_function")
    accepted = [a for a in log.actions(result.id) if a.outcome == "accepted"]
    assert accepted[0].function_version_id == change.id
    assert log.version_scores("learned") == {("solve_it", 1): [(result.id, 1, 1.0)]}
    foreign_keys_hold(store.path)


def test_a_revision_that_does_worse_is_rolled_back(train, store, tmp_path):
    start = tmp_path / "start.json"
    start.write_text(json.dumps([SOLVER]))
    out = tmp_path / "learned.json"
    worse = spec("solve_it", "Solves it another way.", "return x + 1")
    actions = [{"revise_function": worse}, "TERMINATE", "TERMINATE"]
    with Models(train, lambda system: "the right way" in system, actions) as models:
        result = run_training(train, llm=models.fake, optimizer_llm=models.fake, epochs=4, functions=start, out=out,
                          log_store=store, concurrency=2)
        requests = models.optimizer_requests
    data = result.to_json_dict()
    assert [(e["epoch"], e["outcome"], e["success_rate"], e["rolled_back"]) for e in data["epochs"]] == [
        (0, "baseline", 1.0, False), (1, "rolled_back", 0.0, True), (2, "unchanged", None, False)]
    assert data["epochs"][1]["actions"][0]["rolled_back"] is True
    assert data["best_epoch"] == 0 and data["best_success_rate"] == 1.0
    # the saved set is the one that did best, and the trained set was put back
    saved = FunctionSet.load(out, log_store=False)
    assert saved["solve_it"].description == "Solves it the right way."
    assert saved["solve_it"].code == "def solve_it(x):\n    return x\n"
    history = FunctionVersionLog(store).history("learned", "solve_it")
    assert [(h.version, h.action, h.note.split(":")[0]) for h in history] == [
        (1, "add", "epoch 0"), (2, "replace", "epoch 1"), (3, "replace", "epoch 1")]
    assert history[2].note == "epoch 1: rolled back (0.0% < 100.0%)"
    assert history[2].spec == history[0].spec and saved.version("solve_it") == 3
    # the optimizer is shown the change that was rolled back, so as not to make it again
    after = requests[-1]["messages"][1]["content"]
    assert "Changes tried before and rolled back" in after
    assert "at epoch 1 (100.0% -> 0.0%):\n  revise_function solve_it: Solves it another way." in after
    assert log_scores(store) == {("solve_it", 1): [(result.id, 0, 1.0)],
                                 ("solve_it", 2): [(result.id, 1, 0.0)]}
    foreign_keys_hold(store.path)


def log_scores(store: LogStore) -> dict:
    return TrainingLog(store).version_scores("learned")


def test_training_stops_after_patience_epochs_without_improvement(train, store):
    useless = [{"add_function": spec(f"helper_{i}", f"Helper number {i}.")} for i in range(10)]
    with Models(train, lambda system: False, useless) as models:
        result = run_training(train, llm=models.fake, optimizer_llm=models.fake, epochs=6, patience=2, max_actions=1,
                          log_store=store, concurrency=2)
    data = result.to_json_dict()
    assert [(e["epoch"], e["outcome"]) for e in data["epochs"]] == [
        (0, "baseline"), (1, "kept"), (2, "kept")]
    assert data["stop_reason"] == "no improvement in 2 epochs" and data["status"] == "finished"
    # a step at least as good is kept, so the best set grows
    assert [f["name"] for f in data["functions"]] == ["helper_0", "helper_1"]


def test_an_interrupted_step_resumes_with_what_it_had_accepted(train, store, tmp_path):
    out = tmp_path / "learned.json"
    actions = [{"add_function": spec("first_helper", "A first helper.")},
               {"add_function": SOLVER}, "TERMINATE"]

    class Interrupt:
        def started(self, record, *, resumed):
            pass

        def evaluation(self, epoch):
            return None

        def step_run(self, epoch, run):
            if run.accepted is not None and run.accepted.function == "first_helper":
                raise KeyboardInterrupt

        def epoch_done(self, summary):
            pass

        def finished(self, report):
            pass

    with Models(train, lambda system: "solve_it" in system, actions) as models:
        with pytest.raises(KeyboardInterrupt):
            run_training(train, llm=models.fake, optimizer_llm=models.fake, epochs=2, out=out,
                         log_store=store, progress=Interrupt())
        (record,) = TrainingLog(store).list()
        assert record.status == "interrupted"
        assert "runner math train --resume" in record.error["fix"]
        result = resume_training(record.id, llm=models.fake, optimizer_llm=models.fake, log_store=store)
        requests = models.optimizer_requests
    assert result.record.status == "finished" and result.best_success_rate == 1.0
    epoch = result.epochs[1]
    assert [a["function"] for a in epoch.actions] == ["first_helper", "solve_it"]
    # the resumed step went on from its List B, asking for the actions left
    resumed = requests[1]["messages"][1]["content"]
    assert "after the 1 action taken so far" in resumed and "- name: first_helper" in resumed
    assert "(up to 2 more in this step)" in resumed
    names = [(h.function, h.version) for h in FunctionVersionLog(store).history("learned")]
    assert names == [("first_helper", 1), ("solve_it", 1)]
    foreign_keys_hold(store.path)


# -- the command line --------------------------------------------------------------------------


def cli(args: list[str], home: Path, **options) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "RUNNER_MODEL")}
    environment["RUNNER_HOME"] = str(home)
    return subprocess.Popen([sys.executable, "-m", "runner", *args], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **options)


def epoch_state(database: Path) -> tuple[str | None, str | None, int]:
    """(training id, epoch 1's evaluation id, its done items) as far as the log has them."""
    if not database.exists():
        return None, None, 0
    try:
        with sqlite3.connect(database, timeout=10) as conn:
            row = conn.execute("SELECT training_id, evaluation_id FROM training_epochs "
                               "WHERE epoch = 1").fetchone()
            if row is None or row[1] is None:
                return (row[0] if row else None), None, 0
            done = conn.execute("SELECT COUNT(*) FROM evaluation_items WHERE evaluation_id = ? "
                                "AND status = 'done'", (row[1],)).fetchone()[0]
    except sqlite3.OperationalError:  # the tables are not there yet
        return None, None, 0
    return row[0], row[1], done


def test_resume_after_sigkill_during_an_epochs_evaluation(train, tmp_path):
    home = tmp_path / "home"
    database = home / "runner.db"
    out = tmp_path / "learned.json"
    actions = [{"add_function": SOLVER}, "TERMINATE", "TERMINATE"]
    with Models(train, lambda system: "solve_it" in system, actions, delay_s=0.2) as models:
        url = models.server.url
        first = cli(["math", "train", "--train", str(train), "--base-url", url, "--model",
                     "fake-model", "--epochs", "2", "--out", str(out), "--json"], home,
                    start_new_session=True)
        deadline = time.monotonic() + 180
        while epoch_state(database)[2] < 2:
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the training made no progress"
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        training_id, evaluation_id, done = epoch_state(database)
        assert 2 <= done < 6
        with sqlite3.connect(database) as conn:
            assert conn.execute("SELECT status FROM trainings").fetchone()[0] == "running"
        second = cli(["math", "train", "--resume", training_id, "--base-url", url, "--json"],
                     home)
        stdout, stderr = second.communicate(timeout=300)
    assert second.returncode == 0, stderr
    data = json.loads(stdout)
    assert data["id"] == training_id and data["status"] == "finished"
    assert [(e["epoch"], e["outcome"], e["success_rate"]) for e in data["epochs"]] == [
        (0, "baseline", 0.0), (1, "improved", 1.0), (2, "unchanged", None)]
    assert data["epochs"][1]["evaluation_id"] == evaluation_id  # resumed, not started again
    assert [a["function"] for a in data["epochs"][1]["actions"]] == ["solve_it"]
    assert f"training {training_id}: train.jsonl, up to 2 epochs, set learned (resumed)" in stderr
    with sqlite3.connect(database) as conn:
        assert conn.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == 2
        assert conn.execute("SELECT COUNT(*) FROM function_versions").fetchone()[0] == 1
        items = conn.execute("SELECT COUNT(*), SUM(correct) FROM evaluation_items WHERE "
                             "evaluation_id = ?", (evaluation_id,)).fetchone()
    assert items == (6, 6)
    assert FunctionSet.load(out, log_store=False).names == ["solve_it"]
    foreign_keys_hold(database)

    # the reports and the history of the saved file
    report = cli(["math", "report", training_id, "--format", "json"], home)
    assert json.loads(report.communicate(timeout=120)[0]) == data
    chart = tmp_path / "training.png"
    markdown = cli(["math", "report", training_id, "--chart", str(chart)], home)
    text, _ = markdown.communicate(timeout=120)
    assert f"# Training {training_id}" in text and "| 1 | 100.0% (6/6) | improved | add solve\\_it" in text
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 5000
    history = cli(["functions", "history", str(out)], home)
    shown, _ = history.communicate(timeout=120)
    assert "learned.solve_it v1" in shown and f"add by optimizer {training_id}" in shown
    assert "(epoch 1: add_function)" in shown and "score: 100.0% at epoch 1" in shown
    assert "+def solve_it(x):" in shown
    listed = cli(["math", "trainings", "--json"], home)
    assert json.loads(listed.communicate(timeout=120)[0])[0]["id"] == training_id
    # the saved file is a function set the other commands load as it is
    called = cli(["call", str(out), "solve_it", "--args", '{"x": 3}', "--json"], home)
    assert json.loads(called.communicate(timeout=120)[0])["return_value"] == 3


def test_cli_usage_errors(tmp_path):
    home = tmp_path / "home"
    missing = cli(["math", "train", "--model", "m"], home)
    _, err = missing.communicate(timeout=120)
    assert missing.returncode == 2 and "give --train" in err
    mixed = cli(["math", "train", "--resume", "01ABC", "--epochs", "3"], home)
    _, err = mixed.communicate(timeout=120)
    assert mixed.returncode == 2 and "keeps its own settings; leave out --epochs" in err
    vanilla = cli(["math", "train", "--train", "x.jsonl", "--method", "vanilla"], home)
    _, err = vanilla.communicate(timeout=120)
    assert vanilla.returncode == 2 and "Invalid value for '--method'" in err
    unknown = cli(["math", "train", "--resume", "01NOSUCHTRAINING"], home)
    _, err = unknown.communicate(timeout=120)
    assert unknown.returncode == 1 and "no training with an id starting" in err
    assert "Traceback" not in err


def test_the_old_command_names_still_work_and_are_not_listed(tmp_path):
    home = tmp_path / "home"
    old = cli(["math", "optimize", "--model", "m"], home)
    _, err = old.communicate(timeout=120)
    assert old.returncode == 2 and "give --train" in err
    listed = cli(["math", "optimizations", "--json"], home)
    assert json.loads(listed.communicate(timeout=120)[0]) == []
    shown = cli(["math", "--help"], home)
    text, _ = shown.communicate(timeout=120)
    commands = [line.split()[0] for line in text.split("Commands:")[1].splitlines() if line.strip()]
    assert "train" in commands and "optimize" not in commands and "optimizations" not in commands
