"""The sign-up modes end to end (accounts app, docs/accounts.md): closed, invite, approval, open."""

import datetime as dt

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts import services
from accounts.models import AccountApproval, Invitation
from chat_platform.asgi import application
from openai_api.keys import key_create
from tests.factories import BotFactory, SessionFactory, UserFactory

User = get_user_model()
SIGNUP = "/accounts/signup/"
PASSWORD = "a-long-pass-phrase-9"


def _signup(client, username="newbie", email="newbie@example.com", **extra):
    return client.post(
        SIGNUP,
        {
            "username": username,
            "email": email,
            "password1": PASSWORD,
            "password2": PASSWORD,
            **extra,
        },
    )


def _signed_in_as(client):
    return client.session.get("_auth_user_id")


# --- closed ------------------------------------------------------------------------------------


def test_closed_is_the_default_mode():
    from chat_platform import settings as project_settings

    assert project_settings.ACCOUNT_SIGNUP_MODE == "closed"


@pytest.mark.django_db
def test_closed_mode_says_so_and_creates_nobody(settings):
    settings.ACCOUNT_SIGNUP_MODE = "closed"
    page = Client().get(SIGNUP)
    assert page.status_code == 200
    assert "This site does not take sign-ups: an administrator creates accounts." in (
        page.content.decode()
    )
    client = Client()
    _signup(client)
    assert not User.objects.filter(username="newbie").exists()
    assert _signed_in_as(client) is None
    login = Client().get("/accounts/login/").content.decode()
    assert "Create an account" not in login
    assert 'href="/accounts/password/reset/"' in login


# --- open --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_open_mode_creates_an_active_account_and_sends_the_verification_mail(settings):
    settings.ACCOUNT_SIGNUP_MODE = "open"
    assert 'href="/accounts/signup/"' in Client().get("/accounts/login/").content.decode()
    client = Client()
    response = _signup(client)
    assert response.status_code == 302
    user = User.objects.get(username="newbie")
    assert user.is_active is True
    assert user.email == "newbie@example.com"
    assert _signed_in_as(client) == str(user.pk)
    assert not AccountApproval.objects.exists()
    assert [m.to for m in mail.outbox] == [["newbie@example.com"]]
    assert "/accounts/confirm-email/" in mail.outbox[0].body


# --- invite ------------------------------------------------------------------------------------


@pytest.fixture
def invite_mode(settings):
    settings.ACCOUNT_SIGNUP_MODE = "invite"


@pytest.mark.django_db
def test_invite_mode_without_a_link_refuses(invite_mode):
    page = Client().get(SIGNUP)
    assert page.status_code == 403
    assert "Accounts here are by invitation only" in page.content.decode()
    _signup(Client())
    assert not User.objects.filter(username="newbie").exists()


@pytest.mark.django_db
def test_an_invitation_signs_up_once_and_is_refused_the_second_time(invite_mode, staff):
    invitation, token = services.invitation_create(created_by=staff, note="for newbie")
    assert invitation.token_digest != token and token not in invitation.token_digest
    client = Client()
    assert client.get(f"{SIGNUP}?invite={token}").status_code == 200
    response = _signup(client)
    assert response.status_code == 302
    user = User.objects.get(username="newbie")
    assert user.is_active is True
    invitation.refresh_from_db()
    assert invitation.used_by == user
    assert invitation.used_at is not None
    assert invitation.state == "used"

    second = Client()
    refused = second.get(f"{SIGNUP}?invite={token}")
    assert refused.status_code == 403
    assert "This invitation link has already been used. Ask for a new one." in (
        refused.content.decode()
    )
    _signup(second, username="sneaky", email="sneaky@example.com")
    assert not User.objects.filter(username="sneaky").exists()


@pytest.mark.django_db
def test_a_link_used_while_a_form_was_open_is_refused_and_leaves_no_account(invite_mode, staff):
    _invitation, token = services.invitation_create(created_by=staff)
    first, second = Client(), Client()
    assert first.get(f"{SIGNUP}?invite={token}").status_code == 200
    assert second.get(f"{SIGNUP}?invite={token}").status_code == 200
    assert _signup(first).status_code == 302
    refused = _signup(second, username="late", email="late@example.com")
    assert refused.status_code == 403
    assert "already been used" in refused.content.decode()
    assert not User.objects.filter(username="late").exists()
    assert Invitation.objects.get().used_by.username == "newbie"


