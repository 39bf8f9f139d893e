# The chat core no longer names compaction's model (issue 17, item 1): Message.compacted_by
# becomes the plain column compacted_by_id. The column, its values and its index stay as they
# are; only the foreign-key constraint is dropped here, and compaction's migration 0003 adds it
# back as its own.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('bots', '0008_bot_models_approved'),
        ('compaction', '0002_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.AlterField(
                    model_name='message',
                    name='compacted_by',
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        db_constraint=False,
                        on_delete=django.db.models.deletion.RESTRICT,
                        related_name='messages',
                        to='compaction.summary',
                    ),
                ),
            ],
            state_operations=[
                migrations.RemoveField(model_name='message', name='compacted_by'),
                migrations.AddField(
                    model_name='message',
                    name='compacted_by_id',
                    field=models.BigIntegerField(blank=True, db_index=True, null=True),
                ),
            ],
        ),
    ]
