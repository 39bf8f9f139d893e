"""builtin/recall as plain logic, on the exact message shapes the turn sends (the litellm road is
covered in test_builtin_provider.py, the real turn in test_builtin_coherence.py)."""

import json
import re

import pytest

from chat_platform.llm.builtin import generate
from chat_platform.llm.builtin.recall import (
    ANSWER_HEADER,
    MAX_ANSWER_TOKENS,
    NO_MATCH_TEXT,
    NOTED_TEXT,
    is_statement,
    record_name,
    remembered_fact,
    search_query,
)
from chat_platform.llm.builtin.recall_context import read_files_request
from chat_platform.llm.builtin.text import sentences
from chat_platform.llm.recall_protocol import (  # what the pipeline puts in the block
    INDEX_HEADER,
    INDEX_HELP,
)
from chat_platform.llm.tokens import count_message_tokens, count_tokens


class _CallId(str):
    """Equal to any id a built-in tool call may have: ``call_`` and 24 hex digits."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and re.fullmatch(r"call_[0-9a-f]{24}", other) is not None

    __hash__ = str.__hash__


CALL_ID = _CallId("call_<24 hex digits>")

BOT = {"role": "system", "content": "You are Ada, a friendly travel assistant. Answer briefly."}
SUMMARY = {
    "role": "system",
    "content": (
        "[Summary of messages 1–40]\n"
        "[3] user: We are planning a trip to Lisbon in May.\n"
        "[7] user: My budget is 4500 euros.\n"
        "assistant: Booked Hotel Avenida Palace for 3 nights."
    ),
}
INDEX = {
    "role": "system",
    "content": (
        "[Memory index: records you can read]\n" + INDEX_HELP + "\n"
        "- snapshot_1_40 (snapshot, messages 1–40): Pre-compaction snapshot of messages 1–40: "
        "Lisbon trip, budget, hotels\n"
        "- diet (info): Food allergies: peanuts; vegetarian"
    ),
}
HISTORY = [
    {"role": "user", "content": "Which hotel did we pick?"},
    {"role": "assistant", "content": "We picked Hotel Avenida Palace, booking ref AVP-2291."},
    {"role": "user", "content": "And the flight leaves at 07:40 from gate B12."},
    {"role": "assistant", "content": NOTED_TEXT},
]


def tool(name):
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


READ, SEARCH, SAVE = tool("read_records"), tool("search_records"), tool("save_record")
RECALL_TOOLS = [READ, SEARCH, SAVE]
RECALL_TOOL = READ  # used by test_builtin_provider


def ask(question, *context, **kwargs):
    return generate("recall", [*context, {"role": "user", "content": question}], **kwargs)


def call(name, arguments, call_id="call_1"):
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def result(content, call_id="call_1"):
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def after_search(question, query, hits):
    """The model's answer once its ``search_records(query)`` for ``question`` returned ``hits``
    (the index in context, every recall tool offered)."""
    messages = [
        INDEX,
        {"role": "user", "content": question},
        call("search_records", {"query": query}),
        result(hits),
    ]
    return generate("recall", messages, tools=RECALL_TOOLS)


# --- answers: clean quotes with a source ------------------------------------------------------


def test_quotes_the_matching_history_line_with_its_source():
    reply = ask("What is the booking reference for the hotel?", BOT, SUMMARY, *HISTORY)

    assert reply.text == (
        "From earlier in our conversation:\n"
        "> Booked Hotel Avenida Palace for 3 nights. — I said in messages 1–40\n"
        "> We picked Hotel Avenida Palace, booking ref AVP-2291. — I said"
    )
    assert (reply.finish_reason, reply.tool_calls) == ("stop", [])


def test_a_title_before_a_name_ends_no_sentence():
    """ "Dr. Okafor" is one sentence with what comes before it: the quote was cut after "Dr."
    and the name, the answer, left out."""
    history = [
        {
            "role": "user",
            "content": "The check-up is at Harbor Clinic with Dr. Okafor. Bring the card.",
        },
        {"role": "assistant", "content": NOTED_TEXT},
    ]
    reply = ask("Who is the check-up with?", BOT, *history)

    assert reply.text == (
        "From earlier in our conversation:\n"
        "> The check-up is at Harbor Clinic with Dr. Okafor. — you said"
    )
    assert sentences("Mr. and Mrs. Smith met Prof. Ng, e.g. at 9. Dr. Ives came. DR. no.") == [
        "Mr. and Mrs. Smith met Prof. Ng, e.g. at 9.",
        "Dr. Ives came.",
        "DR.",
        "no.",
    ]


def test_summary_lines_are_quoted_without_header_or_speaker_label():
    reply = ask("How much is my budget?", BOT, SUMMARY, *HISTORY)

    assert (
        reply.text
        == "From earlier in our conversation:\n> My budget is 4500 euros. — you said in message 7"
    )
    assert "[Summary" not in reply.text and "user:" not in reply.text


def test_an_unlabelled_summary_line_is_attributed_to_the_summary():
    summary = {"role": "system", "content": "[Summary of messages 1–40]\nThe team chose Porto."}

    reply = ask("Which city did the team choose?", summary)

    assert reply.text == (
        "From earlier in our conversation:\n> The team chose Porto. — summary of messages 1–40"
    )


def test_a_question_in_two_parts_gets_both_answers_in_context_order():
    summary = {
        "role": "system",
        "content": (
            "[Summary of messages 1–24]\n"
            "[3] user: I live in Porto, near the river. My sister Clara plays the cello.\n"
            "[9] user: My dentist appointment is on 14 March."
        ),
    }

    reply = ask("Where do I live and what does my sister play?", BOT, summary)

    assert reply.text == (
        "From earlier in our conversation:\n"
        "> I live in Porto, near the river. — you said in message 3\n"
        "> My sister Clara plays the cello. — you said in message 3"
    )


def test_never_quotes_headers_labels_nested_quotes_or_its_own_answers():
    # What the old models left behind: summaries of summaries of quotes.
    echoing = {
        "role": "system",
        "content": (
            "[Summary of messages 1–30]\n"
            "[28] assistant: — Summary of messages 1–24 > [26] assistant: my sister plays\n"
            "> [12] user: my sister plays the cello — you said\n"
            "[12] user: My sister Clara plays the cello."
        ),
    }
    history = [
        {"role": "user", "content": "What does my sister play?"},
        {
            "role": "assistant",
            "content": ANSWER_HEADER + "\n> My sister Clara plays the cello. — you said",
        },
    ]

    reply = ask("Tell me again what my sister plays", BOT, echoing, *history)

    assert reply.text == (
        "From earlier in our conversation:\n"
        "> My sister Clara plays the cello. — you said in message 12"
    )


def test_ties_go_to_the_newest_lines_and_output_keeps_context_order():
    context = [
        {"role": "user", "content": f"Note {n}: the parcel code is PX{n}."} for n in range(6)
    ]

    reply = ask("parcel code", *context)

    assert reply.text == (
        "From earlier in our conversation:\n"
        "> Note 3: the parcel code is PX3. — you said\n"
        "> Note 4: the parcel code is PX4. — you said\n"
        "> Note 5: the parcel code is PX5. — you said"
    )


def test_answers_stay_short():
    chatter = "and the courier said a lot more about it " * 20
    context = [
        {"role": "user", "content": f"The parcel code is PX{n} {chatter}."} for n in range(3)
    ]

    reply = ask("parcel code", *context)

    assert count_tokens(reply.text) <= MAX_ANSWER_TOKENS == 120
    assert reply.text.count("\n> ") == 2  # the third quote did not fit
    assert all(line.endswith("— you said") for line in reply.text.splitlines()[1:])
    assert "…" in reply.text


def test_reports_usage_as_the_platform_counts_it():
    messages = [BOT, SUMMARY, *HISTORY, {"role": "user", "content": "How much is my budget?"}]

    reply = generate("recall", messages)

    assert reply.prompt_tokens == sum(count_message_tokens(m["content"]) for m in messages)
    assert reply.prompt_tokens == 134
    assert reply.completion_tokens == count_tokens(reply.text) == 22


def test_no_match_says_plainly_what_it_is():
    reply = ask("What's the weather on Mars?", BOT, SUMMARY, *HISTORY)

    assert (
        reply.text
        == NO_MATCH_TEXT
        == (
            "I am the built-in recall model, not a language model: I can only quote what this "
            "conversation already holds, and I found nothing in it that matches your message."
        )
    )
    assert reply.finish_reason == "stop"


def test_only_stopwords_or_no_user_message_is_no_match():
    assert ask("Hi, what did you say?", BOT, *HISTORY).text == NO_MATCH_TEXT
    assert generate("recall", []).text == NO_MATCH_TEXT
    assert generate("recall", [BOT]).text == NO_MATCH_TEXT


def test_never_quotes_the_bots_own_instructions():
    assert ask("How should you answer, Ada?", BOT).text == NO_MATCH_TEXT


def test_a_statement_is_acknowledged_not_answered():
    reply = ask("My locker code is 4471 and it is in building C.", BOT, SUMMARY, INDEX)

    assert (reply.text, reply.finish_reason, reply.tool_calls) == (NOTED_TEXT, "stop", [])
    assert is_statement("The rent is 1,250 euros a month.")
    assert not is_statement("Tell me about the pool")
    assert not is_statement("Where do I live")
    assert not is_statement("parcel code")
    assert not is_statement("Is it 4471, the locker code?")


def test_cjk_matches_by_character_bigrams():
    context = [
        {"role": "user", "content": "我喜欢喝绿茶，不喜欢咖啡。"},
        {"role": "user", "content": "明天下午三点开会。"},
    ]

    reply = ask("我喜欢喝什么茶？", *context)

    assert (
        reply.text == "From earlier in our conversation:\n> 我喜欢喝绿茶，不喜欢咖啡。 — you said"
    )


def test_is_deterministic():
    messages = [BOT, SUMMARY, *HISTORY, {"role": "user", "content": "Lisbon gate budget hotel"}]

    assert generate("recall", messages) == generate("recall", messages)


def test_a_budget_below_one_quote_is_cut_with_finish_reason_length():
    reply = ask("How much is my budget?", BOT, SUMMARY, max_tokens=10)

    assert reply.text == "From earlier in our conversation:\n> My budget is"
    assert count_tokens(reply.text) == 10
    assert reply.finish_reason == "length"


# --- reading a listed record ------------------------------------------------------------------


def test_index_match_asks_for_the_record_with_the_tool_when_offered():
    reply = ask("Do I have food allergies?", BOT, SUMMARY, INDEX, *HISTORY, tools=RECALL_TOOLS)

    assert reply.text == ""
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls == [
        {
            # sha256 of name, arguments and context: the same request gets the same id
            "id": CALL_ID,
            "type": "function",
            "function": {"name": "read_records", "arguments": '{"names": ["diet"]}'},
        }
    ]
    again = ask("Do I have food allergies?", BOT, SUMMARY, INDEX, *HISTORY, tools=RECALL_TOOLS)
    assert again.tool_calls[0]["id"] == reply.tool_calls[0]["id"]
    assert reply.completion_tokens == count_tokens('read_records{"names": ["diet"]}')


def test_a_half_matching_sentence_does_not_stop_the_read_of_the_record_it_lacks():
    """ "What is the Aurora project locker code?" with "The Libra project locker code is 1999."
    in context (three of its four words) and a record of the Aurora locker in the index: the
    sentence counted as the answer and the Libra code was quoted. The word no statement here
    says ("aurora") is in a listed record: it is read first, then its line quoted."""
    index = {
        "role": "system",
        "content": f"{INDEX_HEADER}\n{INDEX_HELP}\n"
        "- aurora_project_locker (info): The Aurora project locker code is 4471.",
    }
    libra = [
        {"role": "user", "content": "The Libra project locker code is 1999."},
        {"role": "assistant", "content": "Noted."},
    ]
    question = "What is the Aurora project locker code?"
    reply = ask(question, BOT, index, *libra, tools=RECALL_TOOLS)
    assert reply.tool_calls[0]["function"] == {
        "name": "read_records",
        "arguments": '{"names": ["aurora_project_locker"]}',
    }
    answer = generate(
        "recall",
        [
            BOT,
            index,
            *libra,
            {"role": "user", "content": question},
            call("read_records", {"names": ["aurora_project_locker"]}),
            result("[record aurora_project_locker]\nThe Aurora project locker code is 4471."),
        ],
        tools=RECALL_TOOLS,
    )
    assert "> The Aurora project locker code is 4471." in answer.text
    # With the Aurora code in context already, nothing is read.
    known = [{"role": "user", "content": "The Aurora project locker code is 4471."}]
    direct = ask(question, BOT, index, *known, *libra, tools=RECALL_TOOLS)
    assert direct.tool_calls == []
    assert "> The Aurora project locker code is 4471." in direct.text


def test_index_match_asks_with_read_files_json_when_no_tool_is_offered():
    reply = ask("Do I have food allergies?", BOT, SUMMARY, INDEX, *HISTORY)

    assert reply.text == '{"read_files": {"files": ["diet"]}}'
    assert (reply.finish_reason, reply.tool_calls) == ("stop", [])
    assert read_files_request(reply.text) == ["diet"]


def test_tool_choice_none_means_answer_now():
    reply = ask("Do I have food allergies?", INDEX, tools=RECALL_TOOLS, tool_choice="none")

    assert reply.text == NO_MATCH_TEXT


def test_matching_uses_record_names_and_descriptions_but_not_index_boilerplate():
    by_topic = ask("What did the snapshot say about hotels?", INDEX)
    boilerplate_only = ask("What is a snapshot of messages?", INDEX)

    assert by_topic.text == '{"read_files": {"files": ["snapshot_1_40"]}}'
    assert json.loads(boilerplate_only.text) == {"search_records": {"query": "snapshot messages"}}


def test_asks_for_the_best_matching_records_only_at_most_three():
    lines = [f"- note_{n} (info): packing list item {n}" for n in range(5)]
    lines.append("- tent_notes (info): packing list tent choice")
    index = {
        "role": "system",
        "content": "[Memory index: records you can read]\n" + INDEX_HELP + "\n" + "\n".join(lines),
    }

    assert json.loads(ask("packing list", index).text) == {
        "read_files": {"files": ["note_0", "note_1", "note_2"]}
    }
    assert json.loads(ask("packing list tent", index).text) == {
        "read_files": {"files": ["tent_notes"]}
    }


def test_a_record_already_in_context_is_not_asked_for():
    recalled = [
        {"role": "user", "content": "What do I eat?"},
        call("read_records", {"names": ["diet"]}),
        result("[record diet]\nI eat vegetarian food only."),
        {"role": "assistant", "content": "From earlier in our conversation:\n> x — record diet"},
    ]

    reply = ask("Any food allergies?", INDEX, *recalled, tools=RECALL_TOOLS)

    assert reply.tool_calls[0]["function"] == {
        "name": "search_records",
        "arguments": '{"query": "food allergies"}',
    }


def test_answers_from_a_recalled_record_with_attribution():
    messages = [
        BOT,
        INDEX,
        *HISTORY,
        {"role": "user", "content": "Do I have food allergies?"},
        call("read_records", {"names": ["diet"]}),
        result("[record diet]\nI am allergic to peanuts and cashews.\nI eat vegetarian food only."),
    ]

    reply = generate("recall", messages, tools=RECALL_TOOLS)

    assert reply.text == (
        "From earlier in our conversation:\n"
        "> I am allergic to peanuts and cashews. — record diet\n"
        "> I eat vegetarian food only. — record diet"
    )
    assert reply.finish_reason == "stop"


def test_a_recalled_snapshot_is_quoted_by_who_said_it_never_with_labels():
    body = (
        "[Summary of messages 1–4]\n"
        "[2] user: My sister Clara plays the cello.\n"
        "[Raw messages 1–4]\n"
        "[3] assistant: From earlier in our conversation:\n"
        "> My sister Clara plays the cello. — you said\n"
        "[4] tool (read_records): [record diet]\n"
        "[9] user: My sister Clara moved to Porto last May."
    )
    messages = [
        INDEX,
        {"role": "user", "content": "What about my sister Clara?"},
        call("read_records", {"names": ["snapshot_1_40"]}),
        result("[record snapshot_1_40]\n" + body),
    ]

    reply = generate("recall", messages, tools=RECALL_TOOLS)

    assert reply.text == (
        "From earlier in our conversation:\n"
        "> My sister Clara plays the cello. — you said in message 2\n"
        "> My sister Clara moved to Porto last May. — you said in message 9"
    )


# --- searching when nothing listed matches ----------------------------------------------------


def test_no_index_match_searches_with_the_questions_content_words():
    reply = ask("What instrument does my sister play?", BOT, SUMMARY, INDEX, tools=RECALL_TOOLS)

    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls == [
        {
            "id": CALL_ID,
            "type": "function",
            "function": {
                "name": "search_records",
                "arguments": '{"query": "instrument sister play"}',
            },
        }
    ]


def test_no_index_match_searches_with_json_when_no_tool_is_offered():
    reply = ask("What instrument does my sister play?", BOT, SUMMARY, INDEX)

    assert reply.text == '{"search_records": {"query": "instrument sister play"}}'
    assert reply.finish_reason == "stop"


def test_no_memory_in_play_means_no_search():
    # No index block and no search tool: recall is off, so the answer is given from context.
    assert ask("What instrument does my sister play?", BOT, SUMMARY).text == NO_MATCH_TEXT


def test_context_that_answers_needs_no_recall():
    reply = ask("How much is my budget?", BOT, SUMMARY, INDEX, tools=RECALL_TOOLS)

    assert reply.text == (
        "From earlier in our conversation:\n> My budget is 4500 euros. — you said in message 7"
    )


def test_a_cut_fragment_gives_way_to_the_whole_sentence():
    context = [
        {"role": "user", "content": "I live in Porto, near the Ribeira."},
        {"role": "tool", "content": "[record snapshot_1_9]\n[3] user: I live"},
    ]

    reply = ask("Where do I live?", *context)

    assert reply.text == (
        "From earlier in our conversation:\n> I live in Porto, near the Ribeira. — you said"
    )


def test_answers_from_search_hits_without_highlights():
    messages = [
        BOT,
        INDEX,
        {"role": "user", "content": "What instrument does my sister play?"},
        call("search_records", {"query": "instrument sister play"}),
        result(
            "[record snapshot_41_80]\n"
            "… [52] user: My **sister** Clara **plays** the cello. [53] assistant: Noted. …\n\n"
            "[record gym]\nI **play** squash on Mondays."
        ),
    ]

    reply = generate("recall", messages, tools=RECALL_TOOLS)

    assert reply.text == (
        "From earlier in our conversation:\n"
        "> My sister Clara plays the cello. — you said in message 52"
    )
    assert "**" not in reply.text


def test_the_rest_of_a_long_message_in_a_hit_is_quoted_as_its_speakers():
    """A hit's message runs over several lines (an attached file's text, a code block): its
    later lines are the speaker's too, in a record and in live history alike (they were quoted
    as "— tool result")."""
    messages = [
        BOT,
        INDEX,
        {"role": "user", "content": "What is the secret word in my file?"},
        call("search_records", {"query": "secret word file"}),
        result(
            "[chat history: not in a record yet, nothing to read]\n"
            "[7] 2024-03-08 13:57Z user: Here is notes.txt:\n"
            "The secret word is PAPAYA."
        ),
    ]

    reply = generate("recall", messages, tools=RECALL_TOOLS)

    assert "> The secret word is PAPAYA. — you said in message 7, on 2024-03-08" in reply.text
    assert "tool result" not in reply.text


def test_read_then_search_then_answer_and_no_third_request():
    question = {"role": "user", "content": "Do I have food allergies or a favourite dish?"}
    first = generate("recall", [INDEX, question], tools=RECALL_TOOLS)
    after_read = [
        INDEX,
        question,
        call("read_records", {"names": ["diet"]}),
        result("[not found: diet]"),
    ]
    second = generate("recall", after_read, tools=RECALL_TOOLS)
    after_search = [
        *after_read,
        call("search_records", {"query": "food allergies favourite dish"}, "call_2"),
        result("[no matches]", "call_2"),
    ]
    third = generate("recall", after_search, tools=RECALL_TOOLS)
    # The turn offers no tools after two rounds: still no request, not even as JSON.
    fourth = generate("recall", after_search)

    assert first.tool_calls[0]["function"]["name"] == "read_records"
    assert second.tool_calls[0]["function"] == {
        "name": "search_records",
        "arguments": '{"query": "food allergies favourite dish"}',
    }
    assert (third.text, third.tool_calls, third.finish_reason) == (NO_MATCH_TEXT, [], "stop")
    assert fourth.text == NO_MATCH_TEXT


def test_a_read_that_lacks_the_questions_distinctive_word_leads_to_a_search():
    # issue 33: the index line matched only "number"; what was read is an invoice number
    index = {
        "role": "system",
        "content": "[Memory index: records you can read]\n" + INDEX_HELP + "\n"
        "- billing (info): The invoice number and due date",
    }
    question = {"role": "user", "content": "What is the flight number?"}
    after_read = [
        index,
        question,
        call("read_records", {"names": ["billing"]}),
        result("[record billing]\nThe invoice number is INV-30017, due on 1 May."),
    ]
    after_search = [
        *after_read,
        call("search_records", {"query": "flight number"}, "call_2"),
        result(
            "[record snapshot_1_9]\n[4] 2024-03-08 13:56Z user: The flight number is JL7079.",
            "call_2",
        ),
    ]

    first = generate("recall", [index, question], tools=RECALL_TOOLS)
    second = generate("recall", after_read, tools=RECALL_TOOLS)
    third = generate("recall", after_search, tools=RECALL_TOOLS)

    assert first.tool_calls[0]["function"]["arguments"] == '{"names": ["billing"]}'
    assert second.tool_calls[0]["function"] == {
        "name": "search_records",
        "arguments": '{"query": "flight number"}',
    }
    assert third.tool_calls == []
    quote = "> The flight number is JL7079. — you said in message 4, on 2024-03-08"
    assert quote in third.text.splitlines()
    assert "INV-30017" not in third.text


def test_a_read_that_says_every_question_word_is_answered_without_a_search():
    question = {"role": "user", "content": "What is the invoice number?"}
    messages = [
        INDEX,
        question,
        call("read_records", {"names": ["diet"]}),
        result("[record diet]\nThe invoice number is INV-30017, due on 1 May."),
    ]

    reply = generate("recall", messages, tools=RECALL_TOOLS)

    assert reply.tool_calls == []
    assert "INV-30017" in reply.text


def test_json_requests_count_as_asked_too():
    question = {"role": "user", "content": "What instrument does my sister play?"}
    asked = {
        "role": "assistant",
        "content": '{"search_records": {"query": "instrument sister play"}}',
    }
    hits = {"role": "tool", "content": "[no matches]"}

    assert generate("recall", [INDEX, question, asked, hits]).text == NO_MATCH_TEXT


def test_a_request_in_an_earlier_turn_does_not_block_asking_again():
    messages = [
        INDEX,
        {"role": "user", "content": "Do I have food allergies?"},
        call("read_records", {"names": ["diet"]}),
        result("Nothing readable."),
        {"role": "assistant", "content": "You told me about peanuts."},
        {"role": "user", "content": "Tell me my food allergies again"},
    ]

    assert generate("recall", messages).text == '{"read_files": {"files": ["diet"]}}'


def test_search_query_and_read_files_parsing():
    assert search_query("What instrument does my sister play?") == "instrument sister play"
    assert search_query("When's Grandma's birthday, the birthday?") == "Grandma's birthday"
    assert read_files_request('{"read_files": {"files": ["a", "b"]}}') == ["a", "b"]
    assert read_files_request('{"read_files": {"files": [1]}}') is None
    assert read_files_request('{"search_records": {"query": "x"}}') is None
    assert read_files_request("Sure! " + '{"read_files": {"files": ["a"]}}') is None


# --- "remember …" -----------------------------------------------------------------------------


def test_remember_calls_save_record_then_confirms():
    question = {"role": "user", "content": "Remember that my locker code is 4471"}

    first = generate("recall", [BOT, INDEX, question], tools=RECALL_TOOLS)
    [save] = first.tool_calls
    second = generate(
        "recall",
        [
            BOT,
            INDEX,
            question,
            call("save_record", json.loads(save["function"]["arguments"])),
            result("[saved: locker_code]"),
        ],
        tools=RECALL_TOOLS,
    )

    assert first.finish_reason == "tool_calls"
    assert save["function"]["name"] == "save_record"
    assert json.loads(save["function"]["arguments"]) == {
        "name": "locker_code",
        "description": "My locker code is 4471.",
        "body": "My locker code is 4471.",
        "scope": "bot",
    }
    assert (second.text, second.finish_reason, second.tool_calls) == (
        "Saved as locker_code.",
        "stop",
        [],
    )


def test_remember_reports_a_refused_save():
    messages = [
        {"role": "user", "content": "remember: my locker code is 4471"},
        call("save_record", {"name": "locker_code"}),
        result("[not saved: name: 'locker_code' is a snapshot]"),
    ]

    reply = generate("recall", messages, tools=RECALL_TOOLS)

    assert reply.text == "I could not save that: name: 'locker_code' is a snapshot"


def test_remember_never_writes_over_another_fact_of_the_same_name():
    """Saving is an upsert by name: the 5C code replaced the 3B one (both door_code_flat)."""
    index = {
        "role": "system",
        "content": f"{INDEX_HEADER}\n{INDEX_HELP}\n"
        "- door_code_flat (info): The door code for flat 3B is 4471.\n"
        "- door_code_flat_2 (info): The door code for flat 7A is 1234.",
    }

    def saved_name(text):
        question = {"role": "user", "content": text}
        [save] = generate("recall", [BOT, index, question], tools=RECALL_TOOLS).tool_calls
        return json.loads(save["function"]["arguments"])["name"]

    assert saved_name("Remember the door code for flat 5C is 9902.") == "door_code_flat_3"
    # the same fact again keeps its record
    assert saved_name("Remember the door code for flat 3B is 4471.") == "door_code_flat"


def test_remember_after_a_mention_saves_in_a_room():
    """A room's "@beta remember …" was answered "Noted." and saved nothing."""
    question = {"role": "user", "content": "@beta remember my locker code is 4471"}
    [save] = generate("recall", [BOT, question], tools=RECALL_TOOLS).tool_calls
    assert save["function"]["name"] == "save_record"
    assert json.loads(save["function"]["arguments"])["body"] == "My locker code is 4471."


