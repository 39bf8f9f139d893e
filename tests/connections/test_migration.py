"""The data migration: each distinct (api_base, api_key_env) of bots staff approved becomes a
connection usable by those bots' owners; unapproved bots stay on the advanced path."""

from importlib import import_module

import pytest
from django.apps import apps

from bots.models import Bot
from connections.models import Connection
from tests.factories import BotFactory

pytestmark = pytest.mark.django_db

migration = import_module("bots.migrations.0015_connections_from_api_base")


def _approved(owner, api_base, key_env, model="openai/gpt-4o"):
    return BotFactory(
        owner=owner,
        model=model,
        api_base=api_base,
        api_key_env=key_env,
        api_base_approved=api_base,
        models_approved=model,
    )


def test_each_approved_pair_becomes_one_connection(owner, other_user, staff):
    a = _approved(owner, "http://gpu.test/v1", "OPENAI_API_KEY")
    b = _approved(other_user, "http://gpu.test/v1", "OPENAI_API_KEY")
    c = _approved(owner, "", "ANTHROPIC_API_KEY", model="anthropic/claude-3-5-sonnet-latest")
    unapproved = BotFactory(
        owner=owner,
        model="openai/x",
        api_base="http://listed.test/v1",
        api_base_approved="",
        models_approved="",
    )
    builtin = BotFactory(owner=owner)

    migration.forwards(apps, None)

    made = {c.name: c for c in Connection.objects.exclude(kind="builtin")}
    assert sorted(made) == ["gpu.test (OPENAI_API_KEY)", "provider default (ANTHROPIC_API_KEY)"]
    gpu = made["gpu.test (OPENAI_API_KEY)"]
    assert (gpu.kind, gpu.base_url, gpu.api_key_env, gpu.public, gpu.created_by) == (
        "openai",
        "http://gpu.test/v1",
        "OPENAI_API_KEY",
        False,
        staff,
    )
    assert set(gpu.users.all()) == {owner, other_user}
    assert made["provider default (ANTHROPIC_API_KEY)"].kind == "anthropic"
    for bot, connection in ((a, gpu), (b, gpu)):
        bot.refresh_from_db()
        assert (bot.connection_id, bot.api_base, bot.api_key_env) == (connection.pk, "", "")
    c.refresh_from_db()
    assert c.connection == made["provider default (ANTHROPIC_API_KEY)"]
    unapproved.refresh_from_db()
    assert (unapproved.connection_id, unapproved.api_base) == (None, "http://listed.test/v1")
    assert Bot.objects.get(pk=builtin.pk).connection_id is None

    migration.backwards(apps, None)
    a.refresh_from_db()
    assert (a.connection_id, a.api_base, a.api_key_env) == (
        None,
        "http://gpu.test/v1",
        "OPENAI_API_KEY",
    )
