from django.db import migrations, models


def approve_staff_models(apps, schema_editor):
    """Bots of staff owners keep calling what they call today; everyone else's models are
    checked against the non-staff rules from now on (the defect this field closes)."""
    Bot = apps.get_model("bots", "Bot")
    for bot in Bot.objects.filter(owner__is_staff=True).only("model", "compaction_model"):
        approved = "\n".join(m for m in (bot.model, bot.compaction_model) if m)
        Bot.objects.filter(pk=bot.pk).update(models_approved=approved)


class Migration(migrations.Migration):
    dependencies = [("bots", "0007_bot_provider_policy_storable_text")]

    operations = [
        migrations.AddField(
            model_name="bot",
            name="models_approved",
            field=models.CharField(blank=True, default="", editable=False, max_length=402),
        ),
        migrations.RunPython(approve_staff_models, migrations.RunPython.noop),
    ]
