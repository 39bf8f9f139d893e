"""Attachments (issue 18, Deliver 4): upload, send as part of a message, download; the attack
surface (another user's id, binary claiming text, NUL, huge and zip-bomb PDFs, path names)."""

import zlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from attachments.models import Attachment
from bots.models import ChatSession, Message
from bots.transitions import session_context_recount
from chat_platform.llm.tokens import count_message_tokens
from compaction.models import CompactionEvent
from tests.attachments.pdfs import pdf_bytes
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db(transaction=True)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 20


def _upload(client, session, name, data):
    return client.post(
        f"/api/v1/sessions/{session.pk}/attachments/",
        {"file": SimpleUploadedFile(name, data)},
        format="multipart",
    )


def _send(client, session, **body):
    return client.post(f"/api/v1/sessions/{session.pk}/messages/", body, format="json")


def test_text_file_becomes_part_of_the_message_the_model_sees(
    owner_client, fake_session, fake_openai, eager_tasks
):
    upload = _upload(owner_client, fake_session, "notes.md", b"# Plan\nMeet Ada at 10:30.\n")
    assert upload.status_code == 201
    body = upload.json()
    attachment_id = body["id"]
    assert body == {
        "id": attachment_id,
        "name": "notes.md",
        "size": 26,
        "kind": "text",
        "status": "ready",
        "error": "",
    }

    fake_openai.script(Reply(text="Noted."))
    sent = _send(
        owner_client, fake_session, content="Read this.", attachments=[attachment_id], wait=True
    )
    assert sent.status_code == 201, sent.json()
    expected = (
        f"Read this.\n\n[Attached file #{attachment_id}: notes.md]\n"
        "# Plan\nMeet Ada at 10:30.\n\n[End of notes.md]"
    )
    user_message = sent.json()["user_message"]
    assert user_message["content"] == expected
    # the one counter, over the whole text the model reads
    assert user_message["token_count"] == count_message_tokens(expected, model="openai/fake-model")
    assert fake_openai.requests[0]["messages"][-1] == {"role": "user", "content": expected}
    session = ChatSession.objects.get(pk=fake_session.pk)
    reply_tokens = sent.json()["assistant_message"]["token_count"]
    assert session.context_tokens == user_message["token_count"] + reply_tokens
    assert Attachment.objects.get(pk=attachment_id).message_id == user_message["id"]

    # the original is downloadable by its owner, as a download
    download = owner_client.get(f"/api/v1/attachments/{attachment_id}/")
    assert download.status_code == 200
    assert download.content == b"# Plan\nMeet Ada at 10:30.\n"
    assert download["Content-Disposition"] == 'attachment; filename="notes.md"'
    assert download["X-Content-Type-Options"] == "nosniff"

    # a file can be sent once
    again = _send(owner_client, fake_session, content="again", attachments=[attachment_id])
    assert again.status_code == 400
    assert "attachments" in again.json()["error"]["details"]


def test_download_by_anyone_else_is_404(owner_client, other_client, fake_session):
    attachment_id = _upload(owner_client, fake_session, "a.txt", b"secret").json()["id"]
    response = other_client.get(f"/api/v1/attachments/{attachment_id}/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert other_client.get("/api/v1/attachments/999999/").json()["error"]["code"] == "not_found"


def test_another_users_attachment_id_is_refused_and_nothing_is_stored(
    owner_client, other_client, other_user, owner, fake_session, fake_openai
):
    theirs = SessionFactory(user=other_user, bot=BotFactory(owner=other_user))
    their_id = _upload(other_client, theirs, "theirs.txt", b"their text").json()["id"]
    response = _send(owner_client, fake_session, content="steal", attachments=[their_id])
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"]["attachments"] == [
        f"Not a file waiting to be sent in this chat: {their_id}. Attach it again."
    ]
    assert Message.objects.filter(session=fake_session).count() == 0
    assert Attachment.objects.get(pk=their_id).message_id is None
    assert fake_openai.requests == []
    # and uploading to their chat is 404
    assert _upload(owner_client, theirs, "x.txt", b"x").status_code == 404
    assert Attachment.objects.filter(session=theirs).count() == 1


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("data.txt", b"\x00\x01\x02binary", "data.txt is not a text file (it holds binary"),
        ("latin.csv", "caf\xe9".encode("latin-1"), "latin.csv is not UTF-8 text (byte 3"),
        ("empty.txt", b"", "empty.txt is empty."),
        ("blank.txt", b"  \n ", "blank.txt holds no text."),
        ("photo.png", b"GIF89a not a png", "photo.png is named as a PNG image but is not one."),
        ("doc.pdf", b"hello", "doc.pdf is named as a PDF but is not one."),
        ("tool.exe", b"MZ...", "tool.exe: this kind of file cannot be attached."),
    ],
)
def test_bad_files_are_refused_with_a_clear_error(owner_client, fake_session, name, data, message):
    response = _upload(owner_client, fake_session, name, data)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"]["file"][0].startswith(message)
    assert error["message"] == error["details"]["file"][0]
    assert Attachment.objects.count() == 0


