"""Sign-in throttling (chat_platform/signin.py): failed attempts per account and per address on
the token endpoint, the login page and the admin login; past a limit 429 with Retry-After."""

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from chat_platform import signin
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

TOKEN = "/api/v1/auth/token/"
PASSWORD = "pw-123456"  # the factories' password


@pytest.fixture(autouse=True)
def _rates(settings):
    settings.LOGIN_RATE_PER_ACCOUNT = "3/min"
    settings.LOGIN_RATE_PER_ADDRESS = "5/min"


def _token(username, password, address="10.0.0.1"):
    return APIClient().post(
        TOKEN, {"username": username, "password": password}, format="json", REMOTE_ADDR=address
    )


def _seconds(wait):
    return "1 second" if wait == 1 else f"{wait} seconds"


def _assert_rate_limited(response):
    assert response.status_code == 429
    body = response.json()
    wait = int(response["Retry-After"])
    assert 1 <= wait <= 60
    assert body == {
        "error": {
            "code": "rate_limited",
            "message": f"Too many failed sign-in attempts. Try again in {_seconds(wait)}.",
            "details": {"retry_after_seconds": wait},
        }
    }


def test_defaults_are_five_per_account_and_twenty_per_address():
    from chat_platform import settings as project_settings

    assert project_settings.LOGIN_RATE_PER_ACCOUNT == "5/min"
    assert project_settings.LOGIN_RATE_PER_ADDRESS == "20/min"


def test_the_nth_wrong_password_is_a_400_and_the_next_attempt_a_429(owner):
    for _ in range(3):
        wrong = _token("owner", "wrong")
        assert wrong.status_code == 400
        assert wrong.json()["error"]["code"] == "validation_error"
    _assert_rate_limited(_token("owner", "wrong"))
    assert not Token.objects.filter(user=owner).exists()


def test_the_right_password_is_refused_during_a_lockout(owner):
    for _ in range(3):
        assert _token("owner", "wrong").status_code == 400
    _assert_rate_limited(_token("owner", PASSWORD))
    assert not Token.objects.filter(user=owner).exists()


def test_a_throttled_account_is_throttled_from_another_address_too(owner):
    for i in range(3):
        assert _token("owner", "wrong", address=f"10.0.1.{i}").status_code == 400
    _assert_rate_limited(_token("owner", PASSWORD, address="10.9.9.9"))
    # the account key ignores case and surrounding spaces
    _assert_rate_limited(_token(" OWNER ", "wrong", address="10.9.9.8"))


def test_an_address_is_limited_across_accounts(owner):
    for i in range(5):  # five different accounts, none of them over its own limit
        assert _token(f"user{i}", "wrong").status_code == 400
    _assert_rate_limited(_token("owner", PASSWORD))
    assert not Token.objects.filter(user=owner).exists()
    # the account itself is not locked: from another address the right password works
    assert _token("owner", PASSWORD, address="10.0.0.2").status_code == 200


def test_successful_sign_ins_do_not_count(owner):
    for _ in range(6):  # over both limits, all successful
        assert _token("owner", PASSWORD).status_code == 200
    for _ in range(3):
        assert _token("owner", "wrong").status_code == 400
    _assert_rate_limited(_token("owner", "wrong"))


def test_a_forged_forwarded_for_header_does_not_change_the_address(owner):
    client = APIClient()
    for i in range(5):
        response = client.post(
            TOKEN,
            {"username": f"user{i}", "password": "wrong"},
            format="json",
            REMOTE_ADDR="10.0.0.1",
            HTTP_X_FORWARDED_FOR=f"192.0.2.{i}",
        )
        assert response.status_code == 400
    _assert_rate_limited(_token("user9", "wrong"))


