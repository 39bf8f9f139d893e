"""Every API way in asks what the login page asks (issue 30, item 7; docs/accounts.md, "Every way
in"): the token endpoint, DRF token and session auth, API keys on /api/v1/ and /v1/, and the
websocket handshake refuse an account with an unconfirmed address under mandatory verification,
a pending or inactive one, and an account with two-factor authentication without its code."""

import time

import pytest
from allauth.account.models import EmailAddress
from allauth.mfa.totp.internal.auth import (
    TOTP,
    format_hotp_value,
    generate_totp_secret,
    hotp_value,
)
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from bots.models import Bot, ChatSession
from chat_platform.asgi import application
from openai_api.keys import key_create
from openai_api.models import ApiKey
from tests.factories import BotFactory, SessionFactory, UserFactory

User = get_user_model()
TOKEN = "/api/v1/auth/token/"
SIGNUP_PASSWORD = "a-long-pass-phrase-9"
FACTORY_PASSWORD = "pw-123456"  # the factories' password


def _token(username, password, **extra):
    return APIClient().post(
        TOKEN, {"username": username, "password": password, **extra}, format="json"
    )


def _error(response):
    return response.json()["error"]


@pytest.fixture
def unverified(settings, db):
    """Open sign-up under mandatory verification: someone signs up with an address they do not
    own (the confirmation mail goes to its owner) and never confirms it."""
    settings.ACCOUNT_SIGNUP_MODE = "open"
    settings.ACCOUNT_EMAIL_VERIFICATION = "mandatory"
    client = Client()
    response = client.post(
        "/accounts/signup/",
        {
            "username": "mallory",
            "email": "victim@corp.example",
            "password1": SIGNUP_PASSWORD,
            "password2": SIGNUP_PASSWORD,
        },
    )
    assert response.status_code == 302
    assert response["Location"] == "/accounts/confirm-email/"
    assert "_auth_user_id" not in client.session  # the page lets nobody in
    user = User.objects.get(username="mallory")
    assert EmailAddress.objects.get(user=user).verified is False
    return user


def test_the_token_endpoint_refuses_an_unverified_address_and_mints_nothing(unverified):
    response = _token("mallory", SIGNUP_PASSWORD)
    assert response.status_code == 403
    assert _error(response) == {
        "code": "email_unverified",
        "message": "This account's email address is not verified yet: confirm it first.",
        "details": {},
    }
    assert not Token.objects.exists()


def test_credentials_made_behind_the_sign_ins_back_are_refused_until_the_address_is_confirmed(
    unverified,
):
    token = Token.objects.create(user=unverified)
    _key, raw = key_create(user=unverified, name="k")
    by_token = APIClient()
    by_token.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    by_key = APIClient()
    by_key.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    by_session = APIClient()
    by_session.force_login(unverified)

    for client in (by_token, by_key, by_session):
        refused = client.post("/api/v1/bots/", {"name": "Spy"}, format="json")
        assert refused.status_code == 401
        assert _error(refused)["code"] == "not_authenticated"
        assert client.get("/api/v1/sessions/").status_code == 401
    minted = by_session.post("/api/v1/api-keys/", {"name": "more"}, format="json")
    assert minted.status_code == 401
    assert not Bot.objects.exists()
    assert ApiKey.objects.count() == 1

    EmailAddress.objects.filter(user=unverified).update(verified=True)
    assert by_token.get("/api/v1/sessions/").status_code == 200
    assert by_key.get("/api/v1/sessions/").status_code == 200
    assert _token("mallory", SIGNUP_PASSWORD).json() == {"token": token.key}


@pytest.mark.django_db(transaction=True)
def test_an_unverified_accounts_key_is_refused_on_v1(settings):
    settings.ACCOUNT_EMAIL_VERIFICATION = "mandatory"
    user = UserFactory(username="mallory", email="victim@corp.example")
    EmailAddress.objects.create(user=user, email=user.email, verified=False, primary=True)
    BotFactory(owner=user, name="Writer")
    _key, raw = key_create(user=user, name="k")
    response = Client().get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.django_db(transaction=True)
async def test_an_unverified_accounts_token_cannot_open_the_websocket(settings):
    from asgiref.sync import sync_to_async

    settings.ACCOUNT_EMAIL_VERIFICATION = "mandatory"

    def make():
        user = UserFactory(username="mallory", email="victim@corp.example")
        EmailAddress.objects.create(user=user, email=user.email, verified=False, primary=True)
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


