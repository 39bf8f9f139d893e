"""A chat turn through REST: fake provider via litellm, built-in model, failures, idempotency."""

import pytest

from bots.models import Message
from chat_platform.llm.tokens import count_message_tokens
from tests.fakeopenai import Reply

# Real commits: the turn is scheduled on commit and, with eager tasks, runs before the response.
pytestmark = pytest.mark.django_db(transaction=True)


def _send(client, session, django_capture_on_commit_callbacks, **body):
    return client.post(f"/api/v1/sessions/{session.pk}/messages/", body, format="json")


@pytest.mark.django_db(transaction=False)
def test_send_schedules_turn_on_commit_and_returns_202(
    owner_client, fake_session, fake_openai, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = owner_client.post(
            f"/api/v1/sessions/{fake_session.pk}/messages/", {"content": "hi"}, format="json"
        )
    assert response.status_code == 202
    body = response.json()
    assert (body["user_message"]["seq"], body["user_message"]["status"]) == (1, "complete")
    assert body["user_message"]["token_count"] == count_message_tokens(
        "hi", model="openai/fake-model"
    )
    assert (body["assistant_message"]["seq"], body["assistant_message"]["status"]) == (2, "pending")
    # the exchange's message.created frames (not waited for), then the turn's hand-over: nothing
    # runs before commit
    assert [(c.func.__name__, c.keywords) for c in callbacks] == [
        ("notify_exchange_created", {"wait": False}),
        ("_dispatch_turn", {}),
    ]
    assert [m.seq for m in callbacks[0].args[0]] == [1, 2]
    assert fake_openai.requests == []


def test_full_turn_with_fake_provider(
    owner_client, fake_session, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    fake_openai.script(Reply(text="Hello there, friend.", chunks=["Hel", "lo there", ", friend."]))
    response = _send(
        owner_client, fake_session, django_capture_on_commit_callbacks, content="hi", wait=True
    )
    assert response.status_code == 201
    reply = response.json()["assistant_message"]
    assert (reply["content"], reply["status"]) == ("Hello there, friend.", "complete")
    assert reply["token_count"] == count_message_tokens(
        "Hello there, friend.", model="openai/fake-model"
    )
    assert fake_openai.requests[0]["messages"] == [
        {"role": "system", "content": "You are a test bot."},
        {"role": "user", "content": "hi"},
    ]
    assert fake_openai.requests[0]["stream"] is True
    stored = Message.objects.get(pk=reply["id"])
    assert (stored.finish_reason, stored.model) == ("stop", "openai/fake-model")

    # the next turn carries the history
    fake_openai.script(Reply(text="Again."))
    _send(owner_client, fake_session, django_capture_on_commit_callbacks, content="more", wait=True)
    assert fake_openai.requests[1]["messages"][1:] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello there, friend."},
        {"role": "user", "content": "more"},
    ]


def test_full_turn_with_builtin_recall(
    owner_client, chat_session, eager_tasks, django_capture_on_commit_callbacks
):
    _send(
        owner_client,
        chat_session,
        django_capture_on_commit_callbacks,
        content="My locker code is 4417 and the locker is in building C.",
        wait=True,
    )
    response = _send(
        owner_client,
        chat_session,
        django_capture_on_commit_callbacks,
        content="What is my locker code?",
        wait=True,
    )
    assert response.status_code == 201
    reply = response.json()["assistant_message"]
    assert reply["status"] == "complete"
    assert "4417" in reply["content"]
    stored = Message.objects.get(pk=reply["id"])
    assert stored.finish_reason == "stop"
    assert stored.prompt_tokens > 0 and stored.completion_tokens > 0


def test_provider_500_fails_the_reply_and_keeps_the_user_message(
    owner_client,
    fake_session,
    fake_openai,
    eager_tasks,
    django_capture_on_commit_callbacks,
    settings,
):
    fake_openai.script(*[Reply(status=500)] * 10)
    response = _send(
        owner_client, fake_session, django_capture_on_commit_callbacks, content="hello?", wait=True
    )
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "model_unavailable"
    assert error["details"]["user_message"]["content"] == "hello?"
    # one attempt plus the bounded retries, then give up
    assert len(fake_openai.requests) == 1 + settings.LLM_MAX_RETRIES
    user_message, reply = Message.objects.filter(session=fake_session).order_by("seq")
    assert (user_message.content, user_message.status) == ("hello?", "complete")
    assert (reply.status, reply.error_code) == ("failed", "model_unavailable")


def test_provider_500_without_wait_is_202_then_failed(
    owner_client, fake_session, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    fake_openai.script(*[Reply(status=500)] * 10)
    response = _send(owner_client, fake_session, django_capture_on_commit_callbacks, content="x")
    assert response.status_code == 202
    reply = Message.objects.get(pk=response.json()["assistant_message"]["id"])
    assert (reply.status, reply.error_code) == ("failed", "model_unavailable")


def test_duplicate_client_id_yields_the_first_result(
    owner_client, fake_session, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    fake_openai.script(Reply(text="Only once."))
    first = _send(
        owner_client,
        fake_session,
        django_capture_on_commit_callbacks,
        content="hi",
        client_id="c-1",
        wait=True,
    )
    second = _send(
        owner_client,
        fake_session,
        django_capture_on_commit_callbacks,
        content="hi",
        client_id="c-1",
        wait=True,
    )
    assert first.status_code == second.status_code == 201
    assert first.json() == second.json()
    assert Message.objects.filter(session=fake_session).count() == 2
    assert len(fake_openai.requests) == 1
    # seqs stay gap-free after the refused duplicate
    third = _send(owner_client, fake_session, django_capture_on_commit_callbacks, content="next")
    assert third.json()["user_message"]["seq"] == 3


@pytest.mark.parametrize(
    ("content", "status", "code"),
    [
        ("", 400, "validation_error"),
        ("   \n ", 400, "validation_error"),
        (None, 400, "validation_error"),
        (42, 400, "validation_error"),
        ("x" * (1024 * 1024 + 1), 413, "payload_too_large"),
        ("é" * (512 * 1024 + 1), 413, "payload_too_large"),
    ],
)
def test_bad_content_is_refused_and_nothing_is_written(
    owner_client,
    fake_session,
    fake_openai,
    django_capture_on_commit_callbacks,
    content,
    status,
    code,
):
    response = _send(
        owner_client, fake_session, django_capture_on_commit_callbacks, content=content
    )
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert Message.objects.count() == 0
    assert fake_openai.requests == []


def test_exactly_one_megabyte_is_accepted(
    owner_client, chat_session, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        response = owner_client.post(
            f"/api/v1/sessions/{chat_session.pk}/messages/",
            {"content": "x" * (1024 * 1024)},
            format="json",
        )
    assert response.status_code == 202


def test_missing_content_field(owner_client, chat_session):
    response = owner_client.post(f"/api/v1/sessions/{chat_session.pk}/messages/", {}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert "content" in response.json()["error"]["details"]


def test_malformed_json_body(owner_client, chat_session):
    response = owner_client.post(
        f"/api/v1/sessions/{chat_session.pk}/messages/",
        data="{not json",
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert Message.objects.count() == 0


@pytest.mark.django_db(transaction=False)  # the send's transaction is a savepoint of the test's
@pytest.mark.parametrize(
    ("client_id", "statements"),
    [
        # a chat's first send: the session; the user's daily token limit (connections.usage,
        # one read); the exchange's seqs and totals in one UPDATE … RETURNING; the two rows in
        # one INSERT (the question's in a CTE, bots.fast_paths.exchange_insert; two INSERTs
        # before); pins and summaries (one UNION ALL) for the fixed-part check (not the memory
        # index). From the second send on, the chat's last question too (a Retry sends it
        # again: turns/services/retry.py; the test below)
        (
            None,
            [
                "SELECT",
                "SELECT",
                "SAVEPOINT",
                "UPDATE",
                "WITH",
                "(SELECT",
                "RELEASE",
            ],
        ),
        # with a client_id: a savepoint to recover from a concurrent duplicate, and the lookup
        (
            "c-1",
            [
                "SELECT",
                "SELECT",
                "SAVEPOINT",
                "SAVEPOINT",
                "UPDATE",
                "SELECT",
                "WITH",
                "RELEASE",
                "(SELECT",
                "RELEASE",
            ],
        ),
    ],
)
def test_a_send_costs_a_fixed_set_of_statements(
    owner, fake_session, django_capture_on_commit_callbacks, client_id, statements
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from turns.services.send import session_message_send

    with (
        django_capture_on_commit_callbacks(execute=False),
        CaptureQueriesContext(connection) as queries,
    ):
        result = session_message_send(
            user=owner, session_id=fake_session.pk, content="hi", client_id=client_id
        )
    assert [q["sql"].split()[0] for q in queries.captured_queries] == statements
    fake_session.refresh_from_db()
    tokens = count_message_tokens("hi", model="openai/fake-model")
    assert (fake_session.last_seq, fake_session.context_tokens, fake_session.context_messages) == (
        2,
        tokens,
        1,
    )
    assert (result.user_message.seq, result.assistant_message.seq) == (1, 2)


# turns/services/retry.py's read of the chat's last question (its id, kind and text)
LAST_QUESTION_READ = (
    'SELECT "bots_message"."id" AS "pk", "bots_message"."kind" AS "kind", '
    '"bots_message"."content" AS "content" FROM "bots_message"'
)


@pytest.mark.django_db(transaction=False)
def test_a_chats_second_send_reads_its_last_question_and_its_first_does_not(
    owner, fake_session, django_capture_on_commit_callbacks
):
    # A send whose text is the chat's last question while its reply failed is a Retry
    # (turns/services/retry.py): that takes a read of the last question, which a chat with no
    # message yet does not have.
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from turns.services.send import session_message_send

    reads = []
    for text in ("hi", "hi again"):
        with (
            django_capture_on_commit_callbacks(execute=False),
            CaptureQueriesContext(connection) as queries,
        ):
            session_message_send(user=owner, session_id=fake_session.pk, content=text)
        reads.append(sum(LAST_QUESTION_READ in q["sql"] for q in queries))
        fake_session.refresh_from_db()
    assert reads == [0, 1]


def test_the_send_loads_the_model_map_before_its_transaction(
    owner_client, fake_session, monkeypatch, django_capture_on_commit_callbacks
):
    # litellm's first import costs seconds: the send's fit check must not pay it while the
    # transaction holds the new message's locks. Every lookup goes through lazy_litellm.get().
    from django.db import connection

    from chat_platform.llm.gateway import lazy_litellm, model_info

    real_get = lazy_litellm.get
    in_transaction = []

    def recording_get():
        in_transaction.append(connection.in_atomic_block)
        return real_get()

    monkeypatch.setattr(lazy_litellm, "get", recording_get)
    # The process's answers for the model's window (a model litellm does not know is cached
    # too): as in a process that has not looked it up yet.
    monkeypatch.setattr(model_info, "_max_input_cache", {})
    for expected in ([False, True], [False]):
        in_transaction.clear()
        with django_capture_on_commit_callbacks(execute=False):
            response = owner_client.post(
                f"/api/v1/sessions/{fake_session.pk}/messages/", {"content": "hi"}, format="json"
            )
        assert response.status_code == 202
        # first before the transaction (where an import would run), then the fit check inside
        # it; the next send's fit check has the window (none known) from the process's cache
        assert in_transaction == expected


@pytest.mark.django_db(transaction=False)
def test_the_send_s_seq_reservation_is_built_once_per_process(owner, fake_session, monkeypatch):
    """Django builds the send's ``UPDATE … RETURNING`` of the session's seqs and running totals
    once per process (chat_platform/dbwrite.py, ``CompiledStatement``), not on every send
    (docs/performance.md "A turn's CPU and latency, seventh pass (web)"); each reservation
    still moves only its own session, by its own counts."""
    from django.db.models.sql.compiler import SQLUpdateCompiler

    from bots.transitions import allocate_seqs
    from tests.factories import SessionFactory

    other = SessionFactory(user=owner, bot=fake_session.bot)
    allocate_seqs(session_id=other.pk, count=1)  # built here, if not yet
    allocate_seqs(session_id=other.pk, count=2, context_tokens=5, context_messages=1)
    builds = []
    real_as_sql = SQLUpdateCompiler.as_sql
    monkeypatch.setattr(
        SQLUpdateCompiler, "as_sql", lambda self: builds.append(1) or real_as_sql(self)
    )

    row = allocate_seqs(session_id=fake_session.pk, count=2, context_tokens=7, context_messages=1)
    plain = allocate_seqs(session_id=fake_session.pk, count=1)

    assert builds == []
    assert (row.pk, row.last_seq, row.context_tokens, row.context_messages) == (
        fake_session.pk,
        2,
        7,
        1,
    )
    assert (plain.last_seq, plain.context_tokens, plain.context_messages) == (3, 7, 1)
    other.refresh_from_db()
    assert (other.last_seq, other.context_tokens, other.context_messages) == (3, 5, 1)
    fake_session.refresh_from_db()
    assert fake_session.updated_at == plain.updated_at


@pytest.mark.django_db(transaction=False)
def test_the_outbox_stamp_is_built_once_per_process(owner, fake_session, monkeypatch):
    """A send's hand-over stamps its reply ``dispatched_at`` with a statement Django built once
    per process (``CompiledStatement``), not on every send; it stamps only that reply."""
    from django.db.models.sql.compiler import SQLUpdateCompiler

    from bots.transitions import reply_dispatched
    from turns.services.send import do_message_pair_create

    first = do_message_pair_create(session=fake_session, content="one", client_id=None)
    second = do_message_pair_create(session=fake_session, content="two", client_id=None)
    reply_dispatched(message_id=first.assistant_message.pk)  # built here, if not yet
    builds = []
    real_as_sql = SQLUpdateCompiler.as_sql
    monkeypatch.setattr(
        SQLUpdateCompiler, "as_sql", lambda self: builds.append(1) or real_as_sql(self)
    )

    reply_dispatched(message_id=second.assistant_message.pk)

    assert builds == []
    stamped = dict(
        Message.objects.filter(session=fake_session, role="assistant").values_list(
            "pk", "dispatched_at"
        )
    )
    assert stamped[second.assistant_message.pk] > stamped[first.assistant_message.pk]
    assert (
        Message.objects.filter(session=fake_session, role="user", dispatched_at=None).count() == 2
    )
