"""What a staff member who is not a superuser can reach in the admin (docs/security.md, "The
admin"): never a credential in clear (API tokens, TOTP secrets, sign-in provider tokens), never
an account with more rights than their own (a superuser's or another staff member's password,
email address, sign-in identity, second factor or API keys), never rights of their own making;
and an edit the admin allows goes through the same rules as the API."""

import pytest
from allauth.account.models import EmailAddress
from allauth.mfa.models import Authenticator
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth.models import Group, Permission
from django.test import Client
from rest_framework.authtoken.models import Token

from bots.models import Bot, ChatSession, Message
from openai_api.models import ApiKey
from tests.factories import BotFactory, SessionFactory, message_add

pytestmark = pytest.mark.django_db

SECRET = "JRTTOHCA7W7UQWERTYUIOPASDFGHJKLZ"


@pytest.fixture
def root(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "root-pass-91")


def _staff(django_user_model, name: str, *codenames: str):
    user = django_user_model.objects.create_user(name, f"{name}@example.com", "staff-pass-91")
    user.is_staff = True
    user.save()
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_no_admin_page_shows_an_api_token_or_a_totp_secret(django_user_model, root):
    token = Token.objects.create(user=root)
    alice = django_user_model.objects.create_user("alice", "alice@example.com", "x-pass-91")
    Authenticator.objects.create(user=alice, type="totp", data={"secret": SECRET})
    viewer = _staff(
        django_user_model, "viewer", "view_tokenproxy", "view_token", "view_authenticator"
    )
    for client in (_signed_in(viewer), _signed_in(root)):
        assert client.get("/admin/authtoken/tokenproxy/").status_code == 404
        listed = client.get("/admin/mfa/authenticator/")
        assert listed.status_code == 200
        authenticator = Authenticator.objects.get(user=alice)
        page = client.get(f"/admin/mfa/authenticator/{authenticator.pk}/change/")
        assert page.status_code == 200
        for text in (listed, page):
            assert SECRET not in text.content.decode()
            assert token.key not in text.content.decode()
    for path in ("/admin/socialaccount/socialtoken/", "/admin/rest_framework_api_key/apikey/"):
        assert _signed_in(root).get(path).status_code == 404


def test_staff_cannot_make_an_api_key_for_anyone(django_user_model, root):
    keymaker = _staff(django_user_model, "keymaker", "add_apikey", "view_apikey")
    for client in (_signed_in(keymaker), _signed_in(root)):
        made = client.post(
            "/admin/openai_api/apikey/add/", {"name": "mine now", "user": root.pk, "access": "full"}
        )
        assert made.status_code == 403
    assert ApiKey.objects.count() == 0


def test_staff_cannot_move_a_superusers_email_address(django_user_model, root):
    address = EmailAddress.objects.create(
        user=root, email="root@example.com", verified=True, primary=True
    )
    mailer = _staff(
        django_user_model, "mailer", "change_emailaddress", "add_emailaddress", "view_emailaddress"
    )
    client = _signed_in(mailer)
    changed = client.post(
        f"/admin/account/emailaddress/{address.pk}/change/",
        {"user": root.pk, "email": "attacker@evil.test", "verified": "on", "primary": "on"},
    )
    assert changed.status_code == 302  # to the admin index: not one it may see
    added = client.post(
        "/admin/account/emailaddress/add/",
        {"user": root.pk, "email": "second@evil.test", "verified": "on"},
    )
    assert added.status_code == 403, added.context["adminform"].form.errors
    assert list(EmailAddress.objects.values_list("email", flat=True)) == ["root@example.com"]
    assert "root@example.com" not in client.get("/admin/account/emailaddress/").content.decode()
    # An ordinary user's address is still theirs to correct.
    alice = django_user_model.objects.create_user("alice", "alice@example.com", "x-pass-91")
    theirs = EmailAddress.objects.create(user=alice, email="alice@example.com")
    fixed = client.post(
        f"/admin/account/emailaddress/{theirs.pk}/change/",
        {"user": alice.pk, "email": "alice@example.org", "verified": "on", "primary": "on"},
    )
    assert fixed.status_code == 302
    theirs.refresh_from_db()
    assert (theirs.email, theirs.verified) == ("alice@example.org", True)


def test_staff_cannot_tie_a_sign_in_identity_to_a_superuser(django_user_model, root):
    alice = django_user_model.objects.create_user("alice", "alice@example.com", "x-pass-91")
    identity = SocialAccount.objects.create(user=alice, provider="openid_connect", uid="sub-1")
    linker = _staff(django_user_model, "linker", "change_socialaccount", "view_socialaccount")
    moved = _signed_in(linker).post(
        f"/admin/socialaccount/socialaccount/{identity.pk}/change/",
        {
            "user": root.pk,
            "provider": "openid_connect",
            "uid": "sub-1",
            "extra_data": '{"sub": "sub-1"}',
        },
    )
    assert moved.status_code == 403, moved.context["adminform"].form.errors
    identity.refresh_from_db()
    assert identity.user_id == alice.pk


