"""`runner math eval` overhead: what the sandbox, the agent loop, the checker and the log add
per problem, with a model that answers instantly.

Targets (issue: math agents):
- with a scripted model that answers at once (two code blocks, then a boxed answer), the
  overhead of an evaluation of 200 problems at concurrency 4 on the restricted tier is at
  most 25 ms per problem. The baseline, measured in the same run, is the same two blocks
  per problem run bare through `Sandbox.session` (one session per problem, same
  concurrency, nothing logged, no model, no checker); the overhead is the difference of
  the wall-clock time per problem, and the ratio of the two is printed as well;
- throughput rises with concurrency up to the core count (printed for 1, 2 and 4).

The problems are synthetic, with gold answers of MATH's shapes (integers, fractions,
radicals, tuples, polynomials, intervals); the model answers some of them in an equivalent
but different form, so the checker's symbolic step runs for about a quarter of them. Each
evaluation pays for its own start (workers, checker processes), as a real one does.

Run: `make bench` (or `.venv/bin/python bench/bench_math_eval.py [--problems N]`).
Prints the numbers and exits non-zero if the overhead target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

TARGET_MS = 25.0
BLOCKS = ("a = {k}\nb = a * 3 + 1\nprint(a, b)", "print(b - a)")

# (gold, how the model writes it): a quarter need the symbolic step
SHAPES = [("{k}", "{k}"), ("\\frac{{{k}}}{{7}}", "\\frac{{{k}}}{{7}}"), ("{k}\\sqrt{{2}}", "{k}\\sqrt{{2}}"),
          ("({k}, 2)", "({k},2)"), ("\\frac{{{k}}}{{3}}", "\\dfrac{{{k2}}}{{6}}"),
          ("x^2+{k}", "{k}+x^2"), ("[{k}, {k1})", "[{k},{k1})"), ("{k}\\pi", "{k}\\pi")]


def _problems(count: int, directory: Path) -> Path:
    path = directory / "problems.jsonl"
    with path.open("w") as handle:
        for index in range(count):
            gold, written = SHAPES[index % len(SHAPES)]
            k = index + 2
            values = {"k": k, "k1": k + 1, "k2": 2 * k}
            handle.write(json.dumps({"id": f"p{index}", "problem": f"Problem {index}: find it.",
                                     "answer": gold.format(**values),
                                     "written": written.format(**values),
                                     "level": 1 + index % 5,
                                     "type": ["Algebra", "Geometry", "Number Theory"][index % 3]})
                         + "\n")
    return path


class InstantModel:
    """A ChatModel that answers at once: two code blocks, then the boxed answer."""

    model = "instant"

    def __init__(self, written: dict[str, str]) -> None:
        self.written = written

    def complete(self, messages: Sequence[dict[str, Any]], *,
                 tools: Sequence[dict[str, Any]] | None = None) -> Any:
        from runner.agent import ChatReply

        task = str(messages[1]["content"]).rpartition("Problem:")[2].lstrip(" \n")
        step = sum(1 for message in messages if message["role"] == "assistant")
        k = len(task)
        if step < len(BLOCKS):
            content = f"Step {step + 1}.\n```python\n{BLOCKS[step].format(k=k)}\n```"
        else:
            content = f"So the answer is $\\boxed{{{self.written[task]}}}$."
        return ChatReply(content=content, message={"role": "assistant", "content": content})


class _Clock:
    """Progress listener that notes when each problem was done."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def started(self, record: Any, *, done: int, correct: int) -> None:
        pass

    def item_done(self, item: Any, *, correct: bool) -> None:
        self.times.append(time.perf_counter())

    def finished(self, record: Any) -> None:
        pass

    def steady_rate(self, skip: int) -> float:
        """Problems per second once running: from the `skip`-th problem done to the last
        (leaves out the start of the workers and checker processes)."""
        return (len(self.times) - skip) / (self.times[-1] - self.times[skip - 1])


def _evaluate(path: Path, model: InstantModel, concurrency: int, database: Path
              ) -> tuple[float, Any, _Clock]:
    from runner.math import evaluate

    clock = _Clock()
    started = time.perf_counter()
    report = evaluate(path, llm=model, concurrency=concurrency, backend="restricted",
                      log_store=database, progress=clock)
    return time.perf_counter() - started, report, clock


def _bare(count: int, concurrency: int) -> float:
    """The same blocks through Sandbox.session, one session per problem, nothing else."""
    from runner import Sandbox

    started = time.perf_counter()
    with Sandbox(backend="restricted", log_store=False, pool_size=concurrency) as sandbox:
        def one(index: int) -> None:
            with sandbox.session() as session:
                for block in BLOCKS:
                    result = session.run(block.format(k=20 + index))
                    assert result.ok, result
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(one, range(count)))
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("RUNNER_HOME", tempfile.mkdtemp(prefix="runner-bench-"))
    with tempfile.TemporaryDirectory(prefix="runner-bench-math-") as scratch:
        directory = Path(scratch)
        path = _problems(args.problems, directory)
        written = {}
        for line in path.read_text().splitlines():
            record = json.loads(line)
            written[record["problem"]] = record["written"]
        model = InstantModel(written)

        _bare(8, args.concurrency)  # page in the worker code once, for both measurements
        bare_s = _bare(args.problems, args.concurrency)
        eval_s, report, _ = _evaluate(path, model, args.concurrency, directory / "eval.db")
        assert report.total == args.problems, report.to_json_dict()
        assert report.correct == args.problems, report.to_json_dict()  # every answer is right

        per_problem_ms = eval_s / args.problems * 1000
        bare_ms = bare_s / args.problems * 1000
        overhead_ms = per_problem_ms - bare_ms
        rules: dict[str, int] = {}
        from runner.logs.evaluations import EvaluationLog

        for item in EvaluationLog(directory / "eval.db").items(report.id):
            rule = str((item.verdict or {}).get("rule"))
            rules[rule] = rules.get(rule, 0) + 1
        print(f"evaluation: {args.problems} problems at concurrency {args.concurrency} in "
              f"{eval_s:.2f} s = {per_problem_ms:.1f} ms/problem (checker rules: {rules})")
        print(f"baseline: the same blocks bare through Sandbox.session: {bare_s:.2f} s = "
              f"{bare_ms:.1f} ms/problem")
        print(f"ratio evaluation/bare = {per_problem_ms / bare_ms:.2f}")
        verdict = "OK" if overhead_ms <= TARGET_MS else "MISSED"
        print(f"overhead (sandbox session use, agent loop, checker, log) = {overhead_ms:.1f} "
              f"ms/problem (target <= {TARGET_MS:.0f}) {verdict}")

        sized = args.problems
        (directory / "small").mkdir()
        small = _problems(sized, directory / "small")  # the first of the same problems
        rates = []
        for concurrency in (1, 2, 4):
            seconds, _, clock = _evaluate(small, model, concurrency, directory / f"c{concurrency}.db")
            rates.append((concurrency, sized / seconds, clock.steady_rate(sized // 2)))
        cores = os.cpu_count() or 1
        print(f"throughput, {sized} problems each on {cores} cores (steady state: the second half "
              "of the problems, after the workers and checker processes have started; in "
              "brackets: overall):")
        for concurrency, overall, steady in rates:
            print(f"  concurrency {concurrency}: {steady:6.1f} problems/s ({overall:.1f}); "
                  f"x{steady / rates[0][2]:.2f} of concurrency 1")
    return 0 if overhead_ms <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
