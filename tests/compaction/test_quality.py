"""docs/compaction.md summary quality gates and fact retention (pure, no database)."""

from __future__ import annotations

import pytest

from compaction.facts import extract_facts, retention_score
from compaction.quality import (
    GateResult,
    has_tool_syntax,
    strip_reasoning,
    summary_gate,
)


def words(text: str) -> int:
    return len(text.split())


TEN_WORDS = "Alice agreed to pay invoice INV-7 on Friday at noon."
assert words(TEN_WORDS) == 10


# --- strip_reasoning ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("   \n\t ", ""),
        ("Plain summary.", "Plain summary."),
        ("  padded  \n", "padded"),
        ("<think>plan</think>Summary.", "Summary."),
        ("<think>only reasoning</think>", ""),
        ("<THINK>upper</THINK>Summary.", "Summary."),
        ("<Think>mixed</tHiNk> Summary.", "Summary."),
        ("<think>\nline 1\nline 2\n</think>\n\nSummary.", "Summary."),
        ("<thinking>long form</thinking>Summary.", "Summary."),
        ("<think>a</think>One. <think>b</think>Two.", "One. Two."),
        ("<think>a</think>One.<thinking>b</thinking> Two.", "One. Two."),
        ("<think type='x'>attrs</think>Summary.", "Summary."),
        # unclosed open tag: everything from it to the end is reasoning
        ("<think>cut off while reasoning", ""),
        ("<think>\nstill thinking about Alice and 4471", ""),
        ("Summary first. <think>then an unclosed block", "Summary first."),
        ("<think>closed</think>Summary. <think>unclosed", "Summary."),
        # close tag without its open tag (template pre-filled "<think>"): all before it goes
        ("reasoning without an open tag</think>\n\nSummary.", "Summary."),
        # not reasoning tags
        ("Use <b>bold</b> sparingly.", "Use <b>bold</b> sparingly."),
        ("We think this is fine.", "We think this is fine."),
    ],
)
def test_strip_reasoning(text: str, expected: str) -> None:
    assert strip_reasoning(text) == expected


# --- has_tool_syntax ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "read_records", "arguments": {}}</tool_call>',
        "Summary so far.\n<tool_call>",
        "done </tool_call>",
        "<TOOL_CALL>",
        "<tool_calls>[]</tool_calls>",
        "<tool_response>42</tool_response>",
        "<function=read_records>",
        "<function = save_record>",
        "<function_calls>",
        "<parameter name=\"names\">['a']",
        "<parameter=names>",
        "<|tool_call|>",
        "<|tool_calls_section_begin|>",
        "<|python_tag|>search(query)",
        "<\uff5ctool\u2581calls\u2581begin\uff5c>",
        '[TOOL_CALLS] [{"name": "f", "arguments": {}}]',
        '{"tool_calls": [{"id": "call_1"}]}',
        'Assistant message: {"role": "assistant", "tool_calls": []}',
        '{"function_call": {"name": "f"}}',
        '{"name": "read_records", "arguments": {"names": ["snapshot_1_20"]}}',
        '{"arguments": {"names": ["a"]}, "name": "read_records"}',
        '{"name": "search", "parameters": {"q": "x"}}',
        'Calling now: {"name": "read_records", "arguments": {"names": ["a"',  # truncated JSON
        '{"type": "function", "function": {"name": "f", "arguments": "{}"}}',
        '{"type": "tool_use", "id": "t1", "name": "f", "input": {}}',
        '{"tool": "search", "args": {"q": "x"}}',
        '{"action": "search", "action_input": "x"}',
        '[{"name": "f", "arguments": {}}]',
        '{"read_files": {"files": ["snapshot_1_20"]}}',
        '{ "read_files" : []}',
        'read_records(["snapshot_1_20"])',
        'read_records (names=["a"])',
        'save_record(name="prefs", body="likes tea")',
        "read_files(['a'])",
        '<invoke name="read_records">',
        "</invoke>",
        '<invoke name="x">',
        "```tool_code\nprint(search('x'))\n```",
        "``` tool_call\n{}\n```",
    ],
)
def test_tool_syntax_detected(text: str) -> None:
    assert has_tool_syntax(text) is True


