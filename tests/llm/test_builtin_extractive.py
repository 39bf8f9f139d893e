"""builtin/extractive as plain logic (the litellm road is covered in test_builtin_provider.py)."""

import pytest

from chat_platform.llm.builtin import generate
from chat_platform.llm.builtin.extractive import Turn, parse_transcript, summarise
from chat_platform.llm.tokens import count_message_tokens, count_tokens

SYSTEM = {
    "role": "system",
    "content": (
        "You compact conversations. Keep facts, decisions and agreements; user preferences and "
        "requests; names, dates, numbers and identifiers."
    ),
}
TRANSCRIPT = """user: Hi! How are you today?
assistant: I'm doing well, thanks for asking. How can I help?
user: I need to plan the offsite. It will be in Porto on 14 March 2025.
assistant: Sounds lovely. How many people are coming?
user: Around 25 people. Maria Lopes is organising the catering.
assistant: Great. Do you have a budget in mind?
user: We agreed on a budget of 12,000 EUR. I prefer vegetarian options for lunch.
assistant: Understood. I'll note that.
user: Thanks, that's all for now.
assistant: You're welcome! Have a nice day."""
PROMPT = "Summarise the conversation below. Keep every fact.\n\n" + TRANSCRIPT


def summarise_messages(user_content, max_tokens=None, system=SYSTEM):
    return generate(
        "extractive", [system, {"role": "user", "content": user_content}], max_tokens=max_tokens
    )


def test_keeps_fact_sentences_with_speaker_labels_in_order():
    result = summarise_messages(PROMPT, max_tokens=500)

    assert result.text == (
        "user: I need to plan the offsite. It will be in Porto on 14 March 2025.\n"
        "user: Around 25 people. Maria Lopes is organising the catering.\n"
        "user: We agreed on a budget of 12,000 EUR. I prefer vegetarian options for lunch."
    )
    assert result.finish_reason == "stop"
    assert result.tool_calls == []


def test_reports_usage():
    messages = [SYSTEM, {"role": "user", "content": PROMPT}]

    result = generate("extractive", messages, max_tokens=500)

    assert result.prompt_tokens == sum(count_message_tokens(m["content"]) for m in messages)
    assert result.prompt_tokens == 181
    assert result.completion_tokens == count_tokens(result.text) == 59


def test_output_is_shorter_than_the_transcript_and_within_max_tokens():
    transcript_tokens = count_tokens(TRANSCRIPT)
    assert transcript_tokens == 138

    for budget in (500, 60, 40, 25, 12):
        text = summarise_messages(PROMPT, max_tokens=budget).text
        assert 0 < count_tokens(text) <= budget
        assert count_tokens(text) < transcript_tokens


def test_a_tight_budget_keeps_the_strongest_and_newest_facts():
    assert summarise_messages(PROMPT, max_tokens=40).text == (
        "user: It will be in Porto on 14 March 2025.\n"
        "user: We agreed on a budget of 12,000 EUR. I prefer vegetarian options for lunch."
    )
    assert summarise_messages(PROMPT, max_tokens=25).text == (
        "user: We agreed on a budget of 12,000 EUR. I prefer vegetarian options for lunch."
    )


def test_keeps_numbers_names_dates_and_identifiers():
    transcript = (
        "user: hello there\n"
        "assistant: hi, what can I do for you\n"
        "user: my order number is INV-2041 and it shipped via dhl\n"
        "assistant: thanks, checking now\n"
        "user: also Priya from accounts asked about it\n"
        "user: nice weather here\n"
        "assistant: the refund of 49.90 was issued on Friday\n"
        "assistant: ok then"
    )

    text = summarise_messages(transcript).text

    assert text == (
        "user: my order number is INV-2041 and it shipped via dhl\n"
        "user: also Priya from accounts asked about it\n"
        "assistant: the refund of 49.90 was issued on Friday"
    )


def test_is_never_longer_than_its_input_even_when_everything_is_a_fact():
    transcript = "user: Flight BA117 on 3 May.\nassistant: Seat 14C, gate A7."

    text = summarise_messages(transcript).text

    assert count_tokens(text) < count_tokens(transcript)
    assert text == "user: Flight BA117 on 3 May."


def test_instructions_before_the_transcript_are_not_summarised():
    content = "Keep all 5 facts. You must be brief!\n\nuser: Call me Sam.\nassistant: Sure thing."

    text = summarise_messages(content).text

    assert text == "user: Call me Sam."


