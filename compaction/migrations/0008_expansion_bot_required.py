"""Every pending expansion has its bot (0007 filled it in), one per (session, bot)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("bots", "0016_bot_embedding_model"),
        ("compaction", "0007_expansion_per_seat"),
    ]

    operations = [
        migrations.AlterField(
            model_name="contextexpansion",
            name="bot",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="bots.bot",
            ),
        ),
        migrations.AddConstraint(
            model_name="contextexpansion",
            constraint=models.UniqueConstraint(
                fields=("session", "bot"), name="expansion_session_bot"
            ),
        ),
    ]
