"""AG2's AgentOptimizer notebook (agentchat_agentoptimizer), with every code block and every
learned function in runner's sandbox.

The notebook's loop as it is: a MathUserProxyAgent and an assistant solve MATH problems;
after each epoch over the training problems the AgentOptimizer reads the conversations and
adds, revises or removes functions; the assistant is told of them and the proxy calls
them. What changes (the lines marked `runner:`):

- the proxy mixes in `RunnerMathChat`: its blocks run once each, in one runner session per
  problem (the notebook's proxy replays every earlier block, twice, on the host);
- the optimizer is `SandboxedAgentOptimizer`: each proposed function is checked and
  smoke-run as `runner math train` does, kept as a version of a FunctionSet, and called
  in the sandbox with validated arguments (the notebook's callables pip-install the model's
  packages and run its code on the host);
- answers are judged by runner's checker rather than string equality.

Data: MATH problems from `runner math data` (the Algebra subset, as the notebook), or any
MATH-format JSONL file. Model: any OpenAI-compatible server.

    runner math data
    python examples/ag2_agentoptimizer.py --base-url http://127.0.0.1:8000/v1 --model M \\
        --train 10 --test 10 --epochs 10 --out learned.json

Every block, smoke run and function call is in runner's log (`runner logs list`), with
`{"integration": "ag2"}` in its meta; the functions' versions are in `runner functions
history ag2-learned`.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from typing import Any

from autogen import AssistantAgent
from autogen.agentchat.contrib.math_user_proxy_agent import MathUserProxyAgent
from autogen.code_utils import extract_code
from autogen.math_utils import get_answer

from runner import FunctionSet, Sandbox
from runner.integrations.ag2 import RunnerMathChat, SandboxedAgentOptimizer
from runner.math import is_equivalent, load_dataset

# The notebook's prompt.
PROMPT = """Let's solve a math problem.
Query requirements:
You should always use the 'print' function for the output and use fractions/radical forms instead of decimals.
You can use packages like sympy to help you.
You must follow the formats below to write your code:
```python
# your code
```
Please follow this process:
1. Solve the problem step by step (do not over-divide the steps).
2. Take out any queries that can be asked through Python code (for example, any calculations or equations that can be calculated) and functions you know in the context of this conversation.

Please
(1) do not mix suggested Python codes and function calls in one step.
(2) You MUST remember that you don't have a function named "python" available.

You must follow the formats below to write your Python code:
```python
# your code
```

3. Wait for me to give the results or wait for the executed results of the function call.
4. Continue if you think the result is correct. If the result is invalid or unexpected, please correct your query or reasoning.

After all the queries are run and you get the answer, put the answer in \\boxed{}.

Problem:
"""


def is_termination_msg_mathchat(message: Any) -> bool:
    """The notebook's: an answer in \\boxed{} without code, or TERMINATE."""
    if isinstance(message, dict):
        message = message.get("content")
        if message is None:
            return False
    if any(block[0] == "python" for block in extract_code(message)):
        return False
    return "TERMINATE" in message or get_answer(message) not in (None, "")