def test_transcript_tags_and_focus_line():
    content = "Focus: catering\n<transcript>\n" + TRANSCRIPT + "\n</transcript>\nThanks!"

    text = summarise_messages(content, max_tokens=30).text

    assert text == (
        "user: Maria Lopes is organising the catering.\nuser: We agreed on a budget of 12,000 EUR."
    )


def test_focus_in_the_system_prompt_counts_too():
    system = {"role": "system", "content": "Summarise.\nFocus: catering"}

    text = summarise_messages(TRANSCRIPT, max_tokens=12, system=system).text

    assert text == "user: Maria Lopes is organising the catering."


def test_fuses_earlier_summaries_keeping_unlabelled_summary_lines():
    content = (
        "[Summary of messages 1–40]\n"
        "The team chose Porto for the offsite.\n"
        "Budget talks were friendly.\n"
        "[Summary of messages 41–80]\n"
        "user: The venue is Casa da Música, deposit paid on 2 Feb.\n"
        "assistant: Noted.\n"
        "user: ok"
    )

    text = summarise_messages(content).text

    assert text == (
        "The team chose Porto for the offsite.\n"
        "user: The venue is Casa da Música, deposit paid on 2 Feb."
    )


def test_small_talk_only_still_yields_a_short_summary():
    content = (
        "user: ok\n"
        "assistant: sure thing, happy to help with anything else\n"
        "user: nah that's it, bye for now"
    )

    text = summarise_messages(content).text

    assert text == (
        "assistant: sure thing, happy to help with anything else\nuser: nah that's it, bye for now"
    )
    assert count_tokens(text) < count_tokens(content)


def test_cjk_sentences_are_joined_without_spaces():
    content = "user: 你好！我们决定在2025年3月14日去波尔图。预算是12000欧元。\nassistant: 好的。"

    text = summarise_messages(content).text

    assert text == "user: 我们决定在2025年3月14日去波尔图。预算是12000欧元。"


def test_a_budget_below_one_sentence_cuts_the_best_one():
    text = summarise_messages(PROMPT, max_tokens=5).text

    assert text == "user: We agreed on"
    assert count_tokens(text) == 5


def test_tiny_input_gives_empty_output():
    assert summarise_messages("user: ok").text == ""
    assert summarise_messages("").text == ""


def test_is_deterministic():
    assert summarise(TRANSCRIPT, max_tokens=40) == summarise(TRANSCRIPT, max_tokens=40)


def test_parse_transcript_speaker_labels():
    turns, body = parse_transcript(
        "Please summarise:\n"
        "[3] user: First line.\n"
        "continued here\n"
        "assistant (#4): Second.\n"
        "Alice: Third.\n"
        "TOOL: {}\n"
        "user:\n"
        "Fifth on the next line."
    )

    assert turns == [
        Turn(label="[3] user", lines=["First line.", "continued here"]),
        Turn(label="assistant (#4)", lines=["Second."]),
        Turn(label="Alice", lines=["Third."]),
        Turn(label="TOOL", lines=["{}"]),
        Turn(label="user", lines=["Fifth on the next line."]),
    ]
    assert body.startswith("[3] user: First line.")


def test_a_fact_repeated_word_for_word_is_kept_once():
    content = (
        "user: The venue is in Lisbon on 14 March.\n"
        "assistant: Noted: the venue is in Lisbon on 14 March.\n"
        "user: Again, the venue is in Lisbon on 14 March!\n"
        "assistant: The venue is in Lisbon on 14 March."
    )

    text = summarise_messages(content).text

    # "Noted:" and "Again," make those two sentences different; the two verbatim ones collapse
    assert text.count("The venue is in Lisbon on 14 March.") == 1


def test_long_fact_dense_input_keeps_at_most_60_percent():
    lines = [
        f"user: Order {n} ships on day {n} from dock {n + 7} to store {n * 3}." for n in range(40)
    ]
    content = "\n".join(lines)
    body_tokens = count_tokens(content)
    assert body_tokens >= 128

    text = summarise_messages(content).text

    assert 0 < count_tokens(text) <= body_tokens * 60 // 100
    # newest facts win among equals: the last order is kept, the first is not
    assert "Order 39 ships" in text
    assert "Order 0 ships" not in text


# --- echoes of quotes and summaries are dropped -----------------------------------------------


