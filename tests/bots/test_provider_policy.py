"""Issue 7, item 1: no secret and no request leaves the server through a bot's provider settings.

A bot names an environment variable (``api_key_env``) whose value is sent as the key to its
``api_base``. Only allow-listed provider variables and (for non-staff) listed addresses pass;
rows that escaped the rules are refused again at call time; non-owners never see the settings.
"""

import os
import subprocess
import sys

import pytest
from django.test import Client

from bots.models import Bot, Message
from tests.conftest import FAKE_KEY_ENV
from tests.factories import BotFactory, SessionFactory, UserFactory

pytestmark = pytest.mark.django_db

NOT_ALLOWED_KEY = [
    "Not an allowed provider key variable (PROVIDER_KEY_ENV_ALLOWED): ask an administrator."
]
NOT_ALLOWED_BASE = ["Not an allowed provider address (PROVIDER_API_BASES): ask an administrator."]
NOT_HTTP = ["Must be a plain http(s) URL: no user name or password, query or fragment."]


def _error(response) -> dict:
    return response.json()["error"]


# --- creating and editing bots ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["SECRET_KEY", "DATABASE_URL", "REDIS_URL", "HOME", "PATH", "NO_SUCH_VARIABLE_XYZ"]
)
def test_hostile_bot_naming_a_setting_as_its_key_is_refused_and_nothing_is_stored(
    owner_client, fake_openai, settings, name
):
    """The exfiltration of the issue: the attacker's bot names SECRET_KEY and points at a server
    the attacker controls. Refused before anything is stored or sent, with one answer whether
    or not the variable exists (NO_SUCH_VARIABLE_XYZ is unset, the others are set)."""
    settings.PROVIDER_API_BASES = []
    assert (name in os.environ) is (name != "NO_SUCH_VARIABLE_XYZ")
    response = owner_client.post(
        "/api/v1/bots/",
        {
            "name": "exfil",
            "model": "openai/fake-model",
            "api_base": fake_openai.url,
            "api_key_env": name,
        },
        format="json",
    )

    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "code": "validation_error",
            "message": "The request is not valid.",
            "details": {"api_key_env": NOT_ALLOWED_KEY, "api_base": NOT_ALLOWED_BASE},
        }
    }
    assert Bot.objects.count() == 0
    assert fake_openai.requests == []


def test_staff_may_not_use_a_setting_as_key_either(staff_client, fake_openai):
    response = staff_client.post(
        "/api/v1/bots/",
        {"name": "b", "api_base": fake_openai.url, "api_key_env": "SECRET_KEY"},
        format="json",
    )
    assert response.status_code == 400
    assert _error(response)["details"] == {"api_key_env": NOT_ALLOWED_KEY}
    assert Bot.objects.count() == 0


def test_an_allowed_key_variable_is_accepted(owner_client):
    response = owner_client.post(
        "/api/v1/bots/", {"name": "b", "api_key_env": "OPENAI_API_KEY"}, format="json"
    )
    assert response.status_code == 201
    assert Bot.objects.get().api_key_env == "OPENAI_API_KEY"


LISTED = "http://allowed.example/v1/"


@pytest.mark.parametrize(
    ("api_base", "details"),
    [
        ("http://169.254.169.254/latest/meta-data/", NOT_ALLOWED_BASE),
        ("http://127.0.0.1:8000/v1", NOT_ALLOWED_BASE),
        ("http://localhost/v1", NOT_ALLOWED_BASE),
        ("http://allowed.example@evil.example/v1", NOT_HTTP),
        ("http://user:pw@allowed.example/v1", NOT_HTTP),
        ("http://allowed.example:8080/v1", NOT_ALLOWED_BASE),
        ("https://allowed.example/v1", NOT_ALLOWED_BASE),
        ("http://allowed.example.evil.example/v1", NOT_ALLOWED_BASE),
        ("http://allowed.example/v10", NOT_ALLOWED_BASE),
        ("http://allowed.example/", NOT_ALLOWED_BASE),
        ("http://allowed.example/v1/../admin", NOT_HTTP),
        ("http://allowed.example/v1/%2e%2e/admin", NOT_HTTP),
        ("http://allowed.example/v1?x=1", NOT_HTTP),
    ],
)
def test_non_staff_api_base_must_be_listed(owner_client, settings, api_base, details):
    settings.PROVIDER_API_BASES = [LISTED]
    response = owner_client.post(
        "/api/v1/bots/", {"name": "b", "api_base": api_base}, format="json"
    )
    assert response.status_code == 400
    assert _error(response) == {
        "code": "validation_error",
        "message": "The request is not valid.",
        "details": {"api_base": details},
    }
    assert Bot.objects.count() == 0