@pytest.mark.django_db
def test_the_claim_is_conditional_so_a_race_has_one_winner(staff):
    _invitation, token = services.invitation_create(created_by=staff)
    winner = UserFactory(username="winner")
    loser = UserFactory(username="loser")
    services.invitation_claim(token=token, user=winner)
    with pytest.raises(services.InvitationRefused) as refused:
        services.invitation_claim(token=token, user=loser)
    assert refused.value.reason == "used"
    assert Invitation.objects.get().used_by == winner


@pytest.mark.django_db
def test_an_expired_invitation_is_refused(invite_mode, staff):
    invitation, token = services.invitation_create(created_by=staff)
    now = timezone.now()
    Invitation.objects.filter(pk=invitation.pk).update(
        created_at=now - dt.timedelta(days=8), expires_at=now - dt.timedelta(seconds=1)
    )
    refused = Client().get(f"{SIGNUP}?invite={token}")
    assert refused.status_code == 403
    assert "This invitation link has expired. Ask for a new one." in refused.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["nope", "x" * 5000, "bad%00token", "%ED%A0%80", "%FF"])
def test_an_unknown_or_malformed_token_is_refused_clearly(invite_mode, staff, query):
    services.invitation_create(created_by=staff)
    refused = Client().get(f"{SIGNUP}?invite={query}")
    assert refused.status_code == 403
    assert "This invitation link is not valid. Ask for a new one." in refused.content.decode()


@pytest.mark.django_db
def test_staff_make_an_invitation_in_the_admin_and_see_its_link_once(invite_mode):
    boss = UserFactory(username="boss", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(boss)
    response = client.post("/admin/accounts/invitation/add/", {"note": "for Ann"}, follow=True)
    assert response.status_code == 200
    text = response.content.decode()
    invitation = Invitation.objects.get()
    assert invitation.created_by == boss and invitation.note == "for Ann"
    start = text.index("http://testserver/accounts/signup/?invite=")
    link = text[start:].split()[0].split("<")[0]
    token = link.rpartition("=")[2]
    assert services.invitation_check(token=token) == invitation
    # The list shows no token.
    listing = client.get("/admin/accounts/invitation/").content.decode()
    assert token not in listing
    # Revoked: refused as expired.
    client.post(
        "/admin/accounts/invitation/",
        {"action": "revoke", "_selected_action": [invitation.pk]},
    )
    with pytest.raises(services.InvitationRefused) as refused:
        services.invitation_check(token=token)
    assert refused.value.reason == "expired"


@pytest.mark.django_db
def test_a_non_staff_user_cannot_make_invitations(owner):
    client = Client()
    client.force_login(owner)
    response = client.post("/admin/accounts/invitation/add/", {"note": "me"})
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    assert not Invitation.objects.exists()


# --- approval ----------------------------------------------------------------------------------


@pytest.fixture
def pending_user(settings, db):
    settings.ACCOUNT_SIGNUP_MODE = "approval"
    client = Client()
    response = _signup(client)
    assert response.status_code == 302
    assert response["Location"] == "/accounts/inactive/"
    assert _signed_in_as(client) is None
    return User.objects.get(username="newbie")


@pytest.mark.django_db
def test_approval_mode_account_waits_inactive_in_the_queue(pending_user):
    assert pending_user.is_active is False
    approval = AccountApproval.objects.get(user=pending_user)
    assert approval.status == "pending"
    assert approval.decided_at is None
    page = Client().get("/accounts/inactive/").content.decode()
    assert "an administrator must approve it before you can sign in" in page


@pytest.mark.django_db
def test_a_pending_user_cannot_sign_in_on_the_page_or_get_a_token(pending_user):
    client = Client()
    page = client.post("/accounts/login/", {"username": "newbie", "password": PASSWORD})
    assert page.status_code == 200
    assert "This account is waiting for an administrator&#x27;s approval." in (
        page.content.decode()
    )
    assert _signed_in_as(client) is None
    wrong = Client().post("/accounts/login/", {"username": "newbie", "password": "wrong"})
    assert "waiting for" not in wrong.content.decode()
    token = APIClient().post(
        "/api/v1/auth/token/", {"username": "newbie", "password": PASSWORD}, format="json"
    )
    assert token.status_code == 403
    assert token.json()["error"]["code"] == "account_pending"
    assert not Token.objects.filter(user=pending_user).exists()


@pytest.mark.django_db
def test_a_pending_user_cannot_use_the_rest_or_openai_api_whatever_credential_they_hold(
    pending_user,
):
    # Credentials made behind the sign-in's back (a token, an API key): still refused.
    token = Token.objects.create(user=pending_user)
    _key, raw_key = key_create(user=pending_user, name="k")
    bot = BotFactory(owner=pending_user)
    session = SessionFactory(user=pending_user, bot=bot)
    rest = APIClient()
    rest.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    sent = rest.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": "hello"}, format="json"
    )
    assert sent.status_code == 401
    assert session.messages.count() == 0
    keyed = APIClient()
    keyed.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    assert keyed.get("/api/v1/bots/").status_code == 401
    completion = keyed.post(
        "/v1/chat/completions",
        {"model": str(bot.pk), "messages": [{"role": "user", "content": "hi"}]},
        format="json",
    )
    assert completion.status_code == 401
    assert session.messages.count() == 0
    # A session cookie cannot be had either: force_login's session is refused at the next request.
    browser = Client()
    browser.force_login(pending_user)
    assert browser.get("/").status_code == 302


