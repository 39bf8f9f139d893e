"""An import is written in steps, each its own short transaction, never as one transaction the
length of the file (docs/transfer.md, "Written in steps"): in embedded mode SQLite has one write
lock, and a 39 MB file held it for minutes while every other user's send failed. A file that
fails anywhere still leaves nothing behind: what its earlier steps wrote is deleted."""

import io
import json
import threading

import pytest
from django.db import connection
from django.utils import timezone

from bots.models import ChatSession, Message
from tests.memory.test_message_search_sqlite import _sqlite
from tests.transfer.test_import_export import (
    _good_lossless,
    _stored_counts,
    imported,
)
from tests.transfer.test_import_jobs import _conversations as conversations_file
from transfer.models import ImportJob, ImportJobSession
from transfer.services import chats_import, jobs

pytestmark = pytest.mark.django_db(transaction=True)


def _seen_elsewhere(count):
    """What ``count()`` answers on another connection: only what has been committed."""
    seen = []

    def look():
        try:
            seen.append(count())
        finally:
            connection.close()

    thread = threading.Thread(target=look)
    thread.start()
    thread.join()
    return seen[0]


def _conversations(count: int) -> list[dict]:
    return json.loads(conversations_file(count))


def _lossless(bot_id: int, messages: int) -> dict:
    data = _good_lossless(bot_id)
    data["messages"] = [
        {
            "seq": seq,
            "role": "user" if seq % 2 else "assistant",
            "content": f"message {seq}",
            "created_at": "2024-03-08T13:56:00Z",
        }
        for seq in range(1, messages + 1)
    ]
    return data


def test_each_chatgpt_conversation_is_committed_before_the_next_is_read(owner, bot, monkeypatch):
    from transfer.services import chatgpt_import as module

    parse = module.conversation_parse
    committed = []

    def watched(value, where):
        committed.append(
            _seen_elsewhere(lambda: ChatSession.objects.filter(user=owner, branch_of=None).count())
        )
        return parse(value, where)

    monkeypatch.setattr(module, "conversation_parse", watched)
    raw = json.dumps(_conversations(3)).encode()
    result = chats_import(user=owner, bot_id=bot.pk, raw=io.BytesIO(raw), size=len(raw))
    assert len(result.imported) == 3
    # Before: [0, 0, 0] (the whole file one transaction).
    assert committed == [0, 1, 2]


def test_a_long_chats_messages_are_committed_in_batches(owner, bot, monkeypatch):
    from transfer.services import lossless_import as module

    coverage = module._coverage_write
    committed = []

    def watched(session, covering):
        committed.append(
            _seen_elsewhere(lambda: Message.objects.filter(session__user=owner).count())
        )
        return coverage(session, covering)

    monkeypatch.setattr(module, "_coverage_write", watched)
    raw = json.dumps(_lossless(bot.pk, 1_200)).encode()
    result = chats_import(user=owner, bot_id=bot.pk, raw=io.BytesIO(raw), size=len(raw))
    assert result.imported[0]["messages"] == 1_200
    # The last step (the last 200 messages, the coverage, the digest) is still open; before:
    # [0].
    assert committed == [1_000]
    assert Message.objects.filter(session__user=owner).count() == 1_200


def test_a_long_chat_refused_at_its_last_message_leaves_nothing(owner, owner_client, bot):
    before = _stored_counts()
    data = _lossless(bot.pk, 1_200)
    data["messages"][-1]["role"] = "narrator"
    job = imported(owner_client, bot, json.dumps(data).encode())
    assert (job["status"], job["error"]["code"]) == ("failed", "validation_error")
    assert job["error"]["message"].startswith("messages[1199].role: must be one of")
    assert _stored_counts() == before
    assert ImportJobSession.objects.count() == 0


def test_a_late_bad_conversation_of_many_leaves_none_of_the_earlier_ones(owner, owner_client, bot):
    conversations = _conversations(5)
    conversations[4]["current_node"] = "nope"
    before = _stored_counts()
    job = imported(owner_client, bot, json.dumps(conversations).encode())
    assert job["error"]["message"] == "conversations[4].current_node: names no node of the mapping."
    assert _stored_counts() == before