class MathProxy(RunnerMathChat, MathUserProxyAgent):  # runner: RunnerMathChat mixed in
    """The notebook's MathUserProxyAgent: one problem per chat, its answer judged."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(is_termination_msg=is_termination_msg_mathchat, **kwargs)
        self.register_reply(AssistantAgent, MathProxy._check_final_result, position=0)
        self.answer: str | None = None
        self.is_correct: int | None = None

    def initiate_chat(self, recipient: Any, answer: str, silent: bool = True, **context: Any) -> int:
        self.answer, self.is_correct = answer, None
        self._prepare_chat(recipient, True)
        self.send(PROMPT + context["problem"], recipient, silent=silent)
        recipient.reset()
        is_correct = copy.deepcopy(self.is_correct) or 0
        self._reset()  # runner: also ends this problem's session
        return is_correct

    def _check_final_result(self, messages: list[dict[str, Any]] | None = None, sender: Any = None,
                            config: Any = None) -> tuple[bool, Any]:
        content = (messages or [{}])[-1].get("content")
        if not content or any(block[0] == "python" for block in extract_code(content)):
            return False, None
        answer = get_answer(content)
        if answer in (None, ""):
            return False, None
        self.is_correct = int(is_equivalent(self.answer, answer))  # runner: the checker
        if self.is_correct:
            return True, "The result is Correct. Please reply me with TERMINATE."
        return False, None


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
    parser.add_argument("--model", default=os.environ.get("RUNNER_MODEL"))
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    parser.add_argument("--optimizer-model", help="default: --model")
    parser.add_argument("--dataset", default="math", help="'math' (runner math data) or a JSONL file")
    parser.add_argument("--type", default="Algebra", help="the MATH subject (the notebook: Algebra)")
    parser.add_argument("--train", type=int, default=10)
    parser.add_argument("--test", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--backend", default="restricted")
    parser.add_argument("--out", help="save the learned function set here")
    args = parser.parse_args(argv)
    if not args.base_url or not args.model:
        parser.error("give --base-url and --model (or OPENAI_BASE_URL and RUNNER_MODEL)")

    def problems(split: str, count: int) -> list[Any]:
        data = load_dataset(args.dataset, split=split) if args.dataset == "math" else load_dataset(args.dataset)
        return list(data.filter(types=[args.type]))[:count]

    train, test = problems("train", args.train), problems("test", args.test)
    llm_config = {"config_list": [{"model": args.model, "base_url": args.base_url,
                                   "api_key": args.api_key}], "cache_seed": None}
    optimizer_config = copy.deepcopy(llm_config)
    optimizer_config["config_list"][0]["model"] = args.optimizer_model or args.model

    with Sandbox(backend=args.backend, source="ag2") as sandbox:  # runner
        learned = FunctionSet("ag2-learned")  # runner: the functions, with their history
        assistant = AssistantAgent(name="assistant", system_message="You are a helpful assistant.",
                                   llm_config=llm_config)
        proxy = MathProxy(name="mathproxyagent", human_input_mode="NEVER", sandbox=sandbox)  # runner

        def success_rate(data: list[Any]) -> float:
            solved = sum(proxy.initiate_chat(assistant, answer=p.answer, problem=p.problem) for p in data)
            return solved / max(1, len(data))

        before = success_rate(test)
        optimizer = SandboxedAgentOptimizer(  # runner: checked, smoke-run, versioned, sandboxed
            max_actions_per_step=3, llm_config=optimizer_config,
            optimizer_model=optimizer_config["config_list"][0]["model"],
            functions=learned, sandbox=sandbox)
        for epoch in range(args.epochs):
            for problem in train:
                is_correct = proxy.initiate_chat(assistant, answer=problem.answer, problem=problem.problem)
                history = assistant.chat_messages_for_summary(proxy)
                optimizer.record_one_conversation(history, is_satisfied=is_correct)
            register_for_llm, register_for_executor = optimizer.step()
            for item in register_for_llm:
                assistant.update_tool_signature({"type": "function", "function": item["func_sig"]},
                                                is_remove=item["is_remove"])
            if register_for_executor:
                proxy.register_function(function_map=register_for_executor)
            accepted = [v for v in optimizer.proposals if v.accepted]
            print(f"epoch {epoch + 1}: functions {learned.names}; {len(accepted)} of "
                  f"{len(optimizer.proposals)} proposals accepted so far", file=sys.stderr)
        after = success_rate(test)
        proxy.runner_executor.close()
        if args.out:
            learned.save(args.out)

    print("Functions learned:")
    for spec in learned:
        print(f"  {spec.name}: {spec.description}")
    print(f"success rate without training: {before:.0%}")
    print(f"success rate with training: {after:.0%}")
    return after


if __name__ == "__main__":
    main()