@pytest.mark.parametrize(
    "api_base",
    [
        "http://allowed.example/v1",
        "http://allowed.example/v1/",
        "http://ALLOWED.example:80/v1",
        "http://allowed.example/v1/deployments/x",
    ],
)
def test_non_staff_api_base_under_a_listed_one_is_accepted(owner_client, settings, api_base):
    settings.PROVIDER_API_BASES = [LISTED]
    response = owner_client.post(
        "/api/v1/bots/", {"name": "b", "api_base": api_base}, format="json"
    )
    assert response.status_code == 201, response.json()
    bot = Bot.objects.get()
    assert (bot.api_base, bot.api_base_approved, bot.api_base_trusted) == (api_base, "", False)


def test_ftp_api_base_is_refused_for_everyone(owner_client, staff_client):
    for client in (owner_client, staff_client):
        response = client.post(
            "/api/v1/bots/", {"name": "b", "api_base": "ftp://files.example/"}, format="json"
        )
        assert response.status_code == 400
        assert "api_base" in _error(response)["details"]
    assert Bot.objects.count() == 0


def test_staff_may_set_any_http_api_base(staff_client, settings):
    settings.PROVIDER_API_BASES = []
    response = staff_client.post(
        "/api/v1/bots/", {"name": "b", "api_base": "http://10.0.0.5:11434"}, format="json"
    )
    assert response.status_code == 201
    bot = Bot.objects.get()
    assert (bot.api_base_approved, bot.api_base_trusted) == ("http://10.0.0.5:11434", True)


def test_owner_keeps_editing_a_bot_whose_api_base_staff_set(
    owner_client, staff_client, owner, settings
):
    settings.PROVIDER_API_BASES = [LISTED]
    bot = BotFactory(owner=owner, api_base="", is_shared=True)  # staff see shared bots
    staff_base = "http://10.1.2.3:11434"
    assert (
        staff_client.patch(
            f"/api/v1/bots/{bot.pk}/", {"api_base": staff_base}, format="json"
        ).status_code
        == 200
    )

    # other fields, with or without the unchanged api_base (a form sends every field)
    for body in ({"name": "renamed"}, {"name": "renamed again", "api_base": staff_base}):
        response = owner_client.patch(f"/api/v1/bots/{bot.pk}/", body, format="json")
        assert response.status_code == 200, response.json()
    bot.refresh_from_db()
    assert (bot.name, bot.api_base, bot.api_base_trusted) == ("renamed again", staff_base, True)

    # but not another unlisted address
    moved = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/", {"api_base": "http://10.1.2.4:11434"}, format="json"
    )
    assert moved.status_code == 400
    assert _error(moved)["details"] == {"api_base": NOT_ALLOWED_BASE}
    bot.refresh_from_db()
    assert (bot.api_base, bot.api_base_trusted) == (staff_base, True)

    # a listed one is fine, and the staff approval does not travel back with it
    listed = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/", {"api_base": "http://allowed.example/v1"}, format="json"
    )
    assert listed.status_code == 200
    back = owner_client.patch(f"/api/v1/bots/{bot.pk}/", {"api_base": staff_base}, format="json")
    assert back.status_code == 400
    bot.refresh_from_db()
    assert (bot.api_base, bot.api_base_approved) == ("http://allowed.example/v1", "")


# --- call time: rows that escaped the rules never leak -----------------------------------------


def _send_and_wait(client, session):
    return client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": "hello", "wait": True},
        format="json",
    )


