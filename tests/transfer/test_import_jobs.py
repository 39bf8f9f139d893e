"""Issue 30, Deliver 1 (imports): the POST stores the file and answers 202 with a job, parsing
nothing; the ``heavy`` task imports it in a limited child process exactly as the request did;
a limit reached, a bad file or a crash ends the job ``failed`` with its error and nothing
imported; the stored chunks go when the job ends; a job is its user's alone."""

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from bots.models import ChatSession, Message
from chat_platform import sandbox
from tests.transfer.test_import_export import (
    _good_lossless,
    _import,
    _stored_counts,
    chatgpt_conversation,
    run_job,
)
from transfer import progress
from transfer.models import ImportChunk, ImportJob
from transfer.services import jobs

pytestmark = pytest.mark.django_db(transaction=True)

MB = 1024 * 1024


def _parse_forbidden(monkeypatch):
    """Any parse or import in this (the web) process fails the test."""

    def forbidden(*args, **kwargs):
        raise AssertionError("parsed in the web process")

    for target in (
        "transfer.services.importing.top_level_kind",
        "transfer.services.importing.chats_import",
        "transfer.services.jobs.chats_import",
        "transfer.services.chatgpt_import.conversation_parse",
    ):
        monkeypatch.setattr(target, forbidden)


def _conversations(count: int, filler: str = "") -> bytes:
    out = []
    for c in range(count):
        conversation = chatgpt_conversation()
        conversation["conversation_id"] = f"conv-{c}"
        conversation["mapping"]["u1"]["message"]["content"]["parts"] = [f"Trip {c}. {filler}"]
        out.append(conversation)
    return json.dumps(out).encode()


def test_the_post_answers_202_with_a_job_and_parses_nothing(owner, owner_client, bot, monkeypatch):
    data = _conversations(12, filler="The ferry leaves at seven from pier nine. " * 5_000)
    assert 2 * MB < len(data) < 3 * MB
    before = _stored_counts()
    with monkeypatch.context() as patched:
        _parse_forbidden(patched)
        upload = SimpleUploadedFile("conversations.json", data)
        response = owner_client.post(
            "/api/v1/import/", {"file": upload, "bot": bot.pk, "progress": "p"}, format="multipart"
        )
        assert response.status_code == 202, response.content
        body = response.json()
        job = ImportJob.objects.get()
        assert body == {
            "id": job.pk,
            "status": "queued",
            "status_url": f"/api/v1/import/jobs/{job.pk}/",
            "file_name": "conversations.json",
            "bytes_total": len(data),
            "bytes_read": 0,
            "result": None,
            "error": None,
            "created_at": body["created_at"],
            "finished_at": None,
        }
        assert response["Location"] == body["status_url"]
        # Nothing imported yet: the file waits in the database, in 1 MB chunks.
        assert _stored_counts() == before
        chunks = list(ImportChunk.objects.filter(job=job).order_by("position"))
        assert [len(c.data) for c in chunks] == [MB, MB, len(data) - 2 * MB]
        assert b"".join(bytes(c.data) for c in chunks) == data
        assert owner_client.get(body["status_url"]).json()["status"] == "queued"
    # The worker's turn: what it reported on the way, and the job's end.
    written, in_status = [], []
    real_write = progress.progress_write

    def write(**values):
        written.append((values["phase"], values["bytes_read"]))
        real_write(**values)
        if values["phase"] == "reading":  # what the job's status says meanwhile
            in_status.append(owner_client.get(body["status_url"]).json()["bytes_read"])

    monkeypatch.setattr(progress, "progress_write", write)
    finished = run_job(owner_client, job.pk)
    assert written == [("reading", 0), ("reading", MB), ("reading", 2 * MB), ("done", len(data))]
    assert in_status == [0, MB, 2 * MB]
    assert (finished["status"], finished["bytes_read"], finished["error"]) == (
        "done",
        len(data),
        None,
    )
    assert [e["title"] for e in finished["result"]["imported"]] == ["Ferry plans"] * 12
    assert finished["finished_at"] is not None
    assert ChatSession.objects.filter(user=owner, branch_of=None).count() == 12
    assert ImportChunk.objects.count() == 0
    # safe to run twice: an ended job is nothing to do
    assert jobs.import_job_run(job_id=job.pk) is None
    assert ChatSession.objects.filter(user=owner, branch_of=None).count() == 12


