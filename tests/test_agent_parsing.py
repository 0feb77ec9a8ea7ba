"""The protocols' parsers on messy replies: every case of shared/examples/messy_replies.md,
and the near misses around them. Pure functions of the text: no model, no sandbox."""

from __future__ import annotations

import pytest

from runner.agent.actions import AnswerAction, CallAction, CodeAction
from runner.agent.llm import ChatReply, ToolCall
from runner.agent.parsing import (
    fenced_blocks,
    json_objects,
    label_segments,
    last_boxed,
    load_arguments,
    read_action,
)
from runner.agent.protocols import CodeProtocol, JsonProtocol, TextProtocol, ToolsProtocol
from runner.functions import FunctionSet, FunctionSpec

FUNCTIONS = FunctionSet("test", [
    FunctionSpec(name="get_current_location", description="Where the user is.",
                 parameters={"type": "object", "properties": {}}, code="def get_current_location():\n    return 'Jakarta'\n"),
    FunctionSpec(name="calculate", description="Evaluate an arithmetic expression such as '2 * (3 + 4)'.",
                 parameters={"type": "object", "properties": {"formula": {"type": "string"}},
                             "required": ["formula"]},
                 code="def calculate(formula):\n    return eval(formula)\n"),
], log_store=False)


def reply(content: str, tool_calls: tuple[ToolCall, ...] = ()) -> ChatReply:
    return ChatReply(content=content, tool_calls=tool_calls)


def parse_json(content: str):
    return JsonProtocol().parse(reply(content), FUNCTIONS)


def only_call(parsed) -> CallAction:
    assert not parsed.problems, parsed.problems
    assert len(parsed.actions) == 1, parsed.actions
    action = parsed.actions[0]
    assert isinstance(action, CallAction), action
    return action


# -- messy_replies.md, JSON protocol ------------------------------------------------------------


def test_case_1_prose_around_a_fenced_block_runs_without_complaint():
    parsed = parse_json(
        "Here is my valid JSON response adhering to the template:\n```json\n"
        '{"thought": "Get the location first.", "action": {"function": "get_current_location", "arguments": {}}}\n'
        "```\nI have produced a JSON-only response.")
    call = only_call(parsed)
    assert (call.function, call.arguments) == ("get_current_location", {})
    assert parsed.notes == ()


def test_case_2_several_objects_run_only_the_first_and_never_accept_the_invented_finish():
    parsed = parse_json(
        '{"thought": "Convert the speed.", "action": {"function": "calculate", "arguments": {"formula": "3.7 * 0.539957"}}}\n\n'
        '{"type": "feedback_success", "result": "2.0"}\n\n'
        '{"thought": "Done.", "action": {"function": "finish_conversation", "arguments": {"final_answer": "2 knots"}}}')
    call = only_call(parsed)
    assert call == CallAction(function="calculate", arguments={"formula": "3.7 * 0.539957"})
    assert parsed.answer is None
    assert len(parsed.notes) == 1
    assert "3 JSON objects" in parsed.notes[0] and "other 2 were ignored" in parsed.notes[0]
    assert "final answer" in parsed.notes[0] and "before you saw" in parsed.notes[0]


def test_case_3_wrong_argument_names_are_passed_on_for_validation():
    parsed = parse_json('{"function": "get_current_weather", "arguments": {"lat": -6.2, "lon": 106.6}}')
    call = only_call(parsed)
    # The parser does not rename arguments: validation names the missing and unexpected ones.
    assert call == CallAction(function="get_current_weather", arguments={"lat": -6.2, "lon": 106.6})


def test_case_4_an_english_formula_is_passed_on_as_given():
    parsed = parse_json('{"function": "calculate", "arguments": {"formula": "1 km/h = 0.54 knots, so 3.7 km/h"}}')
    assert only_call(parsed).arguments == {"formula": "1 km/h = 0.54 knots, so 3.7 km/h"}