@pytest.mark.django_db(transaction=True)
async def test_an_unverified_accounts_session_cookie_cannot_open_the_websocket(settings):
    from asgiref.sync import sync_to_async

    settings.ACCOUNT_EMAIL_VERIFICATION = "mandatory"

    def make():
        user = UserFactory(username="mallory", email="victim@corp.example")
        EmailAddress.objects.create(user=user, email=user.email, verified=False, primary=True)
        session = SessionFactory(user=user, bot=BotFactory(owner=user))
        browser = Client()
        browser.force_login(user)
        return session, browser.cookies["sessionid"].value

    session, cookie = await sync_to_async(make)()
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=[
            (b"cookie", f"sessionid={cookie}".encode()),
            (b"origin", b"http://localhost"),
            (b"host", b"localhost"),
        ],
    )
    await communicator.connect(timeout=5)
    assert await communicator.receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": 4401,
    }
    await communicator.disconnect()


def test_a_pending_account_is_told_so_and_an_inactive_one_gets_nothing(settings, db):
    settings.ACCOUNT_SIGNUP_MODE = "approval"
    response = Client().post(
        "/accounts/signup/",
        {
            "username": "newbie",
            "email": "newbie@example.com",
            "password1": SIGNUP_PASSWORD,
            "password2": SIGNUP_PASSWORD,
        },
    )
    assert response["Location"] == "/accounts/inactive/"
    pending = _token("newbie", SIGNUP_PASSWORD)
    assert pending.status_code == 403
    assert _error(pending)["code"] == "account_pending"
    assert "waiting for an administrator's approval" in _error(pending)["message"]
    # A wrong password says nothing of the account's state.
    wrong = _token("newbie", "not-the-password")
    assert (wrong.status_code, _error(wrong)["code"]) == (400, "validation_error")

    UserFactory(username="gone", is_active=False)
    inactive = _token("gone", FACTORY_PASSWORD)
    assert (inactive.status_code, _error(inactive)["code"]) == (400, "validation_error")
    assert not Token.objects.exists()


# --- two-factor ---------------------------------------------------------------------------------


def _code(secret, offset=0):
    return format_hotp_value(hotp_value(secret, int(time.time()) // 30 + offset))


@pytest.fixture
def totp_user(db):
    user = UserFactory(username="ann", email="ann@example.com")
    secret = generate_totp_secret()
    TOTP.activate(user, secret)
    return user, secret


def test_an_account_with_totp_needs_its_code_with_the_password(totp_user):
    user, secret = totp_user
    missing = _token("ann", FACTORY_PASSWORD)
    assert missing.status_code == 401
    assert _error(missing) == {
        "code": "mfa_required",
        "message": (
            "This account uses two-factor authentication: send the code from your "
            "authenticator app (or a recovery code) as 'code' with the username and password."
        ),
        "details": {},
    }
    wrong = _token("ann", FACTORY_PASSWORD, code="000000" if _code(secret) != "000000" else "1")
    assert (wrong.status_code, _error(wrong)["code"]) == (401, "mfa_invalid")
    # A right code with a wrong password gets nothing either.
    assert _token("ann", "not-the-password", code=_code(secret)).status_code == 400
    assert not Token.objects.exists()

    done = _token("ann", FACTORY_PASSWORD, code=_code(secret))
    assert done.status_code == 200
    assert done.json() == {"token": Token.objects.get(user=user).key}


def test_a_code_of_the_step_before_or_after_is_accepted_once_and_older_ones_never(totp_user):
    # A code typed as its 30-second step ends reaches the server in the next one.
    _user, secret = totp_user
    if time.time() % 30 > 25:  # the step before must not become two steps old in flight
        time.sleep(30.1 - time.time() % 30)
    old = _token("ann", FACTORY_PASSWORD, code=_code(secret, -3))
    assert (old.status_code, _error(old)["code"]) == (401, "mfa_invalid")
    late = _token("ann", FACTORY_PASSWORD, code=_code(secret, -1))
    assert late.status_code == 200
    Token.objects.all().delete()
    again = _token("ann", FACTORY_PASSWORD, code=_code(secret, -1))
    assert (again.status_code, _error(again)["code"]) == (401, "mfa_invalid")
    assert _token("ann", FACTORY_PASSWORD, code=_code(secret, 1)).status_code == 200


def test_wrong_codes_count_as_failed_sign_ins(totp_user, settings):
    settings.LOGIN_RATE_PER_ACCOUNT = "2/min"
    _user, secret = totp_user
    wrong = "000000" if _code(secret) != "000000" else "111111"
    assert [_token("ann", FACTORY_PASSWORD, code=wrong).status_code for _ in range(2)] == [
        401,
        401,
    ]
    throttled = _token("ann", FACTORY_PASSWORD, code=_code(secret))
    assert (throttled.status_code, _error(throttled)["code"]) == (429, "rate_limited")
    assert not Token.objects.exists()
    assert not ChatSession.objects.exists()
