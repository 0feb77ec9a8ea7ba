"""`runner math replay EVAL_ID`: every conversation of an evaluation replayed offline.

Each problem that was done has its conversation in the log as an agent run; each is
replayed as `runner logs replay RUN_ID` replays one (runner.logs.replay: the model's
replies from the log, every block and call run again, on the tier and package set given
or as recorded, turn by turn up to the first turn that differs). The report: how many
conversations replay identically, which diverge and at which turn, and which could not
be replayed (their conversation is no longer in the log). The final answers are the
logged ones, so verdicts change only with the checker: `runner math rescore` says how.

Problems are replayed `concurrency` at a time, each thread with its own sandboxes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..logs.agent import AgentLog
from ..logs.evaluations import EvaluationLog, ItemRecord
from ..logs.replay import Divergence, Replayer, ReplayOutcome, ReplayVerdict
from ..logs.store import LogStore
from .jobs import opened_store

__all__ = ["EvaluationReplay", "ProblemReplay", "replay_evaluation"]


class ProblemReplay(BaseModel):
    """One problem's conversation, replayed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    position: int
    problem_id: str
    run_id: str | None
    outcome: str  # identical | diverged | not_replayed
    diverged_at: int | None = None  # the turn
    turns: int = 0
    replayed: int = 0  # executions replayed
    reason: str = ""


class EvaluationReplay(BaseModel):
    """An evaluation's conversations, replayed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    evaluation_id: str
    backend: str | None  # the tier asked for (None: each as recorded)
    packages: list[str] | None
    identical: int
    diverged: int
    not_replayed: int
    problems: list[ProblemReplay]

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def replay_evaluation(evaluation_id: str, *, log_store: LogStore | Path | str | None = None,
                      backend: str | None = None, packages: list[str] | None = None,
                      concurrency: int = 1,
                      on_problem: Callable[[ProblemReplay], None] | None = None
                      ) -> EvaluationReplay:
    """Replay every done problem's conversation (see the module docstring); `on_problem`
    hears of each as it ends (a progress bar)."""
    with opened_store(log_store) as store:
        record = EvaluationLog(store).get(evaluation_id)
        done = [item for item in EvaluationLog(store).items(record.id) if item.status == "done"]
        local = threading.local()
        replayers: list[Replayer] = []
        lock = threading.Lock()

        def replayer() -> Replayer:
            made: Replayer | None = getattr(local, "replayer", None)
            if made is None:
                made = local.replayer = Replayer(store, backend=backend, packages=packages)
                with lock:
                    replayers.append(made)
            return made

        def one(item: ItemRecord) -> ProblemReplay:
            replayed = _problem(store, replayer(), item)
            if on_problem is not None:
                on_problem(replayed)
            return replayed

        try:
            with ThreadPoolExecutor(max_workers=max(1, concurrency),
                                    thread_name_prefix="runner-replay") as pool:
                problems = list(pool.map(one, done))
        finally:
            for made in replayers:
                made.close()
    return EvaluationReplay(
        evaluation_id=record.id, backend=backend, packages=packages,
        identical=sum(p.outcome == "identical" for p in problems),
        diverged=sum(p.outcome == "diverged" for p in problems),
        not_replayed=sum(p.outcome == "not_replayed" for p in problems), problems=problems)


def _problem(store: LogStore, replayer: Replayer, item: ItemRecord) -> ProblemReplay:
    base: dict[str, Any] = {"position": item.position, "problem_id": item.problem_id,
                            "run_id": item.agent_run_id}
    run = None
    if item.agent_run_id is not None:
        try:
            run = AgentLog(store).get(item.agent_run_id)
        except Exception:  # pruned, or damaged: said below
            run = None
    if run is None:
        return ProblemReplay(**base, outcome="not_replayed",
                             reason="its conversation is not in the log (pruned or damaged)")
    replayed = 0
    diverged: int | None = None
    for outcome in replayer.agent_run(run):
        if isinstance(outcome, ReplayOutcome):
            replayed += 1
            if outcome.verdict is not ReplayVerdict.IDENTICAL and diverged is None:
                diverged = outcome.turn if outcome.turn is not None else len(run.turns)
        elif isinstance(outcome, Divergence):
            diverged = outcome.turn
    if diverged is not None:
        return ProblemReplay(**base, outcome="diverged", diverged_at=diverged,
                             turns=len(run.turns), replayed=replayed)
    # (a conversation that ran nothing, an answer without code, replays as it was)
    return ProblemReplay(**base, outcome="identical", turns=len(run.turns), replayed=replayed)