def test_what_a_killed_child_had_committed_is_deleted_by_the_worker(
    owner, owner_client, bot, monkeypatch
):
    """The child is stopped by a limit after its first steps committed: the worker deletes the
    chats the job made (the child could not)."""
    from chat_platform import sandbox
    from transfer.services.common import ChatsMade

    def killed_after_two(**kwargs):
        job_id = kwargs["params"]["job_id"]
        job = ImportJob.objects.get(pk=job_id)
        # Two conversations written by the child's first steps, as the child does.
        made = ChatsMade(job_id=job_id)
        for title in ("one", "two"):
            made.session_new(user=job.user, bot=job.bot, title=title, created_at=None)
        raise sandbox.LimitExceeded("time", "over 4 s")

    monkeypatch.setattr(jobs.sandbox, "run_limited", killed_after_two)
    before = _stored_counts()
    job = imported(owner_client, bot, json.dumps(_conversations(2)).encode())
    assert job["error"]["code"] == "limit_exceeded"
    assert _stored_counts() == before
    assert ImportJobSession.objects.count() == 0


def test_a_done_jobs_chats_are_kept_and_unlinked(owner, owner_client, bot):
    job = imported(owner_client, bot, json.dumps(_conversations(2)).encode())
    assert job["status"] == "done"
    assert ChatSession.objects.filter(user=owner, branch_of=None).count() == 2
    assert ImportJobSession.objects.count() == 0


def test_an_embedded_import_lets_other_writers_in_between_its_steps(tmp_path_factory, tmp_path):
    """SQLite (embedded mode): another connection gets the write lock, within 50 ms, every
    time the import reports progress. Before: it never did (the file was one transaction)."""
    from tests.integration.processes import ROOT

    script = ROOT / "tests" / "transfer" / "import_lock_sqlite_script.py"
    out = _sqlite(tmp_path_factory, tmp_path, script=script)
    assert out == {"tries": 6, "locked": 0, "megabytes": 6, "messages": 3_000, "imported": 3_000}


def test_the_steps_let_go_of_the_lock_after_each_hold_on_a_paced_database(owner, bot, monkeypatch):
    """Paced (SQLite; here PostgreSQL stands in): once the steps have held the lock for
    ``PACE_HOLD_SECONDS``, the import sleeps ``PACE_GAP_SECONDS`` after the step. With a hold of
    0, after every step: one per conversation. Unpaced, never."""
    from transfer.services import common

    slept = []
    monkeypatch.setattr(common, "sleep", slept.append)
    monkeypatch.setattr(common, "PACE_HOLD_SECONDS", 0)
    raw = json.dumps(_conversations(3)).encode()
    chats_import(user=owner, bot_id=bot.pk, raw=io.BytesIO(raw), size=len(raw))
    assert slept == []

    monkeypatch.setattr(common, "PACED_VENDORS", frozenset({connection.vendor}))
    raw = json.dumps(_conversations(5)[3:]).encode()
    chats_import(user=owner, bot_id=bot.pk, raw=io.BytesIO(raw), size=len(raw))
    assert slept == [0.1, 0.1]


def _at_conversation(monkeypatch, index, act):
    """Run ``act()`` as the import reads conversation ``index`` (its earlier ones committed),
    the job's child running in this process."""
    from tests.transfer.test_import_jobs import _run_in_process
    from transfer.services import chatgpt_import as module

    parse = module.conversation_parse

    def watched(value, where):
        if where == f"conversations[{index}]":
            act()
        return parse(value, where)

    monkeypatch.setattr(module, "conversation_parse", watched)
    monkeypatch.setattr(jobs.sandbox, "run_limited", _run_in_process)


