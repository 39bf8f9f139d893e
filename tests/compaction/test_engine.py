"""The compaction engine through the database, Redis and a fake summariser (docs/compaction.md).

Triggers at exact threshold boundaries, the range rules, every quality gate, the fault matrix
(soft / hard / manual x HTTP 500, timeout and each bad output), cool-down and back-off on a
stepped clock, the extractive fallback, frontier fusion, and how summaries reach the model.

Budget used throughout (``small_bot``): W 2200, R 200 -> B 2000, S 1000, H 1500, T 800, Ts 800;
the summariser is the chat model (window 2200 -> ``max_tokens`` 220); fusion past 400 tokens.
"""

from datetime import timedelta
from functools import partial

import pytest
from django.utils import timezone

from bots.models import Message
from chat_platform.llm.tokens import count_message_tokens, count_tokens, truncate_to_tokens
from chat_platform.transcript import stamp
from compaction import engine
from compaction.engine import coverage as compaction_coverage
from compaction.engine import fusion, passes, policy
from compaction.models import CompactionEvent, CompactionState, Summary
from compaction.pipeline import context_build, context_measure
from memory.models import MemoryRecord
from tests.coverage import in_context_recount, in_context_totals, messages_covered
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import Reply
from turns.dispatch import compact_soft_dispatch
from turns.turn import turn_run

pytestmark = pytest.mark.django_db

MODEL = "openai/fake-model"
BUDGET = 2000
GOOD = (
    "Alice and Bob agreed on the launch plan: budget 4,500 EUR, launch on 2024-05-01, "
    "ticket #4471 tracks the work."
)
ROLES = ("user", "assistant")


# --- helpers (also used by the API and concurrency suites) ------------------------------------


def tok(text: str) -> int:
    return count_message_tokens(text, model=MODEL)


def text_of(tokens: int, tag: str) -> str:
    """Prose with facts in it that costs exactly ``tokens`` as a message (text + overhead)."""
    sentences = []
    i = 0
    while count_tokens(" ".join(sentences), model=MODEL) < tokens:
        if i % 2:  # small talk: nothing an extractive summary would keep
            sentences.append("we chatted about the weather for a while and moved on.")
        else:
            sentences.append(f"{tag} item {i} costs {i * 7 + 3} euros and ships on day {i + 1}.")
        i += 1
    text = truncate_to_tokens(" ".join(sentences), tokens - 4, model=MODEL).rstrip()
    while tok(text) < tokens:
        text += " and"
    assert tok(text) == tokens, (tokens, tok(text))
    return text


def summary_text(tokens: int) -> str:
    """A plausible summary of exactly ``tokens`` tokens as the quality gate counts them."""
    text = text_of(tokens + 4, "Summary")
    assert count_tokens(text, model=MODEL) == tokens
    return text


def add_history(session, sizes, *, real: bool = False, start_role: int = 0, tag: str = "m"):
    """Append complete user/assistant messages, alternating; ``real`` = content of that size."""
    rows = []
    for i, size in enumerate(sizes):
        role = ROLES[(i + start_role) % 2]
        if real:
            rows.append(message_add(session, role=role, content=text_of(size, f"{tag}{i}")))
        else:
            rows.append(
                message_add(session, role=role, content=f"{tag} message {i}", token_count=size)
            )
    return rows


def add_turn(session, content: str = "What should we do next?", *, tokens: int | None = None):
    """The current turn in flight: a user message and its pending reply."""
    fields = {} if tokens is None else {"token_count": tokens}
    new = message_add(session, role="user", content=content, **fields)
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    return new, reply


def recount(session):
    """What the seat of the session's bot holds in context, counted from the messages (the
    session's running totals repaired first)."""
    return in_context_recount(session)


def summariser_requests(fake) -> list[dict]:
    return [r for r in fake.requests if not r.get("stream")]


def chat_requests(fake) -> list[dict]:
    return [r for r in fake.requests if r.get("stream")]


def sent_tokens(request: dict) -> int:
    return sum(
        count_message_tokens(m.get("content") or "", model=MODEL) for m in request["messages"]
    )


def dated(session, *lines: str) -> list[str]:
    """``[n] speaker: text`` lines as the transcript writes them: with message n's time stamp."""
    out = []
    for line in lines:
        seq = int(line[1 : line.index("]")])
        created = Message.objects.get(session=session, seq=seq).created_at
        out.append(line.replace("] ", f"] {stamp(created)} ", 1))
    return out


def transcript_of(request: dict) -> str:
    content = request["messages"][1]["content"]
    assert content.startswith("<transcript>\n")
    return content[len("<transcript>\n") : content.index("\n</transcript>")]


def message_rows(session) -> list[tuple]:
    return list(
        messages_covered(session)
        .order_by("seq")
        .values_list("seq", "role", "kind", "content", "status", "token_count", "compacted_by_id")
    )


def compacted_seqs(session) -> list[int]:
    return list(
        messages_covered(session)
        .filter(compacted_by_id__isnull=False)
        .order_by("seq")
        .values_list("seq", flat=True)
    )


def counters(session) -> tuple[int, int]:
    """What the running totals say the seat of the session's bot holds in context."""
    return in_context_totals(session)


class Clock:
    """The engine's clock, stepped by hand."""

    def __init__(self) -> None:
        self.now = timezone.now().replace(microsecond=0)

    def __call__(self):
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture(autouse=True)
def _fast_llm(fast_llm):
    """Every test here: one attempt per summariser call (see conftest)."""


@pytest.fixture
def session(owner, small_bot):
    return SessionFactory(user=owner, bot=small_bot)


@pytest.fixture
def clock(monkeypatch):
    stepped = Clock()
    monkeypatch.setattr(policy, "now", stepped)  # the engine's one clock
    return stepped


# --- 1. thresholds drive the triggers ---------------------------------------------------------


