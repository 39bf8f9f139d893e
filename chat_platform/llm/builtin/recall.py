"""``builtin/recall``: answers by quoting the context it is given. Not a language model.

What it reads (the shapes the context pipeline renders; docs/compaction.md, §10):

* **The question** is the last ``user`` message that is not recalled data (does not start with
  a ``[record <name>]`` frame). Everything after it is this turn's recall exchange.
* **Bot instructions**: the leading ``system`` messages (the bot's prompt, the chat's
  instruction, a room's header, an API client's system message), up to the first ``[…]``
  header, are never quoted.
* **A room's speaker labels**: a ``user`` message with a ``name`` starts with ``Name: `` (who
  spoke); the label is neither part of the question nor of a quote.
* **Summaries**: a ``system`` message whose first line is ``[Summary of messages A–B]``. Its lines
  are extractive output (``[12] user: …``, ``user: …`` or plain text); the speaker label becomes
  the attribution (``you said in message 12``), never part of the quote.
* **Memory index**: a ``system`` message whose first line is ``[Memory index: records you can
  read]``, with lines ``- <name> (<kind>, messages <first>–<last>): <description>`` or
  ``- <name> (info): <description>``. Never quoted; they are what recall may ask for.
* **Recalled records**: a message (``tool`` role, a ``system`` block or an injected ``user``
  message) with lines ``[record <name>]`` followed by the record's body or a search excerpt
  (matches wrapped in ``**…**``). ``[not found: <name>]``, ``[no matches]``, ``[saved: <name>]``
  and ``[not saved: <reason>]`` are results, never quoted.
* **History**: earlier ``user`` / ``assistant`` messages (``you said`` / ``I said``). Assistant
  messages may carry ``tool_calls``; ``tool`` messages carry their results.

Never quoted: headers (``[Summary of …]``, ``[Raw messages …]``), speaker labels, lines that
echo earlier quotes (``>``, ``— Summary of messages …``), its own answers, requests and
confirmations.

What it does, for a question:

1. If the context already answers it (a quotable sentence holds at least 60 % of the question's
   content words), it quotes.
2. Otherwise, once per question: if the index lists a matching record that is not in context, it
   asks for it — ``read_records({"names": [...]})`` when that tool is offered, else exactly
   ``{"read_files": {"files": [...]}}``. What was read answers when a sentence holds half of
   the question's content words and every one of them is said somewhere in context or in the
   index; a word neither says (the "flight" of "What is the flight number?" after a read that
   holds only an invoice number) leads to the search.
3. Otherwise, once per question, when memory is in play (an index block, or the search tool is
   offered): ``search_records({"query": "<the question's content words>"})``, else exactly
   ``{"search_records": {"query": "..."}}``.
4. Then it answers: up to three short quotes, best matching first in context order, each with its
   source, at most ``MAX_ANSWER_TOKENS`` tokens; or says plainly that nothing matches. After a
   search that brought hits, when no quote chosen by words is from its result (what it found by
   meaning shares no word with the question, or only a word something read shares), the
   statements of its best hit are quoted instead, dated turns with their day.

``tool_choice: "none"`` means answer now: no request of either form.

A question whose first word names one of the bot's own tools (not a memory tool) calls it, then
quotes its result (``chat_platform.llm.builtin.named_tools``); a no-match answer of a bot with
tools says how to call them.

A user message starting with "remember" is saved: a ``save_record`` tool call (name from the
fact's content words, scope ``bot``) when that tool is offered, then ``Saved as <name>.`` once the
``[saved: <name>]`` result arrives; without the tool it acknowledges.
"""

import hashlib
import json
import math
import re

from chat_platform.llm.builtin.named_tools import (
    named_call,
    named_result,
    result_answer,
    tools_hint,
)
from chat_platform.llm.builtin.recall_context import (
    NO_MATCH_TEXT,
    REMEMBER,
    Exchange,
    IndexEntry,
    Unit,
    exchange,
    find_question,
    index_entries,
    json_requests_invited,
    records_to_request,
    search_hits,
    spoken_text,
    units_of,
)
from chat_platform.llm.builtin.result import BuiltinResult, prompt_tokens
from chat_platform.llm.builtin.text import STOPWORDS, stem, terms
from chat_platform.llm.recall_protocol import ANSWER_HEADER, READ_TOOL, SAVE_TOOL, SEARCH_TOOL
from chat_platform.llm.tokens import count_tokens, truncate_to_tokens
from chat_platform.stopwords import WORD

