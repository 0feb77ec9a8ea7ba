"""Training a math agent's function list with the AgentOptimizer: epochs, rollbacks, early stop.

    from runner.math import train
    result = train("math:train:Algebra", limit=20, epochs=5, model="m", base_url=url,
                   optimizer_model="m2", out="learned.json")
    result.functions          # the best FunctionSet (also saved to learned.json)
    result.history            # per epoch: success rate, actions, refusals, rolled back or not

How a training goes (every step is in the log: `runner.logs.trainings`):

- Epoch 0 measures the starting set (`functions`, often none): an evaluation of the
  training problems (`runner.math.evaluation`: every conversation logged, every answer
  judged by the checker), whose success rate is the baseline.
- Each later epoch is one optimizer step (`runner.optimizer.Optimizer.step`) on the best
  set so far, with the conversations and results of the evaluation that measured it, then
  an evaluation of the changed set. A set that does worse is rolled back (its changes are
  undone, logged as changes too) and, with `show_rolled_back`, shown to the optimizer in
  later steps as changes not to make again; a set that does at least as well is kept.
  A step that changes nothing is not measured again.
- The training stops after `epochs` epochs, after `patience` epochs in a row without
  improvement, or when the optimizer answers TERMINATE without changing anything.
- Every change of a function is a new version in the function history (author: the
  optimizer run, i.e. this training's id; note: the epoch), so `runner functions history`
  shows each version with its diff, and the epochs that measured it with their scores.
  The best set is saved (atomically, after each decision) to `out`: a function-set file
  that `runner agent`, `runner call` and `runner math eval --functions` load as it is.
- `resume_training(ID)` goes on from what the log holds: an evaluation in progress is
  resumed (`resume_evaluation`), a step in progress keeps its accepted actions and asks
  for the rest, a decision not yet written is made again.

Package environments are the backend's: built once per set of requirements and cached,
never installed per call; the sandbox never reaches the network.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..agent.run import AgentStatus
from ..backends.base import DEFAULT_BACKEND
from ..errors import ConfigurationError, RunnerError
from ..functions import FunctionSet
from ..ids import new_id
from ..logs.agent import AgentLog
from ..logs.evaluations import EvaluationLog, EvaluationRecord, ItemRecord
from ..logs.functions import Author, FunctionVersionLog
from ..logs.job_status import JobStatus
from ..logs.store import LogStore
from ..logs.trainings import (
    EpochRecord,
    NewAction,
    TrainingLog,
    TrainingRecord,
)
from ..optimizer import Conversation, Optimizer, OptimizerRun, RolledBack, Statistics
from ..optimizer.prompt import DEFAULT_HISTORY_TOKENS
from ..optimizer.step import DEFAULT_MAX_ACTIONS, DEFAULT_MAX_TRIES, change_of
from ..ranges import Range, require
from ..sandbox import Sandbox
from ..stopping import JobInterrupted, stopped_by
from ..types import Limits
from .datasets import DATASETS, Dataset, file_sha256, load_dataset
from .evaluation import ProgressListener, evaluate, resume_evaluation
from .jobs import (
    Stop,
    check_server,
    error_dict,
    llm_from,
    llm_settings,
    opened_store,
    stop_talking,
)
from .mathchat import DEFAULT_MAX_OUTPUT_CHARS, check_variant, load_functions
from .report import EvaluationReport, recorded_variant
from .training_report import EpochSummary, TrainingReport, build_training_report

if TYPE_CHECKING:
    from ..agent.llm import ChatModel

__all__ = ["TrainingError", "TrainingListener", "parse_train_spec", "resume_training", "train",
           "training_report"]

_SHOWN_ROLLED_BACK = 5  # the latest rolled-back steps shown to the optimizer
TRAINING_METHODS = ("mathchat", "pot")  # the methods that use functions


class TrainingError(RunnerError):
    """A training cannot start or go on as asked."""

    code = "TRAINING"


class TrainingListener(Protocol):
    """What a training reports as it goes (the CLI's progress lines)."""

    def started(self, record: TrainingRecord, *, resumed: bool) -> None: ...

    def evaluation(self, epoch: int) -> ProgressListener | None:
        """The listener of this epoch's evaluation (a progress bar), if any."""

    def step_run(self, epoch: int, run: OptimizerRun) -> None:
        """One optimizer conversation of this epoch's step is over."""

    def epoch_done(self, summary: EpochSummary) -> None: ...

    def finished(self, report: TrainingReport) -> None: ...


def parse_train_spec(text: str) -> tuple[str, str | None, list[str] | None]:
    """`math:train:Algebra` -> ("math", "train", ["Algebra"]); a JSONL file's path as it is.

    The form is NAME[:SPLIT[:TYPE[,TYPE...]]]; an existing file (or a name ending in
    .jsonl) is a file."""
    if Path(text).is_file() or text.endswith(".jsonl"):
        return text, None, None
    parts = text.split(":", 2)
    name = parts[0]
    split = parts[1] or None if len(parts) > 1 else None
    types = [t.strip() for t in parts[2].split(",") if t.strip()] if len(parts) > 2 else None
    return name, split, types or None


def _load_training_data(dataset: str | Path | Dataset, split: str | None,
                        types: Iterable[str] | None, levels: Iterable[int | str] | None) -> Dataset:
    if isinstance(dataset, Dataset):
        loaded = dataset
    else:
        name, spec_split, spec_types = parse_train_spec(str(dataset))
        if spec_split is not None and split is not None and spec_split != split:
            raise ConfigurationError(f"two splits given: {spec_split!r} in {dataset!r} and "
                                     f"{split!r}", fix="give the split once")
        loaded = load_dataset(name, split or spec_split)
        if spec_types is not None:
            types = [*spec_types, *(types or [])]
    if types is not None or levels is not None:
        loaded = loaded.filter(types=list(types) if types is not None else None,
                               levels=list(levels) if levels is not None else None)
    if not len(loaded):
        raise TrainingError(f"{loaded.label} has no problems to train on"
                            + (" with these filters" if loaded.filters else ""),
                            fix="check the training problems and their type/level filters")
    return loaded


def train(problems: str | Path | Dataset, *, llm: ChatModel | None = None,
          model: str | None = None, base_url: str | None = None, api_key: str | None = None,
          llm_options: dict[str, Any] | None = None, optimizer_llm: ChatModel | None = None,
          optimizer_model: str | None = None, optimizer_base_url: str | None = None,
          optimizer_api_key: str | None = None,
          optimizer_llm_options: dict[str, Any] | None = None, split: str | None = None,
          types: Iterable[str] | None = None, levels: Iterable[int | str] | None = None,
          limit: int | None = None, seed: int | None = None, epochs: int = 5,
          functions: FunctionSet | str | Path | None = None, method: str = "mathchat",
          variant: str | None = None,
          backend: str = DEFAULT_BACKEND, concurrency: int = 1, max_turns: int | None = None,
          limits: Limits | None = None, budget_s: float | None = 120.0,
          native_tools: bool = True, max_actions: int = DEFAULT_MAX_ACTIONS,
          max_tries: int = DEFAULT_MAX_TRIES, patience: int = 2,
          show_rolled_back: bool = True, history_tokens: int = DEFAULT_HISTORY_TOKENS,
          optimizer_protocol: str = "auto", out: str | Path | None = None,
          set_name: str | None = None, log_store: LogStore | Path | str | None = None,
          progress: TrainingListener | None = None,
          backend_options: dict[str, Any] | None = None,
          on_created: Callable[[TrainingRecord], None] | None = None) -> TrainingReport:
    """Train a function list on `problems` (a dataset spec such as `math:train:Algebra`, a JSONL
    path, or a loaded `Dataset`); see the module docstring. Returns the report: its
    `functions` is the best set, its `history` the epochs.

    The agent's model is `llm`, or an `OpenAIChat` from `model`, `base_url`, `api_key` and
    `llm_options`; the optimizer's is `optimizer_llm`, or one from the `optimizer_*`
    arguments, each falling back to the agent's. `functions` is the starting set;
    `variant` is MathChat's (recorded, and used by every epoch's evaluation).
    """
    require("epochs", epochs, Range(1, False, 10_000, integer=True),
            fix="pass a positive number of optimizer epochs")
    require("patience", patience, Range(1, False, 10_000, integer=True),
            fix="pass a positive number of epochs without improvement to stop after")
    require("concurrency", concurrency, Range(1, False, 1024, integer=True),
            fix="pass a positive number of problems at once")
    if limit is not None:
        require("limit", limit, Range(1, False, 10**9, integer=True),
                fix="pass a positive number of problems, or none for all")
    if method not in TRAINING_METHODS:
        raise ConfigurationError(f"method {method!r} cannot use functions",
                                 fix=f"train with one of: {', '.join(TRAINING_METHODS)}")
    variant = check_variant(method, variant)
    starting = load_functions(functions)
    loaded = _load_training_data(problems, split, types, levels)
    agent_llm = llm_from(llm, model=model, base_url=base_url, api_key=api_key,
                         llm_options=llm_options)
    with optimizer_flags():
        optimizer_chat = optimizer_llm or llm_from(
            None, model=optimizer_model or getattr(agent_llm, "model", None),
            base_url=optimizer_base_url or getattr(agent_llm, "base_url", None),
            api_key=optimizer_api_key or api_key,
            llm_options=optimizer_llm_options if optimizer_llm_options is not None
            else llm_options)
    Optimizer(optimizer_chat, protocol=optimizer_protocol, max_actions=max_actions,
              max_tries=max_tries, history_tokens=history_tokens)  # checks the settings now
    check_server(agent_llm)
    if optimizer_chat is not agent_llm:
        with optimizer_flags():
            check_server(optimizer_chat)
    out_path = str(Path(out).resolve()) if out is not None else None
    if out_path is not None:
        _check_saveable(Path(out_path), shown=str(out))
    record = TrainingRecord(
        id=new_id(), dataset=loaded.name, split=loaded.split, dataset_path=str(loaded.path),
        dataset_sha256=file_sha256(loaded.path), method=method,
        model=getattr(agent_llm, "model", None), base_url=getattr(agent_llm, "base_url", None),
        optimizer_model=getattr(optimizer_chat, "model", None),
        optimizer_base_url=getattr(optimizer_chat, "base_url", None), backend=backend,
        set_name="", out_path=out_path, epochs=epochs,
        settings={
            "sample": {"filters": {key: list(value) for key, value in loaded.filters.items()},
                       "available": len(loaded), "limit": limit, "seed": seed},
            "variant": variant, "concurrency": concurrency, "max_turns": max_turns,
            "budget_s": budget_s,
            "limits": limits.model_dump(mode="json") if limits else None,
            "native_tools": native_tools, "max_actions": max_actions, "max_tries": max_tries,
            "patience": patience, "show_rolled_back": show_rolled_back,
            "history_tokens": history_tokens, "optimizer_protocol": optimizer_protocol,
            "llm": llm_settings(agent_llm), "optimizer_llm": llm_settings(optimizer_chat),
            "starting_functions": starting.to_dict() if starting is not None else None})
    with opened_store(log_store) as store:
        record = record.model_copy(update={"set_name": _own_set_name(
            TrainingLog(store), set_name,
            default=(Path(out).stem if out is not None else "").strip() or "learned")})
        TrainingLog(store).create(record)
        working = FunctionSet(record.set_name, log_store=store)
        for spec in starting or ():
            working.add(spec, by=Author.optimizer(record.id), note="epoch 0: the starting set")
        TrainingLog(store).start_epoch(record.id, 0, functions=working.to_dict(),
                                           status="evaluate")
        if on_created is not None:
            on_created(record)
        training = _Training(record, store, loaded, agent_llm, optimizer_chat, progress,
                             backend_options)
        return training.run(resumed=False)


_MODEL_FLAG = re.compile(r"--(base-url|model|api-key)(?: / [A-Z_]+)?")


@contextmanager
def optimizer_flags() -> Iterator[None]:
    """An error about the optimizer's model server names the optimizer's own options
    (`--optimizer-base-url`, ...), not the agent model's (the client says `--base-url`)."""
    try:
        yield
    except RunnerError as exc:
        def swap(text: str | None) -> str | None:
            return _MODEL_FLAG.sub(r"--optimizer-\1", text) if text else text

        exc.message, exc.fix = swap(exc.message) or exc.message, swap(exc.fix)
        exc.args = (f"{exc.message} (fix: {exc.fix})" if exc.fix else exc.message,)
        raise


def _check_saveable(target: Path, *, shown: str) -> None:
    """The best set can be saved at `target` (as `FunctionSet.save` does it: a new file in
    its directory, renamed over it), checked before anything runs rather than found out
    after the first epoch."""
    fix = "pass an --out in a directory you can write to"
    if not target.parent.is_dir():
        raise ConfigurationError(f"cannot save the trained set to {shown}: its directory does "
                                 "not exist", fix="create the directory, or pass another --out")
    if target.exists() and not target.is_file():
        raise ConfigurationError(f"cannot save the trained set to {shown}: it is not a file",
                                 fix=fix)
    try:
        probe, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise ConfigurationError(f"cannot save the trained set to {shown}: no file can be "
                                 f"written in {target.parent} ({exc.strerror or exc})",
                                 fix=fix) from None
    os.close(probe)
    os.unlink(name)


def _own_set_name(trainings: TrainingLog, asked: str | None, *, default: str) -> str:
    """The trained set's name in the function history: one no other set has used, so that
    two trainings never mix their versions. A name asked for must be free; the default one
    (the --out file's name) gets -2, -3, ... when it is taken."""
    if asked is not None and asked.strip():
        name = asked.strip()
        if trainings.set_name_taken(name):
            raise TrainingError(
                f"the function history already has a set named {name!r}; a training's set "
                "needs a name of its own, or its versions would be mixed with that one's",
                fix="choose another --set-name, or leave it out (a free one is chosen)")
        return name
    candidate, number = default, 1
    while trainings.set_name_taken(candidate):
        number += 1
        candidate = f"{default}-{number}"
    return candidate


def resume_training(training_id: str, *, llm: ChatModel | None = None,
                    model: str | None = None, base_url: str | None = None,
                    api_key: str | None = None, llm_options: dict[str, Any] | None = None,
                    optimizer_llm: ChatModel | None = None,
                    optimizer_model: str | None = None,
                    optimizer_base_url: str | None = None,
                    optimizer_api_key: str | None = None,
                    concurrency: int | None = None,
                    log_store: LogStore | Path | str | None = None,
                    progress: TrainingListener | None = None,
                    backend_options: dict[str, Any] | None = None) -> TrainingReport:
    """Go on with an interrupted training, with its own settings (see the module docstring).
    The models and servers are the training's own unless given; API keys are never stored."""
    with opened_store(log_store) as store:
        log = TrainingLog(store)
        record = log.get(training_id)
        if record.status is JobStatus.FINISHED:
            return build_training_report(log, record)
        # A named dataset is found by its name (and split); a file by its path.
        source = record.dataset if record.dataset in DATASETS else record.dataset_path
        loaded = _load_training_data(source, record.split,
                                     record.settings.get("sample", {}).get("filters", {}).get("types"),
                                     record.settings.get("sample", {}).get("filters", {}).get("levels"))
        if file_sha256(loaded.path) != record.dataset_sha256:
            raise TrainingError(f"the training problems in {loaded.path} changed since training "
                                f"{record.id} began; its epochs would not be comparable",
                                fix="restore the file, or start a new training")
        settings = record.settings
        options = {**settings.get("llm", {}), **(llm_options or {})}
        agent_llm = llm_from(llm, model=model or record.model,
                             base_url=base_url or record.base_url, api_key=api_key,
                             llm_options=options)
        with optimizer_flags():
            optimizer_chat = optimizer_llm or llm_from(
                None, model=optimizer_model or record.optimizer_model,
                base_url=optimizer_base_url or record.optimizer_base_url,
                api_key=optimizer_api_key or api_key,
                llm_options={**settings.get("optimizer_llm", {}), **(llm_options or {})})
        # Refused while another live process runs it: it would be trained twice at once.
        log.claim(record.id)
        try:
            check_server(agent_llm)
            with optimizer_flags():
                check_server(optimizer_chat)
        except RunnerError as exc:
            log.set_status(record.id, JobStatus.INTERRUPTED, error={
                **error_dict(exc), "resume": f"runner math train --resume {record.id}"})
            raise
        if concurrency is not None:
            record = record.model_copy(update={"settings": {**settings, "concurrency": concurrency}})
        record = record.model_copy(update={"status": JobStatus.RUNNING, "error": None})
        training = _Training(record, store, loaded, agent_llm, optimizer_chat, progress,
                             backend_options)
        return training.run(resumed=True)


def training_report(training_id: str, *,
                    log_store: LogStore | Path | str | None = None) -> TrainingReport:
    """The report of a training as it stands (finished or not)."""
    with opened_store(log_store, read_only=True) as store:
        log = TrainingLog(store)
        return build_training_report(log, log.get(training_id))


class _Training:
    """One training run (new or resumed): the loop over epochs and its decisions."""

    def __init__(self, record: TrainingRecord, store: LogStore, dataset: Dataset,
                 llm: ChatModel, optimizer_llm: ChatModel, progress: TrainingListener | None,
                 backend_options: dict[str, Any] | None) -> None:
        self.record = record
        self.store = store
        self.dataset = dataset
        self.llm = llm
        self.optimizer_llm = optimizer_llm
        self.progress = progress
        self.backend_options = dict(backend_options or {})
        self.log = TrainingLog(store)
        self.evaluations = EvaluationLog(store)
        self.settings = record.settings
        self.author = Author.optimizer(record.id)

    # -- the loop ----------------------------------------------------------------------------

    def run(self, *, resumed: bool) -> TrainingReport:
        if self.progress is not None:
            self.progress.started(self.record, resumed=resumed)
        status, stop_reason, error = JobStatus.FINISHED, None, None
        try:
            with Sandbox(backend=self.record.backend, source="optimizer", log_store=self.store,
                         **self.backend_options) as sandbox, \
                    Optimizer(self.optimizer_llm, sandbox=sandbox,
                              protocol=self.settings.get("optimizer_protocol") or "auto",
                              max_actions=int(self.settings.get("max_actions") or DEFAULT_MAX_ACTIONS),
                              max_tries=int(self.settings.get("max_tries") or DEFAULT_MAX_TRIES),
                              history_tokens=int(self.settings.get("history_tokens")
                                                 or DEFAULT_HISTORY_TOKENS),
                              log=AgentLog(self.store)) as optimizer:
                stop_reason = self._epochs(optimizer)
        except KeyboardInterrupt as exc:
            stop_talking(self.llm)
            stop_talking(self.optimizer_llm)
            resume = f"runner math train --resume {self.record.id}"
            self.log.set_status(self.record.id, JobStatus.INTERRUPTED, error={
                "code": "INTERRUPTED", "message": f"stopped by the user ({stopped_by()})", "fix": resume,
                "resume": resume})
            report = build_training_report(self.log, self.log.get(self.record.id))
            if self.progress is not None:
                self.progress.finished(report)
            raise JobInterrupted(report) from exc
        except Stop as stop:
            status, error = JobStatus.INTERRUPTED, stop.error
        except RunnerError as exc:  # the sandbox, the checker or the log could not be had
            status, error = JobStatus.INTERRUPTED, error_dict(exc)
        if error is not None:
            error = {**error, "resume": f"runner math train --resume {self.record.id}"}
        self.log.set_status(self.record.id, status, stop_reason=stop_reason, error=error)
        report = build_training_report(self.log, self.log.get(self.record.id))
        if self.progress is not None:
            self.progress.finished(report)
        return report

    def _epochs(self, optimizer: Optimizer) -> str:
        """Run epochs until a stop; the reason it stopped."""
        patience = int(self.settings.get("patience") or 2)
        while True:
            epochs = self.log.epochs(self.record.id)
            last = epochs[-1]
            if last.status == "done":
                stale = _stale(epochs)
                if stale >= patience:
                    return f"no improvement in {stale} epoch{'s' if stale != 1 else ''}"
                if last.outcome == "unchanged" and last.step_end and "TERMINATE" in last.step_end:
                    return "the optimizer proposed no change (TERMINATE)"
                if last.epoch >= self.record.epochs:
                    return f"all {self.record.epochs} epoch{'s' if self.record.epochs != 1 else ''} done"
                self._start_epoch(last.epoch + 1)
                continue
            self._continue_epoch(last, optimizer)

    def _start_epoch(self, epoch: int) -> None:
        best = self.log.get(self.record.id).best_functions
        assert best is not None  # epoch 0 was measured
        self.log.start_epoch(self.record.id, epoch, functions=best, status="step")

    def _continue_epoch(self, epoch: EpochRecord, optimizer: Optimizer) -> None:
        if epoch.status == "step":
            self._step(epoch, optimizer)
            epoch = next(e for e in self.log.epochs(self.record.id) if e.epoch == epoch.epoch)
        accepted = [a for a in self.log.actions(self.record.id, epoch.epoch) if a.outcome == "accepted"]
        if epoch.epoch > 0 and not accepted:
            self.log.finish_epoch(self.record.id, epoch.epoch, outcome="unchanged", correct=None,
                                  total=None, success_rate=None)
        else:
            report = self._measure(epoch)
            self._decide(epoch, report)
        self._report_epoch(epoch.epoch)

    # -- one step ----------------------------------------------------------------------------

    def _step(self, epoch: EpochRecord, optimizer: Optimizer) -> None:
        record = self.log.get(self.record.id)
        assert record.best_functions is not None and record.best_epoch is not None
        current = self._set(record.best_functions, logged=False)
        working = self._set(epoch.functions, logged=True)  # as far as the step had got
        taken = [a for a in self.log.actions(self.record.id, epoch.epoch) if a.outcome == "accepted"]
        conversations, statistics = self._history(record.best_epoch)
        limit = optimizer.max_actions - len(taken)
        if limit <= 0:
            self.log.end_step(self.record.id, epoch.epoch, step_end="all actions were taken",
                              functions=working.to_dict())
            return

        def recorded(run: OptimizerRun) -> None:
            self._record_run(epoch.epoch, run, working)
            if self.progress is not None:
                self.progress.step_run(epoch.epoch, run)

        result = optimizer.step(conversations, statistics, current, start=working,
                                actions_taken=len(taken), rolled_back=self._rolled_back(),
                                max_actions=limit, on_run=recorded)
        if result.error is not None:
            # The optimizer could not be talked to (or its conversation failed): an error of
            # the training, not a step that proposed nothing. The step stays open: a resume
            # asks again.
            raise Stop({**result.error, "message": f"epoch {epoch.epoch}'s optimizer step: "
                                                   f"{result.error.get('message')}"})
        self.log.end_step(self.record.id, epoch.epoch, step_end=result.ended,
                          functions=working.to_dict())

    def _record_run(self, epoch: int, run: OptimizerRun, working: FunctionSet) -> None:
        """Apply the conversation's accepted action to the trained set, then log its proposals
        and the epoch's set with them (one write)."""
        rows: list[NewAction] = []
        versions = FunctionVersionLog(self.store)
        for proposal in run.proposals:
            version_id = None
            if proposal.accepted:
                change = change_of(proposal)
                note = f"epoch {epoch}: {proposal.action}"
                if change.kind == "remove":
                    working.remove(change.name, by=self.author, note=note)
                elif change.kind == "add":
                    assert change.spec is not None
                    working.add(change.spec, by=self.author, note=note)
                else:
                    assert change.spec is not None
                    working.replace(change.spec, by=self.author, note=note)
                latest = versions.latest(working.name, change.name)
                version_id = latest.id if latest is not None else None
            rows.append(NewAction(
                agent_run_id=run.run_id, agent_turn=proposal.turn,
                outcome="accepted" if proposal.accepted else "rejected",
                action=proposal.action, function=proposal.function, code=proposal.code,
                reason=proposal.reason, spec=proposal.spec, arguments=proposal.arguments,
                function_version_id=version_id))
        if run.accepted is None:  # the conversation ended without a change: say how
            ending = "terminated" if run.status is AgentStatus.TERMINATED else "ended"
            rows.append(NewAction(agent_run_id=run.run_id, outcome=ending,
                                  reason=run.stop_reason or str(run.status)))
        self.log.record_step_run(self.record.id, epoch, rows, functions=working.to_dict())

    def _history(self, epoch: int) -> tuple[list[Conversation], Statistics]:
        """The conversations and results of the evaluation that measured `epoch`'s set."""
        measured = next(e for e in self.log.epochs(self.record.id) if e.epoch == epoch)
        if measured.evaluation_id is None:
            return [], Statistics()
        runs = AgentLog(self.store)
        conversations = []
        for item in self.evaluations.items(measured.evaluation_id, status="done"):
            if item.agent_run_id is None:
                continue
            conversations.append(Conversation(run=runs.get(item.agent_run_id),
                                              success=bool(item.correct), label=_label(item),
                                              detail=_detail(item)))
        return conversations, Statistics.of(conversations)

    def _rolled_back(self) -> list[RolledBack]:
        if not self.settings.get("show_rolled_back", True):
            return []
        shown: list[RolledBack] = []
        best: float | None = None
        for epoch in self.log.epochs(self.record.id):
            if epoch.success_rate is None:
                continue
            if epoch.outcome == "rolled_back" and best is not None:
                changes = [{"action": a.action, "function": a.function, "spec": a.spec}
                           for a in self.log.actions(self.record.id, epoch.epoch)
                           if a.outcome == "accepted"]
                shown.append(RolledBack(epoch=epoch.epoch, success_rate=epoch.success_rate,
                                        before=best, changes=changes))
            elif epoch.outcome in ("baseline", "improved", "kept"):
                best = epoch.success_rate
        return shown[-_SHOWN_ROLLED_BACK:]

    # -- measuring and deciding --------------------------------------------------------------

    def _measure(self, epoch: EpochRecord) -> EvaluationReport:
        settings = self.settings
        listener = self.progress.evaluation(epoch.epoch) if self.progress is not None else None
        options = dict(self.backend_options)
        if epoch.evaluation_id is not None:
            report = resume_evaluation(epoch.evaluation_id, llm=self.llm, log_store=self.store,
                                       concurrency=int(settings.get("concurrency") or 1),
                                       progress=listener, backend_options=options)
        else:
            functions = self._set(epoch.functions, logged=False)

            def created(evaluation: EvaluationRecord) -> None:
                self.log.set_evaluation(self.record.id, epoch.epoch, evaluation.id)

            sample = settings.get("sample") or {}
            limits = settings.get("limits")
            report = evaluate(self.dataset, llm=self.llm, limit=sample.get("limit"),
                              seed=sample.get("seed"), method=self.record.method,
                              variant=recorded_variant(self.record.method, settings),
                              functions=functions if len(functions) else None,
                              backend=self.record.backend,
                              concurrency=int(settings.get("concurrency") or 1),
                              max_turns=settings.get("max_turns"),
                              limits=Limits.model_validate(limits) if limits else None,
                              budget_s=settings.get("budget_s"),
                              native_tools=bool(settings.get("native_tools", True)),
                              max_output_chars=DEFAULT_MAX_OUTPUT_CHARS, log_store=self.store,
                              progress=listener, backend_options=options, on_created=created)
        if report.pending:
            raise Stop(report.record.error or {"code": "EVALUATION", "message":
                                                f"epoch {epoch.epoch}'s evaluation stopped early"})
        return report

    def _decide(self, epoch: EpochRecord, report: EvaluationReport) -> None:
        record = self.log.get(self.record.id)
        rate = report.accuracy
        working = self._set(epoch.functions, logged=True)
        if epoch.epoch == 0 or record.best_success_rate is None:
            outcome = "baseline"
        elif rate < record.best_success_rate:
            outcome = "rolled_back"
        elif rate > record.best_success_rate:
            outcome = "improved"
        else:
            outcome = "kept"
        if outcome == "rolled_back":
            assert record.best_functions is not None and record.best_success_rate is not None
            note = (f"epoch {epoch.epoch}: rolled back ({rate * 100:.1f}% < "
                    f"{record.best_success_rate * 100:.1f}%)")
            _revert(working, self._set(record.best_functions, logged=False), by=self.author,
                    note=note)
            assert record.best_epoch is not None
            best = (record.best_epoch, record.best_success_rate, working.to_dict())
        else:
            best = (epoch.epoch, rate, working.to_dict())
        # The epoch's row and the best set change together, then the file follows.
        self.log.finish_epoch(self.record.id, epoch.epoch, outcome=outcome, correct=report.correct,
                              total=report.total, success_rate=rate)
        self.log.set_best(self.record.id, epoch=best[0], success_rate=best[1], functions=best[2])
        self._save(best[2])

    def _save(self, functions: dict[str, Any]) -> None:
        if self.record.out_path is None:
            return
        target = Path(self.record.out_path)
        try:
            self._set(functions, logged=False).save(target)
        except OSError as exc:
            raise TrainingError(f"cannot save the trained set to {target}: {exc.strerror or exc}",
                                fix=f"make it writable, then runner math train --resume "
                                    f"{self.record.id}") from exc

    def _report_epoch(self, epoch: int) -> None:
        if self.progress is None:
            return
        report = build_training_report(self.log, self.log.get(self.record.id))
        summary = next((e for e in report.epochs if e.epoch == epoch), None)
        if summary is not None:
            self.progress.epoch_done(summary)

    def _set(self, data: dict[str, Any], *, logged: bool) -> FunctionSet:
        return FunctionSet.from_data(data, name=self.record.set_name,
                                     where=f"training {self.record.id}",
                                     log_store=self.store if logged else False)


def _stale(epochs: Sequence[EpochRecord]) -> int:
    """Done epochs since the last one that improved on the best (or measured the baseline)."""
    count = 0
    for epoch in epochs:
        if epoch.status != "done":
            continue
        count = 0 if epoch.outcome in ("baseline", "improved") else count + 1
    return count


def _revert(working: FunctionSet, target: FunctionSet, *, by: Author, note: str) -> None:
    """Make `working` hold `target`'s functions again; every change is logged."""
    for name in working.names:
        if name not in target:
            working.remove(name, by=by, note=note)
    for spec in target:
        if spec.name not in working:
            working.add(spec, by=by, note=note)
        elif working[spec.name] != spec:
            working.replace(spec, by=by, note=note)


def _label(item: ItemRecord) -> str:
    parts = [item.problem_id]
    details = [str(item.type)] if item.type else []
    if item.level is not None:
        details.append(f"Level {item.level}")
    return parts[0] + (f" ({', '.join(details)})" if details else "")


def _detail(item: ItemRecord) -> str:
    gold = item.problem.get("answer")
    if item.correct:
        return f"answered {item.answer}"
    if item.answer is None:
        return f"no answer ({item.run_status}); expected {gold}"
    return f"answered {item.answer}, expected {gold}"


# The names these had before "training" became the one word for a run of the AgentOptimizer
# over epochs; kept so that existing callers go on working.
optimize = train
resume_optimization = resume_training