@pytest.mark.parametrize(
    "text",
    [
        "",
        "The user asked which tool to use; we agreed on the read_records tool.",
        "read_records is the recall tool and save_record stores notes.",
        "We discussed tool_calls and function calling in the API.",
        "Tooling: toolbox, tool-call count 3, tools used: search.",
        "Arguments were heard; the name was Bob.",
        "The function f(x) returns x; record(s) were saved.",
        'Alice said "call me" (tomorrow) about the invoice.',
        "The set {a, b} is small; use {braces} freely.",
        'Config: {"city": "Paris", "name": "Alice"}',
        'Data: {"items": [1, 2], "total": 3}',
        "```python\ndef f(x):\n    return {'a': x}\n```",
        '```json\n{"name": "Alice", "age": 30}\n```',
        "He used a <b>bold</b> tag, a <br> and <code>x</code>.",
        "Use the function keyword <function> in JS.",
    ],
)
def test_prose_is_not_tool_syntax(text: str) -> None:
    assert has_tool_syntax(text) is False


# --- summary_gate ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "finish_reason", "replaced", "expected"),
    [
        # empty after stripping (before any other check, even a bad finish_reason)
        ("", "stop", 100, GateResult(False, "empty", "", 0)),
        ("   \n\t  ", "stop", 100, GateResult(False, "empty", "", 0)),
        ("<think>all reasoning</think>", "stop", 100, GateResult(False, "empty", "", 0)),
        ("<think>truncated reasoning", "length", 100, GateResult(False, "empty", "", 0)),
        (
            "<think>a</think>\n  <thinking>b</thinking>",
            "stop",
            100,
            GateResult(False, "empty", "", 0),
        ),
        # finish_reason
        (TEN_WORDS, "length", 100, GateResult(False, "finish_reason", TEN_WORDS, 10)),
        (TEN_WORDS, "content_filter", 100, GateResult(False, "finish_reason", TEN_WORDS, 10)),
        (TEN_WORDS, "tool_calls", 100, GateResult(False, "finish_reason", TEN_WORDS, 10)),
        (TEN_WORDS, "", 100, GateResult(False, "finish_reason", TEN_WORDS, 10)),
        ("Short.", "length", 3, GateResult(False, "finish_reason", "Short.", 1)),
        # tool syntax (checked before length)
        (
            'read_records(["snapshot_1_20"])',
            "stop",
            100,
            GateResult(False, "tool_syntax", 'read_records(["snapshot_1_20"])', 1),
        ),
        (
            TEN_WORDS + " <tool_call>",
            "stop",
            100,
            GateResult(False, "tool_syntax", TEN_WORDS + " <tool_call>", 11),
        ),
        # too short: fewer than 10 tokens
        (
            "Alice pays invoice INV-7 on Friday at noon.",
            "stop",
            100,
            GateResult(False, "too_short", "Alice pays invoice INV-7 on Friday at noon.", 8),
        ),
        (
            "one two three four five six seven eight nine",
            "stop",
            100,
            GateResult(False, "too_short", "one two three four five six seven eight nine", 9),
        ),
        # too short wins over not shorter
        ("a b c", "stop", 2, GateResult(False, "too_short", "a b c", 3)),
        # not shorter than what it replaces: equal counts as not shorter
        (TEN_WORDS, "stop", 10, GateResult(False, "not_shorter", TEN_WORDS, 10)),
        (TEN_WORDS, "stop", 9, GateResult(False, "not_shorter", TEN_WORDS, 10)),
        (TEN_WORDS, "stop", 0, GateResult(False, "not_shorter", TEN_WORDS, 10)),
        # accepted
        (TEN_WORDS, "stop", 11, GateResult(True, "", TEN_WORDS, 10)),
        (TEN_WORDS, "stop", 5000, GateResult(True, "", TEN_WORDS, 10)),
        ("  " + TEN_WORDS + "\n\n", "stop", 11, GateResult(True, "", TEN_WORDS, 10)),
        # finish_reason compared trimmed and case-insensitively
        (TEN_WORDS, "STOP", 11, GateResult(True, "", TEN_WORDS, 10)),
        (TEN_WORDS, " stop\n", 11, GateResult(True, "", TEN_WORDS, 10)),
        # reasoning stripped, then accepted with the cleaned text and its count
        (
            "<think>The user wants a recap of many many words here.</think>\n" + TEN_WORDS,
            "stop",
            11,
            GateResult(True, "", TEN_WORDS, 10),
        ),
        (
            "<THINKING>\nplan\n</THINKING>" + TEN_WORDS + "<think>cut",
            "stop",
            11,
            GateResult(True, "", TEN_WORDS, 10),
        ),
        # prose that mentions tools is fine
        (
            "We agreed the read_records tool answers recall questions for Alice.",
            "stop",
            50,
            GateResult(
                True, "", "We agreed the read_records tool answers recall questions for Alice.", 10
            ),
        ),
    ],
)
def test_summary_gate(text: str, finish_reason: str, replaced: int, expected: GateResult) -> None:
    assert (
        summary_gate(text=text, finish_reason=finish_reason, replaced_tokens=replaced, count=words)
        == expected
    )