def test_the_task_imports_exactly_what_the_request_did(owner, owner_client, bot, monkeypatch):
    dispatched = []
    monkeypatch.setattr(
        "transfer.services.jobs.compact_soft_dispatch", lambda sid: dispatched.append(sid)
    )
    response = _import(owner_client, bot, json.dumps(_good_lossless(bot.pk)).encode())
    job = run_job(owner_client, response.json()["id"])
    (entry,) = job["result"]["imported"]
    assert job["result"] == {
        "format": "lossless",
        "imported": [
            {
                "session": entry["session"],
                "title": "T",
                "messages": 2,
                "branches": 0,
                "unfinished_as_interrupted": 0,
            }
        ],
        "skipped": [],
    }
    session = ChatSession.objects.get(pk=entry["session"])
    assert (session.user, session.bot, session.last_seq) == (owner, bot, 2)
    assert list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "content", "status")
    ) == [(1, "user", "hi", "complete"), (2, "assistant", "yo", "complete")]
    assert dispatched == [session.pk]  # the soft compaction, after the child committed


def _failed_with_nothing_stored(owner_client, data: bytes, bot, before):
    response = _import(owner_client, bot, data)
    assert response.status_code == 202
    job = run_job(owner_client, response.json()["id"])
    assert (job["status"], job["result"]) == ("failed", None)
    assert _stored_counts() == before
    assert ImportChunk.objects.count() == 0
    return job["error"]


def test_a_file_past_the_time_limit_fails_with_the_limit_named_and_nothing_imported(
    owner_client, bot, settings
):
    settings.IMPORT_RUN_SECONDS = 4
    before = _stored_counts()
    # 3,000 conversations with their branches: well over 4 s of work.
    error = _failed_with_nothing_stored(owner_client, _conversations(3_000), bot, before)
    assert error["code"] == "limit_exceeded"
    assert error["details"] in ({"limit": "time"}, {"limit": "cpu"})
    assert error["message"] in (
        "The import stopped: over 4 s. Nothing was imported; split the file into smaller ones.",
        "The import stopped: over 5 s of CPU time. Nothing was imported; split the file into "
        "smaller ones.",
    )


def test_a_file_past_the_memory_limit_fails_with_the_limit_named_and_nothing_imported(
    owner_client, bot, settings
):
    settings.IMPORT_RUN_MEMORY_BYTES = 320 * MB
    before = _stored_counts()
    # One conversation is built whole: 400,000 nodes of ~60 bytes of JSON each take several
    # hundred MB as Python objects, past the limit (the child's own start takes ~180 MB).
    nodes = ",".join(
        f'"n{i}":{{"parent":{json.dumps(f"n{i - 1}" if i else None)},"children":["n{i + 1}"],'
        f'"x":{i}}}'
        for i in range(400_000)
    )
    data = ('[{"title":"Big","mapping":{' + nodes + "}}]").encode()
    error = _failed_with_nothing_stored(owner_client, data, bot, before)
    assert error == {
        "code": "limit_exceeded",
        "message": "The import stopped: over 320 MB of memory. Nothing was imported; split the "
        "file into smaller ones.",
        "details": {"limit": "memory"},
    }


def test_junk_fails_with_a_clear_message(owner_client, bot):
    before = _stored_counts()
    error = _failed_with_nothing_stored(owner_client, b"\x00\xff<html>junk", bot, before)
    assert error["code"] == "validation_error"
    assert error["message"].startswith("The file is not valid JSON (stopped within the first ")
    assert error["details"]["file"] == [error["message"]]


def test_a_crash_of_the_child_fails_the_job_and_deletes_its_chunks(owner_client, bot, monkeypatch):
    def crashed(**kwargs):
        raise sandbox.SandboxFailed("the child process ended with status -11: no output")

    monkeypatch.setattr("transfer.services.jobs.sandbox.run_limited", crashed)
    before = _stored_counts()
    error = _failed_with_nothing_stored(
        owner_client, json.dumps(_good_lossless(bot.pk)).encode(), bot, before
    )
    assert error == {
        "code": "internal_error",
        "message": "The import failed: the file could not be processed. Nothing was imported.",
        "details": {},
    }


