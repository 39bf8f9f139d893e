"""A retired bot keeps its slug (its old messages name it: docs/bots.md "Deleting a bot"); only
bots still in service must have one unique per owner. Bots retired before this lost theirs:
each is given its name's slug again (as ``bots.models.slug_from_name`` makes it)."""

import re

from django.conf import settings
from django.db import migrations, models
from django.utils.text import slugify


def _slug_from_name(name):
    # The rule of ``bots.models.slug_from_name`` as it was when this migration was written.
    slug = re.sub(r"[^a-z0-9]+", "-", slugify(name).lower()).strip("-")[:60].strip("-")
    return slug or "bot"


def slugs_back(apps, schema_editor):
    Bot = apps.get_model("bots", "Bot")
    for bot in Bot.objects.filter(retired_at__isnull=False, slug=""):
        Bot.objects.filter(pk=bot.pk).update(slug=_slug_from_name(bot.name))


class Migration(migrations.Migration):
    dependencies = [
        ("bots", "0022_bot_retired_at"),
        ("connections", "0002_builtin_connection"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="bot",
            name="bot_owner_slug_unique",
        ),
        migrations.AddConstraint(
            model_name="bot",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    models.Q(("slug", ""), _negated=True), ("retired_at__isnull", True)
                ),
                fields=("owner", "slug"),
                name="bot_owner_slug_unique",
            ),
        ),
        migrations.RunPython(slugs_back, migrations.RunPython.noop),
    ]