MODEL = "builtin/recall"
MAX_QUOTES = 3
# A quote must score at least this share of the best quote's score.
QUOTE_MIN_SHARE = 0.5
# A quote that answers another part of the question needs at least this share of the best score.
COVER_MIN_SHARE = 0.3
# The context answers a question when one sentence holds this share of its content words.
ANSWERED_SHARE = 0.6
# ... or half of them once a read brought records in (the search is for when it brought nothing).
ANSWERED_AFTER_READ_SHARE = 0.5
MAX_ANSWER_TOKENS = 120
QUOTE_MAX_TOKENS = 40
MAX_QUERY_WORDS = 8
DESCRIPTION_MAX_CHARS = 140
NAME_MAX_WORDS = 3

NOTED_TEXT = "Noted."

# First words of questions and requests; a message starting otherwise (and not ending in "?")
# is a statement, which is acknowledged, not answered.
_ASKING = frozenset(
    """
    what what's whats when when's where where's which who who's whom whose why how how's
    do does did is are was were am can could would will should shall may might have has had
    tell remind recall show list give find say repeat quote search look check any anything
    please summarise summarize explain describe name
    """.split()  # noqa: SIM905 - a word list reads better as prose
)
_FIRST_WORD = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)?")
STATEMENT_MIN_WORDS = 4
FRAGMENT_MAX_WORDS = 3
_NAME_WORD = re.compile(r"[a-z0-9]+")


# --- choosing quotes --------------------------------------------------------------------------


def _is_question(text: str) -> bool:
    return text.rstrip().endswith(("?", "\uff1f"))


def _is_fragment(text: str) -> bool:
    words = text.split()
    return len(words) < FRAGMENT_MAX_WORDS or (
        text[:1].islower() and not text.rstrip().endswith((".", "!", "\u3002"))
    )


def is_statement(text: str) -> bool:
    """A plain statement ("My locker code is 4471."): not a question, not a request, at least
    ``STATEMENT_MIN_WORDS`` words (a few bare words are a lookup, like a search box)."""
    stripped = text.strip()
    if not stripped or _is_question(stripped) or "?" in stripped:
        return False
    words = stripped.split()
    if len(words) < STATEMENT_MIN_WORDS:
        return False
    first = _FIRST_WORD.search(stripped)
    if first is None:
        return False  # no Latin-script words (e.g. CJK): treat as a lookup
    return first.group().lower().replace("\u2019", "'") not in _ASKING


