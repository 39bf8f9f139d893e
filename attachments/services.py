"""Attachments: upload a file to a chat, then send it with a message.

An upload is checked whole before a row is written (name, size, what the bytes are, whether the
chat's model accepts images). A PDF's text is read afterwards, never in the process that took
the upload: the row is ``processing`` and ``attachments.tasks.extract`` (queue ``heavy``) runs
``attachment_extract``, which parses it in a child process bounded in time, memory and decoded
bytes (``chat_platform.sandbox``) and leaves it ``ready`` or ``failed`` with the limit named
(docs/attachments.md). A send names uploaded, ready ids, and the message it writes carries the
files' text in its ``content`` (so its ``token_count``, the running totals, admission,
compaction, snapshots and search all see it as the text it is). Images are a marker line in the
text, sent to the model as image content parts (``attachments.queries.images_for_messages``).
"""

from collections.abc import Sequence
from dataclasses import asdict
from datetime import timedelta
from functools import partial

import structlog
from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from attachments.extract import AttachmentRefused, Limits, check_file_name, extract
from attachments.models import Attachment
from bots.models import ChatSession, Message
from bots.queries import session_get_for_use
from chat_platform import sandbox
from chat_platform.celery_app import task_named
from chat_platform.errors import PayloadTooLarge, ValidationFailed
from chat_platform.llm import gateway
from chat_platform.outage import BROKER_ERRORS

log = structlog.get_logger(__name__)

IMAGE_MARKER = "[Attached image #"
FILE_MARKER = "[Attached file #"


def _limits() -> Limits:
    return Limits(
        max_text_chars=settings.ATTACHMENT_TEXT_MAX_CHARS,
        pdf_max_pages=settings.ATTACHMENT_PDF_MAX_PAGES,
        pdf_max_stream_bytes=settings.ATTACHMENT_PDF_MAX_STREAM_BYTES,
        pdf_max_decoded_bytes=settings.ATTACHMENT_PDF_MAX_DECODED_BYTES,
    )


def images_refusal(model: str) -> str:
    return (
        f"This chat's model ({model}) does not accept images. Pick a model that does in the "
        "chat's settings, or attach the image's content as text."
    )


def check_upload_size(*, size: int | None) -> None:
    """A file (or a request claiming one) over ``ATTACHMENT_MAX_BYTES``: refused before it is
    read. The request may carry a little more than the file (the multipart envelope)."""
    limit = settings.ATTACHMENT_MAX_BYTES
    if size is not None and size > limit:
        raise PayloadTooLarge(
            f"The file is larger than the {limit:,} bytes a file may have.",
            details={"max_bytes": limit},
        )


def attachment_upload(
    *, user: AbstractBaseUser, session_id: object, name: object, data: bytes
) -> Attachment:
    """Store one file for ``session`` (not yet sent). Refused whole, nothing written."""
    session = session_get_for_use(user=user, session_id=session_id)
    check_upload_size(size=len(data))
    try:
        clean_name = check_file_name(name)
        extracted = extract(name=clean_name, data=data, limits=_limits())
    except AttachmentRefused as exc:
        raise ValidationFailed(str(exc), details={"file": [str(exc)]}) from None
    if extracted.kind == Attachment.Kind.IMAGE and not gateway.model_supports_images(
        session.chat_model
    ):
        refusal = images_refusal(session.chat_model)
        raise ValidationFailed(refusal, details={"file": [refusal]})
    unsent = (
        Attachment.objects.filter(session=session, message__isnull=True)
        .exclude(status=Attachment.Status.FAILED)
        .count()
    )
    if unsent >= settings.ATTACHMENT_UNSENT_MAX:
        message = (
            f"This chat already has {unsent} files waiting to be sent: send them (or start "
            "a new message) before attaching more."
        )
        raise ValidationFailed(message, details={"file": [message]})
    attachment = Attachment.objects.create(
        user=user,
        session=session,
        name=clean_name,
        kind=extracted.kind,
        content_type=extracted.content_type,
        size=len(data),
        data=data,
        text=extracted.text,
        status=Attachment.Status.PROCESSING if extracted.deferred else Attachment.Status.READY,
    )
    log.info(
        "attachment_uploaded",
        attachment_id=attachment.pk,
        session_id=session.pk,
        kind=attachment.kind,
        size=attachment.size,
        status=attachment.status,
    )
    if extracted.deferred:
        transaction.on_commit(partial(attachment_extract_dispatch, attachment.pk, user_id=user.pk))
    return attachment