def test_remember_without_the_save_tool_just_acknowledges():
    assert ask("Remember that my locker code is 4471", BOT).text == NOTED_TEXT
    assert ask("Remember that my locker code is 4471", BOT, tools=[READ, SEARCH]).text == NOTED_TEXT


def test_remember_as_a_question_is_a_question():
    context = [{"role": "user", "content": "My locker code is 4471."}]

    reply = ask("Remember my locker code?", *context, tools=RECALL_TOOLS)

    assert reply.text == "From earlier in our conversation:\n> My locker code is 4471. — you said"


@pytest.mark.parametrize(
    ("message", "fact", "name"),
    [
        ("Remember that my locker code is 4471", "My locker code is 4471.", "locker_code"),
        ("remember, I prefer aisle seats!", "I prefer aisle seats!", "prefer_aisle_seats"),
        ("Remember my sister's name is Clara", "My sister's name is Clara.", "sister_name_clara"),
        ("Remember 我喜欢绿茶", "我喜欢绿茶.", "note_3ec65d42"),
        # a room's message to one bot: the mention is who it is for, not the fact
        ("@beta remember my locker code is 4471", "My locker code is 4471.", "locker_code"),
        ("@beta, @gamma: Remember that I prefer tea", "I prefer tea.", "prefer_tea"),
    ],
)
def test_remembered_fact_and_record_name(message, fact, name):
    assert remembered_fact(message) == fact
    assert record_name(fact) == name


