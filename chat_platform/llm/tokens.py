"""The one token counter (docs/compaction.md): storage, pressure, admission, compaction range and
gates.

tiktoken is used directly (not litellm's ``token_counter``) so counting never imports litellm.
Only the two encodings litellm ships are ever loaded (``o200k_base`` and ``cl100k_base``), and
``chat_platform.offline`` points ``TIKTOKEN_CACHE_DIR`` at them, so counting is offline.
Models whose tokenizer we do not have (Anthropic, Llama, the built-in models, …) are counted with
``cl100k_base``: an estimate, but a stable one, and stability is what the budget maths needs.
"""

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any

import tiktoken

from chat_platform.lru import LRU

# Role, separators and priming that every chat message costs on top of its text.
MESSAGE_OVERHEAD_TOKENS: int = 4

DEFAULT_ENCODING = "cl100k_base"

# Families whose tokenizer is o200k_base (gpt-oss uses o200k_harmony, a superset of o200k_base
# with extra special tokens; plain text counts the same). Checked against the bare model name,
# after any provider prefix ("openai/", "azure/", "openrouter/openai/") and "ft:" are dropped.
_O200K_MODEL = re.compile(
    r"^(?:gpt-4o|chatgpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|gpt-oss|o1|o3|o4)(?:$|[-.:@_])"
)


def _bare_model_name(model: str) -> str:
    name = model.strip().lower().rsplit("/", 1)[-1]
    return name.removeprefix("ft:")


def encoding_name_for_model(model: str) -> str:
    """``o200k_base`` for the GPT-4o / 4.1 / 4.5 / 5 and o-series families, else ``cl100k_base``."""
    if _O200K_MODEL.match(_bare_model_name(model)):
        return "o200k_base"
    return DEFAULT_ENCODING


@lru_cache(maxsize=4)
def _encoding(name: str) -> tiktoken.Encoding:
    return tiktoken.get_encoding(name)


# Counts of the longer texts counted lately. A compaction counts the same text several times
# (a snapshot's body, then the summariser's request that carries it, a fusion its parents'
# summaries and snapshots again, the extractive summariser its sentences at every pass):
# encoding was a ninth of a long tool-using reply (docs/performance.md, tool task). Shorter texts
# encode faster than they are looked up. A text is known by its digest: no text is kept alive
# (an import of thousands of messages stays streamed, tests/transfer).
COUNT_CACHE_MIN_CHARS = 200
COUNT_CACHE_ENTRIES = 4096


# (encoding, digest of the text) -> tokens, least recently used out first.
_COUNTS: LRU[tuple[str, bytes], int] = LRU(COUNT_CACHE_ENTRIES)


# A longer text is encoded in segments of at most this many characters (``_segments``).
SEGMENT_CHARS = 16_384
# Where both encodings' pre-tokenizers always start a new piece: before a space that follows a
# non-space character (no piece holds a non-space character and then a space).
_PIECE_START = re.compile(r"\S ")


def _segments(text: str) -> Iterator[str]:
    """``text`` in segments of at most ``SEGMENT_CHARS``, each cut where a piece starts, so
    their tokens add up to the text's. tiktoken merges within a piece, and its merge of one huge
    piece is superlinear: 900 KB of "x" took 0.33 s of CPU to count whole, 0.14 s in segments
    (900 KB of prose: 0.06 s), and a flood of such messages held the web process. A run with no
    such place in a whole segment (one "word" of 900,000 letters) is cut all the same, and
    counts within a token or so of its whole encoding per cut."""
    start = 0
    while len(text) - start > SEGMENT_CHARS:
        end = start + SEGMENT_CHARS
        cut = end
        for back in (256, 4096, SEGMENT_CHARS):
            low = max(start, end - back)
            starts = [match.start() for match in _PIECE_START.finditer(text, low, end)]
            if starts:
                cut = starts[-1] + 1
                break
        yield text[start:cut]
        start = cut
    yield text[start:]


def _encoded_length(encoding: tiktoken.Encoding, text: str) -> int:
    if len(text) <= SEGMENT_CHARS:
        return len(encoding.encode(text, disallowed_special=()))
    return sum(len(encoding.encode(part, disallowed_special=())) for part in _segments(text))


