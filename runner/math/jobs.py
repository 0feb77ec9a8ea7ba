"""What evaluations and trainings share: their log store, their models, and how they stop.

Both are long jobs recorded in the log so that they can be resumed: each opens the log
store it was given (or the default one), talks to an OpenAI-compatible model it was given
or builds one, checks that the server answers before writing anything, and ends early
(resumably) with an error dict when the model server goes away.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import RunnerError
from ..logs.store import LogStore

if TYPE_CHECKING:
    from ..agent.llm import ChatModel

# Errors of the model server that would fail every other problem too: stop, resumably (a
# problem they cost stays pending; it is never counted as a wrong answer). Gone, refusing
# the key, no longer speaking the protocol (an HTML page, no choices), or failing in a way
# the client does not know; a request refused for one problem only (LLM_REQUEST: a context
# too long) counts as that problem unanswered.
FATAL_LLM_CODES = frozenset({"LLM_UNAVAILABLE", "LLM_AUTHENTICATION", "LLM_PROTOCOL",
                             "LLM_ERROR"})


class Stop(Exception):
    """Ends an evaluation or a training early, resumably, with this error."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.error = error


@contextmanager
def opened_store(log_store: LogStore | Path | str | None, *, read_only: bool = False
                 ) -> Iterator[LogStore]:
    """The store given, or one opened on the path given (the default log when None) and
    closed on the way out; `read_only` for reports, which then read a log on a full disk
    or a read-only mount too (`LogStore.for_reading`)."""
    if isinstance(log_store, LogStore):
        yield log_store
        return
    store = LogStore.for_reading(log_store) if read_only else LogStore(log_store)
    try:
        yield store
    finally:
        store.close()


def llm_from(llm: ChatModel | None, *, model: str | None, base_url: str | None,
             api_key: str | None, llm_options: dict[str, Any] | None) -> ChatModel:
    """`llm` as given, or an `OpenAIChat` built from the other arguments."""
    if llm is not None:
        return llm
    from ..agent.llm import OpenAIChat

    return OpenAIChat(model, base_url=base_url, api_key=api_key, **(llm_options or {}))


def llm_settings(llm: ChatModel) -> dict[str, Any]:
    """The sampling settings that make a number reproducible."""
    settings: dict[str, Any] = {}
    for name in ("temperature", "max_tokens"):
        value = getattr(llm, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            settings[name] = value
    return settings


def check_server(llm: ChatModel) -> None:
    """Ask the model's server whether it answers, where the model can tell (an HTTP client
    can; a scripted model has nothing to check)."""
    check = getattr(llm, "check_server", None)
    if callable(check):
        check()


def stop_talking(llm: ChatModel) -> None:
    """Abandon the model's requests in flight and send no more, where the model can (an
    HTTP client can; a scripted model has nothing in flight): a job that is stopping."""
    stop = getattr(llm, "stop", None)
    if callable(stop):
        stop()


def error_dict(exc: RunnerError) -> dict[str, Any]:
    """A runner error as the job's recorded error."""
    return {"code": exc.code, "message": exc.message, "fix": exc.fix}