@pytest.mark.django_db(transaction=True)
async def test_a_pending_user_cannot_open_the_websocket(settings):
    from asgiref.sync import sync_to_async

    def make():
        user = UserFactory(username="waiting", is_active=False)
        AccountApproval.objects.create(user=user)
        session = SessionFactory(user=user, bot=BotFactory(owner=user))
        return session, Token.objects.create(user=user).key

    session, key = await sync_to_async(make)()
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=[(b"authorization", f"Token {key}".encode())],
    )
    await communicator.connect(timeout=5)
    assert await communicator.receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": 4401,
    }
    await communicator.disconnect()


@pytest.mark.django_db
def test_approval_in_the_admin_lets_them_in(pending_user):
    boss = UserFactory(username="boss", is_staff=True, is_superuser=True)
    admin = Client()
    admin.force_login(boss)
    queue = admin.get("/admin/accounts/accountapproval/?status__exact=pending").content.decode()
    assert "newbie" in queue
    approval = AccountApproval.objects.get(user=pending_user)
    admin.post(
        "/admin/accounts/accountapproval/",
        {"action": "approve", "_selected_action": [approval.pk]},
    )
    approval.refresh_from_db()
    pending_user.refresh_from_db()
    assert approval.status == "approved"
    assert approval.decided_by == boss
    assert pending_user.is_active is True
    client = Client()
    signed_in = client.post("/accounts/login/", {"username": "newbie", "password": PASSWORD})
    assert signed_in.status_code == 302
    assert _signed_in_as(client) == str(pending_user.pk)
    token = APIClient().post(
        "/api/v1/auth/token/", {"username": "newbie", "password": PASSWORD}, format="json"
    )
    assert token.status_code == 200
    # Decided once: a second decision changes nothing.
    assert services.approval_decide(approval_ids=[approval.pk], approve=False, by=boss) == 0
    pending_user.refresh_from_db()
    assert pending_user.is_active is True


@pytest.mark.django_db
def test_a_rejected_account_stays_out(pending_user, staff):
    approval = AccountApproval.objects.get(user=pending_user)
    assert services.approval_decide(approval_ids=[approval.pk], approve=False, by=staff) == 1
    pending_user.refresh_from_db()
    assert pending_user.is_active is False
    page = Client().post("/accounts/login/", {"username": "newbie", "password": PASSWORD})
    assert page.status_code == 200
    assert "waiting for" not in page.content.decode()
