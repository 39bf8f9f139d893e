"""What a sent message's text may be, and whether it is the ``/compact`` command: checked before
anything is stored (docs/chat-turn.md)."""

import re

from django.conf import settings

from chat_platform.errors import PayloadTooLarge, ValidationFailed
from chat_platform.textcheck import UNSTORABLE_MESSAGE, text_is_storable

COMPACT_COMMAND = re.compile(r"^/compact(?:\s+(?P<focus>.*))?$", re.DOTALL)


def check_message_content(
    *, content: object, client_id: object = None, allow_blank: bool = False
) -> tuple[str, str | None]:
    """``allow_blank``: a message that carries attachments may have no text of its own."""
    if not isinstance(content, str):
        raise ValidationFailed(details={"content": ["This field is required and must be text."]})
    # Before measuring: a lone surrogate cannot even be encoded to count its bytes.
    if not text_is_storable(content):
        raise ValidationFailed(details={"content": [UNSTORABLE_MESSAGE]})
    if len(content.encode("utf-8")) > settings.MESSAGE_MAX_BYTES:
        raise PayloadTooLarge(details={"max_bytes": settings.MESSAGE_MAX_BYTES})
    if not content.strip() and not allow_blank:
        raise ValidationFailed(details={"content": ["This field may not be blank."]})
    if client_id is not None and client_id != "":
        if not isinstance(client_id, str) or len(client_id) > 100:
            raise ValidationFailed(details={"client_id": ["Must be a string of ≤ 100 chars."]})
        if not text_is_storable(client_id):
            raise ValidationFailed(details={"client_id": [UNSTORABLE_MESSAGE]})
        return content, client_id
    return content, None