@pytest.mark.parametrize("content", [
    "{'thought': 'x', 'action': {'function': 'calculate', 'arguments': {'formula': '1+1'}}}",
    '{"thought": "x", "action": {"function": "calculate", "arguments": {"formula": "1+1",},},}',
    '{"thought": "x", "action": {"function": "calculate", "arguments": {"formula": "1+1"}}}\n```',
    '```json\n{"thought": "x", "action": {"function": "calculate", "arguments": {"formula": "1+1"}}}',
    "{'thought': 'x', 'action': {'function': 'calculate', 'arguments': {'formula': '1+1', 'exact': True, 'note': None,},},}\n```",
])
def test_case_5_near_json_is_repaired_and_accepted(content):
    call = only_call(parse_json(content))
    assert call.function == "calculate"
    assert call.arguments["formula"] == "1+1"


def test_case_5_python_literals_become_json_values():
    call = only_call(parse_json(
        "{'action': {'function': 'calculate', 'arguments': {'formula': '1', 'exact': True, 'note': None}}}"))
    assert call.arguments == {"formula": "1", "exact": True, "note": None}


@pytest.mark.parametrize("content", [
    '{"thought": "x", "actions": {"function": "calculate", "arguments": {"formula": "2*3"}}}',
    '{"thought": "x", "action": {"function": "calculate", "args": {"formula": "2*3"}}}',
    '{"thought": "x", "function": "calculate", "arguments": {"formula": "2*3"}}',
    '{"function": "calculate", "args": {"formula": "2*3"}}',
    '{"Thought": "x", "Action": {"Function": "calculate", "Arguments": {"formula": "2*3"}}}',
    '{"action": {"name": "calculate", "parameters": {"formula": "2*3"}}}',
    '{"action": {"tool": "calculate", "input": {"formula": "2*3"}}}',
    '{"action": "calculate", "action_input": {"formula": "2*3"}}',
    '{"action": {"function": "calculate", "arguments": "{\\"formula\\": \\"2*3\\"}"}}',
    '{"action": {"function": {"name": "calculate", "arguments": {"formula": "2*3"}}}}',
    '{"function": "calculate", "formula": "2*3"}',
    '{"thought": "x", "actions": [{"function": "calculate", "arguments": {"formula": "2*3"}}]}',
])
def test_case_6_near_miss_keys_are_accepted_when_unambiguous(content):
    call = only_call(parse_json(content))
    assert (call.function, call.arguments) == ("calculate", {"formula": "2*3"})


@pytest.mark.parametrize("content, words", [
    (('{"action": {"function": "calculate", "arguments": {"formula": "1"}}, '
      '"actions": {"function": "get_current_location", "arguments": {}}}'), "different actions"),
    ('{"action": {"function": "calculate", "arguments": {"formula": "1"}, "args": {"formula": "2"}}}',
     "arguments twice"),
    ('{"action": {"arguments": {"formula": "1"}}}', "names no function"),
    ('{"action": {"function": "calculate", "name": "get_current_location"}}', "2 functions"),
    ('{"action": 42}', "must be an object"),
])
def test_case_6_ambiguous_keys_are_malformed_with_the_template(content, words):
    parsed = parse_json(content)
    assert not parsed.actions
    assert len(parsed.problems) == 1
    assert words in parsed.problems[0].message


def test_an_actions_list_runs_the_first_and_says_so():
    parsed = parse_json('{"actions": [{"function": "calculate", "arguments": {"formula": "1"}}, '
                        '{"function": "calculate", "arguments": {"formula": "2"}}]}')
    assert only_call(parsed).arguments == {"formula": "1"}
    assert "2 actions; only the first one ran" in parsed.notes[0]