@pytest.mark.parametrize(
    ("min_tokens", "expected"),
    [
        (0, GateResult(True, "", "a b c", 3)),
        (3, GateResult(True, "", "a b c", 3)),
        (4, GateResult(False, "too_short", "a b c", 3)),
    ],
)
def test_summary_gate_min_tokens(min_tokens: int, expected: GateResult) -> None:
    result = summary_gate(
        text="a b c", finish_reason="stop", replaced_tokens=4, count=words, min_tokens=min_tokens
    )
    assert result == expected


def test_summary_gate_counts_only_the_cleaned_text() -> None:
    seen: list[str] = []

    def count(text: str) -> int:
        seen.append(text)
        return len(text.split())

    summary_gate(
        text="<think>x y z</think> " + TEN_WORDS,
        finish_reason="stop",
        replaced_tokens=11,
        count=count,
    )
    assert seen == [TEN_WORDS]
    seen.clear()
    summary_gate(text="<think>x</think>", finish_reason="stop", replaced_tokens=11, count=count)
    assert seen == []  # empty is decided without counting


def test_summary_gate_with_the_real_token_counter() -> None:
    from chat_platform.llm.tokens import count_tokens

    cleaned = "Alice (Acme Corp) agreed to renew contract INV-2024-001 for $1,200.50 on 2025-03-14."
    text = "<think>The user wants a recap.</think>\n" + cleaned
    assert summary_gate(
        text=text, finish_reason="stop", replaced_tokens=200, count=count_tokens
    ) == GateResult(True, "", cleaned, 32)
    assert summary_gate(
        text=text, finish_reason="stop", replaced_tokens=32, count=count_tokens
    ) == GateResult(False, "not_shorter", cleaned, 32)
    assert summary_gate(
        text="Short recap.", finish_reason="stop", replaced_tokens=200, count=count_tokens
    ) == GateResult(False, "too_short", "Short recap.", 3)