def test_drops_lines_that_only_echo_earlier_quotes_summaries_and_recall():
    transcript = (
        "[11] user: My sister Clara plays the cello in the Porto orchestra.\n"
        "[12] assistant: From earlier in our conversation:\n"
        "> My sister Clara plays the cello. — you said in message 3\n"
        "[13] user: What does she play?\n"
        "[14] assistant: — Summary of messages 1–24 > [10] user: my sister plays 2 instruments\n"
        "[15] assistant: (used search_records)\n"
        "[16] tool (search_records): [record snapshot_1_9]\n"
        "[3] user: My sister Clara plays the cello since 2019.\n"
        "[17] assistant: Saved as sister_cello.\n"
        "[18] user: Her concert is on 12 May at 19:30."
    )

    text = summarise_messages(transcript).text

    assert text == (
        "[11] user: My sister Clara plays the cello in the Porto orchestra.\n"
        "[18] user: Her concert is on 12 May at 19:30."
    )


def test_fusion_keeps_at_most_half_of_the_summaries_it_fuses():
    first = "\n".join(
        f"[{n}] user: Item {n} costs {n * 7} euros and ships on day {n}." for n in range(1, 9)
    )
    second = "\n".join(f"[{n}] user: Order {n} goes to shelf B{n} on 3 May." for n in range(9, 17))
    content = f"[Summary of messages 1–8]\n{first}\n[Summary of messages 9–16]\n{second}"
    summaries = count_tokens(content)

    text = summarise_messages(content).text

    assert summaries == 314
    assert count_tokens(text) <= summaries * 50 // 100 == 157
    assert text.startswith("[") and "Summary of" not in text


def test_a_fusion_counts_its_summary_sections_once(monkeypatch):
    """The summary sections bound a fusion's output; they are tokenised once per summary, not
    once for the bound and again for the ordering (docs/performance.md, "The tool task")."""
    from chat_platform.llm.builtin import extractive

    first = "[2] user: Flight BA117 leaves on 3 May from gate A7."
    second = "[6] user: The hotel booking number is HX-4471 for two nights."
    content = f"[Summary of messages 1–4]\n{first}\n[Summary of messages 5–8]\n{second}"
    sections = content  # every line of this transcript is inside a summary section
    counted: list[str] = []

    def counting(text, *, model=""):
        counted.append(text)
        return count_tokens(text, model=model)

    monkeypatch.setattr(extractive, "count_tokens", counting)
    text = extractive.summarise(content)

    assert counted.count(sections) == 2  # the body's share, then the sections: each once
    assert text == summarise(content)
    assert count_tokens(text) <= count_tokens(sections) * 50 // 100


def test_fusion_with_raw_messages_is_capped_by_the_summaries_not_the_raw_text():
    summary = "[Summary of messages 1–4]\n[2] user: Flight BA117 leaves on 3 May from gate A7."
    raw = "\n".join(
        f"[{n}] user: Flight BA117 leaves on 3 May from gate A7, seat {n}C, row {n}."
        for n in range(1, 20)
    )
    content = f"{summary}\n[Raw messages 1–4]\n{raw}"

    text = summarise_messages(content).text

    assert count_tokens(text) <= count_tokens(summary) * 50 // 100


# --- short fact-dense lines first; a question only with its answer (issue 16 item 4) ---------

NAME_CITY_CHATTER = (
    "user: Hi there, my name is Ravi.\n"
    "assistant: Nice to meet you.\n"
    "user: I live in Leeds.\n"
    "assistant: Lovely.\n"
    "user: I really love long walks when the weather is like this and I always want to go out "
    "again the moment I get home from work, honestly it is the best part of my week.\n"
    "assistant: That sounds wonderful, I love hearing that you enjoy your walks so much and I "
    "hope you always find the time for them.\n"
)


def test_a_name_and_a_city_are_kept_before_long_chatter():
    # Before: the name line weighed less than a keyword ("love", "always", "want"), so a
    # 30-token budget kept the assistant's chatter and dropped both the name and the city.
    assert summarise(NAME_CITY_CHATTER, max_tokens=30) == (
        "user: Hi there, my name is Ravi.\nuser: I live in Leeds."
    )
    assert summarise(NAME_CITY_CHATTER, max_tokens=45) == (
        "user: Hi there, my name is Ravi.\nuser: I live in Leeds."
    )


