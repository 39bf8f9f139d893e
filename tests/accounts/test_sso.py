"""Single sign-on with a generic OpenID Connect provider (allauth's openid_connect), against the
local fake provider in tests/fakeoidc.py: a good sign-in, a wrong audience, an expired token, a
disallowed domain, and no account creation unless OIDC_CREATE_ACCOUNTS."""

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.models import AccountApproval
from chat_platform import oidc
from openai_api.keys import key_create
from tests.factories import BotFactory, SessionFactory, UserFactory, message_add
from tests.fakeoidc import fake_oidc  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db
User = get_user_model()
LOGIN = "/accounts/oidc/sso/login/"


@pytest.fixture
def sso(settings, fake_oidc):  # noqa: F811
    settings.OIDC_ISSUER = fake_oidc.issuer
    settings.OIDC_NAME = "Example SSO"
    settings.OIDC_ALLOWED_DOMAINS = ["example.com"]
    settings.OIDC_CREATE_ACCOUNTS = True
    settings.SOCIALACCOUNT_PROVIDERS = oidc.providers_setting(
        issuer=fake_oidc.issuer,
        client_id=fake_oidc.client_id,
        secret=fake_oidc.client_secret,
        name="Example SSO",
    )
    return fake_oidc


def _sign_in(client):
    """The browser's round trip: our start -> the provider's authorize -> our callback."""
    start = client.post(LOGIN)
    assert start.status_code == 302, start.content
    authorize = httpx.get(start["Location"], follow_redirects=False)
    assert authorize.status_code == 302, authorize.text
    back = urlsplit(authorize.headers["location"])
    assert back.path == "/accounts/oidc/sso/login/callback/"
    return client.get(back.path, {k: v[0] for k, v in parse_qs(back.query).items()})


def _signed_in_as(client):
    return client.session.get("_auth_user_id")


def test_the_login_page_offers_the_provider(sso):
    page = Client().get("/accounts/login/").content.decode()
    assert f'action="{LOGIN}"' in page
    assert "Sign in with Example SSO" in page


def test_no_provider_no_button(settings):
    settings.OIDC_ISSUER = ""
    assert "Sign in with" not in Client().get("/accounts/login/").content.decode()


def test_a_good_sign_in_creates_the_account_and_signs_in(sso):
    sso.identity(sub="abc", email="ann@example.com", preferred_username="ann")
    client = Client()
    response = _sign_in(client)
    assert response.status_code == 302
    assert response["Location"] == "/"
    user = User.objects.get(email="ann@example.com")
    assert user.username == "ann"
    assert user.is_active is True
    assert not user.has_usable_password()
    assert _signed_in_as(client) == str(user.pk)
    assert user.socialaccount_set.get().uid == "abc"
    # The code went back with the client's secret, PKCE verifier and the same redirect URI.
    [token_request] = sso.token_requests
    assert token_request["client_id"] == sso.client_id
    assert token_request["code_verifier"]
    assert sso.authorize_requests[0]["code_challenge_method"] == "S256"
    # The second time, the same account.
    again = Client()
    assert _sign_in(again).status_code == 302
    assert _signed_in_as(again) == str(user.pk)
    assert User.objects.count() == 1


def test_an_existing_account_with_that_verified_email_signs_in_as_itself(sso, settings):
    settings.OIDC_CREATE_ACCOUNTS = False
    ann = UserFactory(username="ann-local", email="ann@example.com")
    sso.identity(email="ann@example.com")
    client = Client()
    assert _sign_in(client).status_code == 302
    assert _signed_in_as(client) == str(ann.pk)
    assert User.objects.count() == 1


def test_without_create_accounts_a_stranger_is_refused(sso, settings):
    settings.OIDC_CREATE_ACCOUNTS = False
    sso.identity(email="new@example.com")
    client = Client()
    response = _sign_in(client)
    assert response.status_code == 403
    assert "this site does not create accounts at first sign-in" in response.content.decode()
    assert not User.objects.exists()
    assert _signed_in_as(client) is None


def _assert_refused(response, reason):
    assert response.status_code == 401
    text = response.content.decode()
    assert "Single sign-on failed" in text
    assert f"Sign-in refused: {reason}." in text
    assert not User.objects.exists()


def test_a_wrong_audience_is_refused(sso):
    sso.identity(audience="another-app")
    client = Client()
    _assert_refused(_sign_in(client), "the identity token was issued for another application")
    assert _signed_in_as(client) is None


def test_an_expired_token_is_refused(sso):
    sso.identity(expires_in=-120)
    client = Client()
    _assert_refused(_sign_in(client), "the identity token has expired")
    assert _signed_in_as(client) is None


def test_a_token_from_another_issuer_is_refused(sso):
    sso.identity(issuer="https://evil.example")
    _assert_refused(_sign_in(Client()), "the identity token was issued by another provider")


@pytest.mark.parametrize(
    ("email", "verified"),
    [
        ("eve@evil.example", True),
        ("eve@example.com.evil.example", True),
        ("eve@sub.example.com", True),
        ("ann@example.com", False),  # the right domain, but the provider does not vouch for it
    ],
)
def test_a_disallowed_or_unverified_domain_is_refused(sso, email, verified):
    sso.identity(email=email, email_verified=verified)
    client = Client()
    response = _sign_in(client)
    assert response.status_code == 403
    text = response.content.decode()
    assert "Sign-in refused" in text
    assert "this site accepts only verified addresses at example.com" in text
    assert not User.objects.exists()
    assert _signed_in_as(client) is None


