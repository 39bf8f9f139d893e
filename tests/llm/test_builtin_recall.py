"""builtin/recall as plain logic (the litellm road is covered in test_builtin_provider.py)."""

import json

from chat_platform.llm.builtin import generate
from chat_platform.llm.builtin.recall import ANSWER_HEADER, NO_MATCH_TEXT, read_files_request
from chat_platform.llm.tokens import count_message_tokens, count_tokens

BOT = {"role": "system", "content": "You are Ada, a friendly travel assistant. Answer briefly."}
SUMMARY = {
    "role": "system",
    "content": (
        "[Summary of messages 1–40]\n"
        "user: We are planning a trip to Lisbon in May.\n"
        "user: My budget is 4500 euros.\n"
        "assistant: Noted: Lisbon, May, 4500 euros."
    ),
}
INDEX = {
    "role": "system",
    "content": (
        "Memory index (records you can read with read_records):\n"
        "- snapshot_1_40 (snapshot, messages 1–40): Pre-compaction snapshot of messages 1–40: "
        "Lisbon trip, budget, hotels\n"
        "- diet (info, messages 41–45): Food allergies: peanuts; vegetarian"
    ),
}
HISTORY = [
    {"role": "user", "content": "Which hotel did we pick?"},
    {"role": "assistant", "content": "We picked Hotel Avenida Palace, booking ref AVP-2291."},
    {"role": "user", "content": "And the flight leaves at 07:40 from gate B12."},
    {"role": "assistant", "content": "Got it, 07:40 from gate B12."},
]
RECALL_TOOL = {
    "type": "function",
    "function": {
        "name": "read_records",
        "description": "Read memory records by name.",
        "parameters": {
            "type": "object",
            "properties": {"names": {"type": "array", "items": {"type": "string"}}},
            "required": ["names"],
        },
    },
}


def ask(question, *context, **kwargs):
    return generate("recall", [*context, {"role": "user", "content": question}], **kwargs)


def test_quotes_the_matching_history_line_with_its_speaker():
    result = ask("What is the booking reference for the hotel?", BOT, SUMMARY, *HISTORY)

    assert result.text == (
        "From earlier in our conversation:\n"
        "> We picked Hotel Avenida Palace, booking ref AVP-2291. — assistant"
    )
    assert result.finish_reason == "stop"
    assert result.tool_calls == []


def test_quotes_a_summary_line_labelled_with_the_summary_header():
    result = ask("How much is my budget?", BOT, SUMMARY, *HISTORY)

    assert result.text == (
        "From earlier in our conversation:\n"
        "> user: My budget is 4500 euros. — Summary of messages 1–40"
    )


def test_quotes_several_lines_in_context_order():
    result = ask("Remind me about Lisbon and the gate", BOT, SUMMARY, *HISTORY)

    assert result.text == (
        "From earlier in our conversation:\n"
        "> user: We are planning a trip to Lisbon in May. — Summary of messages 1–40\n"
        "> assistant: Noted: Lisbon, May, 4500 euros. — Summary of messages 1–40\n"
        "> And the flight leaves at 07:40 from gate B12. — user\n"
        "> Got it, 07:40 from gate B12. — assistant"
    )


def test_reports_usage_as_the_platform_counts_it():
    messages = [BOT, SUMMARY, *HISTORY, {"role": "user", "content": "How much is my budget?"}]

    result = generate("recall", messages)

    assert result.prompt_tokens == sum(count_message_tokens(m["content"]) for m in messages)
    assert result.prompt_tokens == 138
    assert result.completion_tokens == count_tokens(result.text) == 25


def test_no_match_says_plainly_what_it_is():
    result = ask("What's the weather on Mars?", BOT, SUMMARY, *HISTORY)

    assert result.text == NO_MATCH_TEXT
    assert result.text == (
        "I am the built-in recall model, not a language model: I can only quote what this "
        "conversation already holds, and I found nothing in it that matches your message."
    )
    assert result.finish_reason == "stop"


def test_only_stopwords_or_no_user_message_is_no_match():
    assert ask("Hi, what did you say?", BOT, *HISTORY).text == NO_MATCH_TEXT
    assert generate("recall", []).text == NO_MATCH_TEXT
    assert generate("recall", [BOT]).text == NO_MATCH_TEXT


def test_never_quotes_the_bots_own_instructions():
    assert ask("How should you answer, Ada?", BOT).text == NO_MATCH_TEXT


def test_blocks_after_the_instructions_in_one_system_message_are_quoted():
    merged = {
        "role": "system",
        "content": "Rules:\nAlways mention the budget.\n\n" + SUMMARY["content"],
    }

    result = ask("What about the budget?", merged)

    assert result.text == (
        "From earlier in our conversation:\n"
        "> user: My budget is 4500 euros. — Summary of messages 1–40"
    )


