"""MathChat's variants on the same problems: accuracy, how conversations end, messages.

Two kinds of model:

- scripted (the default): a model that knows every gold answer but has the habits real
  models have, one per problem in turn: it answers at once; reasons aloud before any code
  or answer; writes a block whose last line is an expression and prints nothing; repeats a
  block that failed; gives up with TERMINATE; prints far too much. It reacts to what it is
  told (a printed value, "Continue", a request to print, a new approach), so the numbers
  show which habits each variant's rules let a model recover from. This measures the
  rules, not a model.
- a real model behind an OpenAI-compatible server (`--base-url`, e.g. the SmolLM2-135M that
  `make e2e-ready` installs, served by llama-cpp-python's server).

Run: `.venv/bin/python bench/compare_mathchat_variants.py [--base-url URL --limit N]`.
Every evaluation is logged to a temporary database, which is removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "data" / "math_sample.jsonl"
VARIANTS = ("default", "python", "guided")
HABITS = ("direct", "reasons first", "silent block", "repeats a failing block", "gives up",
          "prints too much")


def _problem(messages: Sequence[dict[str, Any]]) -> str:
    return str(messages[1]["content"]).rpartition("Problem:")[2].lstrip(" \n")


class ScriptedModel:
    """The scripted model described in the module docstring (in-process, read like a
    server's replies by `runner.testing.FunctionChat`)."""

    def __init__(self, problems: list[Any]) -> None:
        self.gold = {problem.problem: problem.answer for problem in problems}
        self.habit = {problem.problem: HABITS[index % len(HABITS)]
                      for index, problem in enumerate(problems)}

    def reply(self, messages: list[dict[str, Any]], tools: Any) -> str:
        task = _problem(messages)
        answer = f"So the answer is $\\boxed{{{self.gold[task]}}}$."
        step = sum(1 for message in messages if message["role"] == "assistant")
        told = str(messages[-1]["content"]) if step else ""
        habit = self.habit[task]
        if habit == "direct":
            return answer
        if habit == "reasons first":
            return "Let me think about what the problem asks first." if step == 0 else answer
        if habit == "silent block":
            if step == 0:
                return "```python\nvalue = 40 + 2\nvalue\n```"
            return answer if "42" in told else "```python\nprint(value)\n```"
        if habit == "repeats a failing block":
            if step < 2:
                return "```python\nprint(undefined_helper(3))\n```"
            return answer
        if habit == "gives up":
            return "I cannot solve this. TERMINATE" if step == 0 else answer
        # prints too much
        if step == 0:
            return "```python\nprint(list(range(3000)))\n```"
        return answer if step >= 2 or "long" in told or "cut" in told else \
            "```python\nprint(len(range(3000)))\n```"


def _evaluate(variant: str, llm: Any, limit: int | None, database: Path) -> dict[str, Any]:
    from runner.math import evaluate

    started = time.perf_counter()
    report = evaluate(SAMPLE, llm=llm, variant=variant, limit=limit, concurrency=2,
                      log_store=database)
    seconds = time.perf_counter() - started
    from runner.logs.agent import AgentLog
    from runner.logs.evaluations import EvaluationLog
    from runner.logs.store import LogStore

    with LogStore(database) as store:
        runs = [AgentLog(store).get(item.agent_run_id)
                for item in EvaluationLog(store).items(report.id) if item.agent_run_id]
    data = report.to_json_dict()
    return {"variant": variant, "correct": data["correct"], "total": data["total"],
            "accuracy": data["accuracy"], "endings": data["run_statuses"],
            "messages": sum(len(run.turns) for run in runs) / max(1, len(runs)),
            "seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", help="A real model's OpenAI-compatible endpoint.")
    parser.add_argument("--model", help="The model's name (default: the one it serves).")
    parser.add_argument("--limit", type=int, help="The first N problems of the sample.")
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from runner.math import load_jsonl
    from runner.testing import FunctionChat

    problems = list(load_jsonl(SAMPLE))[:args.limit]
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for variant in VARIANTS:
            if args.base_url:
                from runner.agent import OpenAIChat

                llm: Any = OpenAIChat(args.model, base_url=args.base_url, api_key="local",
                                      temperature=0, max_tokens=args.max_tokens, timeout_s=300)
            else:
                llm = FunctionChat(ScriptedModel(problems).reply, model="scripted")
            rows.append(_evaluate(variant, llm, args.limit, Path(directory) / f"{variant}.db"))
    if args.json:
        print(json.dumps(rows))
        return 0
    kind = f"model at {args.base_url}" if args.base_url else \
        f"scripted model (habits in turn: {', '.join(HABITS)})"
    print(f"MathChat variants on {rows[0]['total']} problems of {SAMPLE.name}, {kind}:")
    for row in rows:
        endings = ", ".join(f"{name} {count}" for name, count in sorted(row["endings"].items()))
        print(f"  {row['variant']:8} {row['correct']:3}/{row['total']} correct "
              f"({row['accuracy'] * 100:5.1f}%), {row['messages']:.1f} model messages per "
              f"problem, {row['seconds']:.1f} s; endings: {endings}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