def test_a_remembered_fact_is_quoted_later_without_the_remember():
    context = [
        {"role": "user", "content": "Remember that my locker code is 4471"},
        {"role": "assistant", "content": "Saved as locker_code."},
    ]

    reply = ask("What is my locker code?", *context)

    assert reply.text == "From earlier in our conversation:\n> my locker code is 4471 — you said"


def test_an_index_without_the_invitation_gets_no_json_request():
    """Recall closed (disabled, or its rounds used up): the pipeline leaves the invitation out of
    the index block and offers no tools, so the model answers instead of asking."""
    closed = {
        "role": "system",
        "content": INDEX["content"].replace(INDEX_HELP + "\n", ""),
    }
    assert INDEX_HELP not in closed["content"]

    reply = ask("Do I have food allergies?", closed)

    assert not reply.text.lstrip().startswith("{")
    assert reply.tool_calls == []


PLANE = "[1] 2024-03-08 18:00Z user: My plane to Tokyo takes off at nine on Saturday morning."
PLANE_QUOTE = (
    "> My plane to Tokyo takes off at nine on Saturday morning. "
    "— you said in message 1, on 2024-03-08"
)


def test_a_search_hit_found_by_meaning_is_quoted_though_it_shares_no_word():
    # issue 33: hybrid search finds the paraphrase; words alone would quote nothing
    reply = after_search(
        "When does my flight depart?",
        "flight depart",
        f"[record snapshot_1_4]\n{PLANE}\n"
        "[2] 2024-03-08 18:01Z assistant: Sure, I'll remind you the day before.\n\n"
        "[record snapshot_5_8]\n[5] 2024-04-19 09:30Z user: Our landlord is raising the rent.",
    )

    assert (reply.text, reply.tool_calls) == (
        "From earlier in our conversation:\n"
        f"{PLANE_QUOTE}\n"
        "> Sure, I'll remind you the day before. — I said in message 2, on 2024-03-08",
        [],
    )