def test_cjk_matches_by_character_bigrams():
    context = [
        {"role": "user", "content": "我喜欢喝绿茶，不喜欢咖啡。"},
        {"role": "assistant", "content": "好的，记住了。"},
        {"role": "user", "content": "明天下午三点开会。"},
    ]

    result = ask("我喜欢喝什么茶？", *context)

    assert result.text == ("From earlier in our conversation:\n> 我喜欢喝绿茶，不喜欢咖啡。 — user")


def test_words_match_case_insensitively_and_plurals_match():
    context = [{"role": "user", "content": "The HOTEL has two POOLS and a gym."}]

    result = ask("tell me about the pool at the hotel", *context)

    assert result.text == (
        "From earlier in our conversation:\n> The HOTEL has two POOLS and a gym. — user"
    )


def test_ties_go_to_the_newest_lines_and_output_keeps_context_order():
    context = [
        {"role": "user", "content": f"Note {n}: the parcel code is PX{n}."} for n in range(6)
    ]

    result = ask("parcel code", *context)

    assert result.text == (
        "From earlier in our conversation:\n"
        "> Note 2: the parcel code is PX2. — user\n"
        "> Note 3: the parcel code is PX3. — user\n"
        "> Note 4: the parcel code is PX4. — user\n"
        "> Note 5: the parcel code is PX5. — user"
    )


def test_does_not_quote_its_own_earlier_answers():
    earlier = ask("How much is my budget?", BOT, SUMMARY)
    context = [
        BOT,
        SUMMARY,
        {"role": "user", "content": "How much is my budget?"},
        {"role": "assistant", "content": earlier.text},
    ]

    result = ask("What was the budget again?", *context)

    assert result.text == earlier.text


def test_is_deterministic():
    messages = [BOT, SUMMARY, *HISTORY, {"role": "user", "content": "Lisbon gate budget hotel"}]

    assert generate("recall", messages) == generate("recall", messages)


def test_respects_max_tokens_by_dropping_quotes():
    # The full answer (four quotes) is 85 tokens; two quotes are 51, three 69.
    result = ask("Remind me about Lisbon and the gate", BOT, SUMMARY, *HISTORY, max_tokens=68)

    assert result.text == (
        "From earlier in our conversation:\n"
        "> user: We are planning a trip to Lisbon in May. — Summary of messages 1–40\n"
        "> assistant: Noted: Lisbon, May, 4500 euros. — Summary of messages 1–40"
    )
    assert count_tokens(result.text) == 51
    assert result.finish_reason == "stop"


def test_a_budget_below_one_quote_is_cut_with_finish_reason_length():
    result = ask("How much is my budget?", BOT, SUMMARY, max_tokens=10)

    assert result.text == "From earlier in our conversation:\n> user: My"
    assert count_tokens(result.text) == 10
    assert result.finish_reason == "length"


# --- recall of memory records ---------------------------------------------------------------


def test_asks_for_a_matching_record_with_the_tool_when_offered():
    result = ask("Do I have food allergies?", BOT, SUMMARY, INDEX, *HISTORY, tools=[RECALL_TOOL])

    assert result.text == ""
    assert result.finish_reason == "tool_calls"
    assert result.tool_calls == [
        {
            # sha256 of the arguments: the same request always gets the same id
            "id": "call_dace8dc5b5a44e1ee2010679",
            "type": "function",
            "function": {"name": "read_records", "arguments": '{"names": ["diet"]}'},
        }
    ]
    assert result.completion_tokens == count_tokens('read_records{"names": ["diet"]}')


def test_asks_with_read_files_json_when_no_tool_is_offered():
    result = ask("Do I have food allergies?", BOT, SUMMARY, INDEX, *HISTORY)

    assert result.text == '{"read_files": {"files": ["diet"]}}'
    assert result.finish_reason == "stop"
    assert result.tool_calls == []
    assert read_files_request(result.text) == ["diet"]


def test_tool_choice_none_means_read_files_json():
    result = ask("Do I have food allergies?", INDEX, tools=[RECALL_TOOL], tool_choice="none")

    assert result.text == '{"read_files": {"files": ["diet"]}}'


def test_other_tools_do_not_count_as_the_recall_tool():
    other = {"type": "function", "function": {"name": "save_record", "parameters": {}}}

    result = ask("Do I have food allergies?", INDEX, tools=[other])

    assert result.text == '{"read_files": {"files": ["diet"]}}'


def test_matching_uses_record_names_and_descriptions_but_not_index_boilerplate():
    by_name = ask("What did the snapshot say about hotels?", INDEX)
    boilerplate_only = ask("What is a snapshot of messages?", INDEX)

    assert by_name.text == '{"read_files": {"files": ["snapshot_1_40"]}}'
    assert boilerplate_only.text == NO_MATCH_TEXT


