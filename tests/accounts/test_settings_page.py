"""``/settings/`` (docs/accounts.md): profile, API keys made and revoked through
``openai_api.keys`` (the REST API's service functions), the key shown once, usage."""

import re

import pytest
from django.test import Client

from openai_api.models import ApiKey
from tests.factories import BotFactory

pytestmark = pytest.mark.django_db

KEY_RE = re.compile(r"<code data-new-key>([^<]+)</code>")


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _models(raw: str):
    return Client().get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {raw}")


def test_the_page_needs_a_sign_in():
    response = Client().get("/settings/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/settings/"
    refused = Client().post("/settings/api-keys/", {"name": "x", "access": "full"})
    assert refused.status_code == 302
    assert ApiKey.objects.count() == 0


def test_the_page_shows_the_profile_the_account_links_and_is_in_the_header(owner):
    owner.first_name, owner.last_name, owner.email = "Ada", "Lovelace", "ada@example.com"
    owner.save()
    page = _signed_in(owner).get("/settings/")
    assert page.status_code == 200
    html = page.content.decode()
    assert '<dd data-profile="name">Ada Lovelace</dd>' in html
    assert '<dd data-profile="email">ada@example.com</dd>' in html
    for href in ("/accounts/password/change/", "/accounts/email/", "/accounts/2fa/", "/usage/"):
        assert f'href="{href}"' in html
    assert "No API keys yet." in html
    assert html.count('href="/settings/"') == 2  # the header's nav and its phone menu
    for path in ("/bots/", "/chat/new/"):
        assert (
            _signed_in(owner).get(path, follow=True).content.decode().count('href="/settings/"')
            == 2
        )


def test_no_stale_signed_in_notice_waits_for_a_later_page(owner):
    """The chat page a sign-in lands on shows no notices, so "Successfully signed in as …"
    waited for the next page that does (the settings, a bot's page) and appeared there."""
    client = Client()
    signed_in = client.post(
        "/accounts/login/", {"username": owner.username, "password": "pw-123456"}
    )
    assert signed_in.status_code == 302
    for path in ("/settings/", "/bots/"):
        assert "Successfully signed in" not in client.get(path).content.decode()


def test_the_profile_changes_the_users_name_and_refuses_bad_text(owner):
    """The profile section edits the name (it was shown only); bad text changes nothing."""
    client = _signed_in(owner)
    assert 'name="first_name"' in client.get("/settings/").content.decode()
    saved = client.post("/settings/profile/", {"first_name": "Ada", "last_name": "Lovelace"})
    assert (saved.status_code, saved["Location"]) == (302, "/settings/")
    owner.refresh_from_db()
    assert (owner.first_name, owner.last_name) == ("Ada", "Lovelace")
    page = client.get("/settings/").content.decode()
    assert '<dd data-profile="name">Ada Lovelace</dd>' in page
    assert "Profile saved." in page
    refused = client.post("/settings/profile/", {"first_name": "A\x00", "last_name": "x" * 151})
    assert refused.status_code == 400
    assert refused.context["profile_form"].errors == {
        "first_name": ["Null characters are not allowed."],
        "last_name": ["Ensure this value has at most 150 characters (it has 151)."],
    }
    owner.refresh_from_db()
    assert (owner.first_name, owner.last_name) == ("Ada", "Lovelace")
    assert Client().post("/settings/profile/", {"first_name": "Eve"}).status_code == 302


# /v1/ runs its database work on another thread (its own connection): committed rows only.
@pytest.mark.django_db(transaction=True)
def test_creating_a_key_shows_it_once_and_it_works_until_revoked(owner):
    bot = BotFactory(owner=owner, name="Writer")
    client = _signed_in(owner)
    made = client.post(
        "/settings/api-keys/",
        {
            "name": "my editor",
            "bots": [str(bot.pk)],
            "expires_at": "2099-01-01T00:00",
            "daily_token_limit": "200000",
            "access": "read",
        },
    )
    assert made.status_code == 200
    assert made["Cache-Control"] == "no-store"
    (raw,) = KEY_RE.findall(made.content.decode())
    key = ApiKey.objects.get(user=owner)
    assert raw.startswith(f"{key.prefix}.")
    assert (key.name, key.all_bots, key.access, key.daily_token_limit) == (
        "my editor",
        False,
        "read",
        200000,
    )
    assert [b.pk for b in key.bots.all()] == [bot.pk]
    assert key.expiry_date.isoformat() == "2099-01-01T00:00:00+00:00"

    listed = _models(raw)
    assert listed.status_code == 200
    assert [m["id"] for m in listed.json()["data"]] == ["writer"]

    # Shown once: the page afterwards lists the key by its prefix, never its text.
    again = client.get("/settings/").content.decode()
    assert f'data-key-prefix="{key.prefix}"' in again
    assert raw not in again and raw.split(".", 1)[1] not in again

    revoked = client.post(f"/settings/api-keys/{key.prefix}/revoke/")
    assert revoked.status_code == 302 and revoked["Location"] == "/settings/"
    assert _models(raw).status_code == 401
    after = client.get("/settings/").content.decode()
    assert f"Key {key.prefix} revoked: it no longer works." in after
    assert f'data-key-prefix="{key.prefix}"' not in after


def test_a_key_for_all_bots_with_the_defaults(owner):
    BotFactory(owner=owner, name="Writer")
    made = _signed_in(owner).post("/settings/api-keys/", {"name": "cli", "access": "full"})
    assert made.status_code == 200
    key = ApiKey.objects.get(user=owner)
    assert (key.all_bots, key.access, key.daily_token_limit, key.expiry_date) == (
        True,
        "full",
        None,
        None,
    )


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"name": " ", "access": "full"}, "name", "This field is required."),
        ({"name": "k", "access": "full", "bots": ["999999"]}, "bots", "Select a valid choice."),
        (
            {"name": "k", "access": "full", "expires_at": "2001-01-01T00:00"},
            "expires_at",
            "The expiry must be in the future.",
        ),
        (
            {"name": "k", "access": "full", "daily_token_limit": "0"},
            "daily_token_limit",
            "A whole number of tokens from 1 to 2,000,000,000.",
        ),
        ({"name": "k", "access": "admin"}, "access", "Select a valid choice."),
    ],
)
def test_bad_input_is_refused_with_its_reason_and_makes_no_key(owner, fields, field, message):
    response = _signed_in(owner).post("/settings/api-keys/", fields)
    assert response.status_code == 400
    html = response.content.decode()
    assert f'data-field="{field}"' in html
    assert message in html
    assert "data-new-key" not in html
    assert ApiKey.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_another_users_key_cannot_be_revoked(owner, other_user):
    from openai_api.keys import key_create

    key, raw = key_create(user=other_user, name="theirs")
    response = _signed_in(owner).post(f"/settings/api-keys/{key.prefix}/revoke/")
    assert response.status_code == 404
    key.refresh_from_db()
    assert key.revoked is False
    assert _models(raw).status_code == 200