def test_the_limits_hold_across_processes(owner, settings, monkeypatch):
    """The counts live in the shared cache (Redis in real mode): a web worker with its own
    connection, built from the same settings, sees the same lockout."""
    from django.core.cache import CacheHandler

    for _ in range(3):
        assert _token("owner", "wrong").status_code == 400
    if settings.REDIS_URL:
        assert settings.CACHES["throttle"]["BACKEND"].endswith(".RedisCache")
        assert settings.CACHES["throttle"]["LOCATION"] == settings.REDIS_URL
    monkeypatch.setattr(signin, "caches", CacheHandler(settings.CACHES))
    _assert_rate_limited(_token("owner", PASSWORD, address="10.0.0.3"))


def test_schema_documents_the_429(client):
    schema = APIClient().get("/api/schema/?format=json").json()
    responses = schema["paths"][TOKEN]["post"]["responses"]
    assert "429" in responses
    assert responses["429"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }


# --- the login page and the admin login -----------------------------------------------------


def _login(path, username, password, address="10.0.0.1"):
    client = Client()
    response = client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address)
    return client, response


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_login_pages_count_failures_and_refuse_with_a_429_page(path):
    UserFactory(username="boss", is_staff=True)
    for _ in range(3):
        _, wrong = _login(path, "boss", "wrong")
        assert wrong.status_code == 200  # the form again, with its error
        assert "_auth_user_id" not in wrong.wsgi_request.session
    client, refused = _login(path, "boss", PASSWORD, address="10.0.0.7")
    assert refused.status_code == 429
    wait = int(refused["Retry-After"])
    assert 1 <= wait <= 60
    text = refused.content.decode()
    assert "Too many sign-in attempts" in text
    assert f"Too many failed sign-in attempts. Try again in {_seconds(wait)}." in text
    assert "_auth_user_id" not in client.session


def test_login_page_success_signs_in_and_does_not_count(owner):
    for _ in range(5):
        client, ok = _login("/accounts/login/", "owner", PASSWORD)
        assert ok.status_code == 302
        assert client.session["_auth_user_id"] == str(owner.pk)
    for _ in range(3):
        assert _login("/accounts/login/", "owner", "wrong")[1].status_code == 200
    assert _login("/accounts/login/", "owner", PASSWORD)[1].status_code == 429


def test_page_and_api_share_the_count(owner):
    for _ in range(2):
        assert _login("/accounts/login/", "owner", "wrong")[1].status_code == 200
    assert _token("owner", "wrong").status_code == 400
    _assert_rate_limited(_token("owner", PASSWORD))
    assert _login("/admin/login/", "owner", PASSWORD)[1].status_code == 429


def test_clear_lifts_every_lockout(owner):
    for _ in range(3):
        assert _token("owner", "wrong").status_code == 400
    _assert_rate_limited(_token("owner", PASSWORD))
    signin.sign_in_throttle_clear()
    assert _token("owner", PASSWORD).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_concurrent_wrong_passwords_are_counted_one_at_a_time(owner):
    """Twelve wrong passwords at once, from twelve addresses: each read the same empty history
    and seven were checked against a limit of three ([400] x 7, [429] x 5)."""
    import threading

    from django.db import connection

    start = threading.Barrier(12, timeout=10)
    codes: list[int] = []

    def guess(i):
        start.wait()
        codes.append(_token("owner", f"wrong{i}", address=f"10.8.0.{i}").status_code)
        connection.close()

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(codes) == [400] * 3 + [429] * 9


@pytest.mark.parametrize("spelling", ["\uff4fwner", "o\uff57ner", "\uff4f\uff57\uff4e\uff45\uff52"])
def test_a_look_alike_spelling_of_the_username_counts_for_its_account(owner, spelling):
    """The sign-in form reads a username as NFKC (Django's UsernameField): "ｏwner" signs in
    as owner. It counted in a bucket of its own, and signed in past owner's lockout."""
    for _ in range(3):
        assert _login("/accounts/login/", "owner", "wrong")[1].status_code == 200
    client, refused = _login("/accounts/login/", spelling, PASSWORD, address="10.0.0.9")
    assert refused.status_code == 429
    assert "_auth_user_id" not in client.session