# --- extract_facts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("no facts here at all, just lower-case words.", []),
        ("The user wants a tool. The model uses tools; it's fine {like this}.", []),
        # names: mid-sentence capitalised words and multi-word names
        (
            "I met Alice from Acme Corp in New York.",
            ["Alice", "Acme Corp", "New York"],
        ),
        ("The Bank of America account is closed.", ["Bank of America"]),
        ("We bought Johnson & Johnson shares.", ["Johnson & Johnson"]),
        ("Meeting with Dr. Smith today.", ["Dr. Smith"]),
        ("Her cat is named Tom.", ["Tom"]),
        # sentence-initial words: dropped unless clearly a name
        ("Remember the milk. Deploy it now.", []),
        ("Alice from Acme Corp called.", ["Acme Corp"]),  # lone initial word, nothing says name
        ("Alice said yes.", ["Alice"]),  # a name's verb follows
        ("Alice's order shipped.", ["Alice"]),  # possessive
        ("Paris is nice. We love Paris.", ["Paris"]),  # capitalised mid-sentence elsewhere
        ("New York is big.", ["New York"]),  # multi-word
        ("NASA and AWS are fine. OpenAI too.", ["NASA", "AWS", "OpenAI"]),  # inner capitals
        ("Thanks Alice! Please ask Bob.", ["Alice", "Bob"]),  # stop words stripped
        ("OK, then I left. I think so.", []),
        # speaker labels and list markers are not facts
        ("user: Hi, I'm Bob.\nassistant: Hello Bob.", ["Bob"]),
        ("User: hello\nAssistant: hi", []),
        # A tool line is traffic, not talk: its result quotes records checked where said.
        ("[12] user: Please call Carol.\n[13] tool (read_records): found 3", ["Carol"]),
        (
            "[14] 2024-03-08 13:57Z assistant: (used search_records)\n"
            "[15] 2024-03-08 13:58Z tool (search_records): [record snapshot_1_30] Sin Clara\n"
            "[16] 2024-03-08 13:59Z assistant: Your code is 4417, you said in message 32 "
            "(messages 12–40 too).",
            ["4417"],
        ),
        ("1. Buy milk\n2. Call Alice\n3) Pay 40", ["Alice"]),  # 40 alone: a bare number
        # Junk the memory panel once listed (issue 18): tool names, bare numbers, ordinary
        # words that open a sentence.
        (
            "[3] user: Did you use search_records or read_records? Step 1 went fine.\n"
            "[4] assistant: Sin problema. I have 32 notes; your code is 4471 since 2019.",
            ["4471", "2019"],
        ),
        ("Call save_record, then read_files and Search_Records.", []),
        ("Maybe Alice can help.", ["Alice"]),  # a stop word opening a run of capitals
        ("Honestly Bob was late. I honestly think so.", ["Bob"]),  # lower case elsewhere
        ("Sin Clara no hay plan, y sin plan no hay viaje.", ["Clara"]),
        ("I paid 07 then 99 and 100 and 4.5 and 12,000.", ["100", "4.5", "12,000"]),
        # numbers, money, percentages
        ("We need 3 seats and 12.5 litres.", ["12.5"]),
        ("Price 1200 or 1,200 or 1200.", ["1200"]),  # one fact despite formatting
        ("Budget is $1,200.50 and 15% off, or 7.5 % later.", ["$1,200.50", "15%", "7.5 %"]),
        ("Costs €30, £4.99, US$5k and ¥1,000.", ["€30", "£4.99", "US$5k", "¥1,000"]),
        ("Downloads of 5GB took 100ms with 2FA.", ["100"]),
        # dates and times
        (
            "Due 2025-03-14, met 14 March and March 14, 2025 then 3rd of June.",
            ["2025-03-14", "14 March", "March 14, 2025", "3rd of June"],
        ),
        ("Starts 2025-03-14T10:30:00Z sharp.", ["2025-03-14T10:30:00Z"]),
        ("Paid 14/03/2025 and 2025/3/14.", ["14/03/2025", "2025/3/14"]),
        (
            "Call on Tuesday at 10:30 or friday 3pm or 9:15 a.m.",
            ["Tuesday", "10:30", "friday", "3pm", "9:15 a.m."],
        ),
        ("Launch in March 2025, review in April.", ["March 2025", "April"]),
        ("We may 2000 times.", ["2000"]),
        # identifiers
        (
            "See ticket #4471, INV-2024-001 in eu-west-1 and PROJ-12.",
            ["#4471", "INV-2024-001", "eu-west-1", "PROJ-12"],
        ),
        (
            "Deploy v1.2.3 of payment_service (see getUserName) to 10.0.0.1; commit 3f9a2c1d.",
            ["v1.2.3", "payment_service", "getUserName", "10.0.0.1", "3f9a2c1d"],
        ),
        (
            "Email alice@example.com or visit https://example.com/docs?id=5.",
            ["alice@example.com", "https://example.com/docs?id=5"],
        ),
        ("(see https://example.com/a_(b)).", ["https://example.com/a_(b)"]),
        (
            "Edit /etc/nginx/nginx.conf, src/app/main.py, ~/notes.txt and README.md.",
            ["/etc/nginx/nginx.conf", "src/app/main.py", "~/notes.txt", "README.md"],
        ),
        ("Open C:\\Users\\bob\\report.docx now.", ["C:\\Users\\bob\\report.docx"]),
        (
            "Host example.org runs gpt-4o-mini and gpt-4.1 on S3.",
            ["example.org", "gpt-4o-mini", "gpt-4.1", "S3"],
        ),
        (
            "Ids 123e4567-e89b-12d3-a456-426614174000 and 0x1F and ABC123.",
            ["123e4567-e89b-12d3-a456-426614174000", "0x1F", "ABC123"],
        ),
        ("A well-known state-of-the-art idea and/or 24/7 help.", []),
        # de-duplication is case-insensitive, first spelling and position win
        ("Alice met alice and ALICE. INV-7 and inv-7.", ["Alice", "INV-7"]),
        # non-English text: numbers, dates and identifiers survive
        (
            "订单4417已于2025年3月14日发货，金额为1,200元，折扣15%。",
            ["4417", "2025年3月14日", "1,200", "15%"],
        ),
        ("用户在3月14日把服务部署到eu-west-1，版本v2.0.1。", ["3月14日", "eu-west-1", "v2.0.1"]),
        ("我和Alice在北京见面。", ["Alice"]),
    ],
)
def test_extract_facts(text: str, expected: list[str]) -> None:
    assert extract_facts(text) == expected


