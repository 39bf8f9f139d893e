"""Issue 30, Deliver 1: a PDF's text is read by a task on the ``heavy`` queue, in a child process
bounded in time, memory and decoded bytes; the upload answers at once (202 ``processing``) and
the file ends ``ready`` or ``failed`` with the limit named. Sending a file that is not ready is
a ``validation_error`` and writes nothing."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from attachments.models import Attachment
from bots.models import Message
from chat_platform.celery_app import app as celery_app
from tests.attachments.pdfs import pdf_bytes, pdf_shared_stream_bytes

pytestmark = pytest.mark.django_db(transaction=True)

# The reproduction's shape: 8 pages sharing one content stream of a repeated no-op operator
# after one text operator (so pypdf parses it: on 94ecda9, 4 MB of it cost the web process
# 185 s of CPU). 1 MB here: over a second of parsing per page, so a 1 s limit always stops it.
CM = b"1 0 0 1 0 0 cm\n"
BOMB_STREAM = b"BT /F1 12 Tf 72 712 Td (x) Tj ET\n" + CM * (1024 * 1024 // len(CM))


def _upload(client, session, name, data):
    return client.post(
        f"/api/v1/sessions/{session.pk}/attachments/",
        {"file": SimpleUploadedFile(name, data)},
        format="multipart",
    )


def _status(client, attachment_id):
    response = client.get(f"/api/v1/attachments/{attachment_id}/status/")
    assert response.status_code == 200
    return response.json()


def _bomb():
    data = pdf_shared_stream_bytes(8, BOMB_STREAM)
    assert len(data) < 20_000  # a few KB of file
    return data


def test_the_upload_answers_processing_and_parses_nothing(owner_client, fake_session):
    # No eager tasks: the task waits on the heavy queue; the web request parsed nothing.
    response = _upload(owner_client, fake_session, "bomb.pdf", _bomb())
    assert response.status_code == 202
    body = response.json()
    assert body == {
        "id": body["id"],
        "name": "bomb.pdf",
        "size": len(_bomb()),
        "kind": "pdf",
        "status": "processing",
        "error": "",
    }
    row = Attachment.objects.get(pk=body["id"])
    assert (row.status, row.text) == ("processing", "")
    assert _status(owner_client, body["id"])["status"] == "processing"


def test_pdf_cpu_bomb_fails_with_the_time_limit_named(
    owner_client, fake_session, settings, eager_tasks
):
    settings.ATTACHMENT_EXTRACT_SECONDS = 1
    response = _upload(owner_client, fake_session, "bomb.pdf", _bomb())
    assert response.status_code == 202
    message = "bomb.pdf: PDF text extraction stopped: over 1 s. Attach a shorter PDF, or its text."
    assert _status(owner_client, response.json()["id"]) == {
        **response.json(),
        "status": "failed",
        "error": message,
    }
    row = Attachment.objects.get(pk=response.json()["id"])
    assert (row.status, row.text, row.error) == ("failed", "", message)


def test_pdf_over_the_decoded_bytes_fails_before_any_parse(
    owner_client, fake_session, settings, eager_tasks
):
    settings.ATTACHMENT_PDF_MAX_DECODED_BYTES = 1_000_000  # 8 x 1 MB decoded is over it
    response = _upload(owner_client, fake_session, "bomb.pdf", _bomb())
    assert response.status_code == 202
    assert _status(owner_client, response.json()["id"])["error"] == (
        "bomb.pdf: PDF text extraction stopped: over 1,000,000 bytes decoded. "
        "Attach a shorter PDF, or its text."
    )


def test_pdf_over_the_memory_limit_fails_with_the_limit_named(
    owner_client, fake_session, settings, eager_tasks
):
    settings.ATTACHMENT_EXTRACT_MEMORY_BYTES = 256 * 1024 * 1024
    settings.ATTACHMENT_PDF_MAX_STREAM_BYTES = 1024 * 1024 * 1024
    settings.ATTACHMENT_PDF_MAX_DECODED_BYTES = 1024 * 1024 * 1024
    data = pdf_shared_stream_bytes(1, b"\0" * (400 * 1024 * 1024), level=1)
    response = _upload(owner_client, fake_session, "wide.pdf", data)
    assert response.status_code == 202
    assert _status(owner_client, response.json()["id"])["error"] == (
        "wide.pdf: PDF text extraction stopped: over 256 MB of memory. "
        "Attach a shorter PDF, or its text."
    )


def test_a_file_not_ready_is_refused_at_send_and_nothing_is_written(
    owner_client, fake_session, settings, eager_tasks
):
    settings.ATTACHMENT_PDF_MAX_DECODED_BYTES = 1_000_000
    failed = _upload(owner_client, fake_session, "bomb.pdf", _bomb()).json()["id"]
    celery_app.conf.task_always_eager = False  # this one waits on the queue (the fixture resets)
    waiting = _upload(owner_client, fake_session, "later.pdf", pdf_bytes(["Later"])).json()["id"]
    for attachment_id, reason in (
        (waiting, "later.pdf is still being read: send it once it is ready."),
        (
            failed,
            "bomb.pdf cannot be sent: bomb.pdf: PDF text extraction stopped: over 1,000,000 "
            "bytes decoded. Attach a shorter PDF, or its text. Remove it.",
        ),
    ):
        sent = owner_client.post(
            f"/api/v1/sessions/{fake_session.pk}/messages/",
            {"content": "Read it.", "attachments": [attachment_id]},
            format="json",
        )
        assert sent.status_code == 400
        assert sent.json()["error"]["code"] == "validation_error"
        assert sent.json()["error"]["details"] == {"attachments": [reason]}
    assert Message.objects.filter(session=fake_session).count() == 0
    assert Attachment.objects.filter(message__isnull=False).count() == 0
    # The worker reads it later; then it is ready and sends as before.
    from attachments.services import attachment_extract

    assert attachment_extract(attachment_id=waiting) == "ready"
    assert attachment_extract(attachment_id=waiting) is None  # safe to run twice
    assert _status(owner_client, waiting)["status"] == "ready"
    assert Attachment.objects.get(pk=waiting).text == "Later"


def test_a_failed_file_does_not_count_towards_the_unsent_limit(
    owner_client, fake_session, settings, eager_tasks
):
    settings.ATTACHMENT_UNSENT_MAX = 1
    settings.ATTACHMENT_PDF_MAX_DECODED_BYTES = 1_000_000
    assert _upload(owner_client, fake_session, "bomb.pdf", _bomb()).status_code == 202
    ok = _upload(owner_client, fake_session, "ok.pdf", pdf_bytes(["Fine"]))
    assert ok.status_code == 202
    assert _status(owner_client, ok.json()["id"])["status"] == "ready"
    assert [a.status for a in Attachment.objects.order_by("pk")] == ["failed", "ready"]


def test_the_extract_task_is_routed_to_the_heavy_queue(settings):
    routes = settings.CELERY_TASK_ROUTES
    assert routes["attachments.tasks.extract"] == {"queue": "heavy"}


def test_the_child_sees_none_of_the_servers_secrets_and_a_crash_is_reported(monkeypatch):
    from chat_platform import sandbox

    monkeypatch.setenv("OPENAI_API_KEY", "sk-server-secret")
    limits = sandbox.Limits(seconds=30, memory_bytes=512 * 1024 * 1024)
    names = sandbox.run_limited(
        target="tests.attachments.sandbox_targets:environment", data=b"", params={}, limits=limits
    )
    assert "OPENAI_API_KEY" not in names and "SECRET_KEY" not in names
    assert "DATABASE_URL" not in names
    assert {"SANDBOX_MEMORY_BYTES", "SANDBOX_CPU_SECONDS"} <= set(names)
    with pytest.raises(sandbox.SandboxFailed) as crashed:
        sandbox.run_limited(
            target="tests.attachments.sandbox_targets:crash", data=b"", params={}, limits=limits
        )
    assert str(crashed.value) == (
        "the child process ended with status 1: RuntimeError: not a refusal"
    )


def test_progress_lines_reach_on_line_while_the_child_runs(tmp_path):
    """The import relays its progress to the page as it reads (transfer/services/jobs.py): a
    line reaches ``on_line`` while the child still runs (here the child finishes only after
    ``on_line`` has run; read at its end, it would wait until the time limit)."""
    from chat_platform import sandbox

    flag = tmp_path / "seen"
    lines = []

    def on_line(line):
        lines.append(line)
        flag.touch()

    answer = sandbox.run_limited(
        target="tests.attachments.sandbox_targets:progress_then_wait",
        data=b"",
        params={"path": str(flag)},
        limits=sandbox.Limits(seconds=30, memory_bytes=512 * 1024 * 1024),
        on_line=on_line,
    )
    assert (answer, lines) == ("seen", [{"progress": "reading", "bytes_read": 1}])


def test_a_child_stalled_past_its_memory_limit_is_stopped_for_memory_not_the_clock():
    """A child that meets its address-space cap may stall rather than fail (an import past its
    memory limit was seen spinning in ``malloc`` until its 900 s wall limit). The parent reads
    the child's address space and stops it for memory at once; before, it waited out the clock
    and named the time limit."""
    from chat_platform import sandbox

    with pytest.raises(sandbox.LimitExceeded) as stopped:
        sandbox.run_limited(
            target="tests.attachments.sandbox_targets:grow_then_stall",
            data=b"",
            params={},
            limits=sandbox.Limits(seconds=20, memory_bytes=256 * 1024 * 1024),
        )
    assert (stopped.value.limit, str(stopped.value)) == ("memory", "over 256 MB of memory")