@pytest.mark.parametrize(
    ("sent", "stored"),
    [("../../etc/passwd.txt", "passwd.txt"), ("dir\\evil.txt", "evil.txt")],
)
def test_path_names_in_uploads_never_reach_storage(owner_client, fake_session, sent, stored):
    # Django's multipart parser keeps only the last part of a path; the service refuses any
    # name that still holds one (below), so no stored name is ever a path.
    response = _upload(owner_client, fake_session, sent, b"x")
    assert response.status_code == 201
    assert Attachment.objects.get().name == stored == response.json()["name"]


@pytest.mark.parametrize(
    "name", ["../x.txt", "a/b.txt", "a\\b.txt", "nul\x00.txt", "..", "x" * 201]
)
def test_the_service_refuses_names_with_folders_or_control_characters(owner, fake_session, name):
    from attachments.services import attachment_upload
    from chat_platform.errors import ValidationFailed

    with pytest.raises(ValidationFailed) as refused:
        attachment_upload(user=owner, session_id=fake_session.pk, name=name, data=b"x")
    assert refused.value.details["file"][0].startswith("The file name ")
    assert Attachment.objects.count() == 0


# A PDF's text is read by a task (issue 30): the upload answers 202 "processing", the file then
# ends "ready" or "failed" with the reason (tests/attachments/test_heavy.py has the limits).
def _pdf_outcome(client, response):
    assert response.status_code == 202
    assert response.json()["status"] == "processing"
    outcome = client.get(f"/api/v1/attachments/{response.json()['id']}/status/").json()
    return outcome["status"], outcome["error"]


def test_pdf_text_is_extracted(owner_client, fake_session, eager_tasks):
    response = _upload(
        owner_client, fake_session, "report.pdf", pdf_bytes(["Revenue 42 EUR", "Signed by Ada"])
    )
    assert response.json()["kind"] == "pdf"
    assert _pdf_outcome(owner_client, response) == ("ready", "")
    stored = Attachment.objects.get(pk=response.json()["id"])
    assert stored.text == "Revenue 42 EUR\n\nSigned by Ada"


def test_huge_damaged_and_zip_bomb_pdfs_fail(owner_client, fake_session, settings, eager_tasks):
    settings.ATTACHMENT_PDF_MAX_PAGES = 3
    settings.ATTACHMENT_PDF_MAX_STREAM_BYTES = 1_000_000
    many = _upload(owner_client, fake_session, "many.pdf", pdf_bytes(["p"] * 4))
    assert _pdf_outcome(owner_client, many) == (
        "failed",
        "many.pdf has 4 pages; at most 3 are accepted.",
    )
    bomb_stream = b"0" * 30_000_000  # about 30 KB compressed, 30 MB unpacked
    assert len(zlib.compress(bomb_stream, 9)) < 100_000
    bomb = _upload(owner_client, fake_session, "bomb.pdf", pdf_bytes(["x"], stream=bomb_stream))
    assert _pdf_outcome(owner_client, bomb) == (
        "failed",
        "bomb.pdf holds a compressed stream larger than 1,000,000 bytes once unpacked: "
        "it is refused.",
    )
    damaged = _upload(owner_client, fake_session, "doc.pdf", b"%PDF-1.4 garbage")
    assert _pdf_outcome(owner_client, damaged) == (
        "failed",
        "doc.pdf could not be read as a PDF (it may be damaged).",
    )
    assert list(Attachment.objects.values_list("status", "text")) == [("failed", "")] * 3


