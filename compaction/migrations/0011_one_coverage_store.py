"""One store for "compacted" (docs/rooms.md "A seat's bounded read"): a one-bot chat's coverage,
until now on its messages (``Message.compacted_by_id``), becomes rows of its bot's seat
(``SummaryCoverage``), as a room's always were. The seat's totals count what they cover, the
session's running totals count every message in context again (a seat's pressure subtracts
its own coverage), and the seat's covered floor stops below its first message that is not
covered. A room that became one with coverage still on its messages (before rooms moved it)
has it become its default bot's rows, beside those it has (a pair already there is kept). The
foreign key of 0003 goes with the column (bots 0024)."""

from django.db import migrations
from django.db.models import Count, Max, Min, Sum

CONSTRAINT = "message_compacted_by_summary_fk"
ELIGIBLE = {
    "kind__in": ["chat", "tool"],
    "status__in": ["complete", "interrupted"],
    "token_count__gt": 0,
}


def rows_from_messages(apps, schema_editor):
    Message = apps.get_model("bots", "Message")
    ChatSession = apps.get_model("bots", "ChatSession")
    SummaryCoverage = apps.get_model("compaction", "SummaryCoverage")
    SeatState = apps.get_model("compaction", "SeatState")
    covered = Message.objects.filter(compacted_by_id__isnull=False)
    sessions = covered.order_by().values_list("session_id", flat=True).distinct()
    for session_id in sessions.iterator():
        bot_id = ChatSession.objects.filter(pk=session_id).values_list("bot_id", flat=True).get()
        mine = covered.filter(session_id=session_id)
        batch = []
        for pk, summary_id in mine.values_list("pk", "compacted_by_id").iterator():
            # The seat is the chat's bot: it was shown everything (a summary of a bot gone
            # since counts for the chat's bot, whose context it stands in).
            batch.append(SummaryCoverage(summary_id=summary_id, bot_id=bot_id, message_id=pk))
            if len(batch) >= 5000:
                SummaryCoverage.objects.bulk_create(batch, ignore_conflicts=True)
                batch = []
        SummaryCoverage.objects.bulk_create(batch, ignore_conflicts=True)
        totals = mine.filter(**ELIGIBLE).aggregate(tokens=Sum("token_count"), messages=Count("id"))
        tokens, messages = totals["tokens"] or 0, totals["messages"]
        # The floor: below the first message the bot is shown that no summary covers.
        first_open = (
            Message.objects.filter(
                session_id=session_id, kind__in=["chat", "tool"], compacted_by_id__isnull=True
            ).aggregate(first=Min("seq"))["first"]
        )
        last_covered = mine.aggregate(last=Max("seq"))["last"] or 0
        floor = last_covered if first_open is None else min(last_covered, first_open - 1)
        state, _ = SeatState.objects.get_or_create(session_id=session_id, bot_id=bot_id)
        SeatState.objects.filter(pk=state.pk).update(
            covered_tokens=state.covered_tokens + tokens,
            covered_messages=state.covered_messages + messages,
            covered_through_seq=max(floor, 0),
            uncovered_ids=[],
        )
        session = ChatSession.objects.filter(pk=session_id)
        row = session.values_list("context_tokens", "context_messages").get()
        session.update(context_tokens=row[0] + tokens, context_messages=row[1] + messages)


def messages_from_rows(apps, schema_editor):
    """Back: a one-bot chat's coverage of its bot's seat on its messages again, out of the
    session's running totals; a room's rows stay rows."""
    Message = apps.get_model("bots", "Message")
    ChatSession = apps.get_model("bots", "ChatSession")
    SummaryCoverage = apps.get_model("compaction", "SummaryCoverage")
    SeatState = apps.get_model("compaction", "SeatState")
    for session_id, bot_id in ChatSession.objects.filter(is_room=False).values_list(
        "pk", "bot_id"
    ).iterator():
        rows = SummaryCoverage.objects.filter(bot_id=bot_id, message__session_id=session_id)
        pairs = list(rows.values_list("message_id", "summary_id"))
        if not pairs:
            continue
        by_summary = {}
        for message_id, summary_id in pairs:
            by_summary.setdefault(summary_id, []).append(message_id)
        for summary_id, ids in by_summary.items():
            Message.objects.filter(pk__in=ids).update(compacted_by_id=summary_id)
        totals = Message.objects.filter(
            pk__in=[m for m, _ in pairs], **ELIGIBLE
        ).aggregate(tokens=Sum("token_count"), messages=Count("id"))
        rows.delete()
        SeatState.objects.filter(session_id=session_id, bot_id=bot_id).delete()
        session = ChatSession.objects.filter(pk=session_id)
        tokens, messages = session.values_list("context_tokens", "context_messages").get()
        session.update(
            context_tokens=max(0, tokens - (totals["tokens"] or 0)),
            context_messages=max(0, messages - totals["messages"]),
        )


def drop_constraint(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE bots_message DROP CONSTRAINT IF EXISTS {CONSTRAINT}")


def add_constraint(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"ALTER TABLE bots_message ADD CONSTRAINT {CONSTRAINT} FOREIGN KEY (compacted_by_id) "
            "REFERENCES compaction_summary (id) DEFERRABLE INITIALLY DEFERRED"
        )


class Migration(migrations.Migration):

    dependencies = [
        ("bots", "0023_slug_kept_by_a_retired_bot"),
        ("compaction", "0010_seat_floor"),
    ]

    operations = [
        migrations.RunPython(drop_constraint, add_constraint),
        migrations.RunPython(rows_from_messages, messages_from_rows),
    ]
