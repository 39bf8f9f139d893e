"""``builtin/recall`` calls a tool the user names, then quotes its result (docs/models.md, "A
tool by name"); the memory tools stay recall's own decision."""

import json

from chat_platform.llm.builtin import recall
from chat_platform.llm.builtin.named_tools import (
    QUOTE_LINES_MAX,
    arguments_from_text,
    result_answer,
)


def _tool(name, properties, required=None):
    parameters = {"type": "object", "properties": properties}
    if required is not None:
        parameters["required"] = required
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


CALCULATE = _tool("demo-tools__calculate", {"expression": {"type": "string"}}, ["expression"])
NOTE_SAVE = _tool(
    "demo-tools__note_save",
    {"key": {"type": "string"}, "text": {"type": "string"}},
    ["key", "text"],
)
CLOCK = _tool("demo-tools__clock", {"timezone": {"type": "string", "default": "UTC"}})
ADD = _tool("calc__add", {"a": {"type": "integer"}, "b": {"type": "integer"}}, ["a", "b"])
SEARCH = _tool("search_records", {"query": {"type": "string"}}, ["query"])
TOOLS = [CALCULATE, NOTE_SAVE, CLOCK, ADD, SEARCH]


def _called(text, tools=TOOLS, **kwargs):
    result = recall.respond([{"role": "user", "content": text}], tools=tools, **kwargs)
    if not result.tool_calls:
        return None
    function = result.tool_calls[0]["function"]
    return function["name"], json.loads(function["arguments"])


def test_a_message_starting_with_a_tools_name_calls_it_with_the_rest():
    assert _called("calculate (17 + 25) * 3") == (
        "demo-tools__calculate",
        {"expression": "(17 + 25) * 3"},
    )
    assert _called("Calculate: 6*7") == ("demo-tools__calculate", {"expression": "6*7"})
    assert _called("demo-tools__clock Asia/Tokyo") == (
        "demo-tools__clock",
        {"timezone": "Asia/Tokyo"},
    )
    assert _called("clock") == ("demo-tools__clock", {})
    assert _called("note_save trip flight JL7079 on Friday") == (
        "demo-tools__note_save",
        {"key": "trip", "text": "flight JL7079 on Friday"},
    )
    assert _called("add 2 40") == ("calc__add", {"a": 2, "b": 40})
    assert _called('note_save {"key": "k", "text": "two words"}') == (
        "demo-tools__note_save",
        {"key": "k", "text": "two words"},
    )
    assert _called("@helper calculate 1+1") == ("demo-tools__calculate", {"expression": "1+1"})


def test_no_call_when_no_tool_is_named_or_calls_are_closed():
    assert _called("What is (17 + 25) * 3?", tools=[CALCULATE]) is None
    assert _called("calculator 2+2", tools=[CALCULATE]) is None
    assert _called("calculate 2+2", tools=[CALCULATE], tool_choice="none") is None
    assert _called("calculate 2+2", tools=None) is None
    # the memory tools stay recall's own choice: the search is for the question's words
    assert _called("search_records flights", tools=[SEARCH]) == (
        "search_records",
        {"query": "search records flights"},
    )


def test_arguments_read_as_the_schema_types_them():
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "number"},
            "on": {"type": "boolean"},
            "x": {"type": "integer"},
        },
        "required": ["n", "on", "x"],
    }
    assert arguments_from_text("2.5 yes 7", schema) == {"n": 2.5, "on": True, "x": 7}
    assert arguments_from_text("many maybe seven", schema) == {
        "n": "many",
        "on": "maybe",
        "x": "seven",
    }
    assert arguments_from_text("only", schema) == {"n": "only"}
    assert arguments_from_text("  ", schema) == {}
    assert arguments_from_text("[1, 2]", {"properties": {"v": {"type": "string"}}}) == {
        "v": "[1, 2]"
    }
    assert arguments_from_text("anything", None) == {}


def test_the_result_is_quoted_once_it_arrives():
    first = recall.respond([{"role": "user", "content": "calculate 6*7"}], tools=TOOLS)
    call = first.tool_calls[0]
    messages = [
        {"role": "user", "content": "calculate 6*7"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "42"},
    ]
    for tools, choice in ((TOOLS, None), (None, "none")):  # the last call may offer no tools
        answer = recall.respond(messages, tools=tools, tool_choice=choice)
        assert (answer.text, answer.finish_reason, answer.tool_calls) == (
            "calculate returned:\n> 42",
            "stop",
            [],
        )


def test_an_answer_quotes_a_long_result_in_part_and_a_failure_in_plain_words():
    assert result_answer("s__t", "[tool failed: timed out after 60 s]", model="") == (
        "t failed: timed out after 60 s"
    )
    assert result_answer("s__t", "  ", model="") == "t returned nothing."
    long = "\n".join(f"line {i}" for i in range(40))
    answer = result_answer("s__t", long, model="")
    assert answer.splitlines()[1:3] == ["> line 0", "> line 1"]
    assert len(answer.splitlines()) == 1 + QUOTE_LINES_MAX + 1
    assert answer.endswith("(The whole result is in the tool step.)")
    one_line = "word " * 2000
    cut = result_answer("s__t", one_line, model="")
    assert cut.endswith("\u2026\n(The whole result is in the tool step.)") and len(cut) < 1500


def test_a_no_match_answer_of_a_bot_with_tools_says_how_to_call_them():
    question = [{"role": "user", "content": "What is (17 + 25) * 3?"}]
    answer = recall.respond(question, tools=[CALCULATE, SEARCH, CLOCK, ADD], tool_choice="none")
    assert answer.text == (
        recall.NO_MATCH_TEXT
        + " To call one of my tools, start a message with its name: calculate, clock, add."
    )
    assert recall.respond(question, tools=[SEARCH], tool_choice="none").text == (
        recall.NO_MATCH_TEXT
    )
    many = [_tool(f"s__t{i}", {}) for i in range(10)]
    assert recall.respond(question, tools=many, tool_choice="none").text.endswith(
        "its name: t0, t1, t2, t3, t4, t5, t6, t7, …."
    )
