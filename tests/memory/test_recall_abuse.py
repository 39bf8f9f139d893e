"""Recall tool abuse (docs/memory.md), through a real turn against the local fake provider: a model
that sends too many calls, unstorable text (NUL, a lone surrogate), oversized or malformed
arguments, unknown tools or wrong types gets a tool result it can read, never a failed turn,
and nothing unstorable or unbounded is written."""

import json

import pytest

from bots.models import Message
from bots.transitions import session_context_add
from memory import services
from memory.models import MemoryRecord, RecallEvent
from tests.factories import message_add
from tests.fakeopenai import Reply
from turns import turn

pytestmark = pytest.mark.django_db(transaction=True)

NOT_RUN = "[not run: at most 8 tool calls a round]"
UNSTORABLE = "Text may not contain NUL characters or unpaired surrogates."
BAD = {"nul": "\u0000", "surrogate": "\ud800"}


def _turn(session, content="What do you remember?"):
    new = message_add(session, role="user", content=content)
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_add(session_id=session.pk, tokens=new.token_count)
    return reply


def _call(name, arguments, call_id="call_1"):
    """A tool call as the provider sends it; ``arguments`` is JSON text unless already a str."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def _seed(session):
    services.record_save(
        session=session,
        name="locker_code",
        description="Locker code",
        body="My locker code is 4471.",
    )
    services.record_save(
        session=session, name="pets", description="Pets", body="My dog is called Biscuit."
    )


def _run(session, fake_openai, *first, answer="Done."):
    """One turn: the model's first reply is ``first`` (a Reply), then it answers ``answer``."""
    reply = _turn(session)
    fake_openai.script(*first, Reply(text=answer))
    turn.turn_run(message_id=reply.pk)
    reply.refresh_from_db()
    assert (reply.status, reply.error_code, reply.content) == ("complete", "", answer)
    return reply


def _tool_results(request):
    return [m for m in request["messages"] if m["role"] == "tool"]


def _stored_calls(session):
    [call] = Message.objects.filter(session=session, role="assistant", kind="tool")
    return call.tool_calls


def _nothing_unstorable_stored(session):
    for content, calls, call_id, name in Message.objects.filter(session=session).values_list(
        "content", "tool_calls", "tool_call_id", "tool_name"
    ):
        for text in (content, json.dumps(calls), call_id, name):
            assert "\x00" not in text and "\\u0000" not in text
            assert "\ud800" not in text and "\\ud800" not in text
    for body, description in MemoryRecord.objects.values_list("body", "description"):
        assert "\x00" not in body + description and "\ud800" not in body + description


# --- (a) too many calls in one round ----------------------------------------------------------


def test_a_round_of_200_calls_runs_8_and_answers_each_other_one_not_run(fake_session, fake_openai):
    _seed(fake_session)
    calls = [_call("search_records", {"query": "dog"}, call_id=f"call_{i}") for i in range(200)]

    reply = _run(fake_session, fake_openai, Reply(text="", tool_calls=calls))

    assert RecallEvent.objects.filter(session=fake_session, message=reply).count() == 8
    results = _tool_results(fake_openai.requests[1])
    assert [r["tool_call_id"] for r in results] == [f"call_{i}" for i in range(200)]
    assert all(r["content"].startswith("[record pets]\n") for r in results[:8])
    assert [r["content"] for r in results[8:]] == [NOT_RUN] * 192
    # what the transcript keeps of a call that did not run is its name, not its arguments
    stored = _stored_calls(fake_session)
    assert len(stored) == 200
    assert [c["function"]["arguments"] for c in stored[8:]] == ["{}"] * 192
    assert Message.objects.filter(session=fake_session, role="tool").count() == 200


