"""Attachments: upload a file to a chat, then send it with a message.

An upload is checked whole before a row is written (name, size, what the bytes are, whether the
chat's model accepts images); a send names uploaded ids, and the message it writes carries the
files' text in its ``content`` (so its ``token_count``, the running totals, admission,
compaction, snapshots and search all see it as the text it is). Images are a marker line in the
text, sent to the model as image content parts (``attachments.queries.images_for_messages``).
"""

from collections.abc import Sequence
from datetime import timedelta

import structlog
from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import timezone

from attachments.extract import AttachmentRefused, Limits, check_file_name, extract
from attachments.models import Attachment
from bots.models import ChatSession, Message
from bots.queries import session_get_for_use
from chat_platform.errors import PayloadTooLarge, ValidationFailed
from chat_platform.llm import gateway

log = structlog.get_logger(__name__)

IMAGE_MARKER = "[Attached image #"
FILE_MARKER = "[Attached file #"


def _limits() -> Limits:
    return Limits(
        max_text_chars=settings.ATTACHMENT_TEXT_MAX_CHARS,
        pdf_max_pages=settings.ATTACHMENT_PDF_MAX_PAGES,
        pdf_max_stream_bytes=settings.ATTACHMENT_PDF_MAX_STREAM_BYTES,
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
    unsent = Attachment.objects.filter(session=session, message__isnull=True).count()
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
    )
    log.info(
        "attachment_uploaded",
        attachment_id=attachment.pk,
        session_id=session.pk,
        kind=attachment.kind,
        size=attachment.size,
    )
    return attachment


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


def message_text_with(content: str, attachments: Sequence[Attachment]) -> str:
    """The message as the model reads it: what the user typed, then each file, labelled."""
    parts = [content] if content.strip() else []
    for a in attachments:
        if a.kind == Attachment.Kind.IMAGE:
            parts.append(f"{IMAGE_MARKER}{a.pk}: {a.name}]")
        else:
            parts.append(f"{FILE_MARKER}{a.pk}: {a.name}]\n{a.text}\n[End of {a.name}]")
    return "\n\n".join(parts)


def attachments_extra_tokens(attachments: Sequence[Attachment]) -> int:
    """What the images add to the message's count (their text is counted with the message)."""
    images = sum(1 for a in attachments if a.kind == Attachment.Kind.IMAGE)
    return images * settings.ATTACHMENT_IMAGE_TOKENS


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
