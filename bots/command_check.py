"""The limits of a chat command, checked by every interface before a send reaches the service.

``/compact <focus>`` typed in chat runs the same compaction as ``POST …/compact/ {focus}``, so
its focus has the same cap (the summary's ``focus`` field, 500 characters) and a longer one is
the same ``validation_error`` on ``focus``, with nothing stored. REST and websocket sends (and
the chat page, which uses them) call ``check_send`` first.
"""

from chat_platform.errors import ValidationFailed
from compaction.models import Summary
from turns.services.content import COMPACT_COMMAND, check_message_content

FOCUS_MAX_CHARS: int = Summary._meta.get_field("focus").max_length or 500


def check_send(*, content: object, client_id: object = None, allow_blank: bool = False) -> None:
    """Refuse a message the service would refuse, and a ``/compact`` whose focus is too long.
    ``allow_blank``: the message carries attachments (it may have no text of its own)."""
    text, _ = check_message_content(content=content, client_id=client_id, allow_blank=allow_blank)
    command = COMPACT_COMMAND.match(text.strip())
    if command and len((command["focus"] or "").strip()) > FOCUS_MAX_CHARS:
        # The words of the REST endpoint's own check (DRF's CharField max_length).
        raise ValidationFailed(
            details={"focus": [f"Ensure this field has no more than {FOCUS_MAX_CHARS} characters."]}
        )