def test_a_job_is_its_users_alone(owner_client, other_client, bot, client):
    response = _import(owner_client, bot, json.dumps(_good_lossless(bot.pk)).encode())
    url = response.json()["status_url"]
    refused = other_client.get(url)
    assert refused.status_code == 404
    assert refused.json()["error"] == {
        "code": "not_found",
        "message": "Import not found.",
        "details": {},
    }
    assert client.get(url).status_code == 401
    for missing in ("999999", "0", str(2**63), "9" * 40):
        assert other_client.get(f"/api/v1/import/jobs/{missing}/").status_code == 404
    assert owner_client.get(url).json()["status"] == "queued"


def test_unfinished_jobs_count_towards_the_users_heavy_limit(owner_client, bot, settings):
    """A queued or running import holds one of its user's HEAVY_REQUESTS_PER_USER: one more is
    refused at once with nothing stored, until one ends."""
    from tests.compaction.test_heavy_requests import assert_rate_limited

    settings.HEAVY_REQUESTS_PER_USER = 1
    data = json.dumps(_good_lossless(bot.pk)).encode()
    first = _import(owner_client, bot, data)
    assert first.status_code == 202
    stored = (_stored_counts(), ImportJob.objects.count(), ImportChunk.objects.count())
    assert_rate_limited(_import(owner_client, bot, data), limit=1)
    assert (_stored_counts(), ImportJob.objects.count(), ImportChunk.objects.count()) == stored
    assert run_job(owner_client, first.json()["id"])["status"] == "done"
    second = _import(owner_client, bot, data)
    assert second.status_code == 202
    assert run_job(owner_client, second.json()["id"])["result"]["imported"] == []  # seen before


def test_the_import_task_is_routed_to_the_heavy_queue(settings):
    from chat_platform.celery_app import app

    app.loader.import_default_modules()
    assert "transfer.tasks.import_run" in app.tasks
    assert settings.CELERY_TASK_ROUTES["transfer.tasks.*"] == {"queue": "heavy"}


def test_a_job_whose_worker_was_lost_is_taken_again_and_a_live_one_is_not(
    owner_client, bot, settings
):
    from datetime import timedelta

    from django.utils import timezone

    settings.IMPORT_RUN_SECONDS = 100
    response = _import(owner_client, bot, json.dumps(_good_lossless(bot.pk)).encode())
    job_id = response.json()["id"]
    recently = timezone.now() - timedelta(seconds=120)  # within its limit + a minute
    ImportJob.objects.filter(pk=job_id).update(status="running", started_at=recently)
    assert jobs.import_job_run(job_id=job_id) is None
    assert ImportJob.objects.get(pk=job_id).status == "running"
    lost = timezone.now() - timedelta(seconds=170)
    ImportJob.objects.filter(pk=job_id).update(started_at=lost)
    assert jobs.import_job_run(job_id=job_id) == "done"
    assert ChatSession.objects.filter(title="T").count() == 1
    assert ImportChunk.objects.count() == 0


def test_a_broker_that_is_down_fails_the_job_at_once_and_keeps_nothing(
    owner_client, bot, monkeypatch
):
    from redis.exceptions import ConnectionError as RedisConnectionError

    from transfer.tasks import import_run

    def down(*args, **kwargs):
        raise RedisConnectionError("Connection refused")

    monkeypatch.setattr(import_run, "apply_async", down)
    before = _stored_counts()
    response = _import(owner_client, bot, json.dumps(_good_lossless(bot.pk)).encode())
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "service_unavailable"
    job = ImportJob.objects.get()
    assert (job.status, job.error_code) == ("failed", "service_unavailable")
    assert (_stored_counts(), ImportChunk.objects.count()) == (before, 0)


# --- through an API key -----------------------------------------------------------------------