def test_after_a_read_that_half_matches_the_search_hit_is_quoted_not_the_read():
    # the read's invoice number shares "number"; the search found the flight by meaning only
    index = {
        "role": "system",
        "content": "[Memory index: records you can read]\n" + INDEX_HELP + "\n"
        "- billing (info): The invoice number and due date",
    }
    question = {"role": "user", "content": "What is the flight number?"}
    messages = [
        index,
        question,
        call("read_records", {"names": ["billing"]}),
        result("[record billing]\nThe invoice number is INV-30017, due on 1 May."),
        call("search_records", {"query": "flight number"}, "call_2"),
        result(f"[record snapshot_1_4]\n{PLANE}", "call_2"),
    ]

    reply = generate("recall", messages, tools=RECALL_TOOLS)

    assert reply.text == f"From earlier in our conversation:\n{PLANE_QUOTE}"


def test_a_json_search_result_is_read_the_same_way_and_questions_in_it_are_not_quoted():
    question = {"role": "user", "content": "When does my flight depart?"}
    messages = [
        INDEX,
        question,
        {"role": "assistant", "content": '{"search_records": {"query": "flight depart"}}'},
        {
            "role": "user",
            "content": "[chat history: not in a record yet, nothing to read]\n"
            "[9] 2024-05-02 20:15Z assistant: Is the plane on time?\n"
            "[10] 2024-05-02 20:16Z user: It takes off at nine, gate 4.",
        },
    ]

    reply = generate("recall", messages)

    assert reply.text == (
        "From earlier in our conversation:\n"
        "> It takes off at nine, gate 4. — you said in message 10, on 2024-05-02"
    )


