from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from bots.models import Bot

DEMO_BOTS = [
    {
        "name": "Recall (built-in)",
        "model": "builtin/recall",
        "system_prompt": "You are a helpful assistant that keeps the thread of long conversations.",
    },
    {
        "name": "Recall, tight budget (built-in)",
        "model": "builtin/recall",
        "system_prompt": "You are a helpful assistant with a deliberately small context window.",
        "context_window": 4096,
        "max_output_tokens": 512,
    },
]


class Command(BaseCommand):
    help = "Create the demo/demo user and two shared built-in bots (DEBUG or --force only)."

    def add_arguments(self, parser):
        parser.add_argument("--force", action="store_true", help="Run even when DEBUG is false.")

    @transaction.atomic
    def handle(self, *args, **options):
        if not settings.DEBUG and not options["force"]:
            raise CommandError(
                "seed_demo creates a demo/demo account: refused unless DEBUG or --force."
            )
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(username="demo")
        user.set_password("demo")
        user.save()
        for spec in DEMO_BOTS:
            bot, _ = Bot.objects.get_or_create(
                owner=user, name=spec["name"], defaults={**spec, "is_shared": True}
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"demo user {'created' if created else 'reset'}; {len(DEMO_BOTS)} shared bots ready"
            )
        )
