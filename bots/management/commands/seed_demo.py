from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from bots.models import Bot, ChatSession
from turns.services.participants import participant_add, session_reply_mode_set
from turns.services.session import session_create
from turns.tools_demo import demo_tools_seed

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
# A room with both (docs/rooms.md): every message is answered by each bot in turn, and each
# compacts the room from its own seat — the tight one every few turns, the roomy one rarely —
# so a newcomer can watch two bots remember one conversation separately, without any key.
DEMO_ROOM_TITLE = "Demo room: two bots, two memories"

# In embedded mode the demo user is staff with *view* permissions only, so the summary audit
# (/admin/compaction/summary/) is one click away without handing out a superuser: it can read
# every summary, event, record and message, and change nothing (the audit admins are read-only
# anyway, and without change/delete permissions the other admin pages are read-only too).
DEMO_VIEW_PERMISSIONS = [
    ("bots", "view_bot"),
    ("bots", "view_chatsession"),
    ("bots", "view_message"),
    ("compaction", "view_summary"),
    ("compaction", "view_compactionevent"),
    ("compaction", "view_compactionstate"),
    ("compaction", "view_seatstate"),
    ("compaction", "view_contextrecord"),
    ("memory", "view_memoryrecord"),
    ("memory", "view_recallevent"),
]


class Command(BaseCommand):
    help = "Create the demo/demo user and two shared built-in bots (DEBUG or --force only)."

    def add_arguments(self, parser):
        parser.add_argument("--force", action="store_true", help="Run even when DEBUG is false.")
        parser.add_argument(
            "--migrate",
            action="store_true",
            help="Apply migrations first, in this process (`make run`: one start of Django "
            "instead of two).",
        )
        parser.add_argument(
            "--tools-url",
            default="",
            help="The demo tool server's URL (scripts/demo_mcp.py): registered as the public "
            "tool server demo-tools, its tools read, and a shared bot given them.",
        )

    def handle(self, *args, **options):
        if not settings.DEBUG and not options["force"]:
            raise CommandError(
                "seed_demo creates a demo/demo account: refused unless DEBUG or --force."
            )
        if options["migrate"]:
            call_command("migrate", interactive=False, verbosity=options["verbosity"])
        user = self._seed()
        if options["tools_url"]:
            # Outside the seed's transaction: reading the server's tools is network I/O.
            self.stdout.write(demo_tools_seed(user=user, url=options["tools_url"]))

    @transaction.atomic
    def _seed(self):
        user_model = get_user_model()
        # Seed only what is missing: `make run` seeds on every start, and a user's edits (the
        # demo password, a demo bot's settings) must survive a restart.
        user, created = user_model.objects.get_or_create(username="demo")
        if created:
            user.set_password("demo")
        if settings.EMBEDDED:
            user.is_staff = True
        user.save()
        if settings.EMBEDDED:
            user.user_permissions.add(*self._view_permissions())
        added = 0
        bots = []
        for spec in DEMO_BOTS:
            bot, made = Bot.objects.get_or_create(
                owner=user, name=spec["name"], defaults={**spec, "is_shared": True}
            )
            bots.append(bot)
            added += made
        room = self._room(user, bots)
        staff = "; demo is staff (read-only admin at /admin/)" if settings.EMBEDDED else ""
        self.stdout.write(
            self.style.SUCCESS(
                f"demo user {'created' if created else 'kept'}; {len(DEMO_BOTS)} shared bots "
                f"ready ({added} added); demo room {room}{staff}"
            )
        )
        return user

    @staticmethod
    def _room(user, bots: list[Bot]) -> str:
        """The demo room, if the demo user has none by its title: the roomy bot as default, the
        tight one beside it, every participant answering (``all``). Through the services, as a
        user would make it; a room the user changed (or emptied) is kept as it is."""
        if ChatSession.objects.filter(user=user, title=DEMO_ROOM_TITLE).exists():
            return "kept"
        roomy, tight = bots
        session = session_create(user=user, bot_id=roomy.pk, title=DEMO_ROOM_TITLE)
        participant_add(user=user, session_id=session.pk, bot_id=tight.pk)
        session_reply_mode_set(
            user=user, session_id=session.pk, reply_mode=ChatSession.ReplyMode.ALL
        )
        return "created"

    @staticmethod
    def _view_permissions() -> list[Permission]:
        wanted = set(DEMO_VIEW_PERMISSIONS)
        found = [
            permission
            for permission in Permission.objects.filter(
                codename__in=[codename for _, codename in wanted]
            ).select_related("content_type")
            if (permission.content_type.app_label, permission.codename) in wanted
        ]
        if len(found) != len(wanted):
            raise CommandError("view permissions missing: run `manage.py migrate` first")
        return found