def test_a_word_quote_from_the_search_result_is_kept_over_its_first_hit():
    reply = after_search(
        "What instrument does my sister play?",
        "instrument sister play",
        "[record snapshot_1_4]\n[1] 2024-03-08 18:00Z user: We went to a concert.\n\n"
        "[record snapshot_5_8]\n[6] 2024-04-19 09:31Z user: My sister plays the harmonica.",
    )

    assert reply.text == (
        "From earlier in our conversation:\n"
        "> My sister plays the harmonica. — you said in message 6, on 2024-04-19"
    )


def test_a_rooms_named_lines_are_quoted_as_their_speakers():
    # a room's search result names the user and the other bots (memory/search_hits.py): their
    # lines are theirs, never "you said" or "I said"
    reply = after_search(
        "Who rang about the lighthouse lamp?",
        "lighthouse lamp",
        "[chat history: not in a record yet, nothing to read]\n"
        "[33] 2024-03-08 18:00Z Dana: Which keeper rang about the lighthouse lamp?\n"
        "[34] 2024-03-08 18:01Z «Tool»: Morwenna rang about the lighthouse lamp.",
    )

    assert (reply.text, reply.tool_calls) == (
        "From earlier in our conversation:\n"
        "> Morwenna rang about the lighthouse lamp. — «Tool» said in message 34, on 2024-03-08",
        [],
    )


def test_the_same_search_in_a_later_turn_gets_another_call_id():
    """The id was the tool's name and arguments alone: the same question asked twice gave two
    calls one id, and a compaction (which pairs a call with its results by id) took the second
    turn's result with the first call (docs/compaction.md "Range")."""
    search = [{"type": "function", "function": {"name": "search_records", "parameters": {}}}]
    question = {"role": "user", "content": "What is my cat called?"}
    first = generate("builtin/recall", [question], tools=search).tool_calls[0]
    answered = [
        question,
        {"role": "assistant", "content": "", "tool_calls": [first]},
        {"role": "tool", "tool_call_id": first["id"], "content": "[no matches]"},
        {"role": "assistant", "content": "Nothing."},
    ]
    second = generate("builtin/recall", [*answered, question], tools=search).tool_calls[0]
    assert first["function"] == second["function"]
    assert first["id"] != second["id"]
    # deterministic: the same context, the same id
    assert generate("builtin/recall", [question], tools=search).tool_calls[0] == first
