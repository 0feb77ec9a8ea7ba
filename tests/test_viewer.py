"""The web viewer: every page on a log seeded by the real sandbox and agent loop, hostile
output and model replies served as inert text (checked in the HTML a real server sends),
the security headers, the token off loopback, the host check on it, and the read-only
guarantee."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from logs_seed import HOSTILE, Seeded, seed_apart
from starlette.testclient import TestClient

from runner.errors import LogStoreError
from runner.logs import LogStore
from runner.logs.viewer import create_app

LOCAL = "http://127.0.0.1"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed_apart(tmp_path_factory.mktemp("viewer") / "runner.db", training=True)


@pytest.fixture(scope="module")
def client(seeded: Seeded) -> TestClient:
    return TestClient(create_app(seeded.path), base_url=LOCAL)


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> Elements:
    parser = Elements()
    parser.feed(html)
    return parser


def ids_in(html: str, kind: str) -> list[str]:
    return re.findall(rf'href="/{kind}/([0-9A-Z]{{26}})"', html)


# -- pages -----------------------------------------------------------------------------------


def test_home_goes_to_the_executions(client: TestClient):
    response = client.get("/", follow_redirects=False)
    assert response.status_code == 302 and response.headers["location"] == "/executions"


def test_executions_page_lists_every_seeded_execution_newest_first(client: TestClient, seeded: Seeded):
    response = client.get("/executions")
    assert response.status_code == 200
    listed = ids_in(response.text, "executions")
    for execution_id in (seeded.ok, seeded.error, seeded.hostile, seeded.call, *seeded.run_executions):
        assert execution_id in listed
    assert listed == sorted(listed, reverse=True)  # ULIDs sort by time
    assert "ZeroDivisionError" in response.text and "call double" in response.text


def test_executions_filters_narrow_the_list(client: TestClient, seeded: Seeded):
    errors = ids_in(client.get("/executions?status=error").text, "executions")
    assert sorted(errors) == sorted([seeded.error, seeded.hostile])
    calls = ids_in(client.get("/executions?function=double").text, "executions")
    assert calls == [seeded.call]
    of_run = ids_in(client.get(f"/executions?run={seeded.run}").text, "executions")
    assert sorted(of_run) == sorted(seeded.run_executions)
    assert ids_in(client.get("/executions?source=nothing-like-this").text, "executions") == []
    assert ids_in(client.get("/executions?since=2000-01-01&until=2000-01-02").text, "executions") == []
    assert seeded.ok in ids_in(client.get("/executions?since=1h").text, "executions")


def test_executions_full_text_search_marks_the_hits(client: TestClient, seeded: Seeded):
    response = client.get("/executions", params={"q": "ZeroDivisionError"})
    assert ids_in(response.text, "executions") == [seeded.error]
    assert "<mark>ZeroDivisionError</mark>" in response.text
    assert ids_in(client.get("/executions", params={"q": "seeded-ok-output"}).text,
                  "executions") == [seeded.ok]
    # Syntax of the search engine in the box is only text: no error, no injection.
    for text in ['"unbalanced', "NEAR(a b", "a AND OR", "*", ")(", "col:x"]:
        assert client.get("/executions", params={"q": text}).status_code == 200


def test_executions_sort_and_keyset_pages(seeded: Seeded):
    client = TestClient(create_app(seeded.path, page_size=2), base_url=LOCAL)
    seen: list[str] = []
    url = "/executions?sort=duration&order=asc"
    first = client.get(url).text
    while True:
        page = client.get(url).text
        seen += ids_in(page, "executions")
        found = re.search(r'href="([^"]+)" rel="next"', page)
        if not found:
            break
        url = found.group(1).replace("&amp;", "&")
        assert "after=" in url and "sort=duration" in url
    everything = TestClient(create_app(seeded.path), base_url=LOCAL).get("/executions").text
    assert len(seen) == len(set(seen)) == len(ids_in(everything, "executions")) > 4
    assert seen[:2] == ids_in(first, "executions")
    assert client.get("/executions?sort=nope").status_code == 400
    assert client.get("/executions?after=!!!").status_code == 400
    assert client.get("/executions?status=bogus").status_code == 400


def test_execution_page_shows_code_limits_output_and_error(client: TestClient, seeded: Seeded):
    page = client.get(f"/executions/{seeded.error}").text
    assert "ZeroDivisionError" in page and "division by zero" in page
    assert 'class="linenos"' in page  # code with line numbers, coloured by Pygments
    assert "max_output_bytes" in page and "restricted" in page
    call = "".join(parse(client.get(f"/executions/{seeded.call}").text).text)
    assert '"x": 21' in call and "Return value" in call and "42" in call


def test_execution_prefix_redirects_and_unknown_is_404(client: TestClient, seeded: Seeded):
    response = client.get(f"/executions/{seeded.ok[:20]}", follow_redirects=False)
    assert response.status_code == 302 and response.headers["location"] == f"/executions/{seeded.ok}"
    missing = client.get("/executions/ZZZZZZZZZZZZZZZZZZZZZZZZZZ")
    assert missing.status_code == 404 and "no execution" in missing.text
    assert client.get("/no/such/page").status_code == 404


def test_runs_page_and_search(client: TestClient, seeded: Seeded):
    listed = ids_in(client.get("/runs").text, "runs")
    assert seeded.run in listed and listed == sorted(listed, reverse=True)
    assert seeded.run in ids_in(client.get("/runs", params={"q": "boxed"}).text, "runs")
    assert ids_in(client.get("/runs", params={"q": "Double four"}).text, "runs") == [seeded.run]
    assert ids_in(client.get("/runs", params={"q": "nothingmatcheshere"}).text, "runs") == []
    assert seeded.run in ids_in(client.get("/runs?status=answered").text, "runs")


def test_run_page_is_a_timeline_with_executions_inline(client: TestClient, seeded: Seeded):
    page = client.get(f"/runs/{seeded.run}").text
    assert page.count('class="turn"') == 3
    for execution_id in seeded.run_executions:
        assert f'href="/executions/{execution_id}"' in page
    text = "".join(parse(page).text)
    assert "model reply" in text and "feedback sent" in text and "defines the functions" in text
    assert "The answer is \\boxed{10}." in text
    assert client.get("/runs/ZZZZZZZZZZZZZZZZZZZZZZZZZZ").status_code == 404


def test_function_pages_show_versions_and_diffs(client: TestClient, seeded: Seeded):
    listing = client.get("/functions").text
    assert "seed_tools" in listing and "double" in listing
    history = client.get("/functions/history", params={"set": seeded.set_name,
                                                       "function": seeded.function})
    assert history.status_code == 200
    text = "".join(parse(history.text).text)
    assert "v1 · add" in text and "v2 · replace" in text
    assert "+    return x + x" in text and "-    return 2 * x" in text
    assert client.get("/functions/history", params={"set": "x", "function": "y"}).status_code == 404
    assert client.get("/functions/history").status_code == 400


def chart_of(html: str) -> bytes:
    """The inline chart of a page, decoded: a PNG drawn on the server."""
    (source,) = [attrs.get("src") or "" for tag, attrs in parse(html).tags if tag == "img"]
    assert source.startswith("data:image/png;base64,")
    data = base64.b64decode(source.removeprefix("data:image/png;base64,"))
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    return data


def test_evaluation_pages_show_accuracy_the_chart_and_link_each_problem_to_its_run(
        client: TestClient, seeded: Seeded):
    listing = client.get("/evaluations").text
    assert ids_in(listing, "evaluations") == list(reversed(seeded.evaluations))
    assert f'href="/trainings/{seeded.training}"' in listing and "epoch 0" in listing
    baseline, improved = seeded.evaluations
    page = client.get(f"/evaluations/{baseline}").text
    text = " ".join(parse(page).text)
    assert "Accuracy 33.3%" in text and "1 of 3 problems correct" in text
    for heading in ("By type", "By level", "By type and level", "Problems"):
        assert heading in text
    assert "Prealgebra" in text and "Level 3" in text and "hostile_problems.jsonl" in text
    chart_of(page)
    runs = ids_in(page, "runs")
    assert len(runs) == 3
    for run_id in runs:
        assert client.get(f"/runs/{run_id}").status_code == 200
    wrong = client.get(f"/evaluations/{baseline}?correct=0").text
    assert len(ids_in(wrong, "runs")) == 2 and "p-2" not in " ".join(parse(wrong).text)
    right = " ".join(parse(client.get(f"/evaluations/{improved}").text).text)
    assert "Accuracy 100.0%" in right and "seed_helper v1" in right
    paged = TestClient(create_app(seeded.path, page_size=2), base_url=LOCAL)
    first = paged.get(f"/evaluations/{baseline}").text
    assert len(ids_in(first, "runs")) == 2 and 'rel="next"' in first
    assert len(ids_in(paged.get(f"/evaluations/{baseline}?after=1").text, "runs")) == 1
    short = client.get(f"/evaluations/{baseline[:20]}", follow_redirects=False)
    assert short.status_code == 302 and short.headers["location"] == f"/evaluations/{baseline}"
    assert client.get("/evaluations/ZZZZZZZZZZZZZZZZZZZZZZZZZZ").status_code == 404
    assert client.get(f"/evaluations/{baseline}?correct=maybe").status_code == 400
    assert client.get(f"/evaluations/{baseline}?after=x").status_code == 400


def test_training_pages_show_each_epoch_its_actions_and_refusals(client: TestClient,
                                                                  seeded: Seeded):
    listing = client.get("/trainings").text
    assert ids_in(listing, "trainings") == [seeded.training] and "100.0%" in listing
    page = client.get(f"/trainings/{seeded.training}").text
    text = " ".join(parse(page).text)
    assert "Best training success rate 100.0%" in text and "measured at epoch 1" in text
    for fact in ("33.3%", "baseline", "improved", "add_function", "seed_helper",
                 "revise_function", "UNKNOWN_FUNCTION", "there is no function 'no_such_function <script>",
                 'a smoke call seed_helper({"x": 2}) returned 2', "seeded_learned.json"):
        assert fact in text, fact
    for evaluation_id in seeded.evaluations:
        assert f'href="/evaluations/{evaluation_id}"' in page
    optimizer_runs = ids_in(page, "runs")
    assert optimizer_runs
    for run_id in optimizer_runs:
        assert "You improve the list of functions" in client.get(f"/runs/{run_id}").text
    assert 'href="/functions/history?set=seeded_learned&amp;function=seed_helper"' in page
    chart_of(page)
    assert client.get("/trainings/ZZZZZZZZZZZZZZZZZZZZZZZZZZ").status_code == 404
    nav = parse(client.get("/executions").text).tags
    assert ("a", {"href": "/evaluations"}) in nav and ("a", {"href": "/trainings"}) in nav


# -- security --------------------------------------------------------------------------------


def test_every_response_carries_the_security_headers(client: TestClient, seeded: Seeded):
    for path in ("/executions", f"/executions/{seeded.ok}", "/static/viewer.css", "/nope",
                 f"/trainings/{seeded.training}", f"/evaluations/{seeded.evaluations[0]}"):
        headers = client.get(path).headers
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp  # so: no script at all
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"


def test_loopback_viewer_refuses_other_host_names(seeded: Seeded):
    client = TestClient(create_app(seeded.path), base_url="http://attacker.example")
    assert client.get("/executions").status_code == 421
    assert TestClient(create_app(seeded.path), base_url="http://localhost").get("/").status_code == 200


def test_a_token_is_required_on_every_request_when_given(seeded: Seeded):
    app = create_app(seeded.path, token="s3cret-token")
    client = TestClient(app, base_url="http://192.0.2.10")
    assert client.get("/executions").status_code == 401
    assert client.get("/executions?token=wrong").status_code == 401
    assert client.get("/static/viewer.css").status_code == 401
    bearer = client.get("/executions", headers={"Authorization": "Bearer s3cret-token"})
    assert bearer.status_code == 200
    first = client.get("/executions?token=s3cret-token&status=ok", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/executions?status=ok"
    assert "HttpOnly" in first.headers["set-cookie"] and "SameSite=Strict" in first.headers["set-cookie"]
    assert client.get("/executions?status=ok").status_code == 200  # the cookie now
    client.cookies.clear()
    assert client.get("/executions").status_code == 401


def test_the_viewer_connection_cannot_write(seeded: Seeded):
    before = hashlib.sha256(seeded.path.read_bytes()).hexdigest()
    with LogStore(seeded.path, read_only=True) as store:
        for statement in ("DELETE FROM executions", "UPDATE executions SET status = 'ok'",
                          "CREATE TABLE evil (x)", "PRAGMA user_version = 99"):
            with pytest.raises(LogStoreError, match="readonly|read-only|query_only|attempt to write"):
                store.read(lambda conn, sql=statement: conn.execute(sql))
        with pytest.raises(LogStoreError, match="read-only"):
            store.write(lambda conn: conn.execute("DELETE FROM executions"))
    client = TestClient(create_app(seeded.path), base_url=LOCAL)
    for path in ("/executions", "/runs", "/functions", f"/executions/{seeded.hostile}",
                 f"/runs/{seeded.run}", "/evaluations", "/trainings",
                 f"/evaluations/{seeded.evaluations[0]}", f"/trainings/{seeded.training}"):
        assert client.get(path).status_code == 200
    assert hashlib.sha256(seeded.path.read_bytes()).hexdigest() == before


def test_an_older_schema_is_refused_read_only_not_migrated(tmp_path: Path):
    from runner.logs.migrations import MIGRATIONS

    path = tmp_path / "old.db"
    LogStore(path, migrations=MIGRATIONS[:3]).close()
    with pytest.raises(LogStoreError, match="schema version 3"):
        create_app(path)
    with pytest.raises(LogStoreError, match="no log database"):
        create_app(tmp_path / "missing.db")


# -- the served HTML: hostile text stays text ------------------------------------------------


@pytest.fixture(scope="module")
def served(seeded: Seeded):
    """`runner logs serve` on a free loopback port, as a user starts it."""
    env = {**os.environ, "RUNNER_HOME": str(seeded.path.parent)}
    process = subprocess.Popen([sys.executable, "-m", "runner", "logs", "serve", "--port", "0"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        match = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        assert match, f"no address in {line!r}; stderr: {process.stderr.read() if process.stderr else ''}"
        url = match.group(1)
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(url + "executions", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_hostile_code_output_errors_and_model_replies_are_inert(served: str, seeded: Seeded):
    pages = [f"executions/{seeded.hostile}", f"runs/{seeded.run}", "executions",
             "executions?q=pwned", "runs", "functions",
             f"functions/history?set={seeded.set_name}&function={seeded.function}",
             "evaluations", "trainings", f"trainings/{seeded.training}",
             *(f"evaluations/{evaluation_id}" for evaluation_id in seeded.evaluations),
             "functions/history?set=seeded_learned&function=seed_helper"]
    charts = {f"trainings/{seeded.training}",
              *(f"evaluations/{evaluation_id}" for evaluation_id in seeded.evaluations)}
    for path in pages:
        response = httpx.get(served + path, timeout=10)
        assert response.status_code == 200, path
        assert "default-src 'none'" in response.headers["content-security-policy"]
        html = response.text
        elements = parse(html)
        if path in charts:  # the one image: a PNG drawn on the server, inline
            chart_of(html)
        for tag, attrs in elements.tags:
            if tag == "img" and path in charts:
                assert set(attrs) == {"src", "alt"}, attrs
                continue
            assert tag not in ("script", "img", "svg", "iframe", "object", "embed"), (path, tag)
            for name, value in attrs.items():
                assert not name.startswith("on"), (path, tag, name)
                assert not (value or "").strip().lower().startswith("javascript:"), (path, tag, value)
        # Terminal escapes arrive as visible text, never as the characters themselves.
        for char in ("\x1b", "\x07", "\x9b", "\u202e"):
            assert char not in html, (path, repr(char))
        assert "<script>" not in html.lower()
    execution = httpx.get(served + f"executions/{seeded.hostile}", timeout=10).text
    text = "".join(parse(execution).text)
    assert '<script>alert("pwned")</script>' in text  # shown, as text
    assert "\\x1b]0;owned title\\x07" in text and "\\x9b31m" in text
    run_text = "".join(parse(httpx.get(served + f"runs/{seeded.run}", timeout=10).text).text)
    assert f"I will compute it. {HOSTILE[:40]}" in run_text
    visible = HOSTILE[:40]  # the markup part, before the terminal escapes
    evaluation = "".join(parse(httpx.get(served + f"evaluations/{seeded.evaluations[0]}",
                                         timeout=10).text).text)
    assert f"Add one and one. {visible}" in evaluation and f"Algebra {visible}" in evaluation
    training = "".join(parse(httpx.get(served + f"trainings/{seeded.training}", timeout=10).text).text)
    assert f"there is no function 'no_such_function {visible}" in training


PEER_PROBE = """
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=20) as answer:
        print(answer.status, answer.read()[:0].decode())
except urllib.error.HTTPError as refused:
    print(refused.code, refused.read().decode())
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another user needs root (CI runs as root)")
def test_on_loopback_another_user_of_the_machine_is_turned_away(served: str, seeded: Seeded,
                                                                 tmp_path: Path):
    """Loopback is every local user's: the viewer (and `runner mcp --http`, behind the same
    guard) serves the user who started it and root, and another user reads nothing."""
    probe = tmp_path / "probe.py"
    probe.write_text(PEER_PROBE)
    for page in ("executions", f"executions/{seeded.hostile}"):
        mine = subprocess.run([sys.executable, str(probe), served + page], capture_output=True,
                              text=True, timeout=60)
        assert mine.stdout.startswith("200"), mine.stdout + mine.stderr
        theirs = subprocess.run([sys.executable, str(Path(__file__).with_name("as_user.py")),
                                 "4242:4242", str(probe), served + page],
                                capture_output=True, text=True, timeout=60)
        assert theirs.stdout.startswith("403"), theirs.stdout + theirs.stderr
        assert "serves the user who started it" in theirs.stdout