@pytest.mark.parametrize("new_tokens", [199, 200], ids=["H-1", "H"])
def test_hard_threshold_boundary_in_context_build(session, fake_openai, new_tokens):
    # The oldest message alone covers what any sizing toward Ts = 800 frees (700, or more to
    # leave room for the summary), so the range is exactly [1] whatever the engine's estimate.
    add_history(session, [1000, 100, 100, 100])
    new, reply = add_turn(session, "the new question", tokens=new_tokens)
    recount(session)
    measure = context_measure(session=session, new_message=new, before_seq=reply.seq)
    budget = measure.budget
    assert (budget.budget, budget.soft, budget.hard, budget.target, budget.target_blocking) == (
        2000,
        1000,
        1500,
        800,
        800,
    )
    assert measure.pressure == 1300 + new_tokens
    fake_openai.script(Reply(text=GOOD))

    built = context_build(session=session, reply=reply)

    if new_tokens == 199:  # H - 1: no blocking compaction, everything fits
        assert fake_openai.requests == []
        assert not Summary.objects.filter(session=session).exists()
        assert not CompactionEvent.objects.filter(session=session).exists()
        assert not MemoryRecord.objects.filter(session=session).exists()
        assert not CompactionState.objects.filter(session=session).exists()
        assert compacted_seqs(session) == []
        assert counters(session) == (1499, 5)
        assert [m["content"] for m in built.messages] == [
            "m message 0",
            "m message 1",
            "m message 2",
            "m message 3",
            "the new question",
        ]
        return

    # H: one blocking pass toward Ts, over the oldest message only, never the new one
    [request] = summariser_requests(fake_openai)
    assert request["max_tokens"] == 220
    assert request["messages"] == [
        {"role": "system", "content": engine.SUMMARY_INSTRUCTIONS},
        {
            "role": "user",
            "content": "<transcript>\n"
            + dated(session, "[1] user: m message 0")[0]
            + "\n</transcript>",
        },
    ]
    summary = Summary.objects.get(session=session)
    assert (summary.first_seq, summary.last_seq, summary.source_tokens, summary.level) == (
        1,
        1,
        1000,
        1,
    )
    assert (summary.trigger, summary.status, summary.model, summary.text) == (
        "hard",
        "active",
        MODEL,
        GOOD,
    )
    assert summary.token_count == tok(f"[Summary of messages 1–1]\n{GOOD}")
    assert compacted_seqs(session) == [1]
    assert counters(session) == (1500 - 1000, 4) == recount(session)
    assert built.messages == [
        {"role": "system", "content": f"[Summary of messages 1–1]\n{GOOD}"},
        {"role": "assistant", "content": "m message 1"},
        {"role": "user", "content": "m message 2"},
        {"role": "assistant", "content": "m message 3"},
        {"role": "user", "content": "the new question"},
    ]
    assert built.admission.selected_tokens == 500 + summary.token_count
    event = CompactionEvent.objects.get(session=session)
    assert (event.trigger, event.outcome, event.reason) == ("hard", "compacted", "")
    assert (event.tokens_before, event.tokens_after) == (1500, 500 + summary.token_count)
    assert (event.source_tokens, event.summary_tokens, event.model) == (
        1000,
        summary.token_count,
        MODEL,
    )
    assert event.summary == summary
    assert (event.snapshot.name, event.snapshot.kind, event.snapshot.indexed) == (
        "snapshot_1_1",
        "snapshot",
        True,
    )
    assert event.snapshot.body == dated(session, "[1] user: m message 0")[0]


@pytest.mark.parametrize("offset", [-1, 0], ids=["S-1", "S"])
def test_soft_threshold_boundary_after_a_completed_turn(
    session, fake_openai, eager_tasks, django_capture_on_commit_callbacks, offset
):
    question, answer = "What is next?", "Noted, thanks."
    turn_tokens = tok(question) + tok(answer)
    add_history(session, [300, 1000 + offset - 300 - turn_tokens])
    new, reply = add_turn(session, question)
    recount(session)
    fake_openai.script(Reply(text=answer), Reply(text=GOOD))

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", answer)
    assert counters(session)[0] == 1000 + offset
    assert len(chat_requests(fake_openai)) == 1
    scheduled = [
        (cb.func, cb.args)
        for cb in callbacks
        if isinstance(cb, partial) and cb.func is compact_soft_dispatch
    ]
    if offset == -1:
        assert scheduled == []
        assert summariser_requests(fake_openai) == []
        assert not CompactionEvent.objects.filter(session=session).exists()
        return

    assert scheduled == [(compact_soft_dispatch, (session.pk,))]
    assert summariser_requests(fake_openai) == []  # nothing ran before commit: the turn never waits
    with django_capture_on_commit_callbacks(execute=True):
        for callback in callbacks:
            callback()  # eager: the task runs here
    # free 200 toward T = 800: the oldest message (300 >= 256); then 1000-300+summary < T: stop
    assert len(summariser_requests(fake_openai)) == 1
    summary = Summary.objects.get(session=session)
    assert (summary.first_seq, summary.last_seq, summary.trigger, summary.source_tokens) == (
        1,
        1,
        "soft",
        300,
    )
    assert compacted_seqs(session) == [1]
    assert counters(session) == (700, 3) == recount(session)
    assert list(
        CompactionEvent.objects.filter(session=session, outcome="compacted").values_list(
            "trigger", flat=True
        )
    ) == ["soft"]
    assert not CompactionEvent.objects.filter(
        session=session, outcome__in=["failed", "rejected"]
    ).exists()


def test_soft_pass_limit_is_three_when_each_pass_frees_too_little(session, fake_openai):
    # REFERENCE: an always-successful summariser gets exactly 3 soft passes when each pass
    # frees too little. Each pass may take at most what fits the summariser's input (~1.7k).
    add_history(session, [1600] * 6)
    add_turn(session, "latest", tokens=10)
    recount(session)
    before = counters(session)
    fake_openai.default = Reply(text=GOOD)

    engine.compaction_soft(session_id=session.pk)

    assert len(summariser_requests(fake_openai)) == 3
    summaries = list(Summary.objects.filter(session=session).order_by("first_seq"))
    assert [(s.first_seq, s.last_seq) for s in summaries] == [(1, 1), (2, 2), (3, 3)]
    assert compacted_seqs(session) == [1, 2, 3]
    assert counters(session) == (before[0] - 3 * 1600, before[1] - 3) == recount(session)


def test_disabled_compaction_never_triggers(session, small_bot, fake_openai):
    small_bot.compaction_enabled = False
    small_bot.save()
    add_history(session, [300, 300, 300, 300])
    new, reply = add_turn(session, "the new question", tokens=300)
    recount(session)

    built = context_build(session=session, reply=reply)

    assert engine.compaction_soft(session_id=session.pk) is None
    assert fake_openai.requests == []
    assert not CompactionEvent.objects.filter(session=session).exists()
    assert compacted_seqs(session) == []
    assert built.admission.selected_tokens == 1500