@pytest.mark.parametrize("content, answer", [
    ('{"thought": "ok", "action": {"function": "finish_conversation", "arguments": {"final_answer": "2 knots"}}}', "2 knots"),
    ('{"action": {"function": "finish_conversation", "arguments": {"answer": "2 knots"}}}', "2 knots"),
    ('{"action": {"function": "finish_conversation", "arguments": {"final_answer": 42}}}', "42"),
    ('{"thought": "done", "final_answer": "2 knots"}', "2 knots"),
    ('Sure! ```json\n{"action": {"function": "finish_conversation", "arguments": {"final_answer": "yes"}}}\n```', "yes"),
])
def test_finish_conversation_gives_the_final_answer(content, answer):
    parsed = parse_json(content)
    assert parsed.answer == answer
    assert parsed.actions == (AnswerAction(answer=answer),)


def test_a_finish_without_final_answer_is_malformed():
    parsed = parse_json('{"action": {"function": "finish_conversation", "arguments": {"a": 1, "b": 2}}}')
    assert parsed.answer is None
    assert "final_answer" in parsed.problems[0].message


@pytest.mark.parametrize("content, words", [
    ("The answer is 42.", "no JSON object"),
    ("", "empty"),
    ('{"thought": "I am thinking", "plan": "later"}', "no JSON object in the reply has an `action`"),
    ("\\boxed{5} is {the answer}", "no JSON object"),
])
def test_replies_without_an_action_are_malformed(content, words):
    parsed = parse_json(content)
    assert not parsed.actions
    assert words in parsed.problems[0].message


def test_a_non_action_object_before_the_action_is_skipped_and_reported():
    parsed = parse_json('{"type": "feedback_success"}\n{"action": {"function": "calculate", "arguments": {"formula": "1"}}}')
    assert only_call(parsed).arguments == {"formula": "1"}
    assert "2 JSON objects" in parsed.notes[0]


def test_braces_inside_strings_do_not_split_objects():
    call = only_call(parse_json('Reply: {"action": {"function": "calculate", "arguments": {"formula": "len(\\"}{\\")"}}} ok'))
    assert call.arguments == {"formula": 'len("}{")'}


def test_an_object_cut_short_by_a_stop_token_is_repaired():
    call = only_call(parse_json('```json\n{"thought": "x", "action": {"function": "calculate", "arguments": {"formula": "6*7"'))
    assert call.arguments == {"formula": "6*7"}


# -- messy_replies.md, text protocol ---------------------------------------------------------------


def parse_text(content: str):
    return TextProtocol().parse(reply(content), FUNCTIONS)


def test_case_7_tool_input_over_several_lines_with_an_invented_observation():
    parsed = parse_text(
        "Thought: I need to compute the speed.\n"
        "Tool: calculate\n"
        "Tool Input: {\n"
        '  "formula": "3.7 * 0.539957"\n'
        "}\n"
        "Observation: 1.997\n"
        "Thought: so it is about 2 knots.\n"
        "Final Answer: 2 knots\n")
    call = only_call(parsed)
    assert call == CallAction(function="calculate", arguments={"formula": "3.7 * 0.539957"})
    assert parsed.answer is None
    assert any("Observation you wrote was ignored" in note for note in parsed.notes)
    assert any("Final Answer after your Tool was ignored" in note for note in parsed.notes)


def test_case_8_final_answer_without_a_thought_line_is_accepted():
    parsed = parse_text("Final Answer: 2 knots")
    assert parsed.answer == "2 knots"


@pytest.mark.parametrize("content", [
    "Thought: x\nTool: calculate\nTool Input: {\"formula\": \"2*3\"}",
    "thought: x\ntool: calculate\ntool input: {\"formula\": \"2*3\"}",
    "**Thought:** x\n**Tool:** `calculate`\n**Tool Input:** {\"formula\": \"2*3\"}",
    "Thought: x\nAction: calculate\nAction Input: {\"formula\": \"2*3\"}",
    "I will compute.\nTool: calculate()\nTool Input: ```json\n{'formula': '2*3',}\n```",
    "Thought: x\nTool: calculate\nTool Input: {\"formula\": \"2*3\"}\nTool: calculate\nTool Input: {\"formula\": \"9\"}",
    'Thought: x\nTool: {"function": "calculate", "arguments": {"formula": "2*3"}}',
])
def test_text_protocol_variants(content):
    call = only_call(parse_text(content))
    assert (call.function, call.arguments) == ("calculate", {"formula": "2*3"})