QUESTIONS_AND_ANSWERS = (
    "user: Did you book Nando's for Friday at 19:30?\n"
    "assistant: Yes, the one by the station, for eight.\n"
    "user: Is Priya still coming on Saturday at 6?\n"
    "assistant: No, she has a cold.\n"
    "user: ok thanks\n"
)


def test_a_question_is_kept_with_its_answer_or_not_at_all():
    # Before: both questions (they hold the numbers) and neither answer.
    assert summarise(QUESTIONS_AND_ANSWERS, max_tokens=40) == (
        "user: Is Priya still coming on Saturday at 6?\nassistant: No, she has a cold."
    )


def test_a_relayed_speaker_name_is_no_name_in_the_sentence():
    # "Mei: Lovely." (a chat relayed as "<speaker>: <text>") holds no name: "Lovely" opens the
    # sentence. Before, it and "Yes" counted as names and both one-word replies were kept.
    transcript = (
        "[1] user: Ravi: Anjali's twins turned six on Sunday, we threw a party.\n"
        "[2] user: Mei: Lovely.\n"
        "[3] user: Ravi: Yes.\n"
    )
    assert summarise(transcript) == (
        "[1] user: Ravi: Anjali's twins turned six on Sunday, we threw a party."
    )


def test_a_name_opening_a_relayed_line_counts_when_a_name_verb_follows():
    # "Mei: Kenji asked me …": Kenji opens the sentence, and "asked" says it is a name (the fact
    # check counts it so too); the one-word replies around it are dropped.
    transcript = (
        "[1] user: Mei: Kenji asked me to give a speech at the wedding.\n"
        "[2] user: Ravi: Lovely.\n"
        "[3] user: Mei: Yes.\n"
    )
    assert summarise(transcript) == "[1] user: Mei: Kenji asked me to give a speech at the wedding."


# --- a tool's result keeps its head (issue 34, docs/tools.md) ---------------------------------

FILLER = " ".join(f"w{i}" for i in range(400))


def test_a_tool_result_keeps_its_head_and_the_snapshot_keeps_the_rest():
    """A long tool result would fill a summary with its body (every ``w123`` looks like an
    identifier): a summary keeps the result's first ``TOOL_RESULT_TOKENS`` tokens, cut with
    "…", and the call and the other turns as before."""
    from chat_platform.llm.builtin.extractive import TOOL_RESULT_TOKENS

    transcript = (
        "[2] 2026-12-05 assistant: (used notes__report: step=1, words=400)\n"
        f"[3] 2026-12-05 tool (notes__report): Step 1 report: serial S7919. {FILLER}\n"
        "[4] 2026-12-05 user: The audit is due on 9 May, ticket OPS-4471."
    )

    text = summarise(transcript)

    assert TOOL_RESULT_TOKENS == 128
    kept = text.splitlines()[1]
    assert kept.startswith("[3] 2026-12-05 tool (notes__report): Step 1 report: serial S7919. w0 ")
    assert kept.endswith(" …")
    assert count_tokens(kept.split(": ", 1)[1].removesuffix(" …")) <= 128
    assert text.splitlines()[0] == (
        "[2] 2026-12-05 assistant: (used notes__report: step=1, words=400)"
    )
    assert text.splitlines()[2] == (
        "[4] 2026-12-05 user: The audit is due on 9 May, ticket OPS-4471."
    )
    assert len(text.splitlines()) == 3


def test_a_tool_result_s_sentences_past_its_head_are_not_kept():
    sentences = " ".join(f"Row {n} holds part P-{n:04d} at bin {n * 3}." for n in range(1, 40))
    transcript = f"[3] tool (stock__list): {sentences}"

    text = summarise(transcript)

    assert text.startswith("[3] tool (stock__list): Row 1 holds part P-0001 at bin 3.")
    assert "P-0039" not in text and "P-0030" not in text
    assert count_tokens(text) < 128 + 20


def test_a_long_sentence_of_a_message_is_kept_whole():
    """Only tool results are cut: a person's long sentence of facts is a message like any."""
    long = (
        "user: For the trip we booked flight BA117 on 3 May, hotel HX-4471 for two nights, "
        + ", ".join(f"locker L{n} for bag {n}" for n in range(1, 30))
        + "."
    )
    chatter = "\n".join(["assistant: Lovely, that sounds really nice to hear about."] * 30)

    text = summarise(f"{long}\n{chatter}")

    assert text == long