def _choose_quotes(units: list[Unit], question_terms: set[str]) -> tuple[list[Unit], float]:
    """(the quotes, in context order; the share of the question's terms the best statement
    holds)."""
    unit_terms = [set(terms(u.text)) for u in units]
    document_frequency: dict[str, int] = {}
    for found in unit_terms:
        for term in found & question_terms:
            document_frequency[term] = document_frequency.get(term, 0) + 1
    total = len(units)
    scored: list[tuple[float, int, Unit]] = []
    coverage = 0.0
    for unit, found in zip(units, unit_terms, strict=True):
        matched = found & question_terms
        if not matched:
            continue
        score = sum(math.log(1 + (total + 1) / document_frequency[t]) for t in matched)
        if _is_question(unit.text):
            score /= 3  # an earlier question rarely holds the answer
        elif _is_fragment(unit.text):
            score /= 2  # a piece cut out of a sentence (a search excerpt's edge)
        else:
            coverage = max(coverage, len(matched) / len(question_terms))
        scored.append((round(score, 9), unit.position, unit))
    if not scored:
        return [], 0.0
    # A fragment of a sentence quoted whole elsewhere (a search excerpt cut mid-sentence) is
    # left to the whole sentence.
    flat = [(" ".join(u.text.lower().split()), u) for _, _, u in scored]
    scored = [
        item
        for item, (text, unit) in zip(scored, flat, strict=True)
        if not any(text != other and text in other for other, _ in flat)
    ]
    scored.sort(key=lambda item: (-item[0], -item[1]))
    best = scored[0][0]
    chosen: list[Unit] = []
    seen_text: set[str] = set()
    covered: set[str] = set()

    def take(unit: Unit) -> None:
        seen_text.add(" ".join(terms(unit.text)))
        chosen.append(unit)
        if not _is_question(unit.text):
            covered.update(set(terms(unit.text)) & question_terms)

    # First the statements that bring question words no earlier pick covered (a question in two
    # parts gets both answers), then the strongest of the rest.
    for score, _, unit in scored:
        if len(chosen) == MAX_QUOTES or score < best * COVER_MIN_SHARE:
            break
        new = (set(terms(unit.text)) & question_terms) - covered
        if new and not _is_question(unit.text) and " ".join(terms(unit.text)) not in seen_text:
            take(unit)
    for score, _, unit in scored:
        if len(chosen) == MAX_QUOTES or score < best * QUOTE_MIN_SHARE:
            break
        if unit not in chosen and " ".join(terms(unit.text)) not in seen_text:
            take(unit)
    return sorted(chosen, key=lambda u: u.position), coverage


def _stated(units: list[Unit]) -> set[str]:
    """The words the statements in context say (questions are not answers)."""
    said: set[str] = set()
    for unit in units:
        if not _is_question(unit.text):
            said.update(terms(unit.text))
    return said


def _unsaid(units: list[Unit], index: list[IndexEntry], question_terms: set[str]) -> set[str]:
    """The question's words that neither a statement in context nor the memory index says
    ("flight" of "What is the flight number?" when what was read says only "the invoice number
    is INV-30017" and its index line only "The invoice number and due date"). A word the index
    line of what was read says ("food" of "Food allergies and diet") was read for."""
    said = _stated(units)
    for entry in index:
        said.update(terms(re.sub(r"[_-]", " ", entry.name) + " " + entry.description))
    return question_terms - said


def _quote_line(unit: Unit) -> str:
    text = unit.text
    if count_tokens(text, model=MODEL) > QUOTE_MAX_TOKENS:
        text = truncate_to_tokens(text, QUOTE_MAX_TOKENS, model=MODEL).rstrip() + "\u2026"
    return f"> {text} \u2014 {unit.label}"


def _answer(
    quotes: list[Unit], max_tokens: int | None, no_match: str = NO_MATCH_TEXT
) -> tuple[str, str]:
    cap = MAX_ANSWER_TOKENS if max_tokens is None else min(max_tokens, MAX_ANSWER_TOKENS)
    if not quotes:
        text = no_match
    else:
        lines = [ANSWER_HEADER]
        for quote in quotes:
            candidate = [*lines, _quote_line(quote)]
            if len(lines) > 1 and count_tokens("\n".join(candidate), model=MODEL) > cap:
                break
            lines = candidate
        text = "\n".join(lines)
        if count_tokens(text, model=MODEL) > cap and (max_tokens is None or cap < max_tokens):
            text = truncate_to_tokens(text, cap, model=MODEL).rstrip() + "\u2026"
    if max_tokens is not None and count_tokens(text, model=MODEL) > max_tokens:
        return truncate_to_tokens(text, max_tokens, model=MODEL), "length"
    return text, "stop"


def _searched(quotes: list[Unit], hits: list[list[Unit]]) -> list[Unit]:
    """The quotes once a search answered: the search ran because the context did not answer,
    and it ranks by meaning too (docs/memory.md, "Hybrid search"), so when no word-chosen quote
    is from its result (what it found shares no word with the question: "When does my flight
    depart?" -> "My plane to Tokyo takes off at nine"; or only a word a read record shares, the
    invoice number for the flight number) its best hit is quoted: that hit's statements, dated
    turns in seq order, at most ``MAX_QUOTES``."""
    if not hits:
        return quotes
    brought = {(unit.label, unit.text) for hit in hits for unit in hit}
    if any((quote.label, quote.text) in brought for quote in quotes):
        return quotes
    best = [u for u in hits[0] if not _is_question(u.text) and not _is_fragment(u.text)]
    return best[:MAX_QUOTES] or quotes


