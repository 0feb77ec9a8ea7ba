"""`SandboxedAgentOptimizer`: AG2's `AgentOptimizer` whose learned functions are checked,
smoke-run and kept as versions of a runner `FunctionSet`.

    optimizer = SandboxedAgentOptimizer(max_actions_per_step=3, llm_config=llm_config,
                                        optimizer_model="m", functions=learned, sandbox=sb)
    ...  # record conversations as in AG2's notebook
    register_for_llm, register_for_executor = optimizer.step()
    for item in register_for_llm:
        assistant.update_function_signature(**item)
    user_proxy.register_function(function_map=register_for_executor)

`step()` asks the optimizer model as AG2 does (its prompt, its three actions, its
rollback of a list that did worse, up to three tries per action), and returns the same two
things, with these differences:

- Every proposed action passes the checks and the smoke run of `runner math train`
  (`runner.optimizer.proposals.read_proposal`, then `runner.optimizer.smoke.smoke_test`:
  the arguments load as a function file does, the code compiles and defines exactly the
  named function, packages are plain requirements the sandbox offers, and the function is
  defined and called once in the sandbox; a call that runs past its limit refuses it). A
  refused action counts as invalid, so AG2 asks again, as it does for an action whose
  JSON does not parse, and the reason is printed (as AG2 prints "Syntax is invalid") and
  told to the optimizer model with the next try, which AG2 would send unchanged;
  `proposals` keeps every verdict with its reason.
- A function the step removed is mapped to None in `register_for_executor`, which is how
  AG2's `register_function` removes it from the executor (AG2's own step computes the
  removed names from the functions' keys and so never removes one).
- The list the step settles on (after AG2's rollback, if any) becomes the content of
  `functions`: each change a new version in the function history, by
  `Author.optimizer(training_id)`. `register_for_executor` is `function_map(functions,
  sandbox)`: one callable per function, running it in the sandbox with validated
  arguments. AG2's own callables, which paste the code into a script that runs
  `pip install` and the function in a Docker image (and share one loop variable, so every
  callable runs the last function), are never called.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autogen.agentchat.contrib.agent_optimizer import AgentOptimizer

from ...agent.feedback import Feedback
from ...functions import FunctionSet, FunctionSpec
from ...ids import new_id
from ...logs.functions import Author
from ...optimizer.proposals import KINDS, Change, apply_change, read_proposal
from ...optimizer.smoke import smoke_test
from ...optimizer.step import SMOKE_LIMITS
from ...sandbox import Sandbox
from ...terminal import sanitize_for_terminal
from ...types import Limits
from ..common import integration_meta
from .functions import INTEGRATION, function_map, function_signatures


@dataclass(frozen=True)
class ActionVerdict:
    """One action the optimizer model proposed, and what runner's checks made of it."""

    action: str
    function: str | None
    accepted: bool
    code: str | None = None  # the refusal's feedback code
    reason: str = ""  # why it was refused, or what its smoke call showed


