"""AgentOptimizer: functions as learnable weights of an agent, trained on its own conversations.

    from runner.optimizer import Optimizer, conversations_from_log
    conversations = conversations_from_log({run_id: True, other_run_id: False})
    with Optimizer(llm) as optimizer:
        result = optimizer.step(conversations, None, function_set)
    Optimizer.apply(result.actions, function_set, by=Author.optimizer("my-training"))

- `step`: `Optimizer` (one step: up to N actions, M replies per action, each conversation an
  agent run), `Proposal`, `StepResult`;
- `actions`: `add_function`, `revise_function`, `remove_function`, and the host-side checks
  of a proposal;
- `smoke`: the proposed function defined and called once in the sandbox;
- `prompt`: the optimizer's request (lists, results, conversations within a token budget);
- `protocol`: the `tools` and `json` protocols with TERMINATE.

Training a math agent's list over epochs, with rollbacks and early stopping, is
`runner.math.optimize`; any other task can drive `Optimizer.step` from its own logged runs.
"""

from __future__ import annotations

from .prompt import Conversation, ProblemResult, RolledBack, Statistics, conversations_from_log
from .proposals import ACTION_SPECS, ADD, REMOVE, REVISE, Change
from .step import Optimizer, OptimizerRun, Proposal, StepResult

__all__ = [
    "ACTION_SPECS",
    "ADD",
    "REMOVE",
    "REVISE",
    "Change",
    "Conversation",
    "Optimizer",
    "OptimizerRun",
    "ProblemResult",
    "Proposal",
    "RolledBack",
    "Statistics",
    "StepResult",
    "conversations_from_log",
]
