from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from bots.models import Bot

# The everyday built-in bot: a large window, so it rarely compacts.
RECALL_BOT = {
    "name": "Recall (built-in)",
    "model": "builtin/recall",
    "system_prompt": "You are a helpful assistant that keeps the thread of long conversations.",
}
# The memory showcase: a window small enough to compact every few turns, yet big enough to hold
# the bot's instructions, a couple of summaries, a short memory index, the recent exchange and a
# recalled record or search hits. Replies of builtin/recall stay under 120 tokens, so a 256-token
# reserve is plenty; an index of 12 records costs at most ~300 tokens (older records stay
# searchable). Facts that leave the summaries come back through read_records / search_records.
TIGHT_BOT = {
    "name": "Recall, tight budget (built-in)",
    "model": "builtin/recall",
    "system_prompt": (
        "You are a helpful assistant with a deliberately small context window: older messages "
        "are compacted into summaries and snapshots, and recalled from memory when needed."
    ),
    "context_window": 2048,
    "max_output_tokens": 256,
    "memory_index_size": 8,
}
DEMO_BOTS = [RECALL_BOT, TIGHT_BOT]


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
            # Re-seeding brings a demo bot back to its showcase settings.
            Bot.objects.update_or_create(
                owner=user, name=spec["name"], defaults={**spec, "is_shared": True}
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"demo user {'created' if created else 'reset'}; {len(DEMO_BOTS)} shared bots ready"
            )
        )
