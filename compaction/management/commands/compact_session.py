from django.core.management.base import BaseCommand, CommandError

from bots.models import ChatSession
from chat_platform.errors import CompactionBusy, QuotaExceeded
from chat_platform.textcheck import UNSTORABLE_MESSAGE, text_is_storable
from compaction.engine import compaction_manual
from compaction.services import compaction_notice_text


class Command(BaseCommand):
    help = "Compact a session's history now, as /compact does (operator tool: no user check)."

    def add_arguments(self, parser):
        parser.add_argument("session_id", type=int)
        parser.add_argument("--focus", default="", help="What the summary should keep above all.")

    def handle(self, *args, **options):
        session = ChatSession.objects.select_related("bot").filter(pk=options["session_id"]).first()
        if session is None:
            raise CommandError(f"No session {options['session_id']}.")
        if not text_is_storable(options["focus"]):  # bytes the shell did not decode, a NUL
            raise CommandError(f"--focus: {UNSTORABLE_MESSAGE}")
        try:
            result = compaction_manual(session=session, focus=options["focus"])
        except (CompactionBusy, QuotaExceeded) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(compaction_notice_text(result))
        if result.outcome in ("failed", "rejected"):
            raise CommandError(f"compaction {result.outcome}: {result.reason}")
