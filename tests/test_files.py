"""Files in and out of runs, as users hand and get them, on every tier that has files.

- in: bytes, text and paths appear in the run's working directory before its code starts;
  names are relative paths inside it and nothing else; too many or too large is a clear
  error naming the limit; the restricted tier, whose runs have no files, refuses them;
- out: the files a run made or changed come back whole, with a size, a media type sniffed
  from the bytes and a sha256; past `max_returned_files_mb` the rest are named as left
  out; links, FIFOs and names the host refuses never come back as files;
- figures: `plt.show()` saves each open figure as figure-N.png;
- the same in sessions (the directory is kept, each block returns its own changes), in
  function calls, and on Docker and Ray;
- the log: stored once per content, read back whole, listed by `runner logs show`,
  written out by `runner logs files`, gone with `runner logs prune`, and exported and
  imported byte for byte; past RUNNER_LOG_FILES_MB a file is recorded without its bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import backend_options
from runner import Limits, Sandbox, Status
from runner.errors import ConfigurationError
from runner.files import MAX_DEPTH, MAX_INPUT_FILES, MAX_OUTPUT_FILES
from runner.logs import LogStore

TIERS = ["jail", pytest.param("docker", marks=pytest.mark.docker),
         pytest.param("ray", marks=pytest.mark.ray)]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

ROUND_TRIP = r"""
import csv, os
rows = list(csv.reader(open("data.csv")))
blob = open("nested/blob.bin", "rb").read()
text = open("note.txt").read()
os.makedirs("out", exist_ok=True)
with open("out/summary.txt", "w") as f:
    f.write(f"{len(rows)} rows, {len(blob)} bytes, {text}")