def test_text_protocol_tool_without_input_means_no_arguments():
    call = only_call(parse_text("Thought: where am I?\nTool: get_current_location\n"))
    assert call == CallAction(function="get_current_location", arguments={})
    assert only_call(parse_text("Tool: get_current_location\nTool Input: none")).arguments == {}


def test_text_protocol_second_tool_is_ignored_and_reported():
    parsed = parse_text("Tool: calculate\nTool Input: {\"formula\": \"1\"}\nTool: calculate\nTool Input: {\"formula\": \"2\"}")
    assert only_call(parsed).arguments == {"formula": "1"}
    assert any("only the first Tool" in note for note in parsed.notes)


@pytest.mark.parametrize("content, words", [
    ("I think the answer is 4.", "neither a Tool: line nor a Final Answer: line"),
    ("Thought: hmm\nTool Input: {\"formula\": \"1\"}", "no Tool line"),
    ("Tool: calculate\nTool Input: three point seven", "not a JSON object"),
    ("Final Answer:   ", "empty"),
    ("Tool: ???\nTool Input: {}", "names no function"),
])
def test_text_protocol_malformed(content, words):
    parsed = parse_text(content)
    assert not parsed.actions
    assert words in parsed.problems[0].message


# -- tools protocol ------------------------------------------------------------------------------------


def parse_tools(content: str = "", *calls: ToolCall):
    return ToolsProtocol().parse(reply(content, tuple(calls)), FUNCTIONS)


def test_tools_protocol_runs_every_call_in_order_and_repairs_arguments():
    parsed = parse_tools("let me see", ToolCall(id="a", name="calculate", arguments='{"formula": "1"}'),
                         ToolCall(id="b", name="calculate", arguments="{'formula': '2',}"),
                         ToolCall(id="c", name="get_current_location", arguments=""))
    assert [(a.call_id, a.function, a.arguments) for a in parsed.actions] == [
        ("a", "calculate", {"formula": "1"}), ("b", "calculate", {"formula": "2"}),
        ("c", "get_current_location", {})]
    assert parsed.answer is None


def test_tools_protocol_content_without_calls_is_the_answer():
    assert parse_tools("  It is 2 knots.  ").answer == "It is 2 knots."
    assert "empty" in parse_tools("").problems[0].message


def test_tools_protocol_unreadable_arguments_are_a_problem_of_that_call():
    parsed = parse_tools("", ToolCall(id="a", name="calculate", arguments="three"),
                         ToolCall(id="b", name="calculate", arguments='{"formula": "1"}'))
    assert [a.call_id for a in parsed.actions] == ["b"]
    assert parsed.problems[0].call_id == "a"
    assert "not a JSON object" in parsed.problems[0].message


# -- code protocol --------------------------------------------------------------------------------------


def parse_code(content: str):
    return CodeProtocol().parse(reply(content), FUNCTIONS)


def test_code_protocol_runs_blocks_and_json_calls_in_order():
    parsed = parse_code("First:\n```python\nx = 2\nprint(x)\n```\nthen\n```json\n"
                        '{"function": "calculate", "arguments": {"formula": "x"}}\n```\nand\n```py\nprint(x + 1)\n```')
    assert [type(a) for a in parsed.actions] == [CodeAction, CallAction, CodeAction]
    assert parsed.actions[0].code == "x = 2\nprint(x)"
    assert parsed.actions[1] == CallAction(function="calculate", arguments={"formula": "x"})


def test_code_protocol_boxed_answer_alone_is_final():
    assert parse_code("So the result is $\\boxed{\\frac{1}{2}}$.").answer == "\\frac{1}{2}"


def test_code_protocol_boxed_answer_with_code_is_not_accepted():
    parsed = parse_code("```python\nprint(1/2)\n```\nThe answer is \\boxed{0.5}.")
    assert parsed.answer is None
    assert len(parsed.actions) == 1
    assert "'0.5' was not accepted" in parsed.notes[0]