def test_extract_facts_is_deterministic() -> None:
    text = "user: Alice paid $1,200.50 for INV-2024-001 on 2025-03-14 via eu-west-1."
    assert (
        extract_facts(text)
        == extract_facts(text)
        == [
            "Alice",
            "$1,200.50",
            "INV-2024-001",
            "2025-03-14",
            "eu-west-1",
        ]
    )


# --- retention_score ------------------------------------------------------------------------

SOURCE = (
    "[1] user: I spoke to Alice at Acme Corp about invoice INV-2024-001.\n"
    "[2] assistant: Noted: $1,200.50 due 2025-03-14, ticket #4471."
)


def test_source_facts() -> None:
    assert extract_facts(SOURCE) == [
        "Alice",
        "Acme Corp",
        "INV-2024-001",
        "$1,200.50",
        "2025-03-14",
        "#4471",
    ]


@pytest.mark.parametrize(
    ("source", "summary", "expected"),
    [
        (SOURCE, SOURCE, (1.0, [])),
        (
            SOURCE,
            "Alice (Acme Corp): invoice INV-2024-001, $1,200.50 due 2025-03-14, ticket #4471.",
            (1.0, []),
        ),
        # formatting tolerance: thousands separators, currency sign, "#", case
        (
            SOURCE,
            "alice (acme corp): inv-2024-001, 1200.50 dollars, due 2025-03-14, ticket 4471.",
            (1.0, []),
        ),
        # missing facts, listed in source order
        (
            SOURCE,
            "Alice owes 1,200.50 on invoice INV-2024-001.",
            (0.5, ["Acme Corp", "2025-03-14", "#4471"]),
        ),
        (
            SOURCE,
            "Alice.",
            (0.1667, ["Acme Corp", "INV-2024-001", "$1,200.50", "2025-03-14", "#4471"]),
        ),
        (
            SOURCE,
            "",
            (0.0, ["Alice", "Acme Corp", "INV-2024-001", "$1,200.50", "2025-03-14", "#4471"]),
        ),
        # no facts in the source: perfect score
        ("just some lower-case chatter.", "anything", (1.0, [])),
        ("", "", (1.0, [])),
        # rounding to 4 decimals
        ("We met Alice, Bob and Carol.", "Alice", (0.3333, ["Bob", "Carol"])),
        ("We met Alice, Bob and Carol.", "Alice and Carol", (0.6667, ["Bob"])),
        # whole numbers only: 120 is not inside 2012, 300 is not inside 300.5
        ("orders 120 and 2012", "order 2012", (0.5, ["120"])),
        ("took 300 hours", "took 300.5 hours", (0.0, ["300"])),
        ("pay 1200 now", "pay 1,200 now", (1.0, [])),
        ("a 15% cut", "a 15 percent cut", (1.0, [])),
        ("a 15 % cut", "a 15% cut", (1.0, [])),
        # whole words for names: "Al" is not inside "Alice"
        ("I met Al.", "I met Alice.", (0.0, ["Al"])),
        # Chinese text with numbers
        (
            "用户在2025年3月14日下单，订单号4417，金额1,200元，折扣15%。",
            "订单4417金额1200元。",
            (0.5, ["2025年3月14日", "15%"]),
        ),
        (
            "用户在2025年3月14日下单，订单号4417，金额1,200元，折扣15%。",
            "2025年3月14日的订单4417：1200元，15%折扣。",
            (1.0, []),
        ),
    ],
)
def test_retention_score(source: str, summary: str, expected: tuple[float, list[str]]) -> None:
    assert retention_score(source, summary) == expected


