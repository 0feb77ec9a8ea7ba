"""A model server that accepts and never answers, one that cuts its reply short, and an
optimizer's server that is not there: what the client waits, says and retries.

Each against a real HTTP server through the real `openai` SDK (tests/fake_openai_server.py);
time bounds are generous safety bounds, not speed targets."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI
from test_cli_paper_cuts import cli

from runner.agent.llm import DEFAULT_TIMEOUT_S, TIMEOUT_RETRIES, OpenAIChat
from runner.errors import LLMUnavailableError

ASK = [{"role": "user", "content": "What is 1 + 1?"}]
SAMPLE = Path(__file__).parent / "data" / "math_sample.jsonl"


def silent(body: dict) -> dict:
    return {"content": "too late", "delay_s": 600}


def test_the_defaults_wait_about_a_minute_and_retry_a_silent_server_twice():
    with FakeOpenAI() as server:
        client = OpenAIChat("fake-model", base_url=server.url)
    assert client.timeout_s == DEFAULT_TIMEOUT_S == 60
    assert TIMEOUT_RETRIES == 2 and client.max_retries >= TIMEOUT_RETRIES


def test_a_silent_server_is_given_up_after_its_timeout_retries_with_slow_lines():
    said: list[str] = []
    with FakeOpenAI(responder=silent) as server:
        client = OpenAIChat("fake-model", base_url=server.url, timeout_s=1.5, max_retries=4,
                            backoff_s=0.01, slow_after_s=0.5, on_slow=said.append)
        started = time.monotonic()
        with pytest.raises(LLMUnavailableError) as raised:
            client.complete(ASK)
        took = time.monotonic() - started
        asked = len(server.requests)
    # Three attempts of 1.5 s (not the five that max_retries allows for other faults).
    assert asked == TIMEOUT_RETRIES + 1
    assert 3 * 1.5 <= took < 60
    assert "did not answer within 1.5 s (after 2 retries)" in raised.value.message
    assert "--llm-timeout" in (raised.value.fix or "")
    # One line per attempt, each saying which attempt and the most it may still take.
    assert len(said) == 3, said
    assert all("has not answered for 0.5 s" in line for line in said)
    assert "attempt 1," in said[0] and "attempt 3," in said[2]
    assert "given up within" in said[0]


def test_no_slow_line_when_the_answer_comes_in_time():
    said: list[str] = []
    with FakeOpenAI() as server:
        server.reply("2", delay_s=0.1)
        client = OpenAIChat("fake-model", base_url=server.url, slow_after_s=1.0,
                            on_slow=said.append)
        assert client.complete(ASK).content == "2"
    time.sleep(1.2)  # the notice would have fired by now
    assert said == []


def test_a_reply_cut_short_without_a_length_is_retried():
    with FakeOpenAI() as server:
        server.cut("the whole answer", at=40)
        server.reply("2")
        client = OpenAIChat("fake-model", base_url=server.url, backoff_s=0.01)
        reply = client.complete(ASK)
        assert reply.content == "2" and reply.retries == 1
        assert len(server.requests) == 2


def test_a_reply_cut_short_every_time_says_so_and_does_not_blame_the_address():
    with FakeOpenAI() as server:
        for _ in range(3):
            server.cut("the whole answer", at=55)
        client = OpenAIChat("fake-model", base_url=server.url, max_retries=2, backoff_s=0.01)
        with pytest.raises(LLMUnavailableError) as raised:
            client.complete(ASK)
        assert len(server.requests) == 3
    error = raised.value
    assert "cut its reply to POST /chat/completions short" in error.message
    assert "after 55 bytes" in error.message and "(after 2 retries)" in error.message
    assert "--base-url" not in (error.fix or "") and "retried" in (error.fix or "")


def test_the_cli_says_when_the_model_is_slow_and_still_takes_the_answer(tmp_path: Path):
    """The line comes after 15 s of silence (the default), on stderr, and the run goes on
    when the answer comes."""
    with FakeOpenAI() as server:
        server.reply("\\boxed{2}", delay_s=17)
        done = cli(["agent", "What is 1 + 1?", "--protocol", "code", "--base-url", server.url,
                    "--model", "fake-model", "--llm-timeout", "30"], tmp_path / "home")
    assert done.returncode == 0, done.stderr
    assert f"runner: the model server at {server.url} has not answered for 15 s" in done.stderr
    assert "given up within" in done.stderr and "Traceback" not in done.stderr


def test_an_optimizer_server_that_is_not_there_names_the_optimizer_option(tmp_path: Path):
    problems = tmp_path / "problems.jsonl"
    problems.write_text("\n".join(SAMPLE.read_text().splitlines()[:2]) + "\n")
    with FakeOpenAI(responder=lambda body: "\\boxed{1}") as server:
        done = cli(["math", "train", "--train", str(problems), "--base-url", server.url,
                    "--model", "fake-model", "--optimizer-base-url", "http://127.0.0.1:9/v1",
                    "--retries", "0"], tmp_path / "home")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "--optimizer-base-url" in done.stderr, done.stderr
    assert "check --base-url" not in done.stderr


def test_a_stopped_client_ends_the_slow_wait_without_a_line():
    """A job that is stopping abandons the request in flight: no slow line afterwards."""
    said: list[str] = []
    with FakeOpenAI(responder=silent) as server:
        client = OpenAIChat("fake-model", base_url=server.url, timeout_s=30, slow_after_s=1.0,
                            on_slow=said.append)
        failure: list[BaseException] = []

        def ask() -> None:
            try:
                client.complete(ASK)
            except BaseException as exc:  # noqa: BLE001 - what ended it is the check
                failure.append(exc)

        worker = threading.Thread(target=ask)
        worker.start()
        time.sleep(0.3)
        client.stop()
        worker.join(10)
    assert not worker.is_alive() and failure and isinstance(failure[0], KeyboardInterrupt)
    time.sleep(1.0)
    assert said == []