EXTRACT_TASK = "attachments.tasks.extract"


def attachment_extract_dispatch(attachment_id: int, *, user_id: int | None = None) -> bool:
    """Hand a ``processing`` file to the ``heavy`` queue (by task name: the domain never imports
    its task module); in embedded mode, to the lane of the user who sent it (``user_id``), so
    one user's files take their turn with that user's replies, never every task thread
    (docs/operations.md). A broker that is down leaves it ``processing``: the send refuses it
    until it is ready, and the unsent sweep removes it after the retention."""
    try:
        task_named(EXTRACT_TASK).apply_async((attachment_id,), fair_key=user_id)
    except BROKER_ERRORS:
        log.exception("attachment_extract_dispatch_failed", attachment_id=attachment_id)
        return False
    return True


def attachment_extract(*, attachment_id: int) -> str | None:
    """Read a ``processing`` PDF's text in a limited child process; the file ends ``ready`` or
    ``failed`` (``error`` names the limit or what was wrong). Safe to run twice, and a file
    deleted meanwhile is nothing to do. Returns the status written (None: nothing to do)."""
    row = (
        Attachment.objects.filter(pk=attachment_id, status=Attachment.Status.PROCESSING)
        .only("pk", "name", "data")
        .first()
    )
    if row is None:
        return None
    name = row.name
    try:
        text = _pdf_text_limited(name=name, data=bytes(row.data))
    except AttachmentRefused as exc:
        status, values = Attachment.Status.FAILED, {"error": str(exc)}
    else:
        status, values = Attachment.Status.READY, {"text": text}
    del row
    written = Attachment.objects.filter(
        pk=attachment_id, status=Attachment.Status.PROCESSING
    ).update(status=status, **values)
    log.info(
        "attachment_extracted",
        attachment_id=attachment_id,
        status=status,
        error=values.get("error", ""),
        written=bool(written),
    )
    return status if written else None


def _pdf_text_limited(*, name: str, data: bytes) -> str:
    """``extract.pdf_text_child`` in a child process: bounded by ``ATTACHMENT_EXTRACT_SECONDS``
    (wall clock and CPU), ``ATTACHMENT_EXTRACT_MEMORY_BYTES`` and the decoded-bytes limit it
    checks itself. A limit reached is an ``AttachmentRefused`` naming it."""
    limits = sandbox.Limits(
        seconds=settings.ATTACHMENT_EXTRACT_SECONDS,
        memory_bytes=settings.ATTACHMENT_EXTRACT_MEMORY_BYTES,
    )
    try:
        text = sandbox.run_limited(
            target="attachments.extract:pdf_text_child",
            data=data,
            params={"name": name, "limits": asdict(_limits())},
            limits=limits,
        )
    except sandbox.Refused as exc:
        raise AttachmentRefused(str(exc)) from None
    except sandbox.LimitExceeded as exc:
        raise AttachmentRefused(
            f"{name}: PDF text extraction stopped: {exc}. Attach a shorter PDF, or its text."
        ) from None
    except sandbox.SandboxFailed as exc:
        log.error("attachment_extract_crashed", name=name, error=str(exc))
        raise AttachmentRefused(f"{name} could not be read as a PDF (it may be damaged).") from None
    if not isinstance(text, str):  # pragma: no cover - the child returns a string or refuses
        raise AttachmentRefused(f"{name} could not be read as a PDF (it may be damaged).")
    return text