# --- requests ---------------------------------------------------------------------------------


def _offered(tools: list[dict] | None, name: str) -> bool:
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name") == name:
            return True
    return False


def _tool_call(name: str, arguments: dict, messages: list[dict]) -> dict:
    """A call whose id is unique to this context (deterministic: the same context gives the
    same id): the same search in a later turn gets another id, since a compaction pairs a
    call with its results by id (``compaction.ranges``)."""
    encoded = json.dumps(arguments)
    context = json.dumps(messages, sort_keys=True, default=str)
    digest = hashlib.sha256(f"{name}{encoded}{context}".encode()).hexdigest()[:24]
    return {
        "id": f"call_{digest}",
        "type": "function",
        "function": {"name": name, "arguments": encoded},
    }


def _call_result(name: str, arguments: dict, prompt: int, messages: list[dict]) -> BuiltinResult:
    call = _tool_call(name, arguments, messages)
    return BuiltinResult(
        text="",
        finish_reason="tool_calls",
        prompt_tokens=prompt,
        completion_tokens=count_tokens(name + call["function"]["arguments"], model=MODEL),
        tool_calls=[call],
    )


def _text_result(text: str, prompt: int, finish_reason: str = "stop") -> BuiltinResult:
    return BuiltinResult(
        text=text,
        finish_reason=finish_reason,
        prompt_tokens=prompt,
        completion_tokens=count_tokens(text, model=MODEL),
    )


def search_query(question: str) -> str:
    """The question's content words, in order, without repeats (at most MAX_QUERY_WORDS)."""
    words: list[str] = []
    seen: set[str] = set()
    for word in WORD.findall(question):
        lower = word.lower()
        if lower in STOPWORDS or (len(lower) == 1 and not lower.isdigit()):
            continue
        key = stem(lower)
        if key in seen:
            continue
        seen.add(key)
        words.append(word)
    return " ".join(words[:MAX_QUERY_WORDS])


# --- "remember …" -----------------------------------------------------------------------------


def is_remember(text: str) -> bool:
    """A user message starting with "remember" that is not a question ("Remember what …?")."""
    return REMEMBER.match(text) is not None and not _is_question(text)


def remembered_fact(text: str) -> str:
    """``"Remember that my locker code is 4471"`` -> ``"My locker code is 4471."``."""
    fact = " ".join(REMEMBER.sub("", text.strip(), count=1).split())
    if not fact:
        return ""
    fact = fact[0].upper() + fact[1:]
    return fact if fact.endswith((".", "!", "?", "\u3002")) else fact + "."


def record_name(fact: str) -> str:
    """A record name from the fact's first content words (numbers left out): ``locker_code``."""
    words: list[str] = []
    for match in WORD.finditer(fact.lower()):
        word = re.sub(r"['\u2019]s$", "", match.group())
        if word in STOPWORDS or len(word) < 2 or word.isdigit():
            continue
        ascii_word = "".join(_NAME_WORD.findall(word))
        if ascii_word and not ascii_word.isdigit() and ascii_word not in words:
            words.append(ascii_word)
        if len(words) == NAME_MAX_WORDS:
            break
    if words:
        return "_".join(words)[:80].strip("_")
    return "note_" + hashlib.sha256(fact.encode()).hexdigest()[:8]


def _description(fact: str) -> str:
    if len(fact) <= DESCRIPTION_MAX_CHARS:
        return fact
    return fact[: DESCRIPTION_MAX_CHARS - 1].rstrip() + "\u2026"


