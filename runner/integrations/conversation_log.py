"""A framework's conversation in the log as an agent run, so that `runner logs runs`,
`runner logs show RUN_ID` and the viewer show it as they show `runner agent`'s.

What an executor sees of a conversation is its blocks, not the model's messages: AG2,
AutoGen and smolagents hand it the code they extracted. So each block is a turn whose
reply is that block (as a fenced block of its language, what the `code` protocol reads),
whose action is the block, whose feedback is the text the framework hands back to the
model, and whose execution is the block's run. The run starts with its conversation's
first block (`integration` in its settings names the framework), and ends `terminated`
when the conversation does (a new conversation, a restart, the executor closed): a
framework's conversation ends without an answer runner can read.

Writes are best effort, as the agent's are: a log that cannot take a turn does not stop
the conversation, and the run's last write (the whole run) goes to the log's spool when
the log cannot take it.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import Any

from ..agent.actions import CodeAction
from ..agent.run import AgentRun, AgentStatus, AgentTurn
from ..ids import new_id
from ..logs.agent import AgentLog
from ..sandbox import Sandbox
from ..types import ExecutionResult

log = logging.getLogger(__name__)

ENDED = "the conversation's executor ended it (a new conversation, a restart, or closed)"


class ConversationRecord:
    """One framework conversation as an agent run in the sandbox's log (nothing when the
    sandbox keeps no log). Thread-safe: a conversation's blocks may come from threads."""

    def __init__(self, sandbox: Sandbox, integration: str, settings: dict[str, Any]) -> None:
        self._log: AgentLog | None = None
        if sandbox.log_store is not None:
            try:
                self._log = AgentLog(sandbox.log_store)
            except Exception:  # the conversation matters more than its log
                log.warning("this %s conversation is not logged as an agent run: the log "
                            "cannot be opened", integration, exc_info=True)
        self._run = AgentRun(id=new_id(), task=f"a conversation of {integration}",
                             protocol="code", backend=sandbox.backend,
                             settings={"integration": integration, **settings})
        self._turns: list[AgentTurn] = []
        self._lock = threading.Lock()
        self._started = False
        self._ended = False

    @property
    def id(self) -> str:
        return self._run.id

    def block(self, code: str, language: str, result: ExecutionResult, feedback: str) -> None:
        """A block the conversation ran, and what the model was told of it."""
        if self._log is None:
            return
        with self._lock:
            if self._ended:
                return
            if not self._started:
                self._started = True
                self._write(lambda log: log.start(self._run))
            turn = AgentTurn(
                number=len(self._turns) + 1, started_at=result.started_at, messages_sent=[],
                reply={"role": "assistant", "content": f"```{language}\n{code}\n```"},
                actions=[CodeAction(code=code, language=language).model_dump(mode="json")],
                feedback_messages=[{"role": "user", "content": feedback}],
                execution_ids=[result.id], latency_ms=0)
            self._turns.append(turn)
            self._run = self._run.model_copy(
                update={"sandbox_ms": self._run.sandbox_ms + result.duration_ms})
            self._write(lambda log: log.add_turn(self._run.id, turn))

    def end(self) -> None:
        """The conversation is over: the whole run, `terminated`, once (nothing for a
        conversation that ran no block)."""
        with self._lock:
            if self._ended or not self._started or self._log is None:
                self._ended = True
                return
            self._ended = True
            run = self._run.model_copy(update={
                "turns": list(self._turns), "status": AgentStatus.TERMINATED,
                "stop_reason": ENDED, "finished_at": datetime.now(timezone.utc)})
            try:
                self._log.finish(run)
            except Exception as exc:  # the conversation matters more than its log
                try:
                    where = self._log.spool(run)
                except Exception:
                    log.warning("conversation %s is not in the log: %s", run.id, exc)
                    return
                log.warning("could not write conversation %s to the log (%s); kept it in %s",
                            run.id, exc, where)

    def _write(self, work: Any) -> None:
        """A write as the conversation goes; `end` writes the whole run, making good any
        that failed."""
        assert self._log is not None
        try:
            work(self._log)
        except Exception:
            log.debug("could not write conversation %s to the log", self._run.id, exc_info=True)
