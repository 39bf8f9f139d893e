from django.core.management.base import BaseCommand

from turns.watchdog import messages_sweep_orphans, turns_watchdog


class Command(BaseCommand):
    help = (
        "Mark replies stuck in pending/streaming for over 10 minutes as interrupted; with "
        "--watchdog, also interrupt turns whose heartbeat stopped and hand never-started replies "
        "to the task queue again (what beat runs every few seconds)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=int, default=None, help="Seconds (default 600).")
        parser.add_argument(
            "--watchdog", action="store_true", help="Also run the heartbeat/outbox watchdog."
        )

    def handle(self, *args, **options):
        if options["watchdog"]:
            result = turns_watchdog()
            self.stdout.write(
                f"watchdog: {result.interrupted} dead turn(s) interrupted, "
                f"{result.dispatched} reply(ies) handed to the queue"
            )
        count = messages_sweep_orphans(older_than_seconds=options["older_than"])
        self.stdout.write(f"{count} message(s) marked interrupted")
