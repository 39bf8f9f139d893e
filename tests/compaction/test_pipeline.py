"""Budget-first admission in the one context pipeline (docs/compaction.md), through the database."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bots.models import Message
from bots.transitions import session_context_recount
from chat_platform.errors import ContextTooLarge
from chat_platform.llm.tokens import count_message_tokens
from compaction import pipeline
from compaction.pipeline import HISTORY_PAGE_SIZE, context_build, context_report
from compaction.pipeline import history as pipeline_history
from tests.factories import BotFactory, SessionFactory, message_add

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["whole", "walk"])
def history_read(request, monkeypatch):
    """Both ways history reaches admission: read whole with its text when the running totals say
    it fits, or walked in pages of counts (forced here) with text read for the admitted run."""
    if request.param == "walk":
        monkeypatch.setattr(pipeline_history, "fits_whole", lambda measure: False)
    return request.param


def _session_with(owner, *, budget: int, entries, system_prompt: str = "", compaction: bool = True):
    """entries: (tokens, pinned) oldest first; the last one is the new user message."""
    bot = BotFactory(
        owner=owner,
        system_prompt=system_prompt,
        context_window=budget + 1000,
        max_output_tokens=1000,
        compaction_enabled=compaction,
    )
    session = SessionFactory(user=owner, bot=bot)
    rows = []
    for i, (tokens, pinned) in enumerate(entries):
        role = "user" if i % 2 == 0 or i == len(entries) - 1 else "assistant"
        rows.append(
            message_add(session, role=role, content=f"m{i}", token_count=tokens, pinned=pinned)
        )
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=rows[-1]
    )
    session_context_recount(session_id=session.pk)
    session.refresh_from_db()
    return session, rows, reply


def _admission_events(caplog):
    return [
        r.msg
        for r in caplog.records
        if isinstance(r.msg, dict) and r.msg.get("event") == "context_admission"
    ]


def test_pinned_and_new_only_when_history_does_not_fit(history_read, owner, caplog):
    # REFERENCE: [1000, pinned 50, 1000, 100(new)] at budget 300 -> pinned + new only
    # compaction off: this is about admission alone (the stored counts are fictitious, so a
    # blocking compaction's summary of "m0" would pass as replacing 2,000 tokens)
    session, rows, reply = _session_with(
        owner,
        budget=300,
        entries=[(1000, False), (50, True), (1000, False), (100, False)],
        compaction=False,
    )
    built = context_build(session=session, reply=reply)
    assert built.messages == [
        {"role": "assistant", "content": "m1"},
        {"role": "user", "content": "m3"},
    ]
    admission = built.admission
    assert (admission.decision, admission.selected_tokens, admission.estimated_tokens) == (
        "trim",
        150,
        2150,
    )
    assert admission.dropped_messages == 2
    event = _admission_events(caplog)[-1]
    assert {k: v for k, v in event.items() if k not in ("level", "logger", "timestamp")} == {
        "event": "context_admission",
        "session_id": session.pk,
        "bot_id": session.bot_id,
        "budget_tokens": 300,
        "estimated_tokens": 2150,
        "selected_tokens": 150,
        "dropped_messages": 2,
        "decision": "trim",
        "path": "turn",
    }
    session.refresh_from_db()
    assert session.last_admission["selected_tokens"] == 150


def test_contiguous_newest_run_stops_at_first_misfit(history_read, owner):
    # REFERENCE: [10, 1000, 100(new)] at 200 -> the new one only (never skip over the misfit)
    # compaction off: this is about admission alone (see above)
    session, rows, reply = _session_with(
        owner, budget=200, entries=[(10, False), (1000, False), (100, False)], compaction=False
    )
    built = context_build(session=session, reply=reply)
    assert built.messages == [{"role": "user", "content": "m2"}]
    assert (built.admission.estimated_tokens, built.admission.dropped_messages) == (1110, 2)


def test_everything_fits_is_admit(history_read, owner):
    session, rows, reply = _session_with(
        owner,
        budget=1000,
        entries=[(100, False), (100, False), (100, False)],
        system_prompt="Be brief.",
    )
    built = context_build(session=session, reply=reply)
    system = count_message_tokens("Be brief.", model=session.bot.model)
    assert [m["content"] for m in built.messages] == ["Be brief.", "m0", "m1", "m2"]
    assert (built.admission.decision, built.admission.selected_tokens) == ("admit", 300 + system)


def test_fixed_part_over_budget_is_context_too_large(owner, caplog):
    # REFERENCE: pinned 80 + new 80 with budget 100 -> context_too_large
    session, rows, reply = _session_with(owner, budget=100, entries=[(80, True), (80, False)])
    with pytest.raises(ContextTooLarge) as excinfo:
        context_build(session=session, reply=reply)
    assert excinfo.value.details == {"budget_tokens": 100, "required_tokens": 160}
    rejected = [
        r.msg
        for r in caplog.records
        if isinstance(r.msg, dict) and r.msg.get("event") == "context_admission_rejected"
    ]
    assert len(rejected) == 1
    assert (rejected[0]["decision"], rejected[0]["selected_tokens"]) == ("reject", 0)


def test_never_starts_on_an_orphaned_tool_result(history_read, owner):
    bot = BotFactory(
        owner=owner, system_prompt="", context_window=1000 + 130, max_output_tokens=1000
    )
    session = SessionFactory(user=owner, bot=bot)
    message_add(session, role="user", content="old", token_count=10)
    message_add(
        session,
        role="assistant",
        content="",
        token_count=101,
        tool_calls=[
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    )
    message_add(
        session, role="tool", kind="tool", content="result", token_count=20, tool_call_id="call_1"
    )
    new = message_add(session, role="user", content="now", token_count=10)
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_recount(session_id=session.pk)
    session.refresh_from_db()
    built = context_build(session=session, reply=reply)
    # budget 130: new (10) + tool result (20) fit, the call (101) does not -> the result is dropped
    assert built.messages == [{"role": "user", "content": "now"}]


def test_20000_message_session_loads_text_only_for_admitted_rows(owner):
    bot = BotFactory(
        owner=owner,
        system_prompt="",
        context_window=2000 + 500,
        max_output_tokens=500,
        # compaction off: this is about admission alone (pressure is far above the hard mark)
        compaction_enabled=False,
    )
    session = SessionFactory(user=owner, bot=bot)
    Message.objects.bulk_create(
        Message(
            session=session,
            seq=seq,
            role="user" if seq % 2 else "assistant",
            content=f"message number {seq}",
            token_count=50,
        )
        for seq in range(1, 20_001)
    )
    new = Message.objects.create(
        session=session, seq=20_001, role="user", content="latest", token_count=50
    )
    reply = Message.objects.create(
        session=session, seq=20_002, role="assistant", status="pending", reply_to=new
    )
    session.last_seq = 20_002
    session.save(update_fields=["last_seq"])
    session_context_recount(session_id=session.pk)
    session.refresh_from_db()
    reply = Message.objects.select_related("session__bot", "reply_to").get(pk=reply.pk)

    with CaptureQueriesContext(connection) as queries:
        built = context_build(session=reply.session, reply=reply)

    # B = 2000: the new message (50) + the newest 39 history messages (1950)
    assert built.admission.admitted_history_ids == list(
        Message.objects.filter(session=session, seq__gte=19_962, seq__lte=20_000)
        .order_by("seq")
        .values_list("pk", flat=True)
    )
    assert [m["content"] for m in built.messages][-2:] == ["message number 20000", "latest"]
    assert built.admission.estimated_tokens == 20_001 * 50
    sqls = [q["sql"] for q in queries.captured_queries]
    # pinned ids and active summary counts (one UNION ALL), the memory index (newest readable
    # records, bounded by memory_index_size, no bodies), one page of history ids, the
    # last_admission update, the chosen texts (no summaries: rendering them costs no query)
    assert len(sqls) == 5
    assert sqls[0].startswith('(SELECT 0 AS "part"') and "UNION ALL" in sqls[0]
    [index_query] = [s for s in sqls if "memory_memoryrecord" in s]
    assert '"body"' not in index_query and "LIMIT 50" in index_query
    text_queries = [s for s in sqls if '"content"' in s]
    assert len(text_queries) == 1
    # the admitted run as a seq range (19,962 up to the reply), the new message by id
    assert '"bots_message"."seq" >= 19962' in text_queries[0]
    assert '"bots_message"."seq" < 20002' in text_queries[0]
    assert f'"bots_message"."id" IN ({new.pk})' in text_queries[0]
    assert [m["content"] for m in built.messages] == [
        *(f"message number {seq}" for seq in range(19_962, 20_001)),
        "latest",
    ]
    [history_query] = [s for s in sqls if f"LIMIT {HISTORY_PAGE_SIZE}" in s]
    assert '"bots_message"' in history_query
    assert '"content"' not in history_query


def test_context_report_exact_numbers(owner, owner_client, other_client):
    bot = BotFactory(
        owner=owner,
        system_prompt="You are a test bot.",
        context_window=10_000,
        max_output_tokens=1000,
    )
    session = SessionFactory(user=owner, bot=bot)
    message_add(session, role="user", content="hello there")
    message_add(session, role="assistant", content="general kenobi", pinned=True)
    session_context_recount(session_id=session.pk)
    system = count_message_tokens("You are a test bot.", model=bot.model)
    hello = count_message_tokens("hello there", model=bot.model)
    kenobi = count_message_tokens("general kenobi", model=bot.model)

    response = owner_client.get(f"/api/v1/sessions/{session.pk}/context/")
    assert response.status_code == 200
    assert response.json() == {
        "window": 10_000,
        "reserve": 1000,
        "budget": 9000,
        "soft": 4500,
        "hard": 6750,
        "target": 3600,
        "pressure": system + hello + kenobi,
        "parts": {
            "system": system,
            "pinned": kenobi,
            "summaries": 0,
            "memory_index": 0,
            "history": hello,
        },
        "last_admission": None,
        "compaction": {"enabled": True, "in_flight": False, "cooldown_until": None},
    }
    assert other_client.get(f"/api/v1/sessions/{session.pk}/context/").status_code == 404


def test_with_compaction_off_the_report_has_no_compaction_marks(owner, owner_client):
    bot = BotFactory(
        owner=owner, context_window=10_000, max_output_tokens=1000, compaction_enabled=False
    )
    session = SessionFactory(user=owner, bot=bot)
    report = owner_client.get(f"/api/v1/sessions/{session.pk}/context/").json()
    # No threshold acts: the meter draws no marks and never says compaction is due.
    assert (report["budget"], report["soft"], report["hard"], report["target"]) == (
        9000,
        None,
        None,
        None,
    )
    assert report["compaction"]["enabled"] is False


def test_window_comes_from_litellm_then_the_cap(owner, settings):
    known = SessionFactory(user=owner, bot=BotFactory(owner=owner, model="openai/gpt-4o"))
    unknown = SessionFactory(user=owner, bot=BotFactory(owner=owner, model="openai/fake-model"))
    report = context_report(session=known)
    assert (report["window"], report["budget"]) == (128_000, 128_000 - 1024)
    report = context_report(session=unknown)
    assert (report["window"], report["budget"]) == (200_000, 200_000 - 1024)
    settings.CONTEXT_ABSOLUTE_CAP_TOKENS = 50_000
    report = context_report(session=unknown)
    assert (report["window"], report["budget"]) == (50_000, 50_000 - 1024)


def test_multibyte_text_counted_by_the_one_function(
    owner_client, chat_session, django_capture_on_commit_callbacks
):
    text = "我们明天上午十点在会议室见面 🚀🎉 Café naïve"
    with django_capture_on_commit_callbacks(execute=False):
        response = owner_client.post(
            f"/api/v1/sessions/{chat_session.pk}/messages/", {"content": text}, format="json"
        )
    stored = response.json()["user_message"]["token_count"]
    assert stored == count_message_tokens(text, model="builtin/recall")
    # cl100k_base: 23 tokens + 4 per-message overhead (chars/2 would say 14, bytes/4 16)
    assert stored == 27
    report = owner_client.get(f"/api/v1/sessions/{chat_session.pk}/context/").json()
    assert report["parts"]["history"] == stored


def test_the_admitted_range_sends_only_what_admission_chose(history_read, owner):
    """The chosen text is read as a seq range: whatever else lies in it (a failed reply, a
    command and its notice, a pin counted with the fixed part) is not sent twice or at all."""
    bot = BotFactory(owner=owner, system_prompt="", compaction_enabled=False)
    session = SessionFactory(user=owner, bot=bot)
    message_add(session, role="user", content="first question")
    pin = message_add(session, role="assistant", content="pinned answer")
    Message.objects.filter(pk=pin.pk).update(pinned=True)
    message_add(session, role="assistant", content="broken", status="failed")
    message_add(session, role="user", content="/compact", kind="command")
    message_add(session, role="system", content="Compacted nothing.", kind="notice")
    message_add(session, role="user", content="second question")
    new = message_add(session, role="user", content="latest")
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_recount(session_id=session.pk)
    reply = Message.objects.select_related("session__bot", "reply_to").get(pk=reply.pk)

    built = context_build(session=reply.session, reply=reply)

    assert built.admission.admitted_from_seq == 1
    assert [(m["role"], m["content"]) for m in built.messages] == [
        ("user", "first question"),
        ("assistant", "pinned answer"),
        ("user", "second question"),
        ("user", "latest"),
    ]


def _fitting_session(owner, count: int):
    bot = BotFactory(owner=owner, system_prompt="Be brief.", compaction_enabled=False)
    session = SessionFactory(user=owner, bot=bot)
    for i in range(count):
        message_add(session, role="user" if i % 2 == 0 else "assistant", content=f"m{i}")
    new = message_add(session, role="user", content="latest")
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_recount(session_id=session.pk)
    return Message.objects.select_related("session__bot", "reply_to").get(pk=reply.pk)


def test_a_history_that_fits_is_read_with_its_text_in_one_query(owner, monkeypatch):
    """When the running totals say everything fits, admission takes every candidate: the
    counts and the text come in one query, and the call is the one the paged walk builds."""
    reply = _fitting_session(owner, 12)
    with CaptureQueriesContext(connection) as whole_queries:
        whole = context_build(session=reply.session, reply=reply, record=False)
    monkeypatch.setattr(pipeline_history, "fits_whole", lambda measure: False)
    with CaptureQueriesContext(connection) as walk_queries:
        walked = context_build(session=reply.session, reply=reply, record=False)

    assert [m["content"] for m in whole.messages] == [
        "Be brief.",
        *(f"m{i}" for i in range(12)),
        "latest",
    ]
    assert whole.messages == walked.messages
    assert whole.admission == walked.admission
    assert whole.admission.decision == "admit"
    assert whole.admission.admitted_from_seq == walked.admission.admitted_from_seq == 1
    # pins and summaries, the memory index, then the history: one query instead of two
    assert (len(whole_queries), len(walk_queries)) == (3, 4)
    history = [q["sql"] for q in whole_queries.captured_queries if '"content"' in q["sql"]]
    # One page of the in-context messages, newest first: a bounded read that follows the
    # session's in-context index however much compacted history lies behind it.
    assert len(history) == 1 and f"LIMIT {HISTORY_PAGE_SIZE}" in history[0]


def test_a_history_that_fits_but_outgrows_a_page_is_read_whole_in_pages(owner, monkeypatch):
    """Every in-context message is read, page after page: 13 rows (12 and the new message) in
    pages of 5 are three reads of the text, and the call is the one a single read builds."""
    reply = _fitting_session(owner, 12)
    one_read = context_build(session=reply.session, reply=reply, record=False)
    monkeypatch.setattr(pipeline_history, "HISTORY_PAGE_SIZE", 5)
    with CaptureQueriesContext(connection) as queries:
        paged = context_build(session=reply.session, reply=reply, record=False)

    assert paged.messages == one_read.messages
    assert [m["content"] for m in paged.messages][-3:] == ["m10", "m11", "latest"]
    assert paged.admission == one_read.admission
    history = [q["sql"] for q in queries.captured_queries if '"content"' in q["sql"]]
    assert len(history) == 3 and all("LIMIT 5" in sql for sql in history)


def test_a_recalled_exchange_after_the_new_message_is_read_by_id_in_seq_order(owner):
    """The recall exchange is stored after the new message (outside the history's seqs): it is
    read by id after the history's page, and sent after the new message, in seq order."""
    reply = _fitting_session(owner, 4)
    session = reply.session
    recalled = [
        message_add(session, role="assistant", kind="tool", content="", token_count=20),
        message_add(
            session,
            role="tool",
            kind="tool",
            tool_name="read_records",
            content="[not found: boat]",
            token_count=8,
        ),
    ]
    with CaptureQueriesContext(connection) as queries:
        built = context_build(session=session, reply=reply, recalled=recalled, record=False)

    contents = [m.get("content") for m in built.messages]
    assert contents[:6] == ["Be brief.", "m0", "m1", "m2", "m3", "latest"]
    assert contents[-1] == "[not found: boat]"
    assert len(built.messages) == 8
    history = [q["sql"] for q in queries.captured_queries if '"content"' in q["sql"]]
    assert len(history) == 2 and "LIMIT" in history[0] and "LIMIT" not in history[1]


def test_the_in_context_index_holds_exactly_the_messages_in_context():
    """The partial index a long compacted history is read through is the model's own condition,
    so a database can tell that the history's reads fall within it (docs/performance.md "A long
    compacted history")."""
    index = next(i for i in Message._meta.indexes if i.name == "message_in_context")
    assert [f.lstrip("-") for f in index.fields] == ["session", "seq"]
    assert index.condition == Message.in_context_q()


def test_totals_that_lag_behind_the_rows_still_trim_to_the_budget(owner):
    """The running totals are read before the rows: a history that grew past the budget
    meanwhile (here: totals set back by hand) is still admitted from the rows as read."""
    session, rows, reply = _session_with(
        owner, budget=300, entries=[(100, False), (100, False), (100, False), (50, False)]
    )
    # The totals claim 150 tokens in 2 messages; the rows hold 350 in 4.
    type(session).objects.filter(pk=session.pk).update(context_tokens=150, context_messages=2)
    session.refresh_from_db()
    assert pipeline_history.fits_whole(
        pipeline.context_measure(session=session, new_message=rows[-1])
    )

    built = context_build(session=session, reply=reply)

    assert [m["content"] for m in built.messages] == ["m1", "m2", "m3"]
    assert (built.admission.decision, built.admission.selected_tokens) == ("trim", 250)
    assert built.admission.admitted_history_ids == [rows[1].pk, rows[2].pk]
    # raised to what was read: 3 history candidates, 1 dropped
    assert (built.admission.estimated_tokens, built.admission.dropped_messages) == (350, 1)
