"""What a summariser request costs (``compaction.engine.summariser.request_tokens``): exactly its
two messages' counts, with the fixed instructions tokenised once per model
(docs/performance.md, "The tool task")."""

from chat_platform.llm import tokens
from chat_platform.llm.tokens import count_message_tokens
from compaction.engine import summariser
from compaction.engine.summariser import SUMMARY_INSTRUCTIONS, prompt_messages, request_tokens

TRANSCRIPT = "[3] user: The locker code is 4471.\n[4] assistant: Noted: 4471."


def test_a_request_costs_its_two_messages():
    for focus, model in (("", ""), ("the locker", "openai/gpt-4o"), ("", "openai/gpt-4o")):
        expected = sum(
            count_message_tokens(m["content"], model=model)
            for m in prompt_messages(TRANSCRIPT, focus)
        )
        assert request_tokens(TRANSCRIPT, focus, model) == expected
    assert request_tokens("", "", "") == count_message_tokens(
        SUMMARY_INSTRUCTIONS
    ) + count_message_tokens("<transcript>\n\n</transcript>")


def test_the_instructions_are_counted_once_per_model(monkeypatch):
    counted: list[str] = []
    original = tokens.count_tokens

    def counting(text, *, model=""):
        counted.append(text)
        return original(text, model=model)

    monkeypatch.setattr(tokens, "count_tokens", counting)
    summariser.instructions_tokens.cache_clear()
    for _ in range(3):
        request_tokens(TRANSCRIPT, "", "")
        request_tokens(TRANSCRIPT, "", "openai/gpt-4o")

    assert counted.count(SUMMARY_INSTRUCTIONS) == 2
    assert len(counted) == 2 + 6  # the transcript's message on every request
