"""The staff page for invitations (``/accounts/invitations/``) and the ``invite`` command: a link
made there signs one person up; anyone but staff gets 404; bad input is refused and makes
nothing; the main navigation leads to it (staff) and to the usage page (everyone)."""

import datetime as dt
import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from accounts import services
from accounts.models import Invitation
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

User = get_user_model()
PAGE = "/accounts/invitations/"
PASSWORD = "a-long-pass-phrase-9"
LINK = re.compile(
    r'id="invitation-link" value="(http://testserver/accounts/signup/\?invite=([^"]+))"'
)


@pytest.fixture
def staff_web(staff):
    client = Client()
    client.force_login(staff)
    return client


def _sign_up(client, username):
    return client.post(
        "/accounts/signup/",
        {
            "username": username,
            "email": f"{username}@example.com",
            "password1": PASSWORD,
            "password2": PASSWORD,
        },
    )


def test_staff_make_a_link_that_signs_up_exactly_one_person(settings, staff, staff_web):
    settings.ACCOUNT_SIGNUP_MODE = "invite"
    settings.ACCOUNT_INVITE_DAYS = 7
    before = timezone.now()
    response = staff_web.post(PAGE, {"action": "create", "note": "for Ann", "days": ""})
    assert response.status_code == 200
    page = response.content.decode()
    link, token = LINK.search(page).groups()
    invitation = Invitation.objects.get()
    assert (invitation.note, invitation.created_by, invitation.state) == ("for Ann", staff, "open")
    assert token not in invitation.token_digest
    assert dt.timedelta(days=7) <= invitation.expires_at - before < dt.timedelta(days=7, seconds=60)
    # Shown once: the page read again lists the invitation but not its link.
    again = staff_web.get(PAGE).content.decode()
    assert token not in again
    assert f'data-invitation-id="{invitation.pk}"' in again

    person = Client()
    assert person.get(link).status_code == 200
    assert _sign_up(person, "ann").status_code == 302
    ann = User.objects.get(username="ann")
    assert ann.is_active is True
    listing = staff_web.get(PAGE).content.decode()
    row = listing[listing.index(f'data-invitation-id="{invitation.pk}"') :]
    assert "<td data-state>used</td>" in row.split("</tr>")[0]
    assert "<td>ann</td>" in row.split("</tr>")[0]
    refused = Client().get(link)
    assert refused.status_code == 403
    assert _sign_up(Client(), "bob").status_code == 403
    assert not User.objects.filter(username="bob").exists()


def test_days_sets_the_expiry(staff_web):
    before = timezone.now()
    assert staff_web.post(PAGE, {"action": "create", "days": "30"}).status_code == 200
    expires = Invitation.objects.get().expires_at
    assert dt.timedelta(days=30) <= expires - before < dt.timedelta(days=30, seconds=60)


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"note": "x" * 201}, "note", "At most 200 characters."),
        ({"note": "bad\x00note"}, "note", "NUL"),
        ({"days": "0"}, "days", "A whole number of days from 1 to 365."),
        ({"days": "366"}, "days", "A whole number of days from 1 to 365."),
        ({"days": "two"}, "days", "A whole number of days from 1 to 365."),
        ({"days": "-3"}, "days", "A whole number of days from 1 to 365."),
    ],
)
def test_bad_input_is_refused_with_the_reason_and_makes_nothing(staff_web, fields, field, message):
    response = staff_web.post(PAGE, {"action": "create", **fields})
    assert response.status_code == 400
    page = response.content.decode()
    errors = page[page.index(f'id="id_{field}_errors"') :].split("</ul>")[0]
    assert message in errors
    assert 'id="invitation-link"' not in page
    assert not Invitation.objects.exists()