@pytest.mark.django_db(transaction=True)  # the turn runs on commit
def test_legacy_bot_naming_secret_key_is_refused_at_call_time(
    owner, owner_client, fake_openai, eager_tasks
):
    """A row saved before the allow-list (or straight through the ORM) with api_key_env
    SECRET_KEY: the turn fails model_unavailable and the fake provider receives nothing."""
    bot = BotFactory(
        owner=owner, model="openai/fake-model", api_base=fake_openai.url, api_key_env="SECRET_KEY"
    )
    session = SessionFactory(user=owner, bot=bot)

    response = _send_and_wait(owner_client, session)

    assert response.status_code == 502
    error = _error(response)
    assert error["code"] == "model_unavailable"
    assert error["message"] == (
        "The model did not answer: "
        "openai/fake-model: this bot's api_key_env is not an allowed provider key variable"
    )
    assert os.environ["SECRET_KEY"] not in response.content.decode()
    assert fake_openai.requests == []
    reply = Message.objects.get(session=session, role="assistant")
    assert (reply.status, reply.error_code) == ("failed", "model_unavailable")


@pytest.mark.django_db(transaction=True)  # the turn runs on commit
def test_legacy_bot_with_unapproved_api_base_is_refused_at_call_time(
    owner, owner_client, fake_openai, eager_tasks, monkeypatch, settings
):
    """A non-staff bot whose api_base nobody approved and no list holds (saved before this
    change): the key is never sent there."""
    settings.PROVIDER_API_BASES = []
    monkeypatch.setenv(FAKE_KEY_ENV, "sk-must-not-leave")
    bot = BotFactory(
        owner=owner,
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_base_approved="",
        api_key_env=FAKE_KEY_ENV,
    )
    session = SessionFactory(user=owner, bot=bot)

    response = _send_and_wait(owner_client, session)

    assert response.status_code == 502
    assert _error(response)["message"] == (
        "The model did not answer: "
        "openai/fake-model: this bot's api_base is not an allowed provider address"
    )
    assert fake_openai.requests == []

    # listing the address (an operator decision) makes the same bot work
    settings.PROVIDER_API_BASES = [fake_openai.url]
    ok = owner_client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": "again", "wait": True},
        format="json",
    )
    assert ok.status_code == 201
    assert fake_openai.headers[0]["authorization"] == "Bearer sk-must-not-leave"


@pytest.mark.django_db(transaction=True)  # the turn runs on commit
def test_unset_key_variable_fails_without_naming_it(
    owner, owner_client, fake_openai, eager_tasks, monkeypatch
):
    bot = BotFactory(
        owner=owner, model="openai/fake-model", api_base=fake_openai.url, api_key_env=FAKE_KEY_ENV
    )
    monkeypatch.delenv(FAKE_KEY_ENV, raising=False)
    session = SessionFactory(user=owner, bot=bot)

    response = _send_and_wait(owner_client, session)

    assert response.status_code == 502
    assert _error(response)["message"] == (
        "The model did not answer: "
        "openai/fake-model: authentication failed: the provider key is missing or was refused"
    )
    assert FAKE_KEY_ENV not in response.content.decode()
    assert fake_openai.requests == []


# --- who sees the provider settings -----------------------------------------------------------


def test_non_owners_never_see_api_base_or_api_key_env(
    owner_client, other_client, staff_client, owner
):
    bot = BotFactory(
        owner=owner,
        is_shared=True,
        api_base="http://10.9.9.9:11434",
        api_key_env="OPENAI_API_KEY",
    )
    for response in (
        other_client.get(f"/api/v1/bots/{bot.pk}/"),
        other_client.get("/api/v1/bots/"),
    ):
        assert response.status_code == 200
        body = response.json()
        shown = body[0] if isinstance(body, list) else body
        assert shown["id"] == bot.pk
        assert "api_base" not in shown and "api_key_env" not in shown
        assert "10.9.9.9" not in response.content.decode()
        assert "OPENAI_API_KEY" not in response.content.decode()
    for client in (owner_client, staff_client):
        shown = client.get(f"/api/v1/bots/{bot.pk}/").json()
        assert (shown["api_base"], shown["api_key_env"]) == (
            "http://10.9.9.9:11434",
            "OPENAI_API_KEY",
        )


# --- admin ------------------------------------------------------------------------------------


