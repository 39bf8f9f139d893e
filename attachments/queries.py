"""Reads of attachments: one file for its owner (the download), and the images of messages a
model call carries (the context pipeline renders them as image content parts)."""

import base64

from django.contrib.auth.base_user import AbstractBaseUser

from attachments.models import Attachment
from chat_platform.errors import NotFound


def attachment_get_for_user(*, user: AbstractBaseUser, attachment_id: object) -> Attachment:
    """The owner's file; anyone else's (or none) is the same ``not_found``."""
    try:
        pk = int(str(attachment_id))
    except ValueError:
        pk = 0
    found = Attachment.objects.filter(pk=pk, user_id=user.pk).first()
    if found is None:
        raise NotFound("Attachment not found.")
    return found


def images_for_messages(message_ids: list[int]) -> dict[int, list[str]]:
    """The images attached to these messages as data URLs, per message id, in upload order."""
    if not message_ids:
        return {}
    rows = (
        Attachment.objects.filter(message_id__in=message_ids, kind=Attachment.Kind.IMAGE)
        .order_by("id")
        .values_list("message_id", "content_type", "data")
    )
    images: dict[int, list[str]] = {}
    for message_id, content_type, data in rows:
        encoded = base64.b64encode(bytes(data)).decode("ascii")
        images.setdefault(message_id, []).append(f"data:{content_type};base64,{encoded}")
    return images