def test_a_running_imports_chats_are_listed_once_it_is_done(owner, owner_client, bot, monkeypatch):
    """Listed as they were written, a chat could be acted on (a send, an edit) and the work was
    lost with the import if the file then failed (audit). A chat still linked to its running job
    is not listed."""
    listed = []

    def look():
        listed.append(len(owner_client.get("/api/v1/sessions/").json()))

    _at_conversation(monkeypatch, 2, look)
    job = imported(owner_client, bot, json.dumps(_conversations(3)).encode())
    assert job["status"] == "done"
    # Before: [6] (the two conversations committed, and their branch chats, shown meanwhile).
    assert listed == [0]
    assert len(owner_client.get("/api/v1/sessions/").json()) == 3 * 3  # each has two branches
    assert ImportJobSession.objects.count() == 0


def test_a_failed_file_leaves_no_branch_chat_of_a_chat_deleted_meanwhile(
    owner, owner_client, bot, monkeypatch
):
    """The import's branch chats are its own (linked to the job): found through their chat
    (``branch_of``), they were left behind once that chat was deleted during the import."""
    from turns.services.session import chats_delete

    conversations = _conversations(3)
    conversations[2]["current_node"] = "nope"
    before = _stored_counts()

    def delete_the_first():
        first = ChatSession.objects.filter(user=owner, branch_of=None).order_by("pk").first()
        chats_delete(lambda: ChatSession.objects.filter(pk=first.pk))

    _at_conversation(monkeypatch, 2, delete_the_first)
    job = imported(owner_client, bot, json.dumps(conversations).encode())
    assert job["error"]["message"] == "conversations[2].current_node: names no node of the mapping."
    # Before: two branch chats with their messages and search rows were left.
    assert _stored_counts() == before
    assert ImportJobSession.objects.count() == 0


def test_a_users_imports_run_one_at_a_time(owner, owner_client, bot, monkeypatch):
    """The same file imported twice at once (audit): the second run skipped the conversations
    the first had committed as imported before, then the first failed and took them back; the
    second said done, and two of four conversations were gone. A job whose user has another
    import running is not taken: it is handed to the queue again a few seconds later."""
    from transfer.services import importing

    dispatched = []
    monkeypatch.setattr(
        jobs,
        "import_job_dispatch",
        lambda job_id, user_id=None, countdown=None: not dispatched.append((job_id, countdown)),
    )
    first = jobs.import_job_create(user=owner, bot_id=bot.pk, upload=io.BytesIO(b"[]"), size=2)
    second = jobs.import_job_create(user=owner, bot_id=bot.pk, upload=io.BytesIO(b"[]"), size=2)
    ImportJob.objects.filter(pk=first.pk).update(status="running", started_at=timezone.now())
    monkeypatch.setattr(importing, "chats_import", lambda **kw: pytest.fail("ran beside another"))
    dispatched.clear()

    assert jobs.import_job_run(job_id=second.pk) is None
    assert ImportJob.objects.get(pk=second.pk).status == "queued"
    assert dispatched == [(second.pk, jobs.WAIT_FOR_OTHER_SECONDS)]


def test_a_chat_an_import_still_writes_is_not_found_by_its_id(owner, owner_client, bot):
    """Opened by its id (a search hit finds its messages at once), a chat being imported took
    sends and edits that were lost with the import when the file failed (audit). Until its job
    ends it is not found: reads, sends and edits answer 404, as for a chat that is not there."""
    from transfer.services.common import ChatsMade

    job = jobs.import_job_create(user=owner, bot_id=bot.pk, upload=io.BytesIO(b"[]"), size=2)
    chat = ChatsMade(job_id=job.pk).session_new(user=owner, bot=bot, title="T", created_at=None)
    message = Message.objects.create(session=chat, seq=1, role="user", content="hi")
    paths = [
        ("get", f"/api/v1/sessions/{chat.pk}/"),
        ("get", f"/api/v1/sessions/{chat.pk}/messages/"),
        ("post", f"/api/v1/sessions/{chat.pk}/messages/"),
        ("post", f"/api/v1/messages/{message.pk}/edit/"),
    ]

    def answers():
        return [
            getattr(owner_client, verb)(path, {"content": "mine"}, format="json").status_code
            for verb, path in paths
        ]

    assert answers() == [404, 404, 404, 404]
    ImportJobSession.objects.filter(session=chat).delete()  # the job ended
    assert answers()[:2] == [200, 200]