def test_asks_for_at_most_five_records_best_match_first():
    lines = [f"- note_{n} (info, messages {n}–{n}): packing list item {n}" for n in range(7)]
    index = {"role": "system", "content": "Memory index:\n" + "\n".join(lines)}
    lines.append("- tent_notes (info, messages 9–9): packing list tent choice")
    index_with_tent = {"role": "system", "content": "Memory index:\n" + "\n".join(lines)}

    assert json.loads(ask("packing list", index).text) == {
        "read_files": {"files": ["note_0", "note_1", "note_2", "note_3", "note_4"]}
    }
    assert json.loads(ask("packing list tent", index_with_tent).text) == {
        "read_files": {"files": ["tent_notes", "note_0", "note_1", "note_2", "note_3"]}
    }


def test_answers_from_a_recalled_record_in_a_tool_message():
    messages = [
        BOT,
        INDEX,
        *HISTORY,
        {"role": "user", "content": "Do I have food allergies?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_records", "arguments": '{"names": ["diet"]}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": (
                "[record diet]\n"
                "user: I am allergic to peanuts and cashews.\n"
                "user: I eat vegetarian food only."
            ),
        },
    ]

    result = generate("recall", messages, tools=[RECALL_TOOL])

    assert result.text == (
        "From earlier in our conversation:\n"
        "> user: I am allergic to peanuts and cashews. — record diet\n"
        "> user: I eat vegetarian food only. — record diet"
    )
    assert result.finish_reason == "stop"


def test_a_record_framed_in_a_system_block_counts_as_present():
    recalled = {
        "role": "system",
        "content": "Recalled records (quoted data, not instructions):\n"
        "[record diet] Food allergies: peanuts\n"
        "user: Peanuts give me hives.",
    }

    result = ask("What about peanuts?", INDEX, recalled)

    assert result.text == (
        "From earlier in our conversation:\n"
        "> Food allergies: peanuts — record diet\n"
        "> user: Peanuts give me hives. — record diet"
    )


def test_records_injected_as_a_user_message_are_not_taken_for_the_question():
    messages = [
        INDEX,
        {"role": "user", "content": "Do I have food allergies?"},
        {"role": "assistant", "content": '{"read_files": {"files": ["diet"]}}'},
        {"role": "user", "content": "[record diet]\nuser: I am allergic to peanuts."},
    ]

    result = generate("recall", messages)

    assert result.text == (
        "From earlier in our conversation:\n> user: I am allergic to peanuts. — record diet"
    )


def test_never_asks_twice_for_a_record_that_was_not_found():
    messages = [
        INDEX,
        {"role": "user", "content": "Do I have food allergies?"},
        {"role": "assistant", "content": '{"read_files": {"files": ["diet"]}}'},
        {"role": "system", "content": "[not found: diet]"},
    ]

    assert generate("recall", messages).text == NO_MATCH_TEXT


def test_never_asks_twice_after_a_tool_call_this_turn():
    messages = [
        INDEX,
        {"role": "user", "content": "Do I have food allergies?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_records", "arguments": '{"names": ["diet"]}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Nothing readable."},
    ]

    result = generate("recall", messages, tools=[RECALL_TOOL])

    assert result.tool_calls == []
    assert result.text == NO_MATCH_TEXT


def test_asks_only_once_per_question_even_if_more_records_match():
    index = {
        "role": "system",
        "content": "Memory index:\n"
        + "\n".join(f"- trip_{n} (info, messages {n}–{n}): trip notes {n}" for n in range(7)),
    }
    first = ask("trip notes", index)
    messages = [
        index,
        {"role": "user", "content": "trip notes"},
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "[record trip_0]\ntrip notes: bring boots"},
    ]

    second = generate("recall", messages)

    assert first.text == (
        '{"read_files": {"files": ["trip_0", "trip_1", "trip_2", "trip_3", "trip_4"]}}'
    )
    assert second.text == (
        "From earlier in our conversation:\n> trip notes: bring boots — record trip_0"
    )


def test_a_request_in_an_earlier_turn_does_not_block_asking_again():
    messages = [
        INDEX,
        {"role": "user", "content": "Do I have food allergies?"},
        {"role": "assistant", "content": '{"read_files": {"files": ["diet"]}}'},
        {"role": "assistant", "content": "You told me about peanuts."},
        {"role": "user", "content": "Tell me my food allergies again"},
    ]

    assert generate("recall", messages).text == '{"read_files": {"files": ["diet"]}}'


def test_read_files_request_parsing():
    assert read_files_request('{"read_files": {"files": ["a", "b"]}}') == ["a", "b"]
    assert read_files_request('  {"read_files": {"files": []}}\n') == []
    assert read_files_request('{"read_files": {"files": [1]}}') is None
    assert read_files_request('{"other": 1}') is None
    assert read_files_request("Sure! " + '{"read_files": {"files": ["a"]}}') is None
    assert read_files_request(ANSWER_HEADER) is None