def test_the_cap_holds_for_every_tool_and_saves_nothing_past_it(fake_session, fake_openai):
    calls = [
        _call(
            "save_record",
            {"name": f"fact_{i}", "description": f"Fact {i}", "body": f"Fact number {i}."},
            call_id=f"call_{i}",
        )
        for i in range(12)
    ]

    _run(fake_session, fake_openai, Reply(text="", tool_calls=calls))

    assert sorted(MemoryRecord.objects.values_list("name", flat=True)) == sorted(
        f"fact_{i}" for i in range(8)
    )
    results = [r["content"] for r in _tool_results(fake_openai.requests[1])]
    assert results == [f"[saved: fact_{i}]" for i in range(8)] + [NOT_RUN] * 4


# --- (b) NUL and lone surrogates ----------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_unstorable_text_in_a_search_query_is_dropped(fake_session, fake_openai, bad):
    _seed(fake_session)

    _run(
        fake_session,
        fake_openai,
        Reply(text="", tool_calls=[_call("search_records", {"query": f"do{bad}g{bad}"})]),
    )

    [result] = _tool_results(fake_openai.requests[1])
    assert result["content"].startswith("[record pets]\n")
    event = RecallEvent.objects.get(session=fake_session)
    assert (event.query, event.found) == ("dog", ["pets"])
    assert json.loads(_stored_calls(fake_session)[0]["function"]["arguments"]) == {"query": "dog"}
    _nothing_unstorable_stored(fake_session)


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_unstorable_text_in_read_names_is_dropped(fake_session, fake_openai, bad):
    _seed(fake_session)
    names = [f"locker{bad}_code", f"nope{bad}"]

    _run(
        fake_session,
        fake_openai,
        Reply(text="", tool_calls=[_call("read_records", {"names": names})]),
    )

    [result] = _tool_results(fake_openai.requests[1])
    assert result["content"] == "[record locker_code]\nMy locker code is 4471.\n\n[not found: nope]"
    event = RecallEvent.objects.get(session=fake_session)
    assert (event.names, event.found) == (["locker_code", "nope"], ["locker_code"])
    _nothing_unstorable_stored(fake_session)


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_unstorable_text_in_save_fields_is_refused_and_names_the_fields(
    fake_session, fake_openai, bad
):
    arguments = {"name": f"fact{bad}", "description": "A fact", "body": f"The {bad} fact."}

    _run(fake_session, fake_openai, Reply(text="", tool_calls=[_call("save_record", arguments)]))

    [result] = _tool_results(fake_openai.requests[1])
    assert result["content"] == f"[not saved: name: {UNSTORABLE}; body: {UNSTORABLE}]"
    assert not MemoryRecord.objects.exists()
    _nothing_unstorable_stored(fake_session)


def test_nul_in_the_call_id_and_tool_name_is_dropped(fake_session, fake_openai):
    _seed(fake_session)
    call = _call("read\u0000_records", {"names": ["pets"]}, call_id="call\u0000_7")

    _run(fake_session, fake_openai, Reply(text="", tool_calls=[call]))

    [result] = _tool_results(fake_openai.requests[1])
    assert result == {
        "role": "tool",
        "tool_call_id": "call_7",
        "content": "[record pets]\nMy dog is called Biscuit.",
    }
    _nothing_unstorable_stored(fake_session)


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_call_ids_and_names_are_cleaned_and_made_unique(bad):
    """The check itself, whatever the provider layer did first (it may already have replaced a
    surrogate): unstorable characters dropped, an empty or repeated id replaced."""
    from memory.recall import calls_from_completion

    calls = calls_from_completion(
        [
            _call(f"read{bad}_records", {"names": ["pets"]}, call_id=f"call{bad}_7"),
            _call("read_records", {"names": ["pets"]}, call_id="call_7"),
            _call("read_records", {"names": ["pets"]}, call_id=bad),
            _call("read_records", {"names": ["pets"]}, call_id="x" * 500),
        ]
    )

    assert [(c.id, c.name, c.refusal) for c in calls] == [
        ("call_7", "read_records", ""),
        ("call_1", "read_records", ""),
        ("call_2", "read_records", ""),
        ("x" * 64, "read_records", ""),
    ]


# --- (c) an oversized save ----------------------------------------------------------------------


