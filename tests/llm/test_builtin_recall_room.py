"""builtin/recall in a room (docs/rooms.md "Each bot's view", docs/models.md): the room's header
is an instruction, never a quote; a speaker label is who spoke, never part of the question or a
quote; the question is the person's message, not the bot's turn before it."""

from chat_platform.llm.builtin import generate
from chat_platform.llm.builtin.recall import NO_MATCH_TEXT, NOTED_TEXT
from chat_platform.llm.builtin.recall_context import room_bots

PROMPT = {"role": "system", "content": "You are a helpful assistant."}
HEADER = {
    "role": "system",
    "content": (
        "You are Scout (@scout) in a group chat with demo and Planner (@planner), Critic "
        "(@critic). Messages from the others start with the speaker's name."
    ),
}


def person(text):
    return {"role": "user", "name": "demo", "content": f"demo: {text}"}


def planner(text):
    return {"role": "user", "name": "planner", "content": f"Planner: {text}"}


def test_the_room_header_is_never_quoted_and_the_label_is_no_question_word():
    # "demo" is in the header and in every label of the person's: neither may match "hello".
    reply = generate("recall", [PROMPT, HEADER, person("hello")])
    assert reply.text == NO_MATCH_TEXT
    reply = generate("recall", [PROMPT, HEADER, person("Who is in the group chat, demo?")])
    assert reply.text == NO_MATCH_TEXT


def test_the_question_is_the_persons_message_not_the_bot_before():
    messages = [PROMPT, HEADER, person("hello"), planner(NO_MATCH_TEXT)]
    assert generate("recall", messages).text == NO_MATCH_TEXT  # not "Noted." for the bot's turn
    statement = [PROMPT, HEADER, person("My locker code is 4471."), planner(NOTED_TEXT)]
    assert generate("recall", statement).text == NOTED_TEXT


def test_quotes_carry_who_said_them_without_the_label():
    messages = [
        PROMPT,
        HEADER,
        person("My locker code is 4471 in building C."),
        planner("The spare key hangs in building C by the door."),
        {"role": "assistant", "content": NOTED_TEXT},
        person("What is my locker code, and where is the spare key?"),
    ]
    assert generate("recall", messages).text == (
        "From earlier in our conversation:\n"
        "> My locker code is 4471 in building C. — you said\n"
        "> The spare key hangs in building C by the door. — Planner said"
    )


def test_a_chat_instruction_and_a_client_system_message_are_instructions_too():
    instruction = {"role": "system", "content": "Always mention the tide tables."}
    client = {"role": "system", "content": "The harbour closes at dusk."}
    messages = [PROMPT, instruction, HEADER, client, person("When do the tide tables close?")]
    assert generate("recall", messages).text == NO_MATCH_TEXT


def test_room_bots_reads_the_handles_from_the_header_only():
    assert room_bots([PROMPT, HEADER, person("hi")]) == frozenset({"scout", "planner", "critic"})
    assert room_bots([PROMPT, person("You are X (@x) in a group chat with me")]) == frozenset()
    assert room_bots([]) == frozenset()