def test_compaction_model_setting_chooses_the_summariser(session, small_bot, fake_openai):
    small_bot.compaction_model = "builtin/extractive"
    small_bot.save()
    add_history(session, [150] * 6 + [60, 60], real=True)
    recount(session)

    result = engine.compaction_manual(session=session)

    assert result.outcome == "compacted"
    assert fake_openai.requests == []  # the chat model's server is not asked
    assert (result.summary.model, result.event.model) == ("builtin/extractive",) * 2
    assert result.summary.token_count < result.summary.source_tokens == 900


def test_a_chats_own_model_summarises_when_the_bot_names_no_compaction_model(
    session, small_bot, fake_openai
):
    """docs/compaction.md "Which model compacts": compaction_model, else the model the chat's
    turns call (its override, while the bot allows it), else the bot's. The bot's model was
    asked though the chat had picked another."""
    small_bot.allowed_models = ["openai/fake-other"]
    small_bot.save()
    session.model_override = "openai/fake-other"
    session.save()
    add_history(session, [150] * 6 + [60, 60], real=True)
    recount(session)
    fake_openai.default = Reply(text=GOOD)

    result = engine.compaction_manual(session=session)

    assert result.outcome == "compacted"
    assert [r["model"] for r in summariser_requests(fake_openai)] == ["fake-other"]
    assert (result.summary.model, result.event.model) == ("openai/fake-other",) * 2


def test_builtin_chat_bot_compacts_with_builtin_extractive(owner):
    session = SessionFactory(user=owner, bot=BotFactory(owner=owner, memory_index_size=0))
    assert session.bot.model == "builtin/recall"
    add_history(session, [150] * 6 + [60, 60], real=True)
    recount(session)

    result = engine.compaction_manual(session=session)

    assert result.outcome == "compacted"
    assert (result.summary.model, result.summary.first_seq, result.summary.last_seq) == (
        "builtin/extractive",
        1,
        6,
    )
    assert compacted_seqs(session) == [1, 2, 3, 4, 5, 6]
    assert counters(session) == recount(session)


# --- 2. range rules through the engine --------------------------------------------------------


def test_manual_takes_everything_but_the_latest_exchange(session, fake_openai):
    add_history(session, [100, 100, 100, 100, 100, 100])
    recount(session)
    fake_openai.script(Reply(text=GOOD))

    result = engine.compaction_manual(session=session)

    assert (result.outcome, result.reason) == ("compacted", "")
    assert (result.summary.first_seq, result.summary.last_seq) == (1, 4)
    assert compacted_seqs(session) == [1, 2, 3, 4]
    assert counters(session) == (200, 2) == recount(session)
    assert (result.tokens_before, result.tokens_after) == (600, 200 + result.summary.token_count)
    assert transcript_of(summariser_requests(fake_openai)[0]).splitlines() == dated(
        session, *(f"[{seq}] {ROLES[(seq - 1) % 2]}: m message {seq - 1}" for seq in range(1, 5))
    )


def test_a_pass_counts_its_request_once(session, fake_openai, monkeypatch):
    """The range is sized by what its request costs; the pass charges that figure, without
    counting the transcript again (docs/performance.md, "The tool task")."""
    from compaction.engine import summariser

    counted: list[str] = []
    original = summariser.count_message_tokens

    def counting(text, *, model=""):
        counted.append(text)
        return original(text, model=model)

    monkeypatch.setattr(summariser, "count_message_tokens", counting)
    add_history(session, [100, 100, 100, 100, 100, 100])
    recount(session)
    fake_openai.script(Reply(text=GOOD))

    result = engine.compaction_manual(session=session)

    assert (result.outcome, result.summary.first_seq, result.summary.last_seq) == (
        "compacted",
        1,
        4,
    )
    [request] = summariser_requests(fake_openai)
    sent = request["messages"][1]["content"]
    assert sent.startswith("<transcript>\n[1] ")
    assert counted.count(sent) == 1


def test_manual_compacts_all_history_even_beyond_one_summariser_input(session, fake_openai):
    """docs/compaction.md: ``/compact`` compacts *all* uncompacted history except the latest
    exchange; §8: each summariser input stays <= 85 % of its window (2200 -> 1870). With more
    history than one input holds, that takes more than one summariser call, not a partial result."""
    add_history(session, [800] * 6 + [100, 100])
    recount(session)
    fake_openai.default = Reply(text=GOOD)

    engine.compaction_manual(session=session)

    assert compacted_seqs(session) == [1, 2, 3, 4, 5, 6]
    assert counters(session)[1] == 2
    for request in summariser_requests(fake_openai):  # each input within 85 % of the window
        seqs = [int(line[1 : line.index("]")]) for line in transcript_of(request).splitlines()]
        stored = Message.objects.filter(session=session, seq__in=seqs)
        assert sum(stored.values_list("token_count", flat=True)) <= 2200 * 85 // 100


def test_summariser_input_stays_within_85_percent_of_its_window(session, fake_openai):
    """docs/compaction.md: summariser input <= 85 % of the summariser's window (2200 -> 1870),
    counted as sent. Stored counts hold text + 4 per message, but each transcript line also carries
    its ``[seq] role:`` label, so many short messages cost more in the transcript than stored."""
    for i in range(400):
        message_add(session, role=ROLES[i % 2], content="ok" if i % 2 else "sure")
    add_history(session, [100, 100], tag="latest")
    recount(session)
    fake_openai.default = Reply(text=GOOD)

    engine.compaction_manual(session=session)

    requests = summariser_requests(fake_openai)
    assert requests
    for request in requests:
        assert sent_tokens(request) <= 2200 * 85 // 100


def test_message_pinned_while_being_summarised_is_not_compacted(session, fake_openai, monkeypatch):
    """Pinned messages are never compacted (docs/compaction.md range: unpinned). A pin that lands
    while the summariser is working must not be swallowed by the summary it was cut from."""
    add_history(session, [100, 100, 100, 100, 100, 100])
    recount(session)
    fake_openai.script(Reply(text=GOOD))
    complete = engine.gateway.complete

    def pin_during_the_call(*args, **kwargs):
        Message.objects.filter(session=session, seq=2).update(pinned=True)
        return complete(*args, **kwargs)

    monkeypatch.setattr(engine.gateway, "complete", pin_during_the_call)

    engine.compaction_manual(session=session)

    pinned = messages_covered(session).get(seq=2)
    assert (pinned.pinned, pinned.compacted_by_id) == (True, None)
    assert counters(session) == recount(session)
    new, reply = add_turn(session, "What did I pin?", tokens=10)
    recount(session)
    built = context_build(session=session, reply=reply)
    assert {"role": "assistant", "content": "m message 1"} in built.messages


