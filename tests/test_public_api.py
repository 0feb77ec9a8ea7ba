"""The public API, pinned: `runner.__all__` and the public names of each subpackage people
build on. A change here is a change for users: make it on purpose, and say so in the README.
Everything else (modules not listed, names with an underscore) is internal and may change."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "runner": [
        "Author", "ErrorInfo", "ExecutionRequest", "ExecutionResult", "FunctionSet",
        "FunctionSpec", "Limits", "Resources", "RunnerError", "Sandbox", "Status",
        "__version__", "tool"],
    "runner.agent": [
        "PROTOCOLS", "Agent", "AgentLog", "AgentRun", "AgentStatus", "AgentTurn", "AnswerAction",
        "CallAction", "ChatModel", "ChatReply", "CodeAction", "CodeProtocol", "ErrorCode",
        "Feedback", "JsonProtocol", "ActionReport", "OpenAIChat", "ParsedReply", "ReplyProblem",
        "ReplyProtocol", "TextProtocol", "ToolCall", "ToolsProtocol", "Usage", "get_protocol"],
    "runner.functions": [
        "ArgumentErrors", "ArgumentProblem", "Author", "FunctionSet", "FunctionSpec", "Tool",
        "call_function", "parameters_schema", "parse_docstring", "spec_from_callable", "tool",
        "validate_arguments"],
    "runner.math": [
        "METHODS", "Checker", "CheckerUnavailableError", "Dataset", "DatasetError",
        "EvaluationError", "EvaluationReport", "LineError", "Problem", "Solution",
        "TrainingError", "TrainingReport", "Verdict", "asks_for_decimal", "check", "check_many",
        "checker_version", "dataset_names", "evaluate", "evaluation_report", "extract_answer",
        "is_equivalent", "load_dataset", "load_jsonl", "resume_evaluation", "resume_training",
        "solve", "train", "training_report"],
    "runner.logs": [
        "MIGRATIONS", "SPOOL_NAME", "Author", "ExecutionRecord", "FunctionVersionLog",
        "FunctionVersionRecord", "LogStore", "Migration", "format_duration", "render_execution",
        "render_execution_list"],
    "runner.optimizer": [
        "ACTION_SPECS", "ADD", "REMOVE", "REVISE", "Change", "Conversation", "Optimizer",
        "OptimizerRun", "ProblemResult", "Proposal", "RolledBack", "Statistics", "StepResult",
        "conversations_from_log"],
    "runner.testing": ["FunctionChat", "Reply", "ScriptedChat", "tool_call"],
    "runner.logs.viewer": ["bind", "create_app", "is_loopback", "serve"],
}


@pytest.mark.parametrize("module_name", sorted(PUBLIC))
def test_the_public_names_are_pinned_and_importable(module_name: str):
    module = importlib.import_module(module_name)
    assert sorted(module.__all__) == sorted(PUBLIC[module_name])
    for name in module.__all__:  # lazily loaded names too
        assert getattr(module, name) is not None, name
