"""Reads of attachments: one file for its owner (the download, an image's thumbnail), and the
images of messages a model call carries (the context pipeline renders them as image content
parts)."""

import base64
import re

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser

from attachments.imagesize import image_size
from attachments.models import Attachment
from chat_platform.errors import NotFound


def attachment_get_for_user(
    *, user: AbstractBaseUser, attachment_id: object, with_content: bool = True
) -> Attachment:
    """The owner's file; anyone else's (or none) is the same ``not_found``. Without content:
    its bytes and text are not loaded (the status a page polls)."""
    try:
        pk = int(str(attachment_id))
    except ValueError:
        pk = 0
    rows = Attachment.objects.filter(pk=pk, user_id=user.pk)
    if not with_content:
        rows = rows.defer("data", "text")
    found = rows.first()
    if found is None:
        raise NotFound("Attachment not found.")
    return found


def attachment_thumbnail_for_user(*, user: AbstractBaseUser, attachment_id: object) -> Attachment:
    """The owner's image, to be shown in the page as it is (docs/attachments.md "Thumbnails"):
    the same access check as the download (anyone else's: ``not_found``), and only an image
    whose header says at most ATTACHMENT_THUMBNAIL_MAX_PIXELS and whose bytes are at most
    ATTACHMENT_THUMBNAIL_MAX_BYTES; the server never decodes it."""
    found = attachment_get_for_user(user=user, attachment_id=attachment_id, with_content=False)
    if found.kind != Attachment.Kind.IMAGE:
        raise NotFound("This file is not an image: it has no thumbnail. Download it.")
    if found.size > settings.ATTACHMENT_THUMBNAIL_MAX_BYTES:
        raise NotFound(_too_big(found))
    found = attachment_get_for_user(user=user, attachment_id=found.pk)
    size = image_size(bytes(found.data))
    if size is None or size[0] * size[1] > settings.ATTACHMENT_THUMBNAIL_MAX_PIXELS:
        raise NotFound(_too_big(found))
    return found


def _too_big(found: Attachment) -> str:
    return (
        f"{found.name} is shown as a link only: a thumbnail is for images up to "
        f"{settings.ATTACHMENT_THUMBNAIL_MAX_PIXELS:,} pixels and "
        f"{settings.ATTACHMENT_THUMBNAIL_MAX_BYTES:,} bytes (or its header could not be read)."
    )


IMAGE_ID = re.compile(r"\[Attached image #(\d+): ")


def image_ids_named(text: str) -> list[int]:
    """The images a message's text names, each once, in order, ``ATTACHMENT_MESSAGE_MAX_FILES``
    at most: what it sends and what its stored count holds (``image_tokens_named``). Markers
    typed by hand sent one image fifty times, none of them counted."""
    ids = list(dict.fromkeys(int(i) for i in IMAGE_ID.findall(text) if len(i) < 19))
    return ids[: settings.ATTACHMENT_MESSAGE_MAX_FILES]


def image_tokens_named(text: str) -> int:
    """What the images ``text`` names add to its count, ``ATTACHMENT_IMAGE_TOKENS`` each (a
    marker naming no file of its user's counts too: never less than what is sent)."""
    if "[Attached image #" not in text:
        return 0
    return len(image_ids_named(text)) * settings.ATTACHMENT_IMAGE_TOKENS


def images_for_messages(*, user_id: int, contents: dict[int, str]) -> dict[int, list[str]]:
    """The images the messages name (``[Attached image #<id>: …]`` lines: ``image_ids_named``),
    as data URLs, per message id in the order named. Found by the id in the text, so a branch's
    or an import's copy of a message carries its images too; only ``user_id``'s own files are
    ever read (a marker typed by hand naming someone else's file finds nothing)."""
    wanted = {mid: image_ids_named(text) for mid, text in contents.items()}
    ids = {i for named in wanted.values() for i in named}
    if not ids:
        return {}
    rows = Attachment.objects.filter(
        pk__in=ids, user_id=user_id, kind=Attachment.Kind.IMAGE
    ).values_list("pk", "content_type", "data")
    urls = {
        pk: f"data:{content_type};base64,{base64.b64encode(bytes(data)).decode('ascii')}"
        for pk, content_type, data in rows
    }
    return {
        mid: [urls[i] for i in named if i in urls]
        for mid, named in wanted.items()
        if any(i in urls for i in named)
    }