with open("out/binary.bin", "wb") as f:
    f.write(bytes(range(256)) * 4)
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [3, 1, 2])
plt.savefig("saved.png")
plt.figure()
plt.bar([1, 2], [2, 3])
plt.show()
print("done", sorted(os.listdir(".")))
"""


@pytest.fixture(scope="module", params=TIERS)
def sandbox(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    home = tmp_path_factory.mktemp("files-log")
    with Sandbox(backend=request.param, log_store=LogStore(home / "log.db"),
                 **backend_options(request.param)) as sb:
        yield sb


def test_files_go_in_and_what_the_run_made_comes_back(sandbox, tmp_path):
    source = tmp_path / "blob.bin"
    source.write_bytes(os.urandom(3000))
    r = sandbox.run(ROUND_TRIP, files={"data.csv": b"a,b\n1,2\n3,4\n", "nested/blob.bin": source,
                                       "note.txt": "caf\u00e9"})
    assert r.status == Status.OK, r.error
    # plt.show() shows every open figure, as in a notebook: the saved one is still open.
    assert r.stdout.startswith("done ['data.csv', 'figure-1.png', 'figure-2.png', 'nested', "
                               "'note.txt', 'out', 'saved.png']")
    made = {f.name: f for f in r.files}
    assert set(made) == {"out/summary.txt", "out/binary.bin", "saved.png", "figure-1.png",
                         "figure-2.png"}
    assert made["out/summary.txt"].data == "3 rows, 3000 bytes, caf\u00e9".encode()
    assert made["out/summary.txt"].media_type == "text/plain"
    assert made["out/binary.bin"].data == bytes(range(256)) * 4
    assert made["out/binary.bin"].media_type == "application/octet-stream"
    for name in ("saved.png", "figure-1.png", "figure-2.png"):
        assert made[name].data.startswith(PNG_MAGIC) and made[name].media_type == "image/png"
    for f in r.files:
        assert f.size == len(f.data) and f.sha256 == hashlib.sha256(f.data).hexdigest()
    assert not r.files_truncated and r.files_left_out == ()
    # The next run starts in an empty directory.
    after = sandbox.run("import os\nprint(os.listdir('.'))")
    assert after.stdout == "[]\n" and after.files == ()
    # The log has them, the handed ones too.
    record = sandbox.log_store.get_execution(r.id)
    assert [f.name for f in record.result.files] == [f.name for f in r.files]
    assert [f.data for f in record.result.files] == [f.data for f in r.files]
    assert {f.name: f.data for f in record.request.files} == {
        "data.csv": b"a,b\n1,2\n3,4\n", "nested/blob.bin": source.read_bytes(), "note.txt": "caf\u00e9".encode()}


def test_what_comes_back_is_bounded_and_what_is_left_out_is_named(sandbox):
    code = ("open('a.txt', 'w').write('a')\nopen('big.bin', 'wb').write(b'x' * (3 << 20))\n"
            "open('c.txt', 'w').write('c')\n")
    r = sandbox.run(code, limits=Limits(max_returned_files_mb=1))
    assert r.status == Status.OK
    assert [f.name for f in r.files] == ["a.txt", "c.txt"]
    assert r.files_truncated and r.files_left_out == ("big.bin",)
    none = sandbox.run(code, limits=Limits(max_returned_files_mb=0))
    assert none.files == () and none.files_left_out == ("a.txt", "big.bin", "c.txt")


def test_links_fifos_and_unsafe_names_do_not_come_back_as_files(sandbox):
    code = ("import os\nos.symlink('/etc/passwd', 'link')\n"
            "try:\n    os.mkfifo('fifo')\nexcept OSError:\n    pass  # the jail tier makes no FIFOs\n"
            "open('ok.txt', 'w').write('ok')\nopen('bad\\x1bname', 'w').write('x')\n")
    r = sandbox.run(code)
    assert r.status == Status.OK, r.error
    names = [f.name for f in r.files]
    assert "ok.txt" in names and "link" not in names and "fifo" not in names
    assert "bad\x1bname" not in names
    # named with the character escaped: what is left out is text anyone may show
    assert "bad\\u001bname (holds a control character)" in r.files_left_out


def test_names_that_cannot_be_carried_as_they_are_are_left_out_with_why(sandbox):
    """Bytes that are not UTF-8 (two such names used to come back as one, `x?.txt`, and
    the second replaced the first when written out), C1 controls, and text-direction
    marks (`\u202egnp.html` shows as "lmth.png") are left out, each named escaped."""
    code = ("import os\nfor raw in (b'x\\xff.txt', b'x\\xfe.txt'):\n"
            "    fd = os.open(raw, os.O_WRONLY | os.O_CREAT)\n    os.write(fd, raw)\n    os.close(fd)\n"
            "open('a\\u202egnp.html', 'w').write('<script>')\nopen('c1\\x9bx', 'w').write('x')\n"
            "open('fine.txt', 'w').write('fine')\n")
    r = sandbox.run(code)
    assert r.status == Status.OK, r.error
    assert [f.name for f in r.files] == ["fine.txt"]
    left = set(r.files_left_out)
    assert {"x\\xff.txt (is not valid UTF-8)", "x\\xfe.txt (is not valid UTF-8)",
            "a\\u202egnp.html (holds a text-direction character)",
            "c1\\u009bx (holds a control character)"} == left, left
    assert r.files_truncated


def test_what_the_walk_does_not_look_into_is_said(sandbox):
    """A file deeper than the walk goes, and more files than a result lists: both said,
    never dropped in silence."""
    deep = "/".join(f"d{n}" for n in range(MAX_DEPTH))
    r = sandbox.run(f"import os\nos.makedirs({deep!r})\nopen({deep + '/deep.txt'!r}, 'w').write('x')\n"
                    "for n in range(300):\n    open(f'f{n:03}.txt', 'w').write('x')\n")
    assert r.status == Status.OK, r.error
    assert len(r.files) == MAX_OUTPUT_FILES and r.files_truncated
    assert r.files_left_out[0] == (f"{deep}/ (more than {MAX_DEPTH} directories deep: not "
                                   "looked into)")
    # (the files past the count, and the count of what the list no longer names)
    assert "f299.txt" in r.files_left_out
    many = sandbox.run("for n in range(600):\n    open(f'g{n:03}.txt', 'w').write('x')\n",
                       limits=Limits(max_returned_files_mb=0))
    assert len(many.files_left_out) == MAX_OUTPUT_FILES
    assert many.files_left_out[-1] == f"(and {600 - MAX_OUTPUT_FILES + 1} more)"


def test_a_run_that_picks_agg_itself_still_gets_its_shown_figures(sandbox):
    """Scripts written for servers select Agg before pyplot; `plt.show()` still saves."""
    r = sandbox.run("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                    "plt.plot([1, 2], [2, 1])\nplt.show()\n")
    assert r.status == Status.OK, r.error
    assert [(f.name, f.media_type) for f in r.files] == [("figure-1.png", "image/png")]
    assert r.files[0].data.startswith(PNG_MAGIC)


def test_a_run_that_fails_still_returns_the_files_it_made(sandbox):
    r = sandbox.run("open('partial.csv', 'w').write('a,b\\n')\nraise ValueError('stopped')")
    assert r.status == Status.ERROR and r.error.type == "ValueError"
    assert [(f.name, f.data) for f in r.files] == [("partial.csv", b"a,b\n")]


def test_a_session_keeps_its_directory_and_each_block_returns_its_own_changes(sandbox):
    with sandbox.session() as session:
        first = session.run("open('kept.txt', 'w').write('1')", files={"given.txt": "g"})
        second = session.run("print(open('kept.txt').read(), open('given.txt').read(), open('more.txt').read())\n"
                             "open('kept.txt', 'a').write('2')", files={"more.txt": "m"})
    assert [f.name for f in first.files] == ["kept.txt"]
    assert second.stdout == "1 g m\n"
    assert [(f.name, f.data) for f in second.files] == [("kept.txt", b"12")]


def test_a_function_call_gets_its_files(sandbox):
    from runner import tool

    @tool
    def count_rows(name: str) -> int:
        """Rows of a CSV file in the working directory."""
        return len(open(name).read().splitlines())

    r = sandbox.call(count_rows, {"name": "rows.csv"}, files={"rows.csv": "a\nb\nc\n"})
    assert r.status == Status.OK and r.return_value == 3


@pytest.mark.parametrize("files, says", [
    ({"/etc/passwd": b"x"}, "absolute path"),
    ({"../up.txt": b"x"}, "'..' part"),
    ({"a/./b": b"x"}, "'.' or '..' part"),
    ({"": b"x"}, "is empty"),
    ({"bell\x07": b"x"}, "control character"),
    ({"c1\x9b": b"x"}, "control character"),
    ({"a\udcffb": b"x"}, "is not valid UTF-8"),
    ({"\u202egnp.html": b"x"}, "text-direction character"),
    ({"x" * 300: b"x"}, "longer than 255"),
    ({"a.txt": 42}, "must be bytes, text or a path"),
    ({"a.txt": Path("/nonexistent/file")}, "is not a regular file"),
    ({"d": b"1", "d/e": b"2"}, "given twice, or as a file and a directory"),
    ({f"f{n}": b"" for n in range(MAX_INPUT_FILES + 1)}, f"at most {MAX_INPUT_FILES}"),
    ({"big": b"x" * (33 << 20)}, "more than 32 MB in all"),
])
def test_bad_input_files_are_refused_before_anything_runs(files, says):
    with Sandbox(log_store=False) as sb:
        with pytest.raises(ConfigurationError) as refused:
            sb.run("print('ran')", files=files)
        assert says in str(refused.value)
        assert sb.run("print('next')").stdout == "next\n"


def test_the_restricted_tier_refuses_files_and_says_where_they_work():
    with Sandbox(backend="restricted", log_store=False) as sb:
        r = sb.run("print(1)", files={"a.txt": "a"})
        assert r.status == Status.DENIED and r.error.type == "NoFiles"
        assert "the jail tier (backend 'jail', the default)" in r.error.message


def test_input_files_that_do_not_fit_the_directory_are_an_error_naming_the_limit():
    with Sandbox(log_store=False) as sb:
        r = sb.run("print('ran')", files={"big.bin": b"x" * (3 << 20)}, limits=Limits(disk_mb=2))
        assert r.status == Status.ERROR and r.error.type == "InputFilesError", r.error
        assert "big.bin" in r.error.message and "ran" not in r.stdout


def test_the_log_stores_each_content_once_and_prune_drops_it(tmp_path):
    from datetime import UTC, datetime, timedelta

    from runner.logs.maintenance import prune

    store = LogStore(tmp_path / "log.db")
    with Sandbox(log_store=store) as sb:
        for _ in range(3):
            assert sb.run("open('same.txt', 'w').write('same bytes')").files[0].data == b"same bytes"

    def blobs() -> int:
        return store.read(lambda conn: conn.execute("SELECT COUNT(*) FROM file_blobs").fetchone()[0])

    assert blobs() == 1
    prune(store, datetime.now(UTC) + timedelta(seconds=1))
    assert blobs() == 0
    store.close()


def test_past_the_logs_cap_a_file_is_recorded_without_its_bytes(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_LOG_FILES_MB", "0")
    store = LogStore(tmp_path / "log.db")
    with Sandbox(log_store=store) as sb:
        r = sb.run("open('out.txt', 'w').write('result')", files={"in.txt": "kept always"})
    assert r.files[0].data == b"result"  # the caller gets it whatever the log keeps
    record = store.get_execution(r.id)
    assert record.result.files[0].kept is False and record.result.files[0].data == b""
    assert record.result.files[0].sha256 == r.files[0].sha256
    assert record.request.files[0].data == b"kept always"
    store.close()


def _cli(args: list[str], home: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "RUNNER_HOME": str(home)}, **kwargs)


def test_the_cli_hands_files_in_and_writes_what_came_out(tmp_path):
    home, out = tmp_path / "home", tmp_path / "out"
    data = tmp_path / "numbers.txt"
    data.write_text("1\n2\n3\n")
    code = ("total = sum(int(n) for n in open('in/numbers.txt'))\n"
            "open('total.txt', 'w').write(str(total))\nprint(total)")
    proc = _cli(["exec", "-", "--file", f"in/numbers.txt={data}", "--out", str(out)], home, input=code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "6\n"
    assert "total.txt  1 B  text/plain" in proc.stderr and f"wrote 1 file(s) to {out}" in proc.stderr
    assert (out / "total.txt").read_text() == "6"
    again = _cli(["exec", "-", "--file", str(data), "--out", str(out), "--json"], home,
                 input="open('total.txt', 'w').write('7')")
    assert again.returncode != 0 and "exists already" in again.stderr  # nothing replaced silently
    assert (out / "total.txt").read_text() == "6"
    result = json.loads(again.stdout)
    assert result["files"][0]["name"] == "total.txt" and result["files"][0]["data"] == "Nw=="
    execution_id = result["id"]
    shown = _cli(["logs", "show", execution_id], home)
    assert "--- files made ---" in shown.stdout and "total.txt  1 B  text/plain" in shown.stdout
    assert "--- files given ---" in shown.stdout and "numbers.txt  6 B" in shown.stdout
    listed = _cli(["logs", "files", execution_id[:10]], home)
    assert listed.stdout == "total.txt  1 B  text/plain\n"
    written = _cli(["logs", "files", execution_id, "--out", str(tmp_path / "from-log")], home)
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "from-log" / "total.txt").read_text() == "7"


def test_export_and_import_carry_files_byte_for_byte(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    code = "open('plot.bin', 'wb').write(bytes(range(256)))"
    (tmp_path / "given.txt").write_text("handed")
    assert _cli(["exec", "-", "--file", f"given.txt={tmp_path / 'given.txt'}"], first, input=code).returncode == 0
    exported = _cli(["logs", "export", "--output", str(tmp_path / "log.jsonl")], first)
    assert exported.returncode == 0, exported.stderr
    imported = _cli(["logs", "import", str(tmp_path / "log.jsonl")], second)
    assert imported.returncode == 0, imported.stderr
    again = _cli(["logs", "export", "--output", str(tmp_path / "again.jsonl")], second)
    assert again.returncode == 0
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "log.jsonl").read_bytes()
    with LogStore(second / "runner.db") as store:
        record = store.list_executions(limit=1)[0]
        record = store.get_execution(record.id)
        assert record.result.files[0].data == bytes(range(256))
        assert record.request.files[0].data == b"handed"


def test_an_import_whose_file_lies_about_its_content_is_refused(tmp_path):
    home = tmp_path / "home"
    assert _cli(["exec", "-"], home, input="open('a.txt', 'w').write('true')").returncode == 0
    assert _cli(["logs", "export", "--output", str(tmp_path / "x.jsonl")], home).returncode == 0
    lines = (tmp_path / "x.jsonl").read_text().splitlines()
    record = json.loads(lines[-1])
    record["result"]["files"][0]["data"] = "ZmFsc2U="  # "false", under the digest of "true"
    (tmp_path / "x.jsonl").write_text("\n".join([*lines[:-1], json.dumps(record)]) + "\n")
    refused = _cli(["logs", "import", str(tmp_path / "x.jsonl")], tmp_path / "other")
    assert refused.returncode != 0 and "sha256 or size is not its content's" in refused.stderr


@pytest.mark.docker
def test_a_docker_worker_leaves_nothing_in_its_scratch_directories_after_a_plot():
    """matplotlib, preloaded in the Docker worker, used to leave its config and cache
    directories in the container's /tmp (the worker's $HOME): every run then looked as if
    it had left files, and the clean-up after each waited its full 5 s. After a plot, the
    container's scratch directories hold nothing, and runs come back at once."""
    import time

    probe = f"probe-{os.getpid()}-{os.urandom(3).hex()}"
    options = backend_options("docker")
    options["labels"] = {**options["labels"], "org.runner.probe": probe}
    with Sandbox("docker", log_store=False, **options) as box:
        box.warm()
        plotted = box.run("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
        assert plotted.ok and [f.name for f in plotted.files] == ["figure-1.png"], plotted.error
        took = []
        for _ in range(3):
            began = time.monotonic()
            assert box.run("print(1)").ok
            took.append(time.monotonic() - began)
        found = subprocess.run(["docker", "ps", "-q", "--filter", f"label=org.runner.probe={probe}"],
                               capture_output=True, text=True, check=True).stdout.split()
        assert found
        listing = subprocess.run(
            ["docker", "exec", found[0], "python3", "-c",
             "import os; print(sorted(os.listdir('/tmp')), sorted(os.listdir('/dev/shm')))"],
            capture_output=True, text=True, check=True).stdout
    assert listing.strip() == "[] []", listing
    assert min(took) < 2.5, took  # (generous: the clean-up's wait was 5 s a run)


def test_writing_out_with_force_never_writes_through_a_hard_link_or_waits_on_a_fifo(tmp_path):
    """`--force` replaces a file the directory already has: a hard link to a file outside
    it is replaced as a name (the file outside keeps its content), and a FIFO, a link or
    a directory of that name is refused at once (no writer waits for a reader)."""
    home, out = tmp_path / "home", tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("host data")
    os.link(victim, out / "made.txt")
    os.mkfifo(out / "plot.txt")
    code = "open('made.txt', 'w').write('from the run')\nopen('plot.txt', 'w').write('p')\n"
    run = _cli(["exec", "-", "--json"], home, input=code)
    execution_id = json.loads(run.stdout)["id"]
    written = _cli(["logs", "files", execution_id, "--out", str(out), "--force"], home)
    assert written.returncode == 1, written.stderr
    assert "plot.txt exists and is not a regular file" in written.stderr
    assert victim.read_text() == "host data"
    assert (out / "made.txt").read_text() == "from the run" and victim.stat().st_nlink == 1
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no part left
    os.unlink(out / "plot.txt")
    again = _cli(["logs", "files", execution_id, "--out", str(out), "--force"], home)
    assert again.returncode == 0, again.stderr
    assert (out / "plot.txt").read_text() == "p"