def test_size_limits_come_from_settings(owner_client, fake_session, settings):
    settings.ATTACHMENT_MAX_BYTES = 100
    big = _upload(owner_client, fake_session, "big.txt", b"x" * 101)
    assert big.status_code == 413
    assert big.json()["error"]["code"] == "payload_too_large"
    assert big.json()["error"]["details"] == {"max_bytes": 100}
    settings.ATTACHMENT_MESSAGE_MAX_BYTES = 150
    ids = [_upload(owner_client, fake_session, f"{i}.txt", b"y" * 80).json()["id"] for i in (1, 2)]
    over = _send(owner_client, fake_session, content="both", attachments=ids)
    assert over.status_code == 413
    assert over.json()["error"]["details"] == {"max_bytes": 150}
    assert Message.objects.filter(session=fake_session).count() == 0
    assert Attachment.objects.filter(message__isnull=False).count() == 0


@pytest.mark.parametrize("value", ["1", [True], [1.5], {"id": 1}, [None]])
def test_attachment_ids_of_the_wrong_type_are_refused(owner_client, fake_session, value):
    response = _send(owner_client, fake_session, content="x", attachments=value)
    assert response.status_code == 400
    assert response.json()["error"]["details"]["attachments"] == [
        "A list of attachment ids is required."
    ]
    assert Message.objects.filter(session=fake_session).count() == 0


def test_image_to_a_text_only_model_is_refused(owner_client, chat_session):
    response = _upload(owner_client, chat_session, "photo.png", PNG)
    assert response.status_code == 400
    assert response.json()["error"]["details"]["file"] == [
        "This chat's model (builtin/recall) does not accept images. Pick a model that does in "
        "the chat's settings, or attach the image's content as text."
    ]
    assert Attachment.objects.count() == 0


def test_image_goes_to_a_vision_model_as_an_image_part(
    owner_client, owner, fake_openai, eager_tasks, monkeypatch
):
    from tests.conftest import FAKE_KEY, FAKE_KEY_ENV

    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    bot = BotFactory(
        owner=owner, model="openai/gpt-4o-mini", api_base=fake_openai.url, api_key_env=FAKE_KEY_ENV
    )
    session = SessionFactory(user=owner, bot=bot)
    upload = _upload(owner_client, session, "photo.png", PNG)
    assert upload.status_code == 201
    image_id = upload.json()["id"]
    fake_openai.script(Reply(text="A picture."))
    sent = _send(owner_client, session, content="What is it?", attachments=[image_id], wait=True)
    assert sent.status_code == 201, sent.json()
    text = f"What is it?\n\n[Attached image #{image_id}: photo.png]"
    user_message = sent.json()["user_message"]
    assert user_message["content"] == text
    assert user_message["token_count"] == count_message_tokens(text, model=bot.model) + 1000
    import base64

    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert fake_openai.requests[0]["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {"type": "image_url", "image_url": {"url": url}},
        ],
    }

    # regenerated on a branch (a copy of the message): the image still goes with it
    fake_openai.script(Reply(text="Again a picture."))
    reply_id = sent.json()["assistant_message"]["id"]
    regenerated = owner_client.post(f"/api/v1/messages/{reply_id}/regenerate/", {}, "json")
    assert regenerated.status_code == 201, regenerated.json()
    assert regenerated.json()["session"]["id"] != session.pk
    assert len(fake_openai.requests) == 2
    assert fake_openai.requests[1]["messages"][-1] == fake_openai.requests[0]["messages"][-1]


