import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chat_platform.llm.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    count_message_tokens,
    count_tokens,
    encoding_name_for_model,
    truncate_to_tokens,
)
from chat_platform.lru import LRU

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini", "o200k_base"),
        ("openai/gpt-4o-mini", "o200k_base"),
        ("azure/gpt-4o", "o200k_base"),
        ("openrouter/openai/gpt-4.1-nano", "o200k_base"),
        ("chatgpt-4o-latest", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("o1", "o200k_base"),
        ("o1-mini", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("openai/o4-mini", "o200k_base"),
        ("ft:gpt-4o-mini:acme::abc123", "o200k_base"),
        ("GPT-4o", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        ("builtin/recall", "cl100k_base"),
        ("builtin/extractive", "cl100k_base"),
        ("ollama/llama3", "cl100k_base"),
        ("anthropic/claude-3-5-sonnet-20240620", "cl100k_base"),
        ("openai/fake-model", "cl100k_base"),
        ("o1x", "cl100k_base"),
        ("", "cl100k_base"),
    ],
)
def test_encoding_name_for_model(model, encoding):
    assert encoding_name_for_model(model) == encoding


@pytest.mark.parametrize(
    ("text", "cl100k", "o200k"),
    [
        ("", 0, 0),
        ("Hello, world!", 4, 4),
        ("你好，世界", 6, 3),
        ("日本語のテキストです", 9, 7),
        ("🎉🎉 party time 🚀", 11, 8),
        ("naïve café – “quotes”", 8, 8),
    ],
)
def test_count_tokens_exact(text, cl100k, o200k):
    assert count_tokens(text) == cl100k
    assert count_tokens(text, model="builtin/recall") == cl100k
    assert count_tokens(text, model="openai/gpt-4o") == o200k


def test_special_token_text_is_counted_not_rejected():
    assert count_tokens("<|endoftext|>") == 7
    assert count_tokens("before <|endoftext|> after <|fim_prefix|>", model="gpt-4o") > 7


def test_count_message_tokens_adds_fixed_overhead():
    assert MESSAGE_OVERHEAD_TOKENS == 4
    assert count_message_tokens("Hello, world!") == 8
    assert count_message_tokens("你好，世界", model="gpt-4o") == 7
    assert count_message_tokens("") == 4


def test_truncate_to_tokens():
    assert truncate_to_tokens("Hello, world!", 2) == "Hello,"
    assert truncate_to_tokens("Hello, world!", 4) == "Hello, world!"
    assert truncate_to_tokens("Hello, world!", 0) == ""
    assert truncate_to_tokens("你好，世界", 3) == "你好，"
    # A cut inside a multi-token emoji leaves no replacement character behind.
    assert truncate_to_tokens("🎉🎉 party", 1) == ""


def test_counting_works_with_the_network_blocked():
    """A fresh process, sockets disabled, no litellm import: the shipped encodings are used."""
    script = textwrap.dedent(
        """
        import socket, sys

        def refuse(*args, **kwargs):
            raise OSError("network disabled in this test")

        socket.socket.connect = refuse
        socket.create_connection = refuse
        import chat_platform  # sets TIKTOKEN_CACHE_DIR
        from chat_platform.llm.tokens import count_tokens
        print(count_tokens("Hello, world!"), count_tokens("你好，世界", model="gpt-4o"))
        print("litellm" in sys.modules)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["4 3", "False"]


def _encoded_texts(monkeypatch) -> list[str]:
    """The texts ``chat_platform.llm.tokens`` hands its encoders from now on (in order)."""
    from chat_platform.llm import tokens

    encoded: list[str] = []
    real = tokens._encoding

    class Recording:
        def __init__(self, name: str) -> None:
            self.encoding = real(name)

        def encode(self, text: str, **kwargs):
            encoded.append(text)
            return self.encoding.encode(text, **kwargs)

    monkeypatch.setattr(tokens, "_encoding", Recording)
    return encoded


def test_a_longer_text_is_encoded_once_and_the_kept_counts_stay_within_their_cap(monkeypatch):
    """``count_tokens`` keeps the counts of texts of 200 characters or more (a compaction counts
    one transcript several times), per encoding, by the text's digest (no text is kept), least
    recently used out first, at most ``COUNT_CACHE_ENTRIES``; shorter texts are encoded each
    time."""
    from chat_platform.llm import tokens

    counts = LRU(2)  # tokens.COUNT_CACHE_ENTRIES of them, two here
    monkeypatch.setattr(tokens, "_COUNTS", counts)
    encoded = _encoded_texts(monkeypatch)
    long_text = "the quick brown fox " * 20  # 400 characters
    short_text = "the quick brown fox"
    first = count_tokens(long_text)
    assert first == count_tokens(long_text) == 81  # the trailing space is a token of its own
    assert count_tokens(long_text, model="gpt-4o") == 81  # another encoding: its own entry
    assert count_tokens(short_text) == count_tokens(short_text) == 4
    assert encoded == [long_text, long_text, short_text, short_text]
    assert all(isinstance(digest, bytes) and len(digest) == 16 for _, digest in counts.entries)
    other = "jumps over the lazy dog " * 20
    assert count_tokens(other) == count_tokens(other)
    assert len(counts.entries) == 2  # the oldest (long_text, cl100k) let go
    encoded.clear()
    count_tokens(long_text, model="gpt-4o")
    count_tokens(long_text)
    assert encoded == [long_text]


def _mixed_text(chars: int) -> str:
    """Prose, code with indentation and blank lines, numbers, punctuation and CJK: every kind
    of piece the pre-tokenizers make, well past ``SEGMENT_CHARS``."""
    block = (
        "The ferry to Brindisi leaves at 07:45 from pier nine; Aurelio's ticket is #A-2231.\n\n"
        "def fare(adults, children):\n    if children:\n        return adults * 42.5 + children"
        " * 21.25\n\treturn adults*42.5  \n\n  \u8239\u7968\u5728\u8fd9\u91cc\u3002  !!! ??\r\n"
        "don't won't we'll I'm they've — «quoted» 'single' \"double\"   spaced   out.\n"
    )
    return (block * (chars // len(block) + 1))[:chars]


@pytest.mark.parametrize("model", ["", "gpt-4o"])
def test_a_long_text_counted_in_segments_counts_what_its_whole_encoding_does(model, monkeypatch):
    """Segments start where the pre-tokenizers start a piece, so their counts add up to the
    whole text's: exact for prose, code and the rest (both encodings)."""
    from chat_platform.llm import tokens

    monkeypatch.setattr(tokens, "_COUNTS", LRU(8))  # nothing counted before
    text = _mixed_text(5 * tokens.SEGMENT_CHARS + 777)
    whole = len(tokens._encoding(encoding_name_for_model(model)).encode(text))
    assert count_tokens(text, model=model) == whole
    count, head = tokens.tokens_and_head(text, 3000, model=model)
    assert count == whole
    assert head == truncate_to_tokens(text, 3000, model=model)


def test_a_huge_run_without_spaces_is_encoded_in_bounded_pieces(monkeypatch):
    """tiktoken's merge of one huge piece is superlinear: 900 KB of one letter took 0.33 s of
    CPU to count whole, 0.14 s in segments. No piece handed to the encoder is longer than
    ``SEGMENT_CHARS``, and the count of such a run is still its whole encoding's."""
    from chat_platform.llm import tokens

    real = tokens._encoding
    encoded = _encoded_texts(monkeypatch)
    for text in ("x" * 900_000, " " * 900_000, "!" * 900_000):
        encoded.clear()
        count_tokens(text)
        assert max(map(len, encoded)) == tokens.SEGMENT_CHARS
        assert sum(map(len, encoded)) == 900_000
    monkeypatch.setattr(tokens, "_encoding", real)
    for text in ("x" * 900_000, "y" * 900_000):
        assert count_tokens(text) == len(real("cl100k_base").encode(text))