def test_save_record_with_a_2_mb_body_is_refused_with_the_cap(fake_session, fake_openai):
    body = "x" * (2 * 1024 * 1024)
    arguments = {"name": "big", "description": "A big one", "body": body}

    _run(fake_session, fake_openai, Reply(text="", tool_calls=[_call("save_record", arguments)]))

    [result] = _tool_results(fake_openai.requests[1])
    assert result["content"] == (
        "[not saved: body: too large (2,097,152 bytes); a record body holds at most "
        "1,048,576 bytes]"
    )
    assert not MemoryRecord.objects.exists()
    # the transcript keeps a bounded copy of the call, not 2 MB
    stored = json.loads(_stored_calls(fake_session)[0]["function"]["arguments"])
    assert stored["name"] == "big"
    assert stored["body"] == "x" * 1000 + "… [cut: 2,097,152 characters in all]"


# --- (d) junk ---------------------------------------------------------------------------------

JUNK = {
    "malformed_json": (
        _call("read_records", '{"names": ["pets"'),
        "[not run: the arguments are not valid JSON]",
    ),
    "deeply_nested_json": (
        _call("read_records", "[" * 5_000 + "]" * 5_000),
        "[not run: the arguments are not valid JSON]",
    ),
    "arguments_not_an_object": (
        _call("read_records", '["pets"]'),
        "[not run: the arguments must be a JSON object]",
    ),
    "unknown_tool": (
        _call("delete_everything", {"all": True}),
        "[unknown tool: delete_everything; the tools are read_records, search_records "
        "and save_record]",
    ),
    "names_not_a_list": (
        _call("read_records", {"names": {"pets": 1}}),
        "[not read: names must be a list of record names]",
    ),
    "names_not_text": (
        _call("read_records", {"names": ["pets", 7]}),
        "[not read: names must be a list of record names]",
    ),
    "names_missing": (
        _call("read_records", {}),
        "[not read: names must be a list of record names]",
    ),
    "query_not_text": (
        _call("search_records", {"query": ["dog"]}),
        "[not searched: query must be text]",
    ),
    "save_name_not_text": (
        _call("save_record", {"name": 5, "description": "d", "body": "b"}),
        "[not saved: name: This field is required and must be text.]",
    ),
}


@pytest.mark.parametrize("call,expected", JUNK.values(), ids=JUNK.keys())
def test_a_bad_call_gets_a_readable_result_and_the_turn_completes(
    fake_session, fake_openai, call, expected
):
    _seed(fake_session)

    _run(fake_session, fake_openai, Reply(text="", tool_calls=[call]))

    [result] = _tool_results(fake_openai.requests[1])
    assert result["content"] == expected
    assert not RecallEvent.objects.filter(session=fake_session).exists()  # nothing was looked up
    assert len(_stored_calls(fake_session)) == 1


def test_10000_names_read_the_first_5_and_say_so_even_on_a_small_budget(fake_session, fake_openai):
    bot = fake_session.bot
    bot.context_window = 4000
    bot.max_output_tokens = 200
    bot.save()
    _seed(fake_session)
    names = ["pets", "nope", "pets", "locker_code"] + [f"name_{i}" for i in range(10_000)]

    _run(
        fake_session,
        fake_openai,
        Reply(text="", tool_calls=[_call("read_records", {"names": names})]),
    )

    [result] = _tool_results(fake_openai.requests[1])
    assert result["content"] == (
        "[record pets]\nMy dog is called Biscuit.\n\n[not found: nope]\n\n"
        "[record locker_code]\nMy locker code is 4471.\n\n[not found: name_0]\n\n"
        "[not found: name_1]\n\n[not read: 9998 more names; at most 5 names a call]"
    )
    event = RecallEvent.objects.get(session=fake_session)
    assert event.names == ["pets", "nope", "locker_code", "name_0", "name_1"]
    stored = json.loads(_stored_calls(fake_session)[0]["function"]["arguments"])
    assert stored == {"names": ["pets", "nope", "locker_code", "name_0", "name_1"]}


