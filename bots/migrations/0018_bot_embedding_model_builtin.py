"""``Bot.embedding_model`` defaults to the built-in embedding model (docs/models.md).

Existing bots whose field is blank get it too: until now blank was the only default (there was
no built-in model to name), so a blank field says "left at its default", and the contract uses
the built-in model for every bot left at its default. An owner who wants words only blanks the
field again after this. Their messages are embedded from then on as they are written; older
ones when the next compaction of each chat embeds what is pending.
"""

import chat_platform.textcheck
from django.db import migrations, models

BUILTIN = "builtin/embed"


def forwards(apps, schema_editor):
    apps.get_model("bots", "Bot").objects.filter(embedding_model="").update(
        embedding_model=BUILTIN
    )


def backwards(apps, schema_editor):
    apps.get_model("bots", "Bot").objects.filter(embedding_model=BUILTIN).update(
        embedding_model=""
    )


class Migration(migrations.Migration):
    dependencies = [
        ("bots", "0017_message_charged_to"),
    ]

    operations = [
        migrations.AlterField(
            model_name="bot",
            name="embedding_model",
            field=models.CharField(
                blank=True,
                default=BUILTIN,
                max_length=200,
                validators=[chat_platform.textcheck.validate_storable_text],
            ),
        ),
        migrations.RunPython(forwards, backwards),
    ]