def test_manual_with_only_the_latest_exchange_is_nothing_to_compact(session, fake_openai):
    add_history(session, [500, 500])
    recount(session)
    result = engine.compaction_manual(session=session)
    assert (result.outcome, result.reason, result.summary) == ("noop", "nothing_to_compact", None)
    assert fake_openai.requests == []
    assert compacted_seqs(session) == []
    assert counters(session) == (1000, 2)
    assert not MemoryRecord.objects.filter(session=session).exists()


def test_current_turn_is_never_compacted_and_automatic_span_needs_256_tokens(session, fake_openai):
    # The pressure is the current turn itself; what precedes it (100 tokens) is below 256.
    add_history(session, [50, 50])
    add_history(session, [1000, 100], tag="now")
    recount(session)
    assert counters(session) == (1200, 4)

    result = engine.compaction_soft(session_id=session.pk)

    assert (result.outcome, result.reason) == ("noop", "nothing_to_compact")
    assert fake_openai.requests == []
    assert compacted_seqs(session) == []
    assert not Summary.objects.filter(session=session).exists()
    assert counters(session) == (1200, 4)

    # Manual has no minimum span; it still never touches the current turn (seqs 3, 4).
    fake_openai.script(Reply(text="Two short greetings were exchanged before the big question."))
    manual = engine.compaction_manual(session=session)
    assert manual.outcome == "compacted"
    assert (manual.summary.first_seq, manual.summary.last_seq, manual.summary.source_tokens) == (
        1,
        2,
        100,
    )
    assert compacted_seqs(session) == [1, 2]
    assert counters(session) == (1100, 2) == recount(session)


def _tool_session(session, *, pin_result: bool):
    """user 100, assistant call 100, tool result 900, then older chat, then the current turn."""
    message_add(session, role="user", content="What is the weather in Paris?", token_count=100)
    message_add(
        session,
        role="assistant",
        content="",
        token_count=100,
        tool_calls=[
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
        ],
    )
    message_add(
        session,
        role="tool",
        kind="tool",
        content="sunny, 21 C",
        token_count=900,
        tool_call_id="call_1",
        tool_name="weather",
        pinned=pin_result,
    )
    message_add(session, role="assistant", content="It is sunny and 21 C.", token_count=100)
    message_add(session, role="user", content="And tomorrow?", token_count=100)
    message_add(session, role="assistant", content="Rain.", token_count=100)
    message_add(session, role="user", content="Thanks!", token_count=100)
    message_add(session, role="assistant", content="You're welcome.", token_count=100)
    recount(session)
    assert counters(session) == (1600, 8)


def _assert_no_orphaned_tool_result(session):
    for result in messages_covered(session).filter(role="tool"):
        call = messages_covered(session).get(tool_calls__contains=[{"id": "call_1"}])
        assert result.compacted_by_id == call.compacted_by_id


def test_tool_call_and_its_result_are_compacted_together(session, fake_openai):
    _tool_session(session, pin_result=False)
    fake_openai.script(Reply(text=GOOD))

    engine.compaction_soft(session_id=session.pk)

    # toward T = 800 from 1600: the user message, then the call + result unit (1000) -> 1100
    [request] = summariser_requests(fake_openai)
    assert transcript_of(request).splitlines() == dated(
        session,
        "[1] user: What is the weather in Paris?",
        "[2] assistant: (used weather)",
        "[3] tool (weather): sunny, 21 C",
    )
    assert compacted_seqs(session) == [1, 2, 3]
    _assert_no_orphaned_tool_result(session)
    assert counters(session) == (500, 5) == recount(session)


def test_pinned_tool_result_keeps_its_call_out_of_the_range(session, fake_openai):
    _tool_session(session, pin_result=True)
    fake_openai.script(Reply(text=GOOD))

    engine.compaction_soft(session_id=session.pk)

    # the call cannot go without its (pinned) result: both stay; the rest before the turn goes
    [request] = summariser_requests(fake_openai)
    assert transcript_of(request).splitlines() == dated(
        session,
        "[1] user: What is the weather in Paris?",
        "[4] assistant: It is sunny and 21 C.",
        "[5] user: And tomorrow?",
        "[6] assistant: Rain.",
    )
    assert compacted_seqs(session) == [1, 4, 5, 6]
    _assert_no_orphaned_tool_result(session)
    assert counters(session) == (1200, 4) == recount(session)


# --- 3 + 4. quality gates and the fault matrix ------------------------------------------------

LONG = " ".join(["The team reviewed every detail of the plan once more."] * 260)  # ~2.6k tokens
FAULTS = {
    "http_500": (Reply(status=500), "failed", "summariser_error"),
    "timeout": (Reply(text=GOOD, hang=3.0), "failed", "summariser_error"),
    "empty": (Reply(text=""), "rejected", "empty"),
    "think_only": (Reply(text="<think>The budget matters most.</think>\n"), "rejected", "empty"),
    "length": (Reply(text=GOOD, finish_reason="length"), "rejected", "finish_reason"),
    "too_short": (Reply(text="Budget agreed."), "rejected", "too_short"),
    "not_shorter": (Reply(text=LONG), "rejected", "not_shorter"),
    "tool_syntax": (
        Reply(
            text='<tool_call>{"name": "read_records", "arguments": {"names": ["snapshot_1_4"]}}'
            "</tool_call>\n" + GOOD
        ),
        "rejected",
        "tool_syntax",
    ),
}


def _fault_session(session, trigger: str):
    """soft/manual: S <= pressure < H. hard: a turn in flight with pressure above B."""
    if trigger == "hard":
        add_history(session, [180] * 12, real=True)
        new, reply = add_turn(session, "Please list the remaining items.")
        recount(session)
        return reply
    add_history(session, [150] * 6 + [60, 60], real=True)
    recount(session)
    return None