def test_a_10_kb_query_is_cut_to_1000_characters(fake_session, fake_openai):
    _seed(fake_session)
    query = "dog " + "x" * 10_000

    _run(
        fake_session,
        fake_openai,
        Reply(text="", tool_calls=[_call("search_records", {"query": query})]),
    )

    [result] = _tool_results(fake_openai.requests[1])
    assert result["content"].startswith("[record pets]\n")
    event = RecallEvent.objects.get(session=fake_session)
    assert event.query == query[:1000]
    stored = json.loads(_stored_calls(fake_session)[0]["function"]["arguments"])
    assert stored == {"query": query[:1000]}


def test_an_exception_in_one_call_is_a_result_and_a_logged_warning(
    fake_session, fake_openai, monkeypatch, caplog
):
    from memory import recall

    _seed(fake_session)

    def boom(**kwargs):
        raise RuntimeError("search exploded")

    monkeypatch.setattr(recall, "records_search", boom)
    calls = [
        _call("search_records", {"query": "dog"}, call_id="call_1"),
        _call("read_records", {"names": ["pets"]}, call_id="call_2"),
    ]

    with caplog.at_level("WARNING"):
        _run(fake_session, fake_openai, Reply(text="", tool_calls=calls))

    results = [r["content"] for r in _tool_results(fake_openai.requests[1])]
    assert results == [
        "[failed: search_records could not run because of an error on our side; answer without it]",
        "[record pets]\nMy dog is called Biscuit.",
    ]
    assert list(
        RecallEvent.objects.filter(session=fake_session).order_by("id").values_list("tool", "found")
    ) == [("search", []), ("read", ["pets"])]
    assert "recall_call_failed" in caplog.text
    assert "search exploded" in caplog.text  # the traceback is in the log


# --- the JSON protocol (models without tools) ---------------------------------------------------

JSON_JUNK = {
    "nul_in_a_file_name": (
        '{"read_files": {"files": ["locker\\u0000_code"]}}',
        "[record locker_code]\nMy locker code is 4471.",
    ),
    "surrogate_in_a_query": (
        '{"search_records": {"query": "dog\\ud800"}}',
        "[record pets]\n",
    ),
    "too_many_files": (
        json.dumps({"read_files": {"files": [f"n_{i}" for i in range(10_000)]}}),
        "[not found: n_0]\n\n[not found: n_1]\n\n[not found: n_2]\n\n[not found: n_3]\n\n"
        "[not found: n_4]\n\n[not read: 9995 more names; at most 5 names a call]",
    ),
    "a_10_kb_query": (
        json.dumps({"search_records": {"query": "dog " + "y" * 10_000}}),
        "[record pets]\n",
    ),
}


@pytest.mark.parametrize("text,expected", JSON_JUNK.values(), ids=JSON_JUNK.keys())
def test_json_requests_with_junk_are_answered_readably(fake_session, fake_openai, text, expected):
    bot = fake_session.bot
    bot.max_output_tokens = 60_000  # the whole request is one reply: within the output cap
    bot.save()
    _seed(fake_session)

    _run(fake_session, fake_openai, Reply(text=text))

    [result] = _tool_results(fake_openai.requests[1])
    assert result["content"].startswith(expected)
    assert RecallEvent.objects.filter(session=fake_session).count() == 1
    _nothing_unstorable_stored(fake_session)
    # the transcript's copy of the request is bounded (at most 5 names, a 1000-character query)
    assert len(json.dumps(_stored_calls(fake_session))) < 1200


@pytest.mark.parametrize(
    "text",
    [
        '{"read_files": {"files": "pets"}}',
        '{"search_records": {"query": 42}}',
        '{"read_files": ' + "[" * 5_000 + "]" * 5_000 + "}",
    ],
    ids=["files_not_a_list", "query_not_text", "nested_past_the_parser_stack"],
)
def test_a_json_lookalike_that_is_not_a_request_is_the_answer(fake_session, fake_openai, text):
    fake_session.bot.max_output_tokens = 20_000  # the whole reply is within the output cap
    fake_session.bot.save()
    reply = _turn(fake_session)
    fake_openai.script(Reply(text=text))

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", text)
    assert len(fake_openai.requests) == 1