ROOM = (
    "Summarise the room.\n"
    "[1] 2024-03-08 13:56Z Dana: My flight to Osaka is JL7079 on 12 April.\n"
    "[2] 2024-03-08 13:57Z assistant: I will remind you a week before.\n"
    "[3] 2024-03-08 13:58Z Critic Bot: The hotel booking number is HB-55120.\n"
    "[4] 2024-03-08 13:59Z Dana: My sister Clara lives in Kyoto.\n"
    "She teaches the cello on Tuesdays.\n"
    "[5] 2024-03-08 14:00Z assistant: She sounds lovely."
)


def test_a_room_s_speakers_label_their_own_turns():
    """A room's lines carry names, not roles: each is a turn of its own speaker. (They were
    taken for lines of the turn before, and those before the first role label for
    instructions: Dana's flight was dropped.)"""
    turns, _ = parse_transcript(ROOM)

    assert turns == [
        Turn("[1] 2024-03-08 Dana", ["My flight to Osaka is JL7079 on 12 April."]),
        Turn("[2] 2024-03-08 assistant", ["I will remind you a week before."]),
        Turn("[3] 2024-03-08 Critic Bot", ["The hotel booking number is HB-55120."]),
        Turn(
            "[4] 2024-03-08 Dana",
            ["My sister Clara lives in Kyoto.", "She teaches the cello on Tuesdays."],
        ),
        Turn("[5] 2024-03-08 assistant", ["She sounds lovely."]),
    ]
    assert summarise(ROOM).splitlines()[0] == (
        "[1] 2024-03-08 Dana: My flight to Osaka is JL7079 on 12 April."
    )
    # a message's own line that merely looks numbered is no speaker
    assert parse_transcript("[1] 2024-03-08 13:56Z Dana: Plan:\n[1] Step one: book it.")[0] == [
        Turn("[1] 2024-03-08 Dana", ["Plan:", "[1] Step one: book it."])
    ]


def test_a_bot_named_like_a_role_is_not_a_tool_result():
    """A room quotes a name that reads as a role (compaction/engine/transcript.py): such a
    speaker's long message is kept whole, where a tool's result is cut to its head."""
    from chat_platform.transcript import speaker_label

    sentence = (
        "For the trip we booked flight BA117 on 3 May, hotel HX-4471 for two nights, "
        + ", ".join(f"locker L{n} for bag {n}" for n in range(1, 30))
        + "."
    )
    labels = [speaker_label(name) for name in ("Tool", "Ann tool (x)", "Assistant", "Toolbox")]
    assert labels == ["«Tool»", "«Ann tool (x)»", "«Assistant»", "Toolbox"]
    for label in labels[:2]:
        line = f"[3] 2024-03-08 13:58Z {label}: {sentence}"
        chatter = "\n".join(
            f"[{n}] 2024-03-08 14:00Z assistant: Lovely, that sounds really nice to hear about."
            for n in range(4, 34)
        )
        text = summarise(f"{line}\n{chatter}")
        assert text == f"[3] 2024-03-08 {label}: {sentence}"
    # the same words from a tool are a result: its head only
    tool = summarise(f"[3] 2024-03-08 13:58Z tool (x): {sentence}\n{chatter}")
    assert tool.endswith(" …")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "text",
    [
        "Note: " + "@" * 20_000,  # was cubic: 5,000 of them took 80 s of one core
        "a." * 100_000,  # was quadratic: every "a" starts an identifier's look-ahead
        "x@" * 50_000,
    ],
    ids=["at-signs", "dotted", "x-at"],
)
def test_a_long_run_of_non_blanks_is_scanned_in_linear_time(text):
    """The identifier pattern on hostile text: no alternative backtracks over the whole run
    (the test would hang for hours on the old pattern, far past its timeout)."""
    from chat_platform.llm.builtin.extractive import fact_units

    assert fact_units(text) == frozenset()


def test_identifiers_are_still_found():
    from chat_platform.llm.builtin.extractive import fact_units

    units = fact_units("Write to john.doe@example.com about INV-2041 (v2), my_var and NASA.")
    assert {"john.doe@example.com", "inv-2041", "v2", "my_var", "nasa"} <= units