@pytest.mark.parametrize("trigger", ["soft", "hard", "manual"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_matrix_loses_nothing_and_never_exceeds_the_budget(
    session, small_bot, fake_openai, settings, fault, trigger
):
    settings.LLM_TIMEOUT_SECONDS = 0.5
    small_bot.compaction_fallback_extractive = False
    small_bot.save()
    reply = _fault_session(session, trigger)
    before_rows = message_rows(session)
    before_counters = counters(session)
    reply_text = "Here is what remains."
    scripted, outcome, reason = FAULTS[fault]
    fake_openai.script(scripted, Reply(text=reply_text))

    if trigger == "soft":
        result = engine.compaction_soft(session_id=session.pk)
    elif trigger == "manual":
        result = engine.compaction_manual(session=session)
    else:
        turn_run(message_id=reply.pk)
        result = None
    if result is not None:
        assert (result.outcome, result.reason, result.summary) == (outcome, reason, None)

    # no summary, nothing marked compacted, counters and messages exactly as before
    assert not Summary.objects.filter(session=session).exists()
    assert compacted_seqs(session) == []
    rows = message_rows(session)
    if trigger == "hard":
        reply.refresh_from_db()
        assert (reply.status, reply.content) == ("complete", reply_text)
        rows = [r for r in rows if r[0] != reply.seq]
        before_rows = [r for r in before_rows if r[0] != reply.seq]
        assert counters(session) == (before_counters[0] + tok(reply_text), before_counters[1] + 1)
    else:
        assert counters(session) == before_counters
    assert rows == before_rows

    # exactly one attempt, recorded with the gate's reason and its kept, unindexed snapshot
    [request] = summariser_requests(fake_openai)
    [event] = CompactionEvent.objects.filter(session=session)
    assert (event.trigger, event.outcome, event.reason) == (trigger, outcome, reason)
    assert (event.summary, event.summary_tokens) == (None, 0)
    assert event.tokens_after == event.tokens_before
    snapshot = MemoryRecord.objects.get(session=session)
    assert event.snapshot == snapshot
    assert (snapshot.kind, snapshot.indexed) == ("snapshot", False)
    assert snapshot.body == transcript_of(request)
    first, last = snapshot.first_seq, snapshot.last_seq
    assert snapshot.name == f"snapshot_{first}_{last}"
    assert event.source_tokens == sum(
        Message.objects.filter(session=session, seq__gte=first, seq__lte=last).values_list(
            "token_count", flat=True
        )
    )
    if fault == "http_500":
        assert "HTTP 500" in event.error
    if fault == "timeout":
        assert "timed out" in event.error

    # the chat model never gets more than B (hard: the turn was trimmed, not sent whole)
    for chat in chat_requests(fake_openai):
        assert sent_tokens(chat) <= BUDGET
    if trigger == "hard":
        [chat] = chat_requests(fake_openai)
        contents = [m["content"] for m in chat["messages"]]
        assert contents[-1] == "Please list the remaining items."
        assert before_rows[0][3] not in contents  # the oldest message was trimmed
        # admission keeps the newest contiguous run: 11 x 180 + the new message (10) = 1990
        assert sent_tokens(chat) == 11 * 180 + tok("Please list the remaining items.") == 1990
        state = CompactionState.objects.get(session=session)
        assert state.backoff_step == 1
    else:
        assert chat_requests(fake_openai) == []


def test_http_500_is_retried_within_bounds_then_recorded_once(session, fake_openai, settings):
    settings.LLM_MAX_RETRIES = 2
    _fault_session(session, "manual")
    fake_openai.script(Reply(status=500), Reply(status=500), Reply(status=500))
    result = engine.compaction_manual(session=session)
    assert (result.outcome, result.reason) == ("failed", "summariser_error")
    assert len(summariser_requests(fake_openai)) == 3
    assert CompactionEvent.objects.filter(session=session).count() == 1
    assert not Summary.objects.filter(session=session).exists()


def test_summary_that_costs_more_than_its_source_as_sent_is_rejected(session, fake_openai):
    """docs/compaction.md: a summary not shorter than what it replaces is rejected. What it replaces
    costs ``source_tokens`` in the context (stored counts: text + per-message overhead); the
    summary costs its labelled block (``Summary.token_count``). A summary whose text alone is
    just under the source but whose block is over it would make the context *larger*."""
    add_history(session, [100, 100, 100, 100, 100, 100])
    recount(session)
    before_rows = message_rows(session)
    text = summary_text(398)
    assert count_tokens(text, model=MODEL) < 400 < tok(f"[Summary of messages 1–4]\n{text}")
    fake_openai.script(Reply(text=text))

    result = engine.compaction_manual(session=session)

    assert (result.outcome, result.reason, result.summary) == ("rejected", "not_shorter", None)
    assert not Summary.objects.filter(session=session).exists()
    assert message_rows(session) == before_rows
    assert counters(session) == (600, 6)
    assert not CompactionEvent.objects.filter(session=session, outcome="compacted").exists()


def test_reasoning_block_is_stripped_then_accepted(session, fake_openai):
    _fault_session(session, "manual")
    fake_openai.script(
        Reply(text=f"<think>First the budget, then the date.\nKeep the ticket.</think>\n\n{GOOD}")
    )
    result = engine.compaction_manual(session=session)
    assert result.outcome == "compacted"
    summary = Summary.objects.get(session=session)
    assert summary.text == GOOD
    assert "<think>" not in summary.text and "</think>" not in summary.text
    assert summary.token_count == tok(f"[Summary of messages 1–6]\n{GOOD}")
    assert compacted_seqs(session) == [1, 2, 3, 4, 5, 6]
    snapshot = MemoryRecord.objects.get(session=session)
    assert (snapshot.name, snapshot.indexed) == ("snapshot_1_6", True)


# --- 4. cool-down, back-off, fallback ---------------------------------------------------------


def _soft_ready(session, tag="m"):
    # 1050 >= S; the oldest message (400) covers any sizing toward T = 800
    add_history(session, [400, 300, 200, 150], tag=tag)
    recount(session)


def test_cooldown_after_a_soft_failure(session, fake_openai, clock):
    _soft_ready(session)
    t0 = clock.now
    fake_openai.script(Reply(status=500))
    failed = engine.compaction_soft(session_id=session.pk)
    assert (failed.outcome, failed.reason) == ("failed", "summariser_error")
    state = CompactionState.objects.get(session=session)
    assert state.cooldown_until == t0 + timedelta(seconds=300)
    assert (state.backoff_until, state.backoff_step) == (None, 0)
    assert len(fake_openai.requests) == 1

    # immediate retry and one just before the end: skipped, nothing sent, nothing changed
    for seconds in (0, 299):
        clock.now = t0 + timedelta(seconds=seconds)
        skipped = engine.compaction_soft(session_id=session.pk)
        assert (skipped.outcome, skipped.reason) == ("skipped", "cooldown")
        assert skipped.event.tokens_before == 1050
        assert len(fake_openai.requests) == 1
    assert list(
        CompactionEvent.objects.filter(session=session)
        .order_by("id")
        .values_list("outcome", "reason")
    ) == [("failed", "summariser_error"), ("skipped", "cooldown"), ("skipped", "cooldown")]
    assert compacted_seqs(session) == []

    # 5 min + 1 s later it runs again; success clears the cool-down
    clock.now = t0 + timedelta(seconds=301)
    fake_openai.script(Reply(text=GOOD))
    ran = engine.compaction_soft(session_id=session.pk)
    assert Summary.objects.filter(session=session).count() == 1
    assert ran.outcome in ("compacted", "noop")
    assert len(fake_openai.requests) == 2
    state.refresh_from_db()
    assert (state.cooldown_until, state.backoff_until, state.backoff_step) == (None, None, 0)
    assert engine.compaction_blocked_until(session.pk, hard=False) is None


def _summariser_bug(*args, **kwargs):
    raise RuntimeError("summariser bug")


def test_a_summariser_raising_any_error_is_a_failure_on_record_with_its_cooldown(
    session, fake_openai, clock, monkeypatch
):
    """Not only the gateway's ModelUnavailable: whatever the summariser raises is a failed
    attempt, with its event and the soft cool-down (issue 17, item 3)."""
    _soft_ready(session)
    t0 = clock.now
    monkeypatch.setattr(passes.gateway, "complete", _summariser_bug)
    failed = engine.compaction_soft(session_id=session.pk)
    assert (failed.outcome, failed.reason) == ("failed", "summariser_error")
    [event] = CompactionEvent.objects.filter(session=session)
    assert (event.trigger, event.outcome, event.reason, event.error, event.summary) == (
        "soft",
        "failed",
        "summariser_error",
        "summariser bug",
        None,
    )
    assert event.snapshot is not None  # the transcript it was given is kept, as on any failure
    state = CompactionState.objects.get(session=session)
    assert state.cooldown_until == t0 + timedelta(seconds=300)
    assert (state.backoff_until, state.backoff_step) == (None, 0)
    assert compacted_seqs(session) == []
    assert not Summary.objects.filter(session=session).exists()


def test_a_summariser_raising_any_error_arms_the_hard_backoff(
    session, small_bot, fake_openai, clock, monkeypatch
):
    small_bot.compaction_fallback_extractive = False
    small_bot.save()
    reply = _hard_ready(session)
    monkeypatch.setattr(passes.gateway, "complete", _summariser_bug)
    context_build(session=session, reply=reply)
    state = CompactionState.objects.get(session=session)
    assert (state.backoff_until - clock.now, state.backoff_step) == (timedelta(seconds=30), 1)
    assert list(
        CompactionEvent.objects.filter(session=session).values_list("trigger", "outcome", "reason")
    ) == [("hard", "failed", "summariser_error")]


def test_a_crash_after_the_summariser_rolls_back_and_is_on_record(
    session, fake_openai, clock, monkeypatch
):
    """A bug between the summariser's answer and the commit (here: the claim of the messages)
    leaves nothing half-done, an ``internal_error`` event, and the cool-down."""
    _soft_ready(session)
    t0 = clock.now
    fake_openai.script(Reply(text=GOOD))

    def crash(**kwargs):
        raise RuntimeError("crash inside the pass commit")

    monkeypatch.setattr(compaction_coverage, "coverage_insert", crash)
    failed = engine.compaction_soft(session_id=session.pk)
    assert (failed.outcome, failed.reason) == ("failed", "internal_error")
    [event] = CompactionEvent.objects.filter(session=session)
    assert (event.trigger, event.outcome, event.reason, event.error, event.summary) == (
        "soft",
        "failed",
        "internal_error",
        "crash inside the pass commit",
        None,
    )
    assert (event.tokens_before, event.tokens_after) == (1050, 1050)
    assert not Summary.objects.filter(session=session).exists()
    assert compacted_seqs(session) == []
    assert counters(session) == recount(session)
    assert CompactionState.objects.get(session=session).cooldown_until == t0 + timedelta(
        seconds=300
    )


def test_manual_bypasses_the_cooldown_and_its_success_clears_it(
    session, fake_openai, clock, owner_client
):
    _soft_ready(session)
    fake_openai.script(Reply(status=500))
    engine.compaction_soft(session_id=session.pk)
    assert engine.compaction_blocked_until(session.pk, hard=False) == clock.now + timedelta(
        seconds=300
    )
    report = owner_client.get(f"/api/v1/sessions/{session.pk}/context/").json()
    expected = (clock.now + timedelta(seconds=300)).isoformat().replace("+00:00", "Z")
    assert report["compaction"]["cooldown_until"] == expected

    fake_openai.script(Reply(text=GOOD))
    result = engine.compaction_manual(session=session)
    assert result.outcome == "compacted"
    assert len(fake_openai.requests) == 2
    state = CompactionState.objects.get(session=session)
    assert (state.cooldown_until, state.backoff_until, state.backoff_step) == (None, None, 0)
    report = owner_client.get(f"/api/v1/sessions/{session.pk}/context/").json()
    assert report["compaction"]["cooldown_until"] is None


def _hard_ready(session, *, real: bool = False):
    if real:
        add_history(session, [180] * 12, real=True)
        new, reply = add_turn(session, "Please list the remaining items.")
    else:
        add_history(session, [300, 300, 300, 300])
        new, reply = add_turn(session, "the new question", tokens=300)
    recount(session)
    return reply


def test_hard_failures_back_off_30_60_120_240_270_270(session, small_bot, fake_openai, clock):
    small_bot.compaction_fallback_extractive = False
    small_bot.save()
    reply = _hard_ready(session)
    for attempt, seconds in enumerate([30, 60, 120, 240, 270, 270], start=1):
        fake_openai.script(Reply(status=500))
        context_build(session=session, reply=reply)
        assert len(summariser_requests(fake_openai)) == attempt
        state = CompactionState.objects.get(session=session)
        assert state.backoff_until - clock.now == timedelta(seconds=seconds)
        assert state.backoff_step == attempt
        assert state.cooldown_until - clock.now == timedelta(seconds=300)
        clock.advance(301)  # past the back-off and the cool-down alike
    assert not Summary.objects.filter(session=session).exists()
    assert compacted_seqs(session) == []


def test_hard_retry_waits_for_the_backoff_not_the_cooldown(session, small_bot, fake_openai, clock):
    """docs/compaction.md: under hard pressure retries back off 30 s, 60 s, … (the 5-minute
    cool-down governs soft compaction). So 30 s + 1 s after a hard failure the summariser is tried
    again."""
    small_bot.compaction_fallback_extractive = False
    small_bot.save()
    reply = _hard_ready(session)
    t0 = clock.now
    fake_openai.script(Reply(status=500))
    context_build(session=session, reply=reply)
    assert len(summariser_requests(fake_openai)) == 1

    # inside the back-off: no summariser call, admission trims (nothing over B)
    clock.now = t0 + timedelta(seconds=29)
    built = context_build(session=session, reply=reply)
    assert len(summariser_requests(fake_openai)) == 1
    assert built.admission.selected_tokens <= BUDGET
    last = CompactionEvent.objects.filter(session=session).order_by("-id").first()
    assert (last.trigger, last.outcome, last.reason) == ("hard", "skipped", "backoff")

    # after the back-off: retried, and a success clears the whole failure state
    clock.now = t0 + timedelta(seconds=31)
    fake_openai.script(Reply(text=GOOD))
    context_build(session=session, reply=reply)
    assert len(summariser_requests(fake_openai)) == 2
    assert Summary.objects.filter(session=session, trigger="hard").count() == 1
    state = CompactionState.objects.get(session=session)
    assert (state.cooldown_until, state.backoff_until, state.backoff_step) == (None, None, 0)


def test_hard_pressure_in_a_soft_failures_cool_down_goes_to_the_fallback(
    session, fake_openai, clock
):
    """docs/compaction.md: under hard pressure, in cool-down or backing off, builtin/extractive.
    A soft pass failed 10 s ago (cool-down, no back-off): the hard path asked the summariser
    that had just failed (with its retries, seconds on the turn) before the fallback."""
    reply = _hard_ready(session, real=True)
    policy.arm_failure(session.pk, hard=False)
    clock.advance(10)
    fake_openai.script(Reply(text=GOOD))  # never asked

    context_build(session=session, reply=reply)

    assert summariser_requests(fake_openai) == []
    last = CompactionEvent.objects.filter(session=session).order_by("-id").first()
    assert (last.trigger, last.outcome, last.model) == (
        "fallback",
        "compacted",
        "builtin/extractive",
    )
    # Past the cool-down the summariser is asked again.
    clock.advance(300)
    assert policy.compaction_blocked_until(session.pk, hard=True) is None


def test_fallback_extractive_when_the_summariser_fails_under_hard_pressure(
    session, fake_openai, clock
):
    reply = _hard_ready(session, real=True)
    before_rows = message_rows(session)
    fake_openai.script(Reply(status=500), Reply(text="Here is what remains."))

    turn_run(message_id=reply.pk)

    assert len(summariser_requests(fake_openai)) == 1
    events = list(
        CompactionEvent.objects.filter(session=session)
        .order_by("id")
        .values_list("trigger", "outcome", "reason", "model")
    )
    assert events == [
        ("hard", "failed", "summariser_error", MODEL),
        ("fallback", "compacted", "", "builtin/extractive"),
    ]
    summary = Summary.objects.get(session=session)
    assert (summary.model, summary.trigger, summary.level, summary.first_seq) == (
        "builtin/extractive",
        "fallback",
        1,
        1,
    )
    covered = messages_covered(session).filter(compacted_by_id=summary.pk)
    assert list(covered.values_list("seq", flat=True)) == list(range(1, summary.last_seq + 1))
    assert summary.source_tokens == sum(covered.values_list("token_count", flat=True))
    assert count_tokens(summary.text, model="builtin/extractive") < summary.source_tokens
    # nothing lost: every message is still stored word for word
    rows = {r[0]: r[3] for r in message_rows(session)}
    assert all(rows[r[0]] == r[3] for r in before_rows if r[0] != reply.seq)
    assert counters(session) == recount(session)
    [chat] = chat_requests(fake_openai)
    assert sent_tokens(chat) <= BUDGET
    assert chat["messages"][0] == {"role": "system", "content": summary.block}

    # later, still backing off and under hard pressure again: extractive straight away
    add_history(session, [180] * 4, real=True, tag="more")
    new, reply2 = add_turn(session, "And the rest?")
    recount(session)
    assert context_measure(session=session, new_message=new, before_seq=reply2.seq).pressure >= 1500
    clock.advance(10)
    context_build(session=session, reply=reply2)
    assert len(summariser_requests(fake_openai)) == 1  # the failing LLM was not asked again
    last = CompactionEvent.objects.filter(session=session).order_by("-id").first()
    assert (last.trigger, last.outcome, last.model) == (
        "fallback",
        "compacted",
        "builtin/extractive",
    )


def test_no_fallback_means_admission_trims(session, small_bot, fake_openai):
    small_bot.compaction_fallback_extractive = False
    small_bot.save()
    reply = _hard_ready(session, real=True)
    fake_openai.script(Reply(status=500), Reply(text="Here is what remains."))

    turn_run(message_id=reply.pk)

    assert not Summary.objects.filter(session=session).exists()
    assert list(
        CompactionEvent.objects.filter(session=session).values_list("trigger", "outcome")
    ) == [("hard", "failed")]
    [chat] = chat_requests(fake_openai)
    assert sent_tokens(chat) == 11 * 180 + tok("Please list the remaining items.") == 1990
    reply.refresh_from_db()
    assert reply.status == "complete"


# --- 5. frontier fusion -----------------------------------------------------------------------


def _two_active_summaries(session, fake_openai):
    """A covers 1–4 (600 source tokens), B covers 5–10 (1000); each summary ~265 tokens."""
    add_history(session, [150, 150, 150, 150, 200, 200])
    recount(session)
    fake_openai.script(Reply(text=summary_text(250)))
    first = engine.compaction_manual(session=session)
    add_history(session, [150, 150, 150, 150, 200, 200], tag="n")
    recount(session)
    fake_openai.script(Reply(text=summary_text(250)))
    second = engine.compaction_manual(session=session)
    a, b = first.summary, second.summary
    assert [(a.first_seq, a.last_seq), (b.first_seq, b.last_seq)] == [(1, 4), (5, 10)]
    assert a.token_count + b.token_count > BUDGET * 20 // 100
    add_history(session, [100, 100], tag="late")  # seqs 13, 14: pressure back above S
    recount(session)
    assert context_measure(session=session).pressure == a.token_count + b.token_count + 600
    return a, b


def test_fusion_of_active_summaries_above_20_percent_of_budget(session, fake_openai, monkeypatch):
    # Snapshots come back in while they fit the fusion's input share (here a generous one).
    monkeypatch.setattr(fusion, "FUSION_INPUT_PERCENT", 400)
    a, b = _two_active_summaries(session, fake_openai)
    fused_text = summary_text(80)
    fake_openai.script(Reply(text=fused_text))
    requests_before = len(fake_openai.requests)

    engine.compaction_soft(session_id=session.pk)

    [request] = fake_openai.requests[requests_before:]
    prompt = transcript_of(request)
    [first, fifth] = dated(session, "[1] user: m message 0", "[5] user: m message 4")
    assert prompt.startswith(f"{a.block}\n[Raw messages 1–4]\n{first}")
    assert f"{b.block}\n[Raw messages 5–10]\n{fifth}" in prompt
    fused = Summary.objects.get(session=session, status="active")
    assert (fused.level, fused.first_seq, fused.last_seq, fused.trigger, fused.text) == (
        2,
        1,
        10,
        "fusion",
        fused_text,
    )
    assert fused.source_tokens == 1600
    assert set(fused.parents.all()) == {a, b}
    for parent in (a, b):
        parent.refresh_from_db()
        assert parent.status == "superseded"
        assert parent.superseded_at is not None
    assert compacted_seqs(session) == list(range(1, 11))
    assert set(
        messages_covered(session).filter(seq__lte=10).values_list("compacted_by_id", flat=True)
    ) == {fused.pk}
    assert counters(session) == (600, 4) == recount(session)
    event = CompactionEvent.objects.get(session=session, trigger="fusion")
    assert (event.outcome, event.summary, event.source_tokens) == (
        "compacted",
        fused,
        a.token_count + b.token_count,
    )
    measure = context_measure(session=session)
    assert [s.id for s in measure.summaries] == [fused.pk]
    assert measure.pressure == fused.token_count + 600


def test_fusion_does_not_re_read_history_it_already_compacted(session, fake_openai):
    """At the default share (125 % of the summaries fused) the raw snapshots of these two
    summaries (600 and 1,000 tokens against 2 x ~265) do not fit: the summariser reads the
    summaries and the instructions, nothing else (the compaction economy goal, issue 10)."""
    a, b = _two_active_summaries(session, fake_openai)
    fake_openai.script(Reply(text=summary_text(80)))
    requests_before = len(fake_openai.requests)

    engine.compaction_soft(session_id=session.pk)

    [request] = fake_openai.requests[requests_before:]
    assert transcript_of(request) == f"{a.block}\n{b.block}"
    assert Summary.objects.get(session=session, status="active").level == 2


def test_fusion_is_atomic(session, fake_openai, monkeypatch):
    a, b = _two_active_summaries(session, fake_openai)
    fake_openai.script(Reply(text=summary_text(80)))

    def crash(**kwargs):
        raise RuntimeError("crash inside the fusion commit")

    monkeypatch.setattr(engine.memory_services, "snapshot_mark_indexed", crash)
    # The engine's envelope (issue 17, item 3): the crash rolls the fusion back and ends as a
    # failed attempt on record with its cool-down, instead of escaping the engine unrecorded.
    result = engine.compaction_soft(session_id=session.pk)
    assert (result.outcome, result.reason) == ("failed", "internal_error")

    assert set(Summary.objects.filter(session=session).values_list("pk", "status", "level")) == {
        (a.pk, "active", 1),
        (b.pk, "active", 1),
    }
    assert set(
        messages_covered(session).filter(seq__lte=4).values_list("compacted_by_id", flat=True)
    ) == {a.pk}
    assert set(
        messages_covered(session)
        .filter(seq__gte=5, seq__lte=10)
        .values_list("compacted_by_id", flat=True)
    ) == {b.pk}
    event = CompactionEvent.objects.get(session=session, trigger="fusion")
    assert (event.outcome, event.reason, event.error, event.summary) == (
        "failed",
        "internal_error",
        "crash inside the fusion commit",
        None,
    )
    assert engine.compaction_blocked_until(session.pk, hard=False) is not None


# --- 7. summaries reach the model as labelled system blocks -----------------------------------


def test_summaries_are_system_blocks_after_the_system_prompt(session, small_bot, fake_openai):
    small_bot.system_prompt = "You are terse."
    small_bot.save()
    add_history(session, [100, 100, 100, 100, 100, 100])
    recount(session)
    fake_openai.script(Reply(text=GOOD))
    engine.compaction_manual(session=session)
    new, reply = add_turn(session, "And the date?")
    recount(session)
    fake_openai.script(Reply(text="2024-05-01."))

    turn_run(message_id=reply.pk)

    [chat] = chat_requests(fake_openai)
    assert chat["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "system", "content": f"[Summary of messages 1–4]\n{GOOD}"},
        {"role": "user", "content": "m message 4"},
        {"role": "assistant", "content": "m message 5"},
        {"role": "user", "content": "And the date?"},
    ]
    assert not any("[Summary of" in m["content"] for m in chat["messages"] if m["role"] != "system")


def test_the_soft_task_sends_the_meter_after_it_compacted(
    session, fake_openai, monkeypatch, eager_tasks
):
    from chat_platform import realtime
    from compaction.tasks import compact_soft as soft_task

    sent = []
    monkeypatch.setattr(realtime, "send_frame", lambda session_id, frame: sent.append(frame))
    add_history(session, [1600] * 6)
    add_turn(session, "latest", tokens=10)
    recount(session)
    fake_openai.default = Reply(text=GOOD)

    soft_task(session.pk)  # the task body, in-process

    updates = [f["context"] for f in sent if f["type"] == "context.updated"]
    assert len(updates) == 1
    assert updates[0]["parts"]["summaries"] == sum(
        Summary.objects.filter(session=session, status="active").values_list(
            "token_count", flat=True
        )
    )
