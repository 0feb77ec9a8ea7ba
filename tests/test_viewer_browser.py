"""The viewer in a real browser: `runner logs serve` on loopback, headless Chromium (Debian's
`chromium`, driven by Playwright through its `executable_path`; Playwright's own browser
downloads are never used) filters executions, searches, opens an agent run and takes a
screenshot, all with JavaScript switched off, as the pages promise to work without it.

Without Chromium or Playwright the test skips, unless RUNNER_REQUIRE_E2E is set (as
`make test` sets it, after installing chromium) or CI is: then it fails.
"""

from __future__ import annotations

import importlib.util
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from logs_seed import Seeded, seed_apart

CHROMIUM = os.environ.get("RUNNER_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WIDTH = 1280


def _missing(reason: str) -> None:
    if os.environ.get("RUNNER_REQUIRE_E2E") or os.environ.get("CI"):
        pytest.fail(f"{reason}; `make test` installs it (apt-get install chromium; pip install -e '.[test]')")
    pytest.skip(f"{reason}; `make test` installs it")


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory):
    if importlib.util.find_spec("playwright") is None:
        _missing("the playwright package is not installed")
    if not os.access(CHROMIUM, os.X_OK):
        _missing(f"Chromium is not at {CHROMIUM}")
    seeded = seed_apart(tmp_path_factory.mktemp("browser") / "runner.db", training=True)
    env = {**os.environ, "RUNNER_HOME": str(seeded.path.parent)}
    process = subprocess.Popen([sys.executable, "-m", "runner", "logs", "serve", "--port", "0"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        match = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
        assert match, f"no address in {line!r}"
        url = match.group(1)
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(url + "/executions", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url, seeded
    finally:
        process.terminate()
        process.wait(timeout=10)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_filter_search_open_a_run_and_screenshot(viewer: tuple[str, Seeded], tmp_path: Path):
    from playwright.sync_api import sync_playwright

    url, seeded = viewer
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            context = browser.new_context(java_script_enabled=False,
                                          viewport={"width": WIDTH, "height": 900})
            page = context.new_page()
            page.on("console", lambda message: problems.append(message.text)
                    if message.type == "error" else None)

            page.goto(url + "/executions")
            assert page.locator("h1").inner_text() == "Executions"
            assert page.locator(f"a[href='/executions/{seeded.ok}']").count() == 1
            # The stylesheet loaded under the Content-Security-Policy (Playwright reads the
            # computed style from outside the page; the page itself runs no script).
            header = page.locator("header.top").evaluate("e => getComputedStyle(e).backgroundColor")
            assert header == "rgb(245, 247, 248)"

            # Filter by status with the form.
            page.select_option("select[name=status]", "error")
            page.click("form.filters button[type=submit]")
            page.wait_for_url(re.compile(r".*status=error.*"))
            rows = page.locator("table.executions tbody tr")
            assert rows.count() == 2
            status = page.locator("table.executions .status-error").first
            assert status.evaluate("e => getComputedStyle(e).color") == "rgb(207, 34, 46)"
            assert "ZeroDivisionError" in page.locator("table.executions").inner_text()

            # Search.
            page.goto(url + "/executions")
            page.fill("input[name=q]", "ZeroDivisionError")
            page.press("input[name=q]", "Enter")
            page.wait_for_url(re.compile(r".*q=ZeroDivisionError.*"))
            assert page.locator("table.executions tbody tr").count() == 1
            assert page.locator("mark").first.inner_text() == "ZeroDivisionError"

            # Open the agent run from the navigation.
            page.click("header nav >> text=Agent runs")
            page.wait_for_url(re.compile(r".*/runs$"))
            page.click(f"a[href='/runs/{seeded.run}']")
            page.wait_for_url(re.compile(rf".*/runs/{seeded.run}$"))
            body = page.locator("body").inner_text()
            for text in ("Agent run", "answered", "Timeline", "Turn 1", "Turn 3", "model reply",
                         "feedback sent", "The answer is \\boxed{10}."):
                assert text in body, text
            # The hostile reply is on the page as text; nothing of it ran or rendered.
            assert '<script>alert("pwned")</script>' in body
            assert page.locator("script, img, svg, iframe").count() == 0

            shot = tmp_path / "run.png"
            page.screenshot(path=str(shot), full_page=True)
            width, height = png_size(shot)
            assert width == WIDTH and height > 900  # a full page: the timeline is long
            assert shot.stat().st_size > 20_000  # a page with text on it, not a blank one

            # A training from the navigation: its chart is drawn (an inline PNG the policy
            # allows), then one epoch's evaluation and a problem's conversation.
            page.click("header nav >> text=Trainings")
            page.wait_for_url(re.compile(r".*/trainings$"))
            page.click(f"a[href='/trainings/{seeded.training}']")
            page.wait_for_url(re.compile(rf".*/trainings/{seeded.training}$"))
            body = page.locator("body").inner_text()
            for text in ("Best training success rate 100.0%", "Epochs", "improved", "refused",
                         "UNKNOWN_FUNCTION", "seed_helper"):
                assert text in body, text
            chart = page.locator("figure.chart img")
            assert chart.evaluate("e => e.complete && e.naturalWidth") > 400
            page.click(f"a[href='/evaluations/{seeded.evaluations[0]}']")
            page.wait_for_url(re.compile(rf".*/evaluations/{seeded.evaluations[0]}$"))
            assert "Accuracy 33.3%" in page.locator("body").inner_text()
            assert page.locator("figure.chart img").evaluate("e => e.naturalWidth") > 400
            assert page.locator("table.problems tbody tr").count() == 3
            page.locator("table.problems a[href^='/runs/']").first.click()
            page.wait_for_url(re.compile(r".*/runs/[0-9A-Z]{26}$"))
            assert "Timeline" in page.locator("body").inner_text()
            shot = tmp_path / "evaluation.png"
            page.go_back()
            page.screenshot(path=str(shot), full_page=True)
            assert png_size(shot)[0] == WIDTH and shot.stat().st_size > 20_000
        finally:
            browser.close()
    assert not [p for p in problems if "Content Security Policy" in p or "Refused" in p], problems


HOSTILE_FILES = r'''
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [3, 1, 2])
plt.savefig("chart.png")
script = "<script>window.top.pwned = 1; alert('file')</script>"
open("drawing.svg", "w").write('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)">' + script + '</svg>')
open("page.html", "w").write("<!doctype html><html><body>" + script + "</body></html>")
open("notes.png", "w").write("<html><body>" + script + "</body></html>")  # HTML named as a picture
open('x" onerror="alert(2)<img src=x>.txt', "w").write("named to break out")
'''


@pytest.fixture(scope="module")
def file_viewer(tmp_path_factory: pytest.TempPathFactory):
    """The viewer over a log holding one run that made a chart and files built to attack it."""
    if importlib.util.find_spec("playwright") is None:
        _missing("the playwright package is not installed")
    if not os.access(CHROMIUM, os.X_OK):
        _missing(f"Chromium is not at {CHROMIUM}")
    from runner import Sandbox
    from runner.logs import LogStore

    home = tmp_path_factory.mktemp("browser-files")
    with LogStore(home / "runner.db") as store, Sandbox(log_store=store) as box:
        result = box.run(HOSTILE_FILES, files={"given.csv": "a,b\n1,2\n"})
    assert result.status == "ok", result.error
    env = {**os.environ, "RUNNER_HOME": str(home)}
    process = subprocess.Popen([sys.executable, "-m", "runner", "logs", "serve", "--port", "0"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        match = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
        assert match, f"no address in {line!r}"
        yield match.group(1), result
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_files_show_images_inline_and_never_run_what_a_run_wrote(file_viewer, tmp_path: Path):
    """With JavaScript on (a script that ran would be seen): the chart shows inline, the
    SVG, the HTML and the HTML named .png are offered as downloads and run nothing, even
    opened directly; the name built to break out of its attribute stays text."""
    from playwright.sync_api import sync_playwright

    url, result = file_viewer
    dialogs: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            context = browser.new_context(java_script_enabled=True, accept_downloads=True,
                                          viewport={"width": WIDTH, "height": 900})
            page = context.new_page()
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            page.goto(f"{url}/executions/{result.id}")
            body = page.locator("section.files").inner_text()
            for name in ("chart.png", "drawing.svg", "page.html", "notes.png", "given.csv",
                         'x" onerror="alert(2)<img src=x>.txt'):
                assert name in body, name
            assert "image/svg+xml" in body and "text/html" in body
            # One picture on the page: the chart, loaded; no SVG, frame or object of a file.
            images = page.locator("section.files img")
            assert images.count() == 1
            assert images.first.evaluate("e => e.complete && e.naturalWidth") == 640
            assert page.locator("section.files svg, iframe, object, embed").count() == 0
            assert page.evaluate("() => window.pwned === undefined")
            # Each file opened directly: the non-pictures are downloads, never pages.
            by_name = {made.name: position for position, made in enumerate(result.files)}
            for name in ("drawing.svg", "page.html", "notes.png"):
                link = f"{url}/executions/{result.id}/files/out/{by_name[name]}"
                with page.expect_download() as download:
                    try:
                        page.goto(link)
                    except Exception as exc:  # Chromium reports a navigation that became a download
                        assert "Download is starting" in str(exc), exc
                saved = tmp_path / name
                download.value.save_as(saved)
                assert b"<script>" in saved.read_bytes()
            response = httpx.get(f"{url}/executions/{result.id}/files/out/{by_name['drawing.svg']}")
            assert response.headers["content-type"] == "application/octet-stream"
            assert response.headers["content-disposition"].startswith("attachment;")
            assert "sandbox" in response.headers["content-security-policy"]
            chart = httpx.get(f"{url}/executions/{result.id}/files/out/{by_name['chart.png']}")
            assert chart.headers["content-type"] == "image/png" and "sandbox" in chart.headers[
                "content-security-policy"]
            page.goto(f"{url}/executions/{result.id}")
            shot = tmp_path / "files.png"
            page.screenshot(path=str(shot), full_page=True)
            assert png_size(shot)[0] == WIDTH
        finally:
            browser.close()
    assert dialogs == []