def test_code_protocol_unterminated_and_unlabelled_blocks_run():
    parsed = parse_code("```\nprint(42)")
    assert parsed.actions == (CodeAction(code="print(42)"),)
    assert parse_code("```python\nprint(1)```").actions == (CodeAction(code="print(1)"),)


def test_code_protocol_other_languages_and_invented_output_are_skipped_with_notes():
    parsed = parse_code("```bash\nls\n```\n```python\nprint(1)\n```\n```output\n1\n```")
    assert parsed.actions == (CodeAction(code="print(1)"),)
    assert any("```bash block was not run" in n for n in parsed.notes)
    assert any("output block you wrote was ignored" in n for n in parsed.notes)


def test_code_protocol_nothing_to_do_is_malformed():
    parsed = parse_code("I think it is 5.")
    assert "no ```python block and no final answer" in parsed.problems[0].message


def test_code_protocol_answer_rule_is_configurable():
    def rule(text: str):
        return text.split("ANSWER:", 1)[1].strip() if "ANSWER:" in text else None

    protocol = CodeProtocol(rule, answer_format="ANSWER: <answer>")
    assert protocol.parse(reply("ANSWER: 7"), FUNCTIONS).answer == "7"
    assert "ANSWER: <answer>" in protocol.template(FUNCTIONS)


# -- the readers themselves -----------------------------------------------------------------------------


def test_json_objects_finds_each_object_in_order_with_repair_flags():
    found = json_objects('a {"x": 1} b {\'y\': 2,} c')
    assert [(f.value, f.repaired) for f in found] == [({"x": 1}, False), ({"y": 2}, True)]
    assert json_objects("no objects {here}") == []


def test_load_arguments():
    assert load_arguments('{"a": 1}') == ({"a": 1}, False)
    assert load_arguments("") == ({}, False)
    assert load_arguments(None) == ({}, False)
    assert load_arguments("{'a': 1,}") == ({"a": 1}, True)
    assert load_arguments('"{\\"a\\": 1}"') == ({"a": 1}, True)  # double-encoded
    assert load_arguments("three") == ("three", False)


def test_read_action_kinds():
    assert read_action({"thought": "x"}).kind == "none"
    assert read_action({"final_answer": "5"}).answer == "5"


def test_fenced_blocks_and_labels():
    blocks = fenced_blocks("a\n```Python\nprint(1)\n```\n~~~\nraw\n~~~\n```json\n{}")
    assert [(b.language, b.body, b.closed) for b in blocks] == [
        ("python", "print(1)", True), ("", "raw", True), ("json", "{}", False)]
    assert [s.label for s in label_segments("Thought: a\nTool: b\nTool Input: {}\nObservation: c")] == [
        "thought", "tool", "input", "observation"]


def test_last_boxed():
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{a}{b}}") == "\\frac{a}{b}"
    assert last_boxed("\\boxed{unclosed") is None
    assert last_boxed("nothing") is None


def test_misremembered_finish_names_finish_unless_the_set_has_such_a_function():
    content = '{"action": {"function": "final_answer", "arguments": {"answer": "5"}}}'
    assert parse_json(content).answer == "5"
    own = FunctionSet("own", [FunctionSpec(name="final_answer", parameters={"type": "object"},
                                           code="def final_answer(**kw):\n    return kw\n")], log_store=False)
    parsed = JsonProtocol().parse(reply(content), own)
    assert only_call(parsed).function == "final_answer"


def test_tools_protocol_a_call_written_as_text_runs_instead_of_ending_the_run():
    parsed = parse_tools('<tool_call>\n{"name": "calculate", "arguments": {"formula": "17+25"}}\n</tool_call>')
    assert only_call(parsed) == CallAction(function="calculate", arguments={"formula": "17+25"})
    assert "tool-calling interface" in parsed.notes[0]
    # JSON that names no function of the set is still the answer
    assert parse_tools('{"name": "Ada", "age": 36}').answer == '{"name": "Ada", "age": 36}'