def test_five_megabyte_text_file_that_can_never_fit_is_context_too_large(
    owner_client, chat_session, eager_tasks
):
    line = "The quarterly figures for site 17 were checked by Ada on 2024-03-05.\n"
    data = (line * (5 * 1024 * 1024 // len(line) + 1)).encode()
    assert len(data) >= 5 * 1024 * 1024
    upload = _upload(owner_client, chat_session, "big.txt", data)
    assert upload.status_code == 201
    response = _send(owner_client, chat_session, content="", attachments=[upload.json()["id"]])
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "context_too_large"
    user_message = Message.objects.get(session=chat_session, role="user")
    assert user_message.token_count == count_message_tokens(
        user_message.content, model="builtin/recall"
    )
    assert error["message"] == (
        "This message, with the system prompt and pinned messages, does not fit in the bot's "
        "context budget of 198,976 tokens."
    )
    assert user_message.token_count > 198976
    reply = Message.objects.get(session=chat_session, role="assistant")
    assert (reply.status, reply.error_code) == ("failed", "context_too_large")
    # the message stays stored with its file, titled after it
    assert Attachment.objects.get().message_id == user_message.pk
    assert ChatSession.objects.get(pk=chat_session.pk).title == "test session"


def test_large_file_is_admitted_inside_b_after_a_hard_compaction(
    owner_client, owner, fake_openai, eager_tasks, monkeypatch
):
    from tests.conftest import FAKE_KEY, FAKE_KEY_ENV

    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    # W 6000, R 500 -> B 5500, H 4125
    bot = BotFactory(
        owner=owner,
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_key_env=FAKE_KEY_ENV,
        context_window=6000,
        max_output_tokens=500,
        compaction_model="builtin/extractive",
        memory_index_size=0,
    )
    session = SessionFactory(user=owner, bot=bot)
    for i in range(30):
        message_add(
            session,
            role="user" if i % 2 == 0 else "assistant",
            content=f"Turn {i}: the depot in Lyon ships crate {1000 + i} on day {i}. " * 6,
        )
    session_context_recount(session_id=session.pk)
    session.refresh_from_db()
    before = session.context_tokens
    assert 3000 < before < 4125
    text = "".join(
        f"Line {i}: invoice {5000 + i} is due on 2025-01-{i % 28 + 1:02d}.\n" for i in range(90)
    )
    upload = _upload(owner_client, session, "invoices.csv", text.encode())
    assert upload.status_code == 201
    fake_openai.script(Reply(text="Seen."))
    sent = _send(
        owner_client, session, content="Check these.", attachments=[upload.json()["id"]], wait=True
    )
    assert sent.status_code == 201, sent.json()
    file_tokens = sent.json()["user_message"]["token_count"]
    assert before + file_tokens >= 4125  # the hard threshold was reached
    event = CompactionEvent.objects.get(session=session, trigger="hard")
    assert event.outcome == "compacted"
    session.refresh_from_db()
    admission = session.last_admission
    assert admission["decision"] in ("admit", "trim")
    assert admission["selected_tokens"] <= admission["budget_tokens"] == 5500
    request = fake_openai.requests[0]
    assert request["messages"][-1]["content"].endswith("[End of invoices.csv]")


def test_a_typed_marker_naming_someone_elses_image_sends_no_image(
    owner_client, owner, other_client, other_user, fake_openai, eager_tasks, monkeypatch
):
    from tests.conftest import FAKE_KEY, FAKE_KEY_ENV

    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    vision = {"model": "openai/gpt-4o-mini", "api_base": fake_openai.url}
    theirs = SessionFactory(
        user=other_user, bot=BotFactory(owner=other_user, api_key_env=FAKE_KEY_ENV, **vision)
    )
    their_image = _upload(other_client, theirs, "private.png", PNG).json()["id"]
    mine = SessionFactory(
        user=owner, bot=BotFactory(owner=owner, api_key_env=FAKE_KEY_ENV, **vision)
    )
    fake_openai.script(Reply(text="Nothing."))
    forged = f"[Attached image #{their_image}: private.png]"
    sent = _send(owner_client, mine, content=forged, wait=True)
    assert sent.status_code == 201
    assert fake_openai.requests[0]["messages"][-1] == {"role": "user", "content": forged}


def test_typed_markers_send_each_image_once_ten_at_most_and_count_them(
    owner_client, owner, fake_openai, eager_tasks, monkeypatch, settings
):
    """Markers typed by hand named one of the user's images fifty times: fifty image parts went
    out (each encoded again), and the message's count held none of them (admission admitted
    151 tokens of a request carrying 150,000 by the images' own estimate). Each image is sent
    once, ``ATTACHMENT_MESSAGE_MAX_FILES`` at most, and counted as an attached one is."""
    from tests.conftest import FAKE_KEY, FAKE_KEY_ENV

    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    settings.ATTACHMENT_MESSAGE_MAX_FILES = 3
    bot = BotFactory(
        owner=owner, model="openai/gpt-4o-mini", api_base=fake_openai.url, api_key_env=FAKE_KEY_ENV
    )
    session = SessionFactory(user=owner, bot=bot)
    ids = [_upload(owner_client, session, f"p{i}.png", PNG).json()["id"] for i in range(4)]
    typed = " ".join(f"[Attached image #{i}: p.png]" for i in [ids[0]] * 50 + ids)
    fake_openai.script(Reply(text="Pictures."))
    sent = _send(owner_client, session, content=typed, wait=True)
    assert sent.status_code == 201, sent.json()
    assert sent.json()["user_message"]["token_count"] == (
        count_message_tokens(typed, model=bot.model) + 3 * 1000
    )
    parts = fake_openai.requests[0]["messages"][-1]["content"]
    import base64

    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert [p["type"] for p in parts] == ["text", "image_url", "image_url", "image_url"]
    assert {p["image_url"]["url"] for p in parts[1:]} == {url}


def test_a_retried_send_with_the_same_client_id_returns_the_first_result(
    owner_client, chat_session, eager_tasks
):
    attachment_id = _upload(owner_client, chat_session, "a.txt", b"alpha beta").json()["id"]
    body = {"content": "see file", "attachments": [attachment_id], "client_id": "c-1"}
    first = _send(owner_client, chat_session, **body)
    again = _send(owner_client, chat_session, **body)
    assert first.status_code == again.status_code == 202
    assert again.json()["user_message"]["id"] == first.json()["user_message"]["id"]
    assert Message.objects.filter(session=chat_session, role="user").count() == 1


def test_compact_command_takes_no_attachments(owner_client, chat_session):
    attachment_id = _upload(owner_client, chat_session, "a.txt", b"alpha").json()["id"]
    response = _send(owner_client, chat_session, content="/compact", attachments=[attachment_id])
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "attachments": ["/compact takes no attachments."]
    }
    assert Message.objects.filter(session=chat_session).count() == 0


def test_unsent_uploads_older_than_the_retention_are_swept(
    owner_client, fake_session, fake_openai, eager_tasks, settings
):
    from datetime import timedelta

    from django.utils import timezone

    from attachments.services import attachments_sweep_unsent
    from attachments.tasks import sweep_unsent

    settings.ATTACHMENT_UNSENT_RETENTION_SECONDS = 3600
    old_sent = _upload(owner_client, fake_session, "sent.txt", b"sent long ago").json()["id"]
    fake_openai.script(Reply(text="Noted."))
    sent = _send(owner_client, fake_session, content="here", attachments=[old_sent], wait=True)
    assert sent.status_code == 201, sent.json()
    old_unsent = _upload(owner_client, fake_session, "old.txt", b"abandoned").json()["id"]
    fresh = _upload(owner_client, fake_session, "fresh.txt", b"just attached").json()["id"]
    two_hours_ago = timezone.now() - timedelta(hours=2)
    Attachment.objects.filter(pk__in=[old_sent, old_unsent]).update(created_at=two_hours_ago)

    assert sweep_unsent() == 1  # the beat task calls the service
    assert sorted(Attachment.objects.values_list("pk", flat=True)) == sorted([old_sent, fresh])
    assert attachments_sweep_unsent() == 0  # safe to run twice

    # the swept file cannot be sent any more: a clear error, nothing stored
    before = Message.objects.filter(session=fake_session).count()
    late = _send(owner_client, fake_session, content="late", attachments=[old_unsent])
    assert late.status_code == 400
    assert late.json()["error"]["details"]["attachments"] == [
        f"Not a file waiting to be sent in this chat: {old_unsent}. Attach it again."
    ]
    assert Message.objects.filter(session=fake_session).count() == before


def test_the_sweep_is_on_the_beat_schedule(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["sweep-unsent-attachments"]
    assert entry == {
        "task": "attachments.tasks.sweep_unsent",
        "schedule": 600.0,
        "options": {"expires": 600.0},
    }
    assert settings.ATTACHMENT_UNSENT_RETENTION_SECONDS == 86400


def test_a_files_text_is_counted_before_the_sends_transaction(
    owner_client, fake_session, monkeypatch
):
    """A file's text can be megabytes, and its count took ~0.5 s of SQLite's one write lock
    (embedded mode): it is made before the send's transaction, never inside it."""
    from django.db import connection

    from turns.services import send

    text = "lorem ipsum dolor sit amet. " * 2_000
    upload = _upload(owner_client, fake_session, "big.txt", text.encode())
    assert upload.status_code == 201
    counted = []
    count = send.count_message_tokens

    def watched(content, model):
        counted.append((len(content) > len(text), connection.in_atomic_block))
        return count(content, model=model)

    monkeypatch.setattr(send, "count_message_tokens", watched)
    sent = _send(
        owner_client, fake_session, content="Read this.", attachments=[upload.json()["id"]]
    )
    assert sent.status_code == 202, sent.json()
    # the message with the file's text, counted once, outside any transaction (before: inside)
    assert [c for c in counted if c[0]] == [(True, False)]
    stored = Message.objects.get(pk=sent.json()["user_message"]["id"])
    assert stored.token_count == count_message_tokens(stored.content, model=fake_session.bot.model)
