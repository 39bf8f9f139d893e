"""Each distinct (api_base, api_key_env) of existing bots becomes a staff-owned connection.

The bots keep calling exactly what they called: the connection carries their base URL and key
variable (kind from their models' provider: openai, anthropic, or "litellm" taking any model
string when they differ), usable by the owners of those bots only (not public). The bot's
``api_base`` / ``api_key_env`` move onto the connection; reversing puts them back.
"""

from urllib.parse import urlsplit

from django.conf import settings
from django.db import migrations

KINDS = {"openai": "openai", "anthropic": "anthropic"}


def _name(api_base, api_key_env, taken):
    host = urlsplit(api_base).netloc if api_base else "provider default"
    base = f"{host} ({api_key_env})" if api_key_env else host
    name, n = base[:110], 2
    while name in taken:
        name = f"{base[:100]} #{n}"
        n += 1
    taken.add(name)
    return name


def _staff_approved(bot):
    """Only settings staff set or approved become a connection (which the gateway trusts):
    a bot whose api_base or model was never approved keeps being checked call by call."""
    models = [m for m in (bot.model, bot.compaction_model) if m]
    approved = bot.models_approved.split("\n")
    if bot.api_base:
        return bot.api_base == bot.api_base_approved and all(m in approved for m in models)
    return all(m in approved for m in models)


def forwards(apps, schema_editor):
    Bot = apps.get_model("bots", "Bot")
    Connection = apps.get_model("connections", "Connection")
    User = apps.get_model(settings.AUTH_USER_MODEL)
    staff = User.objects.filter(is_staff=True).order_by("-is_superuser", "pk").first()
    taken = set(Connection.objects.values_list("name", flat=True))
    pairs = {}
    for bot in Bot.objects.filter(connection__isnull=True).exclude(api_base="", api_key_env=""):
        if not _staff_approved(bot):
            continue  # stays on the advanced path, re-checked at every call as before
        pairs.setdefault((bot.api_base, bot.api_key_env), []).append(bot)
    for (api_base, api_key_env), bots in sorted(pairs.items()):
        prefixes = {b.model.partition("/")[0] for b in bots if "/" in b.model}
        prefix = prefixes.pop() if len(prefixes) == 1 else ""
        kind = KINDS.get(prefix, "litellm")
        connection = Connection.objects.create(
            name=_name(api_base, api_key_env, taken),
            kind=kind,
            provider=prefix if kind == "litellm" else "",
            base_url=api_base,
            api_key_env=api_key_env,
            public=False,
            created_by=staff,
        )
        connection.users.set({b.owner_id for b in bots})
        Bot.objects.filter(pk__in=[b.pk for b in bots]).update(
            connection=connection, api_base="", api_key_env=""
        )


def backwards(apps, schema_editor):
    Bot = apps.get_model("bots", "Bot")
    for bot in Bot.objects.filter(connection__isnull=False).select_related("connection"):
        if bot.connection.kind == "builtin":
            Bot.objects.filter(pk=bot.pk).update(connection=None)
            continue
        Bot.objects.filter(pk=bot.pk).update(
            api_base=bot.connection.base_url,
            api_key_env=bot.connection.api_key_env,
            connection=None,
        )


class Migration(migrations.Migration):
    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("bots", "0014_bot_connection"),
        ("connections", "0002_builtin_connection"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