def test_forms_need_the_csrf_token(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.post("/settings/api-keys/", {"name": "k", "access": "full"}).status_code == 403
    assert ApiKey.objects.count() == 0


def test_the_pages_numbers_have_thousands_separators(owner):
    """Today's usage, the limit and a key's daily limit read as 181,125, never 181125."""
    from connections import usage
    from connections.models import TokenCounter, UserQuota

    UserQuota.objects.create(user=owner, daily_token_limit=2_500_000)
    TokenCounter.objects.create(subject=f"user:{owner.pk}", day=usage.today(), used=181_125)
    ApiKey.objects.all().delete()
    client = _signed_in(owner)
    made = client.post(
        "/settings/api-keys/", {"name": "big", "access": "full", "daily_token_limit": "1234567"}
    )
    assert made.status_code == 200
    page = client.get("/settings/").content.decode()
    (today,) = re.findall(r"<p data-usage-today>([^(]+)\(", page)
    assert today == "Today: 181,125 tokens of 2,500,000 "
    key = ApiKey.objects.get(user=owner)
    (row,) = re.findall(rf'<tr data-key-prefix="{key.prefix}">(.*?)</tr>', page, re.S)
    assert "<td>1,234,567</td>" in row
    assert "181125" not in page and "2500000" not in page and "1234567" not in page


def test_reloading_the_page_that_showed_a_new_key_makes_no_second_key(owner):
    """The form carries a token good for one creation: a reload posts the form again, and made
    another full-access key each time."""
    client = _signed_in(owner)
    page = client.get("/settings/").content.decode()
    once = re.search(r'name="once" value="([^"]+)"', page).group(1)
    made = client.post("/settings/api-keys/", {"name": "cli", "access": "full", "once": once})
    assert made.status_code == 200
    again = client.post("/settings/api-keys/", {"name": "cli", "access": "full", "once": once})
    assert (again.status_code, again["Location"]) == (302, "/settings/")
    assert ApiKey.objects.filter(user=owner).count() == 1
    shown = client.get("/settings/").content.decode()
    assert "That form was sent already" in shown


def test_without_a_daily_limit_today_is_what_the_usage_page_counts(owner):
    """No limit, so no counter row: the page said "Today: 0 tokens" while /usage/ showed the
    day's replies. It shows what /usage/ counts for today (yesterday's reply left out)."""
    import datetime as dt

    from bots.models import Message
    from tests.factories import SessionFactory, message_add

    session = SessionFactory(user=owner)
    today = message_add(
        session, role="assistant", content="a", prompt_tokens=100, completion_tokens=15
    )
    old = message_add(
        session, role="assistant", content="b", prompt_tokens=900, completion_tokens=9
    )
    Message.objects.filter(pk=old.pk).update(
        created_at=today.created_at - dt.timedelta(days=1, hours=1)
    )
    page = _signed_in(owner).get("/settings/").content.decode()
    (line,) = re.findall(r"<p data-usage-today>(.*?)</p>", page)
    assert line == "Today: 115 tokens (no daily limit)."
    usage_page = _signed_in(owner).get("/usage/").content.decode()
    assert "<span data-usage-total>1,024</span>" in usage_page


def test_the_key_forms_bot_choices_tell_a_shared_bot_from_ones_own(owner, other_user):
    """Two bots of one name and slug, one's own and another user's shared one, were two
    identical choices; the shared one is named as /v1 names it then: ``owner/slug``."""
    mine = BotFactory(owner=owner, name="Recall", slug="recall")
    theirs = BotFactory(owner=other_user, name="Recall", slug="recall", is_shared=True)

    page = _signed_in(owner).get("/settings/").content.decode()

    found = re.findall(
        r'<input type="checkbox" name="bots" value="(\d+)"[^>]*>\s*([^<]*)</label>', page
    )
    options = {pk: text.strip() for pk, text in found}
    assert options[str(mine.pk)] == "Recall (recall)"
    assert options[str(theirs.pk)] == "Recall (other/recall)"