# --- the fact check is free of the recall machinery's copies (issue 16 item 4) ---------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A recall tool's whole result is a copy of records (checked where they were said): the
        # quoted lines after the tool line, up to the next line with a later seq, are not facts.
        (
            "[5] 2024-03-07 20:42Z user: Mei: Any good?\n"
            "[6] 2024-03-07 20:42Z assistant: (used search_records)\n"
            "[7] 2024-03-07 20:42Z tool (search_records): [record snapshot_1_4]\n"
            "[2] 2024-03-04 20:13Z user: Mei: My flatmate Priya is moving out on 2024-03-31.\n"
            "[8] 2024-03-07 20:43Z user: Ravi: Kenji proposed to Sol on top of Arthur's Seat.",
            ["Sol", "Arthur's Seat"],
        ),
        # A fusion section ends a tool result too.
        (
            "[7] tool (read_records): [record snapshot_1_4]\n"
            "[2] user: Priya moved to Leeds.\n"
            "[Summary of messages 1–9]\n"
            "[3] user: We met Tomás in Bristol.",
            ["Tomás", "Bristol"],
        ),
        # builtin/recall's answer quotes earlier lines: its "> …" quotes are copies.
        (
            "[9] 2024-03-07 20:44Z assistant: From earlier in our conversation:\n"
            "> Mei: I started at the Royal Infirmary. — you said in message 29, on 2024-03-04\n"
            "[10] 2024-03-07 20:45Z user: Mei: Ice and feet up, says Priya.",
            ["Priya"],
        ),
        # A quote the user writes is talk, not a copy.
        ("[4] user: My boss wrote:\n> The launch moves to 2025-04-02.", ["2025-04-02"]),
        # A speaker's name after the role label is who spoke, not a fact.
        ("[3] user: Mei Chen: Hello there.\n[4] assistant: Hi.", []),
        ("[3] user: Mei Chen: I met Ravi Shah.", ["Ravi Shah"]),
        # A name with a possessive before a capitalised word is one name, not two fragments.
        ("We climbed Arthur's Seat. Alice's order shipped.", ["Arthur's Seat", "Alice"]),
    ],
)
def test_extract_facts_leaves_out_recall_copies_and_speaker_names(
    text: str, expected: list[str]
) -> None:
    assert extract_facts(text) == expected


def test_record_frames_are_no_facts_even_after_a_fused_snapshot_ends_the_tool_result() -> None:
    # A fused snapshot read back holds "[Summary of messages …]" headers, which end the
    # blanking of the tool result (as they end the summariser's skip); the next record's frame
    # is machinery all the same.
    text = (
        "[20] tool (read_records): [record snapshot_1_9]\n"
        "[Summary of messages 1–9]\n"
        "[3] user: We met Tomás in Bristol.\n"
        "\n"
        "[record snapshot_10_19]\n"
        "[12] user: ok [not found: snapshot_9_9]"
    )
    assert extract_facts(text) == ["Tomás", "Bristol"]


def test_claimed_characters_are_zeroed_run_by_run_as_character_by_character() -> None:
    """``_claimed_zeroed`` (runs of claimed characters, for tool results of thousands of
    identifiers) gives what the character-by-character join gave, on every shape of claims:
    2,000 seeded random texts (any character, astral ones too) with random claims."""
    import random

    from compaction.facts import _claimed_zeroed

    def by_character(text: str, taken: bytearray) -> str:
        return "".join("0" if flag else ch for ch, flag in zip(text, taken, strict=True))

    rng = random.Random(33)
    alphabet = "ab 0\n\u00e9\u6708\U0001f600\x00"
    for _ in range(2000):
        size = rng.randint(0, 60)
        text = "".join(rng.choice(alphabet) for _ in range(size))
        taken = bytearray(rng.random() < 0.4 for _ in range(size))
        assert _claimed_zeroed(text, taken) == by_character(text, taken)
    claims = bytearray(b"\x01\x01\x00\x00\x00\x00\x01\x01")
    assert _claimed_zeroed("ab cd ef", claims) == "00 cd 00"


FACT_SAMPLES = [
    "see https://example.org/a?b=1 or WWW.example.com",
    "mail ana.lima@example.co.uk today",
    "id 123e4567-e89b-12d3-a456-426614174000",
    "on 2024-03-08T13:56:00Z and 2024/3/8 or 8.3.2024",
    "2024年3月8日 and 3月8号",
    "the 14th of March, 2024; March 14th, 2024; Sept 2023; in July; on monday or Friday",
    "at 13:56, 9 am, 9:30 p.m.",
    "release v1.2.3-rc.1 and 10.4.2",
    "C:\\Users\\ana and /usr/local/bin and src/app/main.py and setup.cfg",
    "api.example.io costs $1,200.50, 15 %, ticket #4471, 0x1F, deadbeef42",
    "eu-west-1 INV-2024-001 snake_case gpt-4.1-mini iPhone ABC123 4o1 1,200 3.5",
]