def _free_name(name: str, description: str, listed: list[IndexEntry]) -> str:
    """``name``, or ``name_2``, ``name_3``… when the memory index lists a record of that name
    that says something else: saving is an upsert by name, and "the door code for flat 5C"
    wrote over "the door code for flat 3B" (both ``door_code_flat``), or was refused when a
    chat's own record had the name. The same fact again keeps its name."""
    taken = {entry.name: entry.description for entry in listed}
    for n in range(1, 100):
        candidate = name if n == 1 else f"{name[:76]}_{n}"
        if taken.get(candidate, description) == description:
            return candidate
    return name


def _remember(
    messages: list[dict],
    question: str,
    done: Exchange,
    tools: list[dict] | None,
    may_call: bool,
    prompt: int,
) -> BuiltinResult:
    if done.saved:
        return _text_result(f"Saved as {done.saved}.", prompt)
    if done.not_saved is not None:
        return _text_result(f"I could not save that: {done.not_saved}", prompt)
    fact = remembered_fact(question)
    if fact and may_call and "save" not in done.kinds and _offered(tools, SAVE_TOOL):
        arguments = {
            "name": _free_name(record_name(fact), _description(fact), index_entries(messages)),
            "description": _description(fact),
            "body": fact,
            "scope": "bot",
        }
        return _call_result(SAVE_TOOL, arguments, prompt, messages)
    return _text_result(NOTED_TEXT, prompt)


# --- the model --------------------------------------------------------------------------------


def respond(
    messages: list[dict],
    *,
    tools: list[dict] | None = None,
    tool_choice: object = None,
    max_tokens: int | None = None,
) -> BuiltinResult:
    prompt = prompt_tokens(messages, model=MODEL)
    question = find_question(messages)
    if question is None:
        return _text_result(NO_MATCH_TEXT, prompt)
    question_text = spoken_text(messages[question])
    may_call = tool_choice != "none"
    done = exchange(messages, question)
    answered = named_result(messages, question, question_text)
    if answered is not None:
        return _text_result(result_answer(*answered, model=MODEL), prompt)
    named = named_call(question_text, tools) if may_call else None
    if named is not None:
        return _call_result(*named, prompt, messages)
    if is_remember(question_text):
        return _remember(messages, question_text, done, tools, may_call, prompt)

    if is_statement(question_text):
        return _text_result(NOTED_TEXT, prompt)
    question_terms = set(terms(question_text))
    if not question_terms:
        return _text_result(NO_MATCH_TEXT, prompt)
    units = units_of(messages, question)
    quotes, coverage = _choose_quotes(units, question_terms)
    enough = ANSWERED_AFTER_READ_SHARE if "read" in done.kinds else ANSWERED_SHARE
    if "read" in done.kinds and _unsaid(units, index_entries(messages), question_terms):
        enough = math.inf  # what was read half-matches: the words it lacks may be elsewhere
    elif coverage >= enough and may_call and "read" not in done.kinds:
        # A sentence holds most of the question's words ("the Libra project locker code") and a
        # record the index lists holds one no statement here says ("aurora"): read it first.
        absent = question_terms - _stated(units)
        if absent and records_to_request(messages, question, absent):
            enough = math.inf
    if coverage < enough and may_call:
        if "read" not in done.kinds:
            names = records_to_request(messages, question, question_terms)
            if names:
                if _offered(tools, READ_TOOL):
                    return _call_result(READ_TOOL, {"names": names}, prompt, messages)
                if json_requests_invited(messages):
                    return _text_result(json.dumps({"read_files": {"files": names}}), prompt)
        query = search_query(question_text)
        searchable = _offered(tools, SEARCH_TOOL) or json_requests_invited(messages)
        if "search" not in done.kinds and query and searchable:
            if _offered(tools, SEARCH_TOOL):
                return _call_result(SEARCH_TOOL, {"query": query}, prompt, messages)
            return _text_result(json.dumps({"search_records": {"query": query}}), prompt)
    if "search" in done.kinds:
        quotes = _searched(quotes, search_hits(messages, question))
    no_match = NO_MATCH_TEXT + tools_hint(tools)
    text, finish_reason = _answer(quotes, max_tokens, no_match)
    return _text_result(text, prompt, finish_reason)
