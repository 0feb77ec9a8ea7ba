"""The messages between the host and a checker worker process: one JSON object per line.

The host sends `CompareRequest`s; the worker answers each with a `CompareReply` (and once,
at start, with a `WorkerReady`). A worker's replies are read as untrusted: it evaluates
hostile answers, so whatever it writes is validated and size-capped before use.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# A reply line longer than this means a confused worker: it is killed, not believed.
MAX_REPLY_BYTES = 64 * 1024
# Parsed forms are shown to people, not re-parsed: a bounded excerpt is enough.
MAX_PARSED_CHARS = 300


class CompareRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int
    gold: str
    candidate: str
    allow_decimal: bool = False
    soft_timeout_s: float = Field(gt=0)


class CompareReply(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int
    equal: bool
    rule: str = Field(max_length=40)
    reason: str = Field(max_length=2000)
    gold_parsed: str | None = Field(default=None, max_length=MAX_PARSED_CHARS)
    candidate_parsed: str | None = Field(default=None, max_length=MAX_PARSED_CHARS)
    # The worker was interrupted mid-computation (timer, memory, recursion): the caches of
    # the libraries it uses may be half-built, so the host replaces it.
    retire: bool = False


class WorkerReady(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ready: bool
    versions: dict[str, str]
