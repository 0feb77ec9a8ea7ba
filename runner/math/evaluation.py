"""Evaluating a model on a MATH-format dataset: concurrent, logged, resumable.

    from runner.math import evaluate
    report = evaluate("math500", model="m", base_url="http://127.0.0.1:8000/v1",
                      limit=50, concurrency=4)
    report.accuracy, report.by_type["Algebra"].accuracy, report.id

How it works:

- The sample (a dataset's split, filtered by type and level, then the first `limit`
  problems, or `limit` drawn with `seed`) is written to the log with every problem as a
  pending item before anything runs (`runner.logs.evaluations`).
- Problems run concurrently on `concurrency` threads, each problem a conversation of its
  own with a sandbox session of its own (`runner.math.mathchat`), against one Sandbox
  whose worker pool has a worker per thread. Every conversation, its executions and the
  verdict are logged; an item is marked done, with its verdict, in one write once its
  conversation has ended and the checker has decided.
- `resume_evaluation(ID)` runs the items still pending, with the evaluation's own
  settings, whatever stopped it (an error, Ctrl-C, SIGKILL): a done item is never run
  again and never counted twice. A conversation cut short by a kill left a `running`
  agent run behind; its item is pending, so it runs again, from the start.
- A model server that cannot be reached, refuses the key or stops speaking the protocol
  (`jobs.FATAL_LLM_CODES`) stops the evaluation (its problem stays pending), which
  stays resumable; a request the server refuses for one problem only (a context too long)
  counts as that problem unanswered.

The report (`runner.math.report`) gives the accuracy overall, by type and by level, with
the model, method (and MathChat's variant), backend, dataset, sample and checker version.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..agent.run import AgentRun, AgentStatus
from ..backends.base import DEFAULT_BACKEND
from ..errors import ConfigurationError, LLMError, LogStoreError, RunLostError, RunnerError
from ..functions import FunctionSet
from ..ids import new_id
from ..logs.agent import AgentLog
from ..logs.evaluations import (
    EvaluationLog,
    EvaluationRecord,
    ItemRecord,
    NewItem,
)
from ..logs.job_status import JobStatus
from ..logs.store import LogStore
from ..sandbox import Sandbox
from ..stopping import JobInterrupted, stopped_by
from ..types import Limits
from .checker import Checker, checker_version
from .datasets import Dataset, OnError, Problem, file_sha256, load_dataset
from .jobs import (
    FATAL_LLM_CODES,
    Stop,
    check_server,
    error_dict,
    llm_from,
    llm_settings,
    opened_store,
    stop_talking,
)
from .mathchat import (
    DEFAULT_MAX_OUTPUT_CHARS,
    check_method,
    check_variant,
    default_max_turns,
    judge_answer,
    load_functions,
    make_agent,
)
from .report import EvaluationReport, build_report, recorded_variant

if TYPE_CHECKING:
    from ..agent.llm import ChatModel

__all__ = ["EvaluationError", "ProgressListener", "evaluate", "evaluation_report",
           "resume_evaluation"]

class EvaluationError(RunnerError):
    """An evaluation cannot start or go on as asked."""

    code = "EVALUATION"


class ProgressListener(Protocol):
    """What an evaluation reports as it goes. Called from the evaluation's threads, one
    call at a time."""

    def started(self, record: EvaluationRecord, *, done: int, correct: int) -> None:
        """The evaluation (new or resumed) starts; `done` items were done before."""

    def item_done(self, item: ItemRecord, *, correct: bool) -> None:
        """One more problem is done."""

    def finished(self, record: EvaluationRecord) -> None:
        """No more items will run in this call (finished, or stopped early)."""


class _Silent:
    def started(self, record: EvaluationRecord, *, done: int, correct: int) -> None:
        pass

    def item_done(self, item: ItemRecord, *, correct: bool) -> None:
        pass

    def finished(self, record: EvaluationRecord) -> None:
        pass


class _Settings:
    """What an evaluation runs with; stored in its row, so a resume runs the same way."""

    def __init__(self, *, method: str, backend: str, functions: FunctionSet | None,
                 max_turns: int | None, limits: Limits | None, budget_s: float | None,
                 native_tools: bool, max_output_chars: int, variant: str | None = None) -> None:
        self.method = check_method(method)
        self.variant = check_variant(self.method, variant)
        self.backend = backend
        self.functions = functions
        self.max_turns = max_turns or default_max_turns(self.method, self.variant)
        self.limits = limits
        self.budget_s = budget_s
        self.native_tools = native_tools
        self.max_output_chars = max_output_chars

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "max_turns": self.max_turns, "budget_s": self.budget_s,
                "limits": self.limits.model_dump(mode="json") if self.limits else None,
                "native_tools": self.native_tools, "max_output_chars": self.max_output_chars,
                "functions": self.functions.to_dict() if self.functions is not None else None}

    @classmethod
    def from_record(cls, record: EvaluationRecord) -> _Settings:
        data = record.settings
        functions = data.get("functions")
        limits = data.get("limits")
        return cls(method=record.method, variant=recorded_variant(record.method, data),
                   backend=record.backend,
                   functions=FunctionSet.from_data(functions, where="the evaluation's functions",
                                                   log_store=False) if functions else None,
                   max_turns=data.get("max_turns"),
                   limits=Limits.model_validate(limits) if limits else None,
                   budget_s=data.get("budget_s"), native_tools=bool(data.get("native_tools", True)),
                   max_output_chars=int(data.get("max_output_chars") or DEFAULT_MAX_OUTPUT_CHARS))


def _sample(dataset: Dataset, *, limit: int | None, seed: int | None) -> list[Problem]:
    problems = list(dataset.problems)
    if limit is None or limit >= len(problems):
        return problems
    if seed is None:
        return problems[:limit]
    chosen = sorted(random.Random(seed).sample(range(len(problems)), limit))
    return [problems[index] for index in chosen]


def evaluate(dataset: str | Path | Dataset, *, llm: ChatModel | None = None,
             model: str | None = None, base_url: str | None = None, api_key: str | None = None,
             llm_options: dict[str, Any] | None = None, split: str | None = None,
             types: Iterable[str] | None = None, levels: Iterable[int | str] | None = None,
             limit: int | None = None, seed: int | None = None, method: str = "mathchat",
             variant: str | None = None,
             functions: FunctionSet | str | Path | None = None, backend: str = DEFAULT_BACKEND,
             concurrency: int = 1, max_turns: int | None = None, limits: Limits | None = None,
             budget_s: float | None = 120.0, native_tools: bool = True,
             max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS, on_bad_line: OnError = "stop",
             log_store: LogStore | Path | str | None = None,
             progress: ProgressListener | None = None,
             backend_options: dict[str, Any] | None = None,
             on_created: Callable[[EvaluationRecord], None] | None = None) -> EvaluationReport:
    """Evaluate a model on a dataset (a name, a JSONL path, or a loaded `Dataset`).

    The model is `llm`, or an `OpenAIChat` from `model`, `base_url`, `api_key` and
    `llm_options` (temperature, max_tokens, timeout_s, max_retries). Raises RunnerError
    subclasses for what the caller can fix: no model server, bad dataset lines under
    `on_bad_line="stop"`, an unknown split, type or level (the message lists the valid
    ones). Returns the report, also when the evaluation stopped early (then its status
    says so and `error` why).
    """
    if concurrency < 1:
        raise ConfigurationError(f"concurrency must be at least 1, got {concurrency}",
                                 fix="pass a positive number of problems at once")
    if limit is not None and limit < 1:
        raise ConfigurationError(f"limit must be at least 1, got {limit}",
                                 fix="pass a positive number of problems, or none for all")
    settings = _Settings(method=method, variant=variant, backend=backend,
                         functions=load_functions(functions),
                         max_turns=max_turns, limits=limits, budget_s=budget_s,
                         native_tools=native_tools, max_output_chars=max_output_chars)
    loaded = dataset if isinstance(dataset, Dataset) else \
        load_dataset(str(dataset), split, on_error=on_bad_line)
    if types is not None or levels is not None:
        loaded = loaded.filter(types=list(types) if types is not None else None,
                               levels=list(levels) if levels is not None else None)
    if not len(loaded):
        raise EvaluationError(f"{loaded.label} has no problems to evaluate"
                              + (" with these filters" if loaded.filters else ""),
                              fix="check the dataset file and the --type/--level filters")
    problems = _sample(loaded, limit=limit, seed=seed)
    model_llm = llm_from(llm, model=model, base_url=base_url, api_key=api_key,
                         llm_options=llm_options)
    check_server(model_llm)
    record = EvaluationRecord(
        id=new_id(), dataset=loaded.name, split=loaded.split, dataset_path=str(loaded.path),
        dataset_sha256=file_sha256(loaded.path), method=settings.method,
        model=getattr(model_llm, "model", None), base_url=getattr(model_llm, "base_url", None),
        backend=backend, function_set=settings.functions.name if settings.functions else None,
        checker_version=checker_version(), total=len(problems),
        settings={**settings.to_dict(), "llm": llm_settings(model_llm),
                  "concurrency": concurrency,
                  "sample": {"filters": {key: list(value) for key, value in loaded.filters.items()},
                             "available": len(loaded), "limit": limit, "seed": seed,
                             "skipped_lines": [str(error) for error in loaded.skipped]}})
    items = [NewItem(problem_id=problem.id, type=problem.type, level=problem.level,
                     problem=problem.model_dump(mode="json")) for problem in problems]
    with opened_store(log_store) as store:
        EvaluationLog(store).create(record, items)
        if on_created is not None:
            on_created(record)
        return _run(record, settings, model_llm, store, concurrency=concurrency,
                    progress=progress, backend_options=backend_options)


def resume_evaluation(evaluation_id: str, *, llm: ChatModel | None = None,
                      model: str | None = None, base_url: str | None = None,
                      api_key: str | None = None, llm_options: dict[str, Any] | None = None,
                      concurrency: int | None = None, log_store: LogStore | Path | str | None = None,
                      progress: ProgressListener | None = None,
                      backend_options: dict[str, Any] | None = None) -> EvaluationReport:
    """Run the items of an evaluation that are still pending, with its own settings.

    The model, server and sampling settings are the evaluation's own unless given (an
    API key is never stored: pass it, or set OPENAI_API_KEY)."""
    with opened_store(log_store) as store:
        evaluations = EvaluationLog(store)
        record = evaluations.get(evaluation_id)
        current = checker_version()
        if record.checker_version != current:
            raise EvaluationError(
                f"evaluation {record.id} was judged by {record.checker_version}, but this "
                f"installation has {current}; its verdicts would not be comparable",
                fix="finish it with the checker it started with, or start a new evaluation; "
                    f"`runner math rescore {record.id}` shows which of its verdicts this "
                    "checker would change")
        pending = evaluations.items(record.id, status="pending")
        if not pending:
            if record.status is not JobStatus.FINISHED:
                evaluations.set_status(record.id, JobStatus.FINISHED)
            return evaluation_report(record.id, log_store=store)
        options = {**record.settings.get("llm", {}), **(llm_options or {})}
        model_llm = llm_from(llm, model=model or record.model, base_url=base_url or record.base_url,
                             api_key=api_key, llm_options=options)
        # Refused while another live process runs it: its items would be solved twice.
        evaluations.claim(record.id)
        try:
            check_server(model_llm)
        except RunnerError as exc:
            evaluations.set_status(record.id, JobStatus.INTERRUPTED, error={
                **error_dict(exc), "resume": f"runner math eval --resume {record.id}"})
            raise
        record = evaluations.get(record.id)
        return _run(record, _Settings.from_record(record), model_llm, store,
                    concurrency=concurrency or int(record.settings.get("concurrency") or 1),
                    progress=progress, backend_options=backend_options)


def evaluation_report(evaluation_id: str, *,
                      log_store: LogStore | Path | str | None = None) -> EvaluationReport:
    """The report of an evaluation as it stands (finished or not)."""
    with opened_store(log_store, read_only=True) as store:
        evaluations = EvaluationLog(store)
        record = evaluations.get(evaluation_id)
        return build_report(record, evaluations.summary(record.id))


def _run(record: EvaluationRecord, settings: _Settings, llm: ChatModel, store: LogStore, *,
         concurrency: int, progress: ProgressListener | None,
         backend_options: dict[str, Any] | None) -> EvaluationReport:
    evaluations = EvaluationLog(store)
    listener: ProgressListener = progress or _Silent()
    pending = evaluations.items(record.id, status="pending")
    before = evaluations.progress([record.id])[record.id]
    listener.started(record, done=before[0], correct=before[1])
    report_lock = threading.Lock()
    stop = threading.Event()
    status, error = JobStatus.FINISHED, None
    options = dict(backend_options or {})
    options.setdefault("pool_size", concurrency)  # a warm worker for each thread's session
    try:
        with Sandbox(backend=settings.backend, source="math", log_store=store, **options) as box, \
                Checker(workers=max(1, min(concurrency, os.cpu_count() or 1, 4))) as checker:
            agent = make_agent(llm, method=settings.method, variant=settings.variant,
                               functions=settings.functions,
                               sandbox=box, max_turns=settings.max_turns, limits=settings.limits,
                               budget_s=settings.budget_s, native_tools=settings.native_tools,
                               max_output_chars=settings.max_output_chars, log=AgentLog(store))

            def work(item: ItemRecord) -> None:
                if stop.is_set():
                    return
                problem = Problem.model_validate(item.problem)
                for attempt in (1, 2):
                    evaluations.start_item(record.id, item.position)
                    started = time.monotonic()
                    run = agent.run(problem.problem)
                    # A run the backend lost (a cluster node went away) is not the model's
                    # doing: the problem runs once more, and that attempt counts, whatever
                    # happens to it.
                    if not (attempt == 1 and _lost(run)):
                        break
                if run.status is AgentStatus.LLM_ERROR and run.error is not None \
                        and run.error.get("code") in FATAL_LLM_CODES:
                    raise Stop(run.error)
                if stop.is_set() and run.status is not AgentStatus.ANSWERED:
                    return  # stopped (Ctrl-C, an error elsewhere): the problem stays pending
                verdict = judge_answer(problem.problem, problem.answer, run.final_answer, checker,
                                       method=settings.method)
                counted = evaluations.finish_item(
                    record.id, item.position, agent_run_id=run.id, run_status=str(run.status),
                    answer=run.final_answer, correct=verdict.equal,
                    verdict=verdict.model_dump(mode="json"),
                    duration_ms=int((time.monotonic() - started) * 1000))
                if counted:
                    with report_lock:
                        listener.item_done(item, correct=verdict.equal)

            def interrupted() -> None:
                # Before the threads are waited for: no request is sent any more, and the
                # log says what happened even if the process is killed while they end.
                stop.set()
                stop_talking(llm)
                _record_interrupted(evaluations, record.id)
                listener.finished(evaluations.get(record.id))

            status, error = _drive(work, pending, concurrency, stop, on_interrupt=interrupted)
    except KeyboardInterrupt as exc:
        stop.set()
        stop_talking(llm)
        if not isinstance(exc, JobInterrupted):
            _record_interrupted(evaluations, record.id)
        final = evaluations.get(record.id)
        listener.finished(final)  # (again, if the interrupt came while the threads ran)
        raise JobInterrupted(build_report(final, evaluations.summary(record.id))) from exc
    except RunnerError as exc:  # the sandbox or the checker could not be had
        status, error = JobStatus.INTERRUPTED, error_dict(exc)
    final = _record_end(evaluations, record.id, status, error)
    listener.finished(final)
    return build_report(final, evaluations.summary(record.id))


def _record_end(evaluations: EvaluationLog, evaluation_id: str, status: JobStatus,
                error: dict[str, Any] | None) -> EvaluationRecord:
    """Write how the evaluation ended and read it back. A log that cannot take this write
    (its disk filled up) does not hide the ending: the evaluation stops, reported as
    interrupted with that error and how to resume; the log keeps it `running`, which
    reads as `interrupted` once this process is gone."""
    resume = f"runner math eval --resume {evaluation_id}"
    if error is not None:
        error = {**error, "resume": resume}
    try:
        evaluations.set_status(evaluation_id, status, error=error)
    except LogStoreError as exc:
        status = JobStatus.INTERRUPTED
        error = error or {**error_dict(exc), "resume": resume}
        return evaluations.get(evaluation_id).model_copy(update={"status": status, "error": error})
    return evaluations.get(evaluation_id)


def _record_interrupted(evaluations: EvaluationLog, evaluation_id: str) -> None:
    resume = f"runner math eval --resume {evaluation_id}"
    evaluations.set_status(evaluation_id, JobStatus.INTERRUPTED, error={
        "code": "INTERRUPTED", "message": f"stopped by the user ({stopped_by()}); the problems "
                                          "that were in progress are pending", "fix": resume,
        "resume": resume})


def _lost(run: AgentRun) -> bool:
    return run.status is AgentStatus.CRASHED and run.error is not None and \
        run.error.get("code") == RunLostError.code


def _drive(work: Callable[[ItemRecord], None], items: Sequence[ItemRecord], concurrency: int,
           stop: threading.Event, *, on_interrupt: Callable[[], None]
           ) -> tuple[JobStatus, dict[str, Any] | None]:
    """Run `work` on every item on `concurrency` threads; stop taking new items at the first
    error (the ones in progress finish). How it ended, and the error if any. Ctrl-C calls
    `on_interrupt` at once (which stops the model's requests), then the threads are waited
    for (a code block in progress ends within its time limit) and it is raised on."""
    error: dict[str, Any] | None = None
    queue = list(reversed(items))
    running: set[Future[None]] = set()
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="runner-eval") as pool:
        try:
            while queue or running:
                while queue and len(running) < concurrency and not stop.is_set():
                    running.add(pool.submit(work, queue.pop()))
                if not running:
                    break
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    failure = future.exception()
                    if failure is None:
                        continue
                    stop.set()
                    if error is None:
                        error = _failure_dict(failure)
        except BaseException:
            stop.set()  # Ctrl-C: the conversations in progress end, nothing new starts
            on_interrupt()
            raise
    if error is not None or queue:
        return JobStatus.INTERRUPTED, error
    return JobStatus.FINISHED, None


def _failure_dict(failure: BaseException) -> dict[str, Any]:
    if isinstance(failure, Stop):
        return failure.error
    if isinstance(failure, (RunnerError, LLMError)):
        return error_dict(failure)
    return {"code": "INTERNAL", "message": f"{type(failure).__name__}: {failure}",
            "fix": "this is a bug in runner; please report it, then resume the evaluation"}