def test_the_domain_rule_holds_for_existing_accounts_too(sso):
    UserFactory(username="eve", email="eve@evil.example")
    sso.identity(email="eve@evil.example")
    client = Client()
    assert _sign_in(client).status_code == 403
    assert _signed_in_as(client) is None


def test_in_approval_mode_an_sso_account_waits_too(sso, settings):
    settings.ACCOUNT_SIGNUP_MODE = "approval"
    sso.identity(email="ann@example.com")
    client = Client()
    response = _sign_in(client)
    assert response.status_code == 302
    assert response["Location"] == "/accounts/inactive/"
    user = User.objects.get(email="ann@example.com")
    assert user.is_active is False
    assert AccountApproval.objects.get(user=user).status == "pending"
    assert _signed_in_as(client) is None


# --- pre-registration: an address someone else claimed here (issue 30, item 8) -----------------


def _api(**credentials):
    client = APIClient()
    client.credentials(**credentials)
    return client


def test_sso_never_hands_over_an_account_registered_with_the_victims_unconfirmed_address(
    sso, settings
):
    settings.ACCOUNT_SIGNUP_MODE = "open"
    # Mallory signs up with the victim's address (never confirmed) and takes a token and a key.
    signup = Client().post(
        "/accounts/signup/",
        {
            "username": "mallory",
            "email": "victim@example.com",
            "password1": "a-long-pass-phrase-9",
            "password2": "a-long-pass-phrase-9",
        },
    )
    assert signup.status_code == 302
    mallory = User.objects.get(username="mallory")
    token = APIClient().post(
        "/api/v1/auth/token/",
        {"username": "mallory", "password": "a-long-pass-phrase-9"},
        format="json",
    )
    assert token.status_code == 200
    by_token = _api(HTTP_AUTHORIZATION=f"Token {token.json()['token']}")
    key = by_token.post("/api/v1/api-keys/", {"name": "k"}, format="json")
    assert key.status_code == 201
    by_key = _api(HTTP_AUTHORIZATION=f"Bearer {key.json()['key']}")

    # The victim signs in with SSO: the provider vouches for the address.
    sso.identity(sub="victim-sub", email="victim@example.com", preferred_username="victim")
    browser = Client()
    assert _sign_in(browser).status_code == 302
    victim = User.objects.get(email="victim@example.com")
    assert victim.pk != mallory.pk
    assert _signed_in_as(browser) == str(victim.pk)
    assert victim.socialaccount_set.get().uid == "victim-sub"
    assert EmailAddress.objects.get(user=victim).verified is True
    # Mallory's account lost the unconfirmed claim and nothing else; it has no SSO identity.
    mallory.refresh_from_db()
    assert mallory.email == ""
    assert not EmailAddress.objects.filter(user=mallory).exists()
    assert not mallory.socialaccount_set.exists()

    # The victim's chat is theirs alone.
    session = SessionFactory(user=victim, bot=BotFactory(owner=victim))
    message_add(session, role="user", content="The merger closes on Friday.")
    for attacker in (by_token, by_key):
        assert attacker.get("/api/v1/sessions/").json() == []
        assert attacker.get(f"/api/v1/sessions/{session.pk}/messages/").status_code == 404
        found = attacker.get("/api/v1/search/", {"q": "merger"})
        assert found.status_code == 200
        assert "merger" not in found.content.decode()
    # The next SSO sign-in is the same (new) account.
    again = Client()
    assert _sign_in(again).status_code == 302
    assert _signed_in_as(again) == str(victim.pk)


def test_without_create_accounts_an_unconfirmed_claim_is_refused_and_left_alone(sso, settings):
    settings.OIDC_CREATE_ACCOUNTS = False
    mallory = UserFactory(username="mallory", email="victim@example.com")
    EmailAddress.objects.create(user=mallory, email=mallory.email, verified=False, primary=True)
    sso.identity(email="victim@example.com")
    client = Client()
    response = _sign_in(client)
    assert response.status_code == 403
    assert "this site does not create accounts at first sign-in" in response.content.decode()
    assert _signed_in_as(client) is None
    mallory.refresh_from_db()
    assert not mallory.socialaccount_set.exists()
    assert mallory.has_usable_password()


def test_connecting_an_identity_revokes_the_accounts_token_and_keys_and_says_so(sso, settings):
    settings.OIDC_CREATE_ACCOUNTS = False
    ann = UserFactory(username="ann-local", email="ann@example.com")
    EmailAddress.objects.create(user=ann, email=ann.email, verified=True, primary=True)
    token = Token.objects.create(user=ann)
    key, _raw = key_create(user=ann, name="laptop")
    sso.identity(email="ann@example.com")
    client = Client()
    assert _sign_in(client).status_code == 302
    assert _signed_in_as(client) == str(ann.pk)
    assert not Token.objects.filter(pk=token.pk).exists()
    key.refresh_from_db()
    assert key.revoked is True
    page = client.get("/accounts/3rdparty/").content.decode()
    assert (
        "Single sign-on is now connected to this account. Its API token and API keys were "
        "revoked (2 ended): make new ones if you need them."
    ) in page
