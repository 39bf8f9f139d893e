"""The built-in models (builtin/recall, builtin/extractive) as a connection everyone may use."""

from django.db import migrations


def builtin_create(apps, schema_editor):
    Connection = apps.get_model("connections", "Connection")
    Connection.objects.get_or_create(
        kind="builtin",
        defaults={
            "name": "Built-in",
            "public": True,
            "model_list": [{"id": "recall"}, {"id": "extractive"}],
        },
    )


def builtin_delete(apps, schema_editor):
    apps.get_model("connections", "Connection").objects.filter(kind="builtin").delete()


class Migration(migrations.Migration):
    dependencies = [("connections", "0001_connections")]

    operations = [migrations.RunPython(builtin_create, builtin_delete)]