def check_attachments_for_send(*, session: ChatSession, attachments: object) -> list[Attachment]:
    """The uploaded, unsent files of ``session`` a send names (``attachments: [ids]``), in the
    order named. Another user's id, another chat's, an unknown or already sent one: the same
    ``validation_error`` (never saying which exists)."""
    if attachments is None:
        return []
    if not isinstance(attachments, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in attachments
    ):
        raise ValidationFailed(details={"attachments": ["A list of attachment ids is required."]})
    if not attachments:
        return []
    if len(set(attachments)) != len(attachments):
        raise ValidationFailed(details={"attachments": ["An attachment is named twice."]})
    most = settings.ATTACHMENT_MESSAGE_MAX_FILES
    if len(attachments) > most:
        raise ValidationFailed(details={"attachments": [f"At most {most} files per message."]})
    found = {
        a.pk: a
        for a in Attachment.objects.filter(
            pk__in=attachments, user_id=session.user_id, session=session, message__isnull=True
        )
    }
    missing = [i for i in attachments if i not in found]
    if missing:
        names = ", ".join(str(i) for i in missing)
        raise ValidationFailed(
            details={
                "attachments": [
                    f"Not a file waiting to be sent in this chat: {names}. Attach it again."
                ]
            }
        )
    chosen = [found[i] for i in attachments]
    not_ready = [_not_ready(a) for a in chosen if a.status != Attachment.Status.READY]
    if not_ready:
        raise ValidationFailed(not_ready[0], details={"attachments": not_ready})
    total = sum(a.size for a in chosen)
    limit = settings.ATTACHMENT_MESSAGE_MAX_BYTES
    if total > limit:
        raise PayloadTooLarge(
            f"These files take {total:,} bytes; a message may carry at most {limit:,}.",
            details={"max_bytes": limit},
        )
    model = session.chat_model
    if any(a.kind == Attachment.Kind.IMAGE for a in chosen) and not gateway.model_supports_images(
        model
    ):
        raise ValidationFailed(
            images_refusal(model), details={"attachments": [images_refusal(model)]}
        )
    return chosen


def _not_ready(attachment: Attachment) -> str:
    if attachment.status == Attachment.Status.PROCESSING:
        return f"{attachment.name} is still being read: send it once it is ready."
    return f"{attachment.name} cannot be sent: {attachment.error} Remove it."


def message_text_with(content: str, attachments: Sequence[Attachment]) -> str:
    """The message as the model reads it: what the user typed, then each file, labelled."""
    parts = [content] if content.strip() else []
    for a in attachments:
        if a.kind == Attachment.Kind.IMAGE:
            parts.append(f"{IMAGE_MARKER}{a.pk}: {a.name}]")
        else:
            parts.append(f"{FILE_MARKER}{a.pk}: {a.name}]\n{a.text}\n[End of {a.name}]")
    return "\n\n".join(parts)


def do_attachments_claim(*, attachments: Sequence[Attachment], message: Message) -> None:
    """In the send's transaction: the files now belong to ``message``. A concurrent send that
    claimed one first makes this one fail whole (its transaction rolls back)."""
    if not attachments:
        return
    ids = [a.pk for a in attachments]
    claimed = Attachment.objects.filter(pk__in=ids, message__isnull=True).update(message=message)
    if claimed != len(ids):
        raise ValidationFailed(
            details={"attachments": ["A file was sent with another message meanwhile."]}
        )


def attachments_sweep_unsent(*, older_than_seconds: int | None = None) -> int:
    """Delete uploads no sent message claimed within ``ATTACHMENT_UNSENT_RETENTION_SECONDS``
    (files attached and then abandoned). One conditional DELETE: a send that claims a file
    meanwhile either claimed it first (then it is not deleted) or finds it gone and is refused
    whole with "Attach it again" (``check_attachments_for_send`` / ``do_attachments_claim``).
    Returns how many were deleted."""
    age = (
        settings.ATTACHMENT_UNSENT_RETENTION_SECONDS
        if older_than_seconds is None
        else older_than_seconds
    )
    cutoff = timezone.now() - timedelta(seconds=age)
    deleted, _ = Attachment.objects.filter(message__isnull=True, created_at__lt=cutoff).delete()
    if deleted:
        log.info("unsent_attachments_swept", count=deleted, older_than_seconds=age)
    return deleted