class SandboxedAgentOptimizer(AgentOptimizer):  # type: ignore[misc]  # AG2 ships no type information
    """AG2's AgentOptimizer with runner's checks and a FunctionSet; see the module docstring."""

    def __init__(self, max_actions_per_step: int, llm_config: Any = None,
                 optimizer_model: str | None = "gpt-4-1106-preview", *, functions: FunctionSet,
                 sandbox: Sandbox, limits: Limits | None = None,
                 training_id: str | None = None) -> None:
        super().__init__(max_actions_per_step, llm_config=llm_config, optimizer_model=optimizer_model)
        # the next try of the optimizer model hears why (AG2's base sets `_client`, untyped)
        self._told = _ToldWhy(getattr(self, "_client"))  # noqa: B009
        self._client = self._told
        self.functions = functions
        self.sandbox = sandbox
        self.limits = limits or SMOKE_LIMITS
        self.training_id = training_id or new_id()
        self.steps = 0
        self.proposals: list[ActionVerdict] = []
        self._verdicts: dict[str, list[Change] | None] = {}  # by the actions' JSON
        self._accepted: dict[str, FunctionSpec] = {spec.name: spec for spec in functions}
        self._trial_functions = [_ag2_function(spec) for spec in functions]

    def step(self) -> tuple[list[dict[str, Any]], dict[str, Callable[..., str] | None]]:
        """One AG2 step; (signatures for the assistant, the function map for the executor,
        with None for each function removed)."""
        before = list(self.functions.names)
        super().step()  # its signatures are rebuilt below and its host callables never called
        self.steps += 1
        self._settle(self._trial_functions)
        removed = [name for name in before if name not in self.functions]
        signatures = [{"func_sig": {"name": name}, "is_remove": True} for name in removed]
        signatures += [{"func_sig": signature, "is_remove": False}
                       for signature in function_signatures(self.functions)]
        executor: dict[str, Callable[..., str] | None] = dict.fromkeys(removed)
        executor.update(function_map(self.functions, self.sandbox))
        return signatures, executor

    # -- AG2's hooks ------------------------------------------------------------------------------

    def _validate_actions(self, actions: Any, incumbent_functions: list[dict[str, Any]]) -> bool:
        """AG2 calls this for each reply of the optimizer model; False makes it ask again."""
        if actions is None:
            return True
        key = _actions_key(actions, incumbent_functions)
        if key not in self._verdicts:
            refused_before = sum(not verdict.accepted for verdict in self.proposals)
            self._verdicts[key] = self._check(actions, incumbent_functions)
            if self._verdicts[key] is None:
                for verdict in [v for v in self.proposals if not v.accepted][refused_before:]:
                    self._told.tell(verdict)
        return self._verdicts[key] is not None

    def _update_function_call(self, incumbent_functions: list[dict[str, Any]], actions: Any
                              ) -> list[dict[str, Any]]:
        """The list after the (checked) actions, each function in its checked form."""
        changes = self._verdicts.get(_actions_key(actions, incumbent_functions))
        if changes is None:  # AG2 validates before it updates; an unchecked list is left as it is
            return incumbent_functions
        working = self._working(incumbent_functions)
        for change in changes:
            apply_change(change, working)
            if change.spec is not None:
                self._accepted[change.name] = change.spec
        return [_ag2_function(spec) for spec in working]

    # -- runner's checks -----------------------------------------------------------------------------

    def _check(self, actions: Any, incumbent_functions: list[dict[str, Any]]) -> list[Change] | None:
        """The changes of one reply, or None when any of its actions is refused."""
        working = self._working(incumbent_functions)
        changes: list[Change] = []
        for action in actions:
            name = str(getattr(action.function, "name", "") or "")
            if name not in KINDS:
                self._refuse(name, None, "UNKNOWN_FUNCTION", f"there is no action {name!r}")
                return None
            try:
                arguments = json.loads(str(action.function.arguments or "{}").strip('"'))
            except ValueError as exc:
                self._refuse(name, None, "MALFORMED_RESPONSE", f"its arguments are not JSON: {exc}")
                return None
            change = read_proposal(name, arguments, working)
            if isinstance(change, Feedback):
                self._refuse(name, arguments.get("name") if isinstance(arguments, dict) else None,
                             str(change.code), change.message)
                return None
            note = ""
            if change.spec is not None:
                candidate = FunctionSet.from_data(working.to_dict(), log_store=False)
                apply_change(change, candidate)
                smoke = smoke_test(self.sandbox, change.spec, candidate, action=name,
                                   meta=integration_meta(INTEGRATION, {"ag2_optimizer": self.training_id,
                                                                       "ag2_step": self.steps}),
                                   execution_ids=[], limits=self.limits)
                if smoke.problem is not None:
                    self._refuse(name, change.name, str(smoke.problem.code), smoke.problem.message)
                    return None
                note = smoke.note
            apply_change(change, working)
            changes.append(change)
            self.proposals.append(ActionVerdict(action=name, function=change.name, accepted=True,
                                                reason=note))
        return changes

    def _refuse(self, action: str, function: Any, code: str, reason: str) -> None:
        self.proposals.append(ActionVerdict(action=action, accepted=False, code=code, reason=reason,
                                            function=function if isinstance(function, str) else None))

    def _working(self, incumbent_functions: list[dict[str, Any]]) -> FunctionSet:
        """AG2's list as a throwaway FunctionSet (each function in the form it was accepted in)."""
        specs = [self._accepted.get(str(item.get("name"))) or FunctionSpec.from_dict(item)
                 for item in incumbent_functions]
        return FunctionSet("ag2-incumbent", specs, log_store=False)

    def _settle(self, trial_functions: list[dict[str, Any]]) -> None:
        """Make `functions` hold AG2's list: removals, then additions and revisions, logged."""
        wanted = self._working(trial_functions)
        author = Author.optimizer(self.training_id)
        note = f"AG2 AgentOptimizer step {self.steps}"
        for name in [n for n in self.functions.names if n not in wanted]:
            self.functions.remove(name, by=author, note=note)
        for spec in wanted:
            self.functions.put(spec, by=author, note=note)


class _ToldWhy:
    """AG2's client for the optimizer model, which tells the next request why the last
    proposal was refused (AG2 sends the same prompt again), and prints it for the user."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._refused: list[ActionVerdict] = []

    def tell(self, verdict: ActionVerdict) -> None:
        what = f"{verdict.action}({verdict.function!r})" if verdict.function else verdict.action
        print(sanitize_for_terminal(f"runner refused {what}: [{verdict.code}] {verdict.reason}"))
        self._refused.append(verdict)

    def create(self, *, messages: list[dict[str, Any]], **options: Any) -> Any:
        if self._refused:
            reasons = "\n".join(f"- {v.action}({v.function or ''}): [{v.code}] {v.reason}"
                                for v in self._refused)
            messages = [*messages, {"role": "user", "content": (
                "Your last proposal was refused, for these reasons:\n" + reasons +
                "\nPropose again with these fixed.")}]
            self._refused = []
        return self._client.create(messages=messages, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def _ag2_function(spec: FunctionSpec) -> dict[str, Any]:
    """A function as AG2's optimizer lists it (and shows it to its model)."""
    return {"name": spec.name, "description": spec.description,
            "arguments": spec.parameters.get("properties") or {},
            "packages": " ".join(spec.packages), "code": spec.code}


def _actions_key(actions: Any, incumbent_functions: list[dict[str, Any]]) -> str:
    """One reply's actions on one list (the same reply may come again for another list)."""
    return json.dumps([[[str(getattr(a.function, "name", "")), str(getattr(a.function, "arguments", ""))]
                        for a in actions], incumbent_functions], sort_keys=True, default=str)