def test_revoke_expires_an_open_link_and_an_unknown_id_is_404(settings, staff, staff_web):
    settings.ACCOUNT_SIGNUP_MODE = "invite"
    invitation, token = services.invitation_create(created_by=staff)
    response = staff_web.post(PAGE, {"action": "revoke", "invitation": str(invitation.pk)})
    assert response.status_code == 200
    assert "Invitation revoked: its link no longer works." in response.content.decode()
    invitation.refresh_from_db()
    assert invitation.state == "expired"
    assert Client().get(f"/accounts/signup/?invite={token}").status_code == 403
    again = staff_web.post(PAGE, {"action": "revoke", "invitation": str(invitation.pk)})
    assert "already used or expired; nothing changed" in again.content.decode()
    for unknown in ("999999", "abc", "", "-1"):
        assert staff_web.post(PAGE, {"action": "revoke", "invitation": unknown}).status_code == 404
    assert staff_web.post(PAGE, {"action": "shred"}).status_code == 400


def test_anyone_but_staff_gets_404_and_nothing_is_made_or_revoked(owner, staff):
    invitation, _ = services.invitation_create(created_by=staff)
    client = Client()
    client.force_login(owner)
    assert client.get(PAGE).status_code == 404
    assert client.post(PAGE, {"action": "create", "note": "me"}).status_code == 404
    assert client.post(PAGE, {"action": "revoke", "invitation": invitation.pk}).status_code == 404
    assert list(Invitation.objects.values_list("pk", flat=True)) == [invitation.pk]
    invitation.refresh_from_db()
    assert invitation.state == "open"
    anonymous = Client().get(PAGE)
    assert anonymous.status_code == 302
    assert anonymous["Location"] == f"/accounts/login/?next={PAGE}"
    # A deactivated staff account is no staff.
    gone = UserFactory(username="gone", is_staff=True)
    gone_client = Client()
    gone_client.force_login(gone)
    User.objects.filter(pk=gone.pk).update(is_active=False)
    assert gone_client.get(PAGE).status_code in (302, 404)


def test_the_invite_command_prints_a_working_link(settings, staff):
    settings.ACCOUNT_SIGNUP_MODE = "invite"
    out, err = StringIO(), StringIO()
    call_command(
        "invite",
        "--note",
        "for Cy",
        "--days",
        "3",
        "--by",
        "staff",
        "--site",
        "https://chat.example.com/",
        stdout=out,
        stderr=err,
    )
    link = out.getvalue().strip()
    prefix = "https://chat.example.com/accounts/signup/?invite="
    assert link.startswith(prefix)
    token = link[len(prefix) :]
    invitation = services.invitation_check(token=token)
    assert (invitation.note, invitation.created_by) == ("for Cy", staff)
    assert f"Invitation {invitation.pk}: single use" in err.getvalue()
    assert token not in err.getvalue()
    with pytest.raises(CommandError, match="--days: A whole number of days from 1 to 365."):
        call_command("invite", "--days", "0", stdout=StringIO(), stderr=StringIO())
    with pytest.raises(CommandError, match="No staff user named 'owner'"):
        UserFactory(username="owner")
        call_command("invite", "--by", "owner", stdout=StringIO(), stderr=StringIO())
    assert Invitation.objects.count() == 1


def test_the_main_navigation_links_usage_settings_for_all_and_invitations_for_staff(owner, staff):
    nav = re.compile(r'<nav class="app-nav" aria-label="Main">(.*?)</nav>', re.S)
    user_web = Client()
    user_web.force_login(owner)
    staff_client = Client()
    staff_client.force_login(staff)
    for path in ("/", "/bots/", "/usage/"):
        mine = nav.search(user_web.get(path, follow=True).content.decode()).group(1)
        assert re.findall(r'href="([^"]+)"', mine) == ["/bots/", "/usage/", "/settings/"], path
        theirs = nav.search(staff_client.get(path, follow=True).content.decode()).group(1)
        assert re.findall(r'href="([^"]+)"', theirs) == [
            "/bots/",
            "/usage/",
            "/settings/",
            "/accounts/invitations/",
            "/admin/",
        ], path