def test_an_import_through_a_spent_key_is_refused_before_anything_is_stored(owner, bot):
    """The key's limit bounds what its actions cost: the import's summaries and embeddings
    too. It answered 202, and the job set off the provider calls the key had no room for."""
    from tests.connections.test_quota_charges import key_client, spend

    key, client = key_client(owner, daily_token_limit=50)
    spend(f"key:{key.pk}", limit_used=50)

    response = _import(client, bot, json.dumps(_good_lossless(bot.pk)).encode())

    assert response.status_code == 429
    assert response.json()["error"]["code"] == "quota_exceeded"
    assert response.json()["error"]["details"]["scope"] == "key"
    assert ImportJob.objects.count() == 0 and ImportChunk.objects.count() == 0


def _run_in_process(*, target, data, params, limits, on_line):
    """The child's work in this process (where the test's stand-ins are)."""
    assert target == "transfer.child:import_child"
    return jobs.import_job_child_run(job_id=int(params["job_id"]), on_progress=lambda done: None)


def test_what_an_import_through_a_key_sets_off_is_charged_to_the_key(owner, bot, monkeypatch):
    """The job runs later, in a child process: it carries the key's limit to the embedding of
    what it wrote and to each new chat's soft compaction."""
    from memory import embeddings
    from tests.connections.test_quota_charges import key_client

    bot.embedding_model = "openai/fake-embedding"
    bot.save()
    key, client = key_client(owner, daily_token_limit=5000)
    embedded, compacted = [], []
    monkeypatch.setattr(
        embeddings,
        "messages_embed_dispatch",
        lambda sid, ids=None, quota=None: embedded.append(quota),
    )
    monkeypatch.setattr(
        "transfer.services.jobs.compact_soft_dispatch",
        lambda sid, quota=(): compacted.append(list(quota)),
    )
    monkeypatch.setattr(jobs.sandbox, "run_limited", _run_in_process)

    response = _import(client, bot, json.dumps(_good_lossless(bot.pk)).encode())
    job = run_job(client, response.json()["id"])

    assert job["status"] == "done"
    assert ImportJob.objects.get().quota == [[f"key:{key.pk}", 5000]]
    # the job's, once the child is done, charged to the key; the child dispatches none (its
    # steps commit as it goes, docs/transfer.md "Written in steps")
    assert embedded == [[[f"key:{key.pk}", 5000]]]
    from connections.usage import Limit

    assert compacted == [[Limit(f"key:{key.pk}", 5000)]]


def test_a_progress_cache_that_does_not_answer_never_fails_the_import(
    owner_client, bot, monkeypatch
):
    """Lost progress stalls a bar: a Redis that refused the progress write failed a good file
    (the child's progress line raised), or left its job running with its chunks."""
    import redis
    from django.core.cache import caches

    def down(*args, **kwargs):
        raise redis.ConnectionError("Redis is restarting")

    monkeypatch.setattr(caches["progress"], "set", down)
    monkeypatch.setattr(caches["progress"], "get", down)
    upload = SimpleUploadedFile("chats.json", _conversations(3), content_type="application/json")
    posted = owner_client.post(
        "/api/v1/import/",
        {"file": upload, "bot": bot.pk, "progress": "bar-1"},
        format="multipart",
    )
    assert posted.status_code == 202, posted.content
    job = run_job(owner_client, posted.json()["id"])
    assert (job["status"], len(job["result"]["imported"])) == ("done", 3)
    assert not ImportChunk.objects.exists()


def test_a_key_limited_to_some_bots_reads_only_their_import_jobs(owner, owner_client, bot):
    """An Alpha-only key read the job of an import into another bot, and with it the titles
    and ids of that bot's chats."""
    from rest_framework.test import APIClient

    from openai_api.keys import key_create
    from tests.factories import BotFactory

    alpha = BotFactory(owner=owner, name="Alpha")
    posted = _import(owner_client, bot, _conversations(1))
    job = run_job(owner_client, posted.json()["id"])
    assert job["status"] == "done"
    _key, raw = key_create(user=owner, name="alpha only", bots=[alpha.pk])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    refused = client.get(f"/api/v1/import/jobs/{job['id']}/")
    assert (refused.status_code, refused.json()["error"]["code"]) == (404, "not_found")
    _key, raw = key_create(user=owner, name="both", bots=[alpha.pk, bot.pk])
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get(f"/api/v1/import/jobs/{job['id']}/").status_code == 200
