"""An import's per-message CPU: the messages' own stamps and answers are written without the
ORM building a ``CASE WHEN pk = … THEN …`` per row and field (``bots.bulk``; a batch of 6 cost
5-6 ms of CPU that way, 0.4-0.5 ms through ``chat_platform.dbwrite.rows_update``), still one
statement per batch."""

import io
import json

import pytest

from bots.models import ChatSession, Message
from tests.transfer.test_import_export import CHATGPT_CURRENT_STAMPS, chatgpt_conversation
from transfer.services import chats_import

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_imports_stamps_and_replies_are_written_without_a_case_per_row(
    owner, bot, case_whens_built
):
    built = case_whens_built
    data = json.dumps([chatgpt_conversation()]).encode()
    result = chats_import(user=owner, bot_id=bot.pk, raw=io.BytesIO(data), size=len(data))
    assert built == []
    (entry,) = result.imported
    main = ChatSession.objects.get(pk=entry["session"])
    rows = {
        m.seq: m
        for m in Message.objects.filter(session=main).select_related("reply_to").order_by("seq")
    }
    # their own stamps, not the time of the import (auto_now stamped them on insert)
    assert [(m.created_at.timestamp(), m.updated_at.timestamp()) for m in rows.values()] == [
        (t, t) for t in CHATGPT_CURRENT_STAMPS
    ]
    # each reply answers the user message just before it
    assert {s: m.reply_to.seq for s, m in rows.items() if m.reply_to} == {3: 2, 6: 5}
    # the branch chats' own messages: their stamps and answers too
    regenerated, edited = ChatSession.objects.filter(branch_of=main).order_by("pk")
    own = [
        (m.session_id, m.seq, m.role, m.reply_to.seq if m.reply_to else None)
        for m in Message.objects.filter(session__branch_of=main, seq__gte=2)
        .exclude(session=edited, seq__lt=2)
        .exclude(session=regenerated, seq__lt=6)
        .select_related("reply_to")
        .order_by("session_id", "seq")
    ]
    assert own == [
        (regenerated.pk, 6, "assistant", 5),
        (edited.pk, 2, "user", None),
        (edited.pk, 3, "assistant", 2),
    ]
    for message in Message.objects.filter(session__branch_of=main):
        assert message.created_at.timestamp() < 1800000000
        assert message.updated_at.timestamp() < 1800000000