def _admin_form(**overrides) -> dict:
    data = {
        "owner": "",
        "name": "Admin bot",
        "system_prompt": "",
        "model": "builtin/recall",
        "api_base": "",
        "api_key_env": "",
        "temperature": "0.7",
        "max_output_tokens": "1024",
        "context_window": "0",
        "compaction_threshold": "0",
        "compaction_kept_percent": "40",
        "compaction_model": "",
        "compaction_enabled": "on",
        "compaction_fallback_extractive": "on",
        "memory_index_size": "50",
        "recall_enabled": "on",
    }
    data.update(overrides)
    return data


def test_admin_runs_the_same_checks_with_staff_acting(owner):
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(admin)

    refused = client.post(
        "/admin/bots/bot/add/", _admin_form(owner=owner.pk, api_key_env="SECRET_KEY")
    )
    assert refused.status_code == 200  # the form again, with its error
    assert NOT_ALLOWED_KEY[0] in refused.content.decode()
    useless = client.post(
        "/admin/bots/bot/add/",
        _admin_form(owner=owner.pk, context_window="1000", max_output_tokens="1000"),
    )
    assert useless.status_code == 200
    assert "must be smaller than the context window" in useless.content.decode()
    assert Bot.objects.count() == 0

    saved = client.post(
        "/admin/bots/bot/add/", _admin_form(owner=owner.pk, api_base="http://10.0.0.7:8080/v1")
    )
    assert saved.status_code == 302
    bot = Bot.objects.get()
    assert (bot.owner, bot.api_base_approved, bot.api_base_trusted) == (
        owner,
        "http://10.0.0.7:8080/v1",
        True,
    )


# --- settings ---------------------------------------------------------------------------------


def _settings_process(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(','.join(settings.PROVIDER_KEY_ENV_ALLOWED))",
        ],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "chat_platform.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "name", ["SECRET_KEY", "DATABASE_URL", "REDIS_URL", "EMAIL_HOST_PASSWORD", "LOG_LEVEL"]
)
def test_allow_list_naming_a_setting_stops_start_up(name):
    done = _settings_process(PROVIDER_KEY_ENV_ALLOWED=f"OPENAI_API_KEY,{name}")
    assert done.returncode == 1
    assert (
        "django.core.exceptions.ImproperlyConfigured: PROVIDER_KEY_ENV_ALLOWED names settings of "
        f"Django or of this project, never provider keys: {name}"
    ) in done.stderr


def test_default_allow_list_is_litellms_provider_variables():
    env = {k: v for k, v in os.environ.items() if k != "PROVIDER_KEY_ENV_ALLOWED"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(','.join(settings.PROVIDER_KEY_ENV_ALLOWED), settings.PROVIDER_API_BASES)",
        ],
        env={**env, "DJANGO_SETTINGS_MODULE": "chat_platform.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    names, bases = done.stdout.split()
    names = names.split(",")
    assert bases == "[]"
    assert {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GROQ_API_KEY"} <= set(names)
    assert all(name.endswith("_API_KEY") for name in names)


def test_the_admin_shows_and_takes_the_slug_as_the_api_does(owner):
    """A bot's fields have the same names in the model, the API and the admin (docs/bots.md):
    the admin had no slug. Blank is made from the name; a taken one is the API's field error."""
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(admin)
    BotFactory(owner=owner, name="First", slug="helper")

    taken = client.post("/admin/bots/bot/add/", _admin_form(owner=owner.pk, slug="helper"))
    assert taken.status_code == 200
    assert "Another of your bots already has the slug &#x27;helper&#x27;." in taken.content.decode()
    made = client.post("/admin/bots/bot/add/", _admin_form(owner=owner.pk, slug=""))
    assert made.status_code == 302
    bot = Bot.objects.get(name="Admin bot")
    assert bot.slug == "admin-bot"
    page = client.get(f"/admin/bots/bot/{bot.pk}/change/").content.decode()
    assert 'name="slug" value="admin-bot"' in page
    changed = client.post(
        f"/admin/bots/bot/{bot.pk}/change/", _admin_form(owner=owner.pk, slug="ops-desk")
    )
    assert changed.status_code == 302
    bot.refresh_from_db()
    assert bot.slug == "ops-desk"
