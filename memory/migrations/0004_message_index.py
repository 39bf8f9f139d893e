"""The message index (docs/memory.md: search at message level): the table, its vendor search
objects (memory/search_schema.py), and every message already compacted indexed, each held by the
narrowest succeeded snapshot that covers it (a pass's, not a fusion's)."""

import django.db.models.deletion


from django.db import migrations, models
from django.db.models import F

from memory.search_schema import (
    message_search_install,
    message_search_uninstall,
    messages_index_rows,
)


def install(apps, schema_editor):
    message_search_install(schema_editor.connection)
    MemoryRecord = apps.get_model("memory", "MemoryRecord")
    MessageIndex = apps.get_model("memory", "MessageIndex")
    Message = apps.get_model("bots", "Message")
    snapshots = (
        MemoryRecord.objects.filter(kind="snapshot", indexed=True, session__isnull=False)
        .annotate(width=F("last_seq") - F("first_seq"))
        .order_by("session_id", "width", "id")
        .values_list("pk", "session_id", "first_seq", "last_seq")
    )
    for record_id, session_id, first_seq, last_seq in snapshots.iterator():
        messages_index_rows(
            Message,
            MessageIndex,
            session_id=session_id,
            first_seq=first_seq,
            last_seq=last_seq,
            record_id=record_id,
        )


def uninstall(apps, schema_editor):
    message_search_uninstall(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ('bots', '0008_bot_models_approved'),
        ('memory', '0003_search'),
    ]

    operations = [
        migrations.CreateModel(
            name='MessageIndex',
            fields=[
                ('message', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='+', serialize=False, to='bots.message')),
                ('seq', models.PositiveIntegerField()),
                ('terms', models.TextField()),
                ('length', models.PositiveIntegerField()),
                ('record', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='memory.memoryrecord')),
                ('session', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='bots.chatsession')),
            ],
            options={
                'indexes': [models.Index(fields=['session', 'seq'], name='memory_message_index_seq')],
            },
        ),
        migrations.RunPython(install, uninstall),
    ]
