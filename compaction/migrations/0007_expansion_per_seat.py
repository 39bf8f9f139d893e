"""A pending expansion per (session, bot) instead of per session (issues 19 and 22).

Until now ``ContextExpansion`` was one row per session: in a room, setting an expansion for one
bot replaced another bot's, and any reply's build deleted it. Each row now names the bot whose
next reply carries it. Existing rows get their bot here: a room's from the seat's snapshot name
it was stored under (``snapshot_<f>_<l>_b<bot>``), every other row from the session's bot. A
room row naming a bot that no longer exists is deleted: no seat can ever claim it.

Reversible, with a loss: a session keeps only its newest pending expansion when going back to
one per session (0008 makes ``bot`` required and unique per session in its own transaction, so
the rows written here are committed before the table is altered again)."""

import re

import django.db.models.deletion
from django.db import migrations, models

# ``memory.services.snapshot_name`` of a room seat: ``snapshot_<first>_<last>_b<bot id>``.
SEAT_SUFFIX = re.compile(r"^snapshot_\d+_\d+_b(\d+)$")


def expansion_bots_assign(apps, schema_editor):
    """Give every row without a bot its bot: a room's from its record's ``_b<bot>`` suffix,
    others (and a room's row without the suffix: set before the session became a room) the
    session's bot."""
    Expansion = apps.get_model("compaction", "ContextExpansion")
    Bot = apps.get_model("bots", "Bot")
    rows = list(
        Expansion.objects.filter(bot__isnull=True).values_list(
            "pk", "record", "session__bot_id", "session__is_room"
        )
    )
    named: dict[int, int] = {}  # row -> the bot its record names
    for pk, record, _, is_room in rows:
        match = SEAT_SUFFIX.match(record) if is_room else None
        if match:
            named[pk] = int(match.group(1))
    existing = set(Bot.objects.filter(pk__in=set(named.values())).values_list("pk", flat=True))
    gone = []
    for pk, _, session_bot_id, _ in rows:
        bot_id = named.get(pk, session_bot_id)
        if bot_id not in existing and pk in named:
            gone.append(pk)
            continue
        Expansion.objects.filter(pk=pk).update(bot_id=bot_id)
    Expansion.objects.filter(pk__in=gone).delete()


def expansions_one_per_session(apps, schema_editor):
    """Back to one row per session: each session keeps its newest pending expansion."""
    Expansion = apps.get_model("compaction", "ContextExpansion")
    keep: dict[int, int] = {}
    for pk, session_id in Expansion.objects.order_by("created_at", "pk").values_list(
        "pk", "session_id"
    ):
        keep[session_id] = pk  # the last one seen is the newest
    Expansion.objects.exclude(pk__in=list(keep.values())).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("bots", "0016_bot_embedding_model"),
        ("compaction", "0006_context_records"),
    ]

    operations = [
        migrations.AddField(
            model_name="contextexpansion",
            name="bot",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="bots.bot",
            ),
        ),
        migrations.AlterField(
            model_name="contextexpansion",
            name="session",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="context_expansions",
                to="bots.chatsession",
            ),
        ),
        migrations.RunPython(expansion_bots_assign, expansions_one_per_session),
    ]