def test_staff_cannot_raise_their_own_rights_or_take_a_superusers_account(django_user_model, root):
    staffy = _staff(django_user_model, "staffy", "view_user", "change_user", "change_group")
    client = _signed_in(staffy)
    own = client.post(
        f"/admin/auth/user/{staffy.pk}/change/",
        {
            "username": "staffy",
            "email": "staffy@example.com",
            "is_active": "on",
            "is_staff": "on",
            "is_superuser": "on",
            "user_permissions": [p.pk for p in Permission.objects.all()],
            "date_joined_0": "2026-12-07",
            "date_joined_1": "10:00:00",
        },
    )
    assert own.status_code == 302, own.content.decode()[:2000]
    staffy.refresh_from_db()
    assert staffy.is_superuser is False
    assert staffy.user_permissions.count() == 3
    password = client.post(
        f"/admin/auth/user/{root.pk}/password/",
        {"password1": "taken-over-91x", "password2": "taken-over-91x", "usable_password": "true"},
    )
    assert password.status_code == 403
    root.refresh_from_db()
    assert root.check_password("root-pass-91")
    # A group's rights are set by superusers: a group of one's own cannot carry new ones.
    group = Group.objects.create(name="helpdesk")
    staffy.groups.add(group)
    granted = client.post(
        f"/admin/auth/group/{group.pk}/change/",
        {"name": "helpdesk", "permissions": [p.pk for p in Permission.objects.all()]},
    )
    assert granted.status_code == 302
    assert group.permissions.count() == 0


def _bot_admin_post(bot: Bot, **fields) -> dict:
    from django.forms.models import model_to_dict

    from tests.connections.test_admin import _bot_admin_data
    from turns.services.bot import BOT_FIELDS

    return _bot_admin_data(**{**model_to_dict(bot, fields=BOT_FIELDS), "slug": bot.slug, **fields})


def test_deleting_a_shared_bot_in_the_admin_keeps_other_peoples_chats(django_user_model, root):
    alice = django_user_model.objects.create_user("alice", "alice@example.com", "x-pass-91")
    bob = django_user_model.objects.create_user("bob", "bob@example.com", "x-pass-91")
    shared = BotFactory(owner=alice, name="Slowbot", slug="slowbot", is_shared=True)
    own = SessionFactory(user=alice, bot=shared)
    theirs = SessionFactory(user=bob, bot=shared)
    message_add(theirs, role="user", content="Where is the spare key?")
    client = _signed_in(root)
    page = client.get(f"/admin/bots/bot/{shared.pk}/delete/").content.decode()
    assert "Cannot delete" not in page
    deleted = client.post(f"/admin/bots/bot/{shared.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert not ChatSession.objects.filter(pk=own.pk).exists()
    assert ChatSession.objects.filter(pk=theirs.pk).exists()
    assert Message.objects.filter(session=theirs).count() == 1
    shared.refresh_from_db()
    assert shared.retired_at is not None and shared.is_shared is False


def test_the_admin_neither_deletes_a_message_nor_moves_a_bot_to_another_owner(
    django_user_model, root
):
    alice = django_user_model.objects.create_user("alice", "alice@example.com", "x-pass-91")
    bob = django_user_model.objects.create_user("bob", "bob@example.com", "x-pass-91")
    bot = BotFactory(owner=alice, name="Alices", slug="alices")
    chat = SessionFactory(user=alice, bot=bot)
    first = message_add(chat, role="user", content="Hello")
    client = _signed_in(root)
    assert (
        client.post(f"/admin/bots/message/{first.pk}/delete/", {"post": "yes"}).status_code == 403
    )
    assert Message.objects.filter(pk=first.pk).exists()
    moved = client.post(f"/admin/bots/bot/{bot.pk}/change/", _bot_admin_post(bot, owner=bob.pk))
    assert moved.status_code == 302, moved.content.decode()[:3000]
    bot.refresh_from_db()
    assert bot.owner_id == alice.pk


def test_unstorable_text_in_an_admin_filter_is_a_400(root):
    answered = _signed_in(root).get("/admin/bots/message/?content=%00x")
    assert answered.status_code == 400


def test_the_api_bookkeeping_is_never_edited_in_the_admin(django_user_model, root):
    """Which key a chat and a turn of the /v1 API belong to: moving a superuser's chat to one's
    own key would hand it over. Viewed and deleted, never added or changed, by anyone."""
    from openai_api.models import ApiSession, ApiTurn

    bot = BotFactory(owner=root)
    chat = SessionFactory(user=root, bot=bot)
    reply = message_add(chat, role="assistant", content="hi")
    ApiSession.objects.create(session=chat, key_name="root's")
    ApiTurn.objects.create(reply=reply, session=chat)
    editor = _staff(
        django_user_model,
        "editor",
        *[
            f"{verb}_{model}"
            for verb in ("view", "change", "add")
            for model in ("apisession", "apiturn")
        ],
    )
    for client in (_signed_in(editor), _signed_in(root)):
        for path, pk in (("apisession", chat.pk), ("apiturn", reply.pk)):
            assert client.get(f"/admin/openai_api/{path}/{pk}/change/").status_code == 200
            changed = client.post(f"/admin/openai_api/{path}/{pk}/change/", {"key_name": "mine"})
            assert changed.status_code == 403
            assert client.get(f"/admin/openai_api/{path}/add/").status_code == 403
    assert ApiSession.objects.get().key_name == "root's"
