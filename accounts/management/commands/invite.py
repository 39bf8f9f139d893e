"""``manage.py invite [--note TEXT] [--days N] [--by USERNAME] [--site URL]``: make a single-use
invitation link from the shell (the staff page ``/accounts/invitations/`` does the same). The link
is printed once; only its SHA-256 is stored."""

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse

from accounts import services
from chat_platform.errors import ValidationFailed


class Command(BaseCommand):
    help = "Make a single-use sign-up invitation link and print it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--note", default="", help="Who the link is for (a reminder).")
        parser.add_argument("--days", default="", help="Days until it expires (1-365).")
        parser.add_argument("--by", default="", help="The staff user named as its maker.")
        parser.add_argument(
            "--site", default="", help="The site's address (e.g. https://chat.example.com)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        maker = None
        if options["by"]:
            maker = get_user_model().objects.filter(username=options["by"], is_staff=True).first()
            if maker is None:
                raise CommandError(f"No staff user named {options['by']!r}.")
        try:
            note, days = services.check_invitation_fields(
                note=options["note"], days=options["days"]
            )
        except ValidationFailed as exc:
            problems = "; ".join(f"--{k}: {' '.join(v)}" for k, v in exc.details.items())
            raise CommandError(problems) from None
        invitation, token = services.invitation_create(created_by=maker, note=note, days=days)
        path = reverse("account_signup") + f"?invite={token}"
        self.stdout.write(f"{options['site'].rstrip('/')}{path}")
        self.stderr.write(
            f"Invitation {invitation.pk}: single use, expires "
            f"{invitation.expires_at:%Y-%m-%d %H:%M} UTC; the link is not shown again."
        )