def count_tokens(text: str, *, model: str = "") -> int:
    """Tokens of ``text`` alone (no message overhead). Special-token text is counted as text."""
    if not text:
        return 0
    name = encoding_name_for_model(model)
    if len(text) < COUNT_CACHE_MIN_CHARS:
        return len(_encoding(name).encode(text, disallowed_special=()))
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    key = (name, digest)
    count = _COUNTS.get(key)
    if count is None:
        count = _encoded_length(_encoding(name), text)
        _COUNTS.put(key, count)
    return count


# Whitespace to ``str.split`` but not to the encodings' pre-tokenizer (Unicode White_Space).
_SPLIT_ONLY_SPACE = ("\x1c", "\x1d", "\x1e", "\x1f")


def tokens_at_least(text: str) -> int:
    """A floor of ``count_tokens(text)`` for any model, without encoding: the number of runs of
    non-whitespace. Both encodings' pre-tokenizers never put two such runs in one piece (a piece
    is whitespace, or at most one leading whitespace character before non-whitespace), and each
    piece is at least one token. 0 for text holding a character only ``str.split`` calls
    whitespace."""
    if any(c in text for c in _SPLIT_ONLY_SPACE):
        return 0
    return len(text.split())


def count_message_tokens(content: str, *, model: str = "") -> int:
    """Tokens one chat message costs: its text plus ``MESSAGE_OVERHEAD_TOKENS``."""
    return count_tokens(content, model=model) + MESSAGE_OVERHEAD_TOKENS


def count_tools_tokens(tools: Sequence[Mapping[str, Any]] | None, *, model: str = "") -> int:
    """What a call's tool schemas cost: their JSON counted as one message (0 without tools).

    The one count for every tool a call offers (the platform's recall tools and an API client's
    alike): the budget counts it in the fixed part, since the schemas go with the call
    (docs/compaction.md: pressure is everything the next call would send), and the context record's
    ``tools`` part reports the same figure."""
    return count_message_tokens(json.dumps(list(tools)), model=model) if tools else 0


def truncate_to_tokens(text: str, max_tokens: int, *, model: str = "") -> str:
    """The longest prefix of ``text`` that is at most ``max_tokens`` tokens (whole tokens)."""
    if max_tokens <= 0:
        return ""
    encoding = _encoding(encoding_name_for_model(model))
    ids = encoding.encode(text, disallowed_special=())
    if len(ids) <= max_tokens:
        return text
    prefix = encoding.decode(ids[:max_tokens])
    # A cut inside a multi-byte character decodes to U+FFFD; drop the broken tail.
    return prefix.rstrip("\ufffd")


def tokens_and_head(text: str, max_tokens: int, *, model: str = "") -> tuple[int, str]:
    """``(count_tokens(text), truncate_to_tokens(text, max_tokens))`` with one encoding of
    ``text`` where the two took two (none when its count is known and within ``max_tokens``): a
    tool result's head in a summary counted its long first sentence, then cut it
    (docs/performance.md, "The tool task, eighth pass")."""
    if not text or max_tokens <= 0:
        return count_tokens(text, model=model), ""
    name = encoding_name_for_model(model)
    key: tuple[str, bytes] | None = None
    if len(text) >= COUNT_CACHE_MIN_CHARS:
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        key = (name, digest)
        count = _COUNTS.get(key)
        if count is not None and count <= max_tokens:
            return count, text
    encoding = _encoding(name)
    if len(text) > SEGMENT_CHARS:
        # Counted as ``count_tokens`` counts it, segment by segment; the head from the ids of
        # the first segments (they start where pieces start: the whole text's ids).
        count, head = 0, list[int]()
        for part in _segments(text):
            part_ids = encoding.encode(part, disallowed_special=())
            count += len(part_ids)
            if len(head) < max_tokens:
                head.extend(part_ids[: max_tokens - len(head)])
        if key is not None:
            _COUNTS.put(key, count)
        if count <= max_tokens:
            return count, text
        return count, encoding.decode(head).rstrip("\ufffd")
    ids = encoding.encode(text, disallowed_special=())
    if key is not None:
        _COUNTS.put(key, len(ids))
    if len(ids) <= max_tokens:
        return len(ids), text
    return len(ids), encoding.decode(ids[:max_tokens]).rstrip("\ufffd")
