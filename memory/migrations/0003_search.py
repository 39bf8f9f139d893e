"""Full-text search objects: a trigger-maintained tsvector + GIN index on PostgreSQL, an FTS5
table synced by triggers on SQLite (memory/search_schema.py). Vendor-specific, so RunPython
rather than RunSQL; the model state does not change."""

from django.db import migrations

from memory.search_schema import search_schema_install, search_schema_uninstall


def install(apps, schema_editor):
    search_schema_install(schema_editor.connection)


def uninstall(apps, schema_editor):
    search_schema_uninstall(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0002_scopes_recall_events'),
    ]

    operations = [
        migrations.RunPython(install, uninstall),
    ]