@pytest.mark.timeout(60)
def test_the_built_in_models_patterns_scan_blank_and_dotted_runs_in_linear_time():
    """Each pattern that ran on through a run of blanks (or dots) from every start in it: a
    million newlines would have taken about an hour of one core each; now a blink."""
    from chat_platform.llm.builtin import extractive, recall_context, text

    hostile = ["\n" * 400_000, " " * 400_000, ". " * 200_000, "\u2026 " * 200_000 + "x"]
    for sample in hostile:
        assert extractive._FOCUS.search(sample) is None
        assert recall_context.SAVED.search(sample) is None
        assert recall_context.NOT_SAVED.search(sample) is None
        assert recall_context._INLINE_SPEAKER.split(sample) == [sample]
        assert recall_context._FRAGMENTS.split(sample)[0] == sample or "\u2026" in sample
        assert "".join(text.stream_pieces(sample)) == sample
    assert recall_context._clean("\u2026 ... " * 200_000 + "kept … " + "... " * 200_000) == "kept"
    assert recall_context._clean("... The flight is JL7079 …") == "The flight is JL7079"
    assert extractive._FOCUS.search("x\n  Focus: the dates \nmore").group("focus") == "the dates"
    # Lines ending in CR LF (the blanks at a line's end include the CR, as \s did)
    assert extractive._FOCUS.search("x\r\nFocus: the dates \r\n").group("focus") == "the dates"
    assert recall_context.SAVED.search("ok\r\n[saved: note_1]\r\n").group("name") == "note_1"


def test_an_ordinal_is_a_number_not_an_identifier():
    """ "for the 3rd time" mixes letters and digits but names nothing: it weighed like a number
    and an identifier (4), above a date said earlier (3), and a tight summary kept the small
    talk and dropped the anniversary (measured in a 150-turn chat through the tight demo bot:
    the summary of messages 1–25 kept "The neighbours are repainting their fence for the 3rd
    time." and lost "Our wedding anniversary is on 17 September.")."""
    from chat_platform.llm.builtin.extractive import _score, fact_units

    transcript = (
        "user: Our wedding anniversary is on 17 September.\n"
        "assistant: Noted.\n"
        "user: The neighbours are repainting their fence for the 3rd time.\n"
        "assistant: Noted."
    )

    assert summarise(transcript, max_tokens=20) == (  # room for one of the two
        "user: Our wedding anniversary is on 17 September."
    )
    assert _score("We met for the 21st time on the 2nd floor.", set()) == 2  # a number
    assert "3rd" in fact_units("for the 3rd time")  # still a number a summary can tell
    assert _score("Gate B22, seat 4th row.", set()) == 4  # B22 is an identifier


def test_a_tool_result_s_head_encodes_its_long_sentence_once(monkeypatch):
    """The head of a tool result is cut from its long sentence in one encoding, not a count and
    then a cut (docs/performance.md, "The tool task, eighth pass"): the same summary, as the
    test above checks."""
    import tiktoken.core

    sentence = f"Step 1 report: serial S7919 {FILLER}"
    transcript = f"[3] 2026-12-05 tool (notes__report): {sentence}"
    encoded = []
    real = tiktoken.core.Encoding.encode

    def encode(self, text, *args, **kwargs):
        encoded.append(text)
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(tiktoken.core.Encoding, "encode", encode)
    text = summarise(transcript)

    assert text.startswith("[3] 2026-12-05 tool (notes__report): Step 1 report: serial S7919 w0 ")
    assert text.endswith(" …")
    assert encoded.count(sentence) == 1  # it was 2


def test_a_near_repeat_waits_behind_a_short_sentence_with_a_fact_of_its_own():
    """Eight notes, each the same long paragraph of facts after its own number, then its own
    code word: the paragraphs, each adding only its note's number, took the room and every code
    word was dropped (0 of 8 kept in 400 tokens); now each paragraph after the first waits until
    the sentences that tell something new are in."""
    paragraph = (
        "We discussed the quarterly budget in detail, including the marketing spend of 42,000 "
        "euros, the hiring plan for two engineers named Priya and Tomas, the office move to "
        "Porto on 3 April, and the decision to drop the legacy billing system. "
    )
    lines = []
    for i in range(8):
        note = f"Note {i}: {paragraph * 2}The code word for item {i} is ALPHA{i}{i}."
        lines += [f"[{2 * i + 1}] 2026-12-07 user: {note}", f"[{2 * i + 2}] 2026-12-07 bot: Noted."]
    summary = summarise("\n".join(lines), max_tokens=400)
    assert [f"ALPHA{i}{i}" in summary for i in range(8)] == [True] * 8
    assert "42,000 euros" in summary and "Porto on 3 April" in summary
    assert count_tokens(summary) <= 400