def test_a_pattern_is_skipped_only_where_it_cannot_match() -> None:
    """``FACT_NEEDLES``: every pattern finds something in the samples (each kind of fact), and
    a text that holds none of a pattern's needles (lower-cased) has no match of it: on the
    samples, on them with each character left out in turn, and on 300 seeded random texts made
    of them and of the characters the patterns look for."""
    import random

    from compaction.fact_patterns import FACT_NEEDLES, FACT_PATTERNS

    def check(text: str) -> None:
        lowered = text.lower()
        for (pattern, kind), needles in zip(FACT_PATTERNS, FACT_NEEDLES, strict=True):
            if needles and not any(needle in lowered for needle in needles):
                assert pattern.search(text) is None, (kind, pattern.pattern, text)

    for (pattern, kind), _ in zip(FACT_PATTERNS, FACT_NEEDLES, strict=True):
        assert any(pattern.search(sample) for sample in FACT_SAMPLES), (kind, pattern.pattern)
    for sample in FACT_SAMPLES:
        check(sample)
        for i in range(len(sample)):
            check(sample[:i] + sample[i + 1 :])

    rng = random.Random(34)
    pieces = [*"0123456789aAmMpPvVxX:/.\\-_@#%$€£¥₹₩ \n年月日号", *FACT_SAMPLES, "Monday", "mar"]
    for _ in range(300):
        check("".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))))


# --- a tool's result is not read for facts (docs/performance.md, the tool task) --------------

TOOL_TRANSCRIPTS = [
    "[2] 2026-12-05 assistant: (used calc__report: step=1, words=400)\n"
    "[3] 2026-12-05 tool (calc__report): Step 1 report: serial S7919. "
    + " ".join(f"w{i}" for i in range(400))
    + "\n[4] 2026-12-05 user: Alice booked flight BA117 on 14 March for 1,200 EUR.",
    "[1] user: Meet Henrik Dahl at 5\n[2] tool (clock__now): 17:00 UTC, 2026-03-08\n[3] user: pm "
    "in Porto, ticket OPS-4471.\n[4] tool (notes__find): Clara plays cello since 2019.\n"
    "continued: the locker code is 4471 and the room is B12.",
    "[5] assistant: (used search_records)\n[6] tool (search_records): [record snapshot_1_9]\n"
    "[3] user: My sister Clara plays the cello since 2019.\n[7] tool (x__y): Bob owes 40 EUR.\n"
    "[8] user: Her concert is on 12 May at 19:30 in Lisbon.",
]


def _blanking_tool_lines(text: str, masked: str) -> tuple[str, str]:
    # What extract_facts did before: every tool result's line blanked in place.
    from compaction.fact_patterns import TOOL_LINE

    return text, TOOL_LINE.sub(lambda m: " " * len(m.group()), masked)


@pytest.mark.parametrize("transcript", TOOL_TRANSCRIPTS)
def test_cutting_tool_lines_finds_the_facts_blanking_them_did(transcript, monkeypatch):
    from compaction import facts

    found = extract_facts(transcript)
    monkeypatch.setattr(facts, "_without_tool_lines", _blanking_tool_lines)

    assert found == extract_facts(transcript)


def test_the_fact_patterns_never_read_a_tool_result(monkeypatch):
    from compaction import facts

    read: list[str] = []

    class Recording:
        def __init__(self, pattern):
            self.pattern = pattern

        def finditer(self, text):
            read.append(text)
            return self.pattern.finditer(text)

    recorded = [(Recording(pattern), kind) for pattern, kind in facts.FACT_PATTERNS]
    monkeypatch.setattr(facts, "FACT_PATTERNS", recorded)

    found = extract_facts(TOOL_TRANSCRIPTS[0])

    assert found == ["calc__report", "400", "BA117", "14 March", "1,200", "EUR"]
    assert read and not any("w399" in text or "S7919" in text for text in read)
