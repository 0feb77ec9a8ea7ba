"""The lines of a log export: one model per kind of record, checked as the log makes them.

An export file is untrusted input. Each line is read by the same model the log reads and
writes (an `ExecutionRecord`, an `AgentRun`, an `EvaluationRecord`, ...), with a `kind`,
and then held to what the log's own writes always are: ids are the log's ids (26
characters of Crockford base32, so `../../etc/passwd` is refused), times lie between the
year 2000 and a day from now (no start in the year 9999), and durations, counts and token
numbers are never negative. A line that is not so is refused with the reason.

Rows whose ids are numbers local to one log (function versions, training actions) travel
without them: a function version is named by its set, function, version and time (which is
what an action's `function_version` holds), and actions keep their order in the file.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from ..agent.run import AgentRun, AgentTurn
from ..files import check_name, media_type
from ..types import OutputFile
from .evaluations import EvaluationRecord, ItemRecord
from .functions import Author, FunctionVersionRecord
from .store import ExecutionRecord
from .trainings import ActionRecord, EpochRecord, TrainingRecord

_ID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
# A record from a machine whose clock runs a little ahead is still a record.
CLOCK_SLACK = timedelta(days=1)


def check_id(value: str | None, what: str) -> None:
    if value is not None and not _ID.match(value):
        raise ValueError(f"{what} {value[:60]!r} is not a log id (26 characters of Crockford "
                         "base32, as the log makes them)")


def check_time(value: datetime | None, what: str) -> None:
    if value is None:
        return
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    latest = datetime.now(UTC) + CLOCK_SLACK
    if not EARLIEST <= moment <= latest:
        raise ValueError(f"{what} {value.isoformat()} is not a time the log could have "
                         f"recorded (from {EARLIEST:%Y} to now)")


def check_count(value: int | float | None, what: str) -> None:
    if value is not None and value < 0:
        raise ValueError(f"{what} is {value}, which cannot be negative")


def check_file(made: OutputFile) -> None:
    """A file as the log records them: its digest, size and type are those of its bytes
    (the log stores contents by digest: a wrong one would stand for another file's), its
    name a relative path in the run's directory."""
    check_name(made.name)
    if made.kept:
        if hashlib.sha256(made.data).hexdigest() != made.sha256 or len(made.data) != made.size:
            raise ValueError(f"file {made.name[:80]!r}: its sha256 or size is not its content's")
        if media_type(made.data) != made.media_type:
            raise ValueError(f"file {made.name[:80]!r}: its media type is not its content's "
                             f"({media_type(made.data)})")


class ExecutionLine(ExecutionRecord):
    kind: Literal["execution"] = "execution"

    @model_validator(mode="after")
    def _as_logged(self) -> ExecutionLine:
        result = self.result
        check_id(result.id, "the execution's id")
        check_time(result.started_at, "its start")
        check_count(result.duration_ms, "its duration_ms")
        check_count(result.resources.cpu_ms, "its cpu_ms")
        check_count(result.resources.max_rss_kb, "its max_rss_kb")
        for key in ("agent_run", "replay_of"):
            value = self.meta.get(key)
            if isinstance(value, str):
                check_id(value, f"its meta's {key}")
        for made in result.files:
            check_file(made)
        return self


class AgentRunLine(AgentRun):
    kind: Literal["agent_run"] = "agent_run"

    @model_validator(mode="after")
    def _as_logged(self) -> AgentRunLine:
        check_id(self.id, "the agent run's id")
        check_time(self.started_at, "its start")
        check_time(self.finished_at, "its end")
        check_count(self.sandbox_ms, "its sandbox_ms")
        if self.turns:
            raise ValueError("an agent run's line holds no turns (they are lines of their own)")
        return self


class AgentTurnLine(AgentTurn):
    kind: Literal["agent_turn"] = "agent_turn"
    run_id: str

    @model_validator(mode="after")
    def _as_logged(self) -> AgentTurnLine:
        check_id(self.run_id, "the turn's run_id")
        if self.number < 1:
            raise ValueError(f"turn number {self.number} is not a turn's (they count from 1)")
        check_time(self.started_at, "its start")
        for name in ("latency_ms", "retries", "prompt_tokens", "completion_tokens"):
            check_count(getattr(self, name), f"its {name}")
        for execution_id in self.execution_ids:
            check_id(execution_id, "an execution id of the turn")
        return self


class FunctionVersionLine(BaseModel):
    """A function version without the number it has in one log (`FunctionVersionRecord`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["function_version"] = "function_version"
    changed_at: datetime
    set_name: str = Field(min_length=1)
    function: str = Field(min_length=1)
    version: int = Field(ge=1)
    action: Literal["add", "replace", "remove"]
    author: Author
    note: str = ""
    spec: dict[str, Any] | None = None
    code_diff: str = ""

    @model_validator(mode="after")
    def _as_logged(self) -> FunctionVersionLine:
        check_time(self.changed_at, "the change's time")
        return self

    def record(self) -> FunctionVersionRecord:
        return FunctionVersionRecord.model_validate(
            {"id": 0, **self.model_dump(exclude={"kind"})})


class EvaluationLine(EvaluationRecord):
    kind: Literal["evaluation"] = "evaluation"

    @model_validator(mode="after")
    def _as_logged(self) -> EvaluationLine:
        check_id(self.id, "the evaluation's id")
        check_time(self.created_at, "its creation")
        check_time(self.finished_at, "its end")
        check_count(self.total, "its total")
        return self


class EvaluationItemLine(ItemRecord):
    kind: Literal["evaluation_item"] = "evaluation_item"

    @model_validator(mode="after")
    def _as_logged(self) -> EvaluationItemLine:
        check_id(self.evaluation_id, "the item's evaluation_id")
        check_id(self.agent_run_id, "its agent_run_id")
        for name in ("position", "attempts", "duration_ms", "level"):
            check_count(getattr(self, name), f"its {name}")
        check_time(self.started_at, "its start")
        check_time(self.finished_at, "its end")
        if self.status not in ("pending", "done"):
            raise ValueError(f"item status {self.status!r} is not pending or done")
        return self


class TrainingLine(TrainingRecord):
    kind: Literal["training"] = "training"

    @model_validator(mode="after")
    def _as_logged(self) -> TrainingLine:
        check_id(self.id, "the training's id")
        check_time(self.created_at, "its creation")
        check_time(self.finished_at, "its end")
        check_count(self.epochs, "its epochs")
        check_count(self.best_epoch, "its best_epoch")
        return self


class TrainingEpochLine(EpochRecord):
    kind: Literal["training_epoch"] = "training_epoch"

    @model_validator(mode="after")
    def _as_logged(self) -> TrainingEpochLine:
        check_id(self.training_id, "the epoch's training_id")
        check_id(self.evaluation_id, "its evaluation_id")
        for name in ("epoch", "correct", "total", "success_rate"):
            check_count(getattr(self, name), f"its {name}")
        check_time(self.started_at, "its start")
        check_time(self.finished_at, "its end")
        return self


class VersionKey(BaseModel):
    """A function version named across logs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    set_name: str
    function: str
    version: int
    changed_at: datetime


class TrainingActionLine(BaseModel):
    """A training action without the number it has in one log (`ActionRecord`); the
    function version it made, by its name across logs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["training_action"] = "training_action"
    training_id: str
    epoch: int = Field(ge=0)
    created_at: datetime
    agent_run_id: str | None = None
    agent_turn: int | None = Field(default=None, ge=1)
    outcome: str
    action: str | None = None
    function: str | None = None
    code: str | None = None
    reason: str = ""
    spec: dict[str, Any] | None = None
    arguments: Any = None
    function_version: VersionKey | None = None
    rolled_back: bool = False

    @model_validator(mode="after")
    def _as_logged(self) -> TrainingActionLine:
        check_id(self.training_id, "the action's training_id")
        check_id(self.agent_run_id, "its agent_run_id")
        check_time(self.created_at, "its time")
        return self

    def record(self) -> ActionRecord:
        return ActionRecord.model_validate(
            {"id": 0, **self.model_dump(exclude={"kind", "function_version"})})


Line = Annotated[ExecutionLine | AgentRunLine | AgentTurnLine | FunctionVersionLine
                 | EvaluationLine | EvaluationItemLine | TrainingLine | TrainingEpochLine
                 | TrainingActionLine, Field(discriminator="kind")]
LINE = TypeAdapter(Line)
