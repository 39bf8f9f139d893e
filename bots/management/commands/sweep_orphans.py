from django.core.management.base import BaseCommand

from bots.services import messages_sweep_orphans


class Command(BaseCommand):
    help = "Mark replies stuck in pending/streaming for over 10 minutes as interrupted."

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=int, default=None, help="Seconds (default 600).")

    def handle(self, *args, **options):
        count = messages_sweep_orphans(older_than_seconds=options["older_than"])
        self.stdout.write(f"{count} message(s) marked interrupted")
