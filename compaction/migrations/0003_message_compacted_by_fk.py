# Compaction owns the reference from a message to the summary that replaced it (issue 17,
# item 1): bots.Message.compacted_by_id is a plain column of the chat core, and this foreign key,
# added by the app above it, keeps it pointing at a real summary. Deferred, as Django's own
# constraints are, so a session's messages and summaries go in one transaction in any order.
# PostgreSQL only: embedded mode (SQLite) never enforced it either.

from django.db import migrations

CONSTRAINT = "message_compacted_by_summary_fk"


def add_constraint(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"ALTER TABLE bots_message ADD CONSTRAINT {CONSTRAINT} FOREIGN KEY (compacted_by_id) "
        "REFERENCES compaction_summary (id) DEFERRABLE INITIALLY DEFERRED"
    )


def drop_constraint(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"ALTER TABLE bots_message DROP CONSTRAINT IF EXISTS {CONSTRAINT}")


class Migration(migrations.Migration):

    dependencies = [
        ('bots', '0009_message_compacted_by_plain_column'),
        ('compaction', '0002_initial'),
    ]

    operations = [migrations.RunPython(add_constraint, drop_constraint)]
