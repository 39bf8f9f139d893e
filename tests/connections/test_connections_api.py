"""Connections over REST: staff only, the key write-only and encrypted, the start-up check."""

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from chat_platform.startup import startup_checks_run
from connections import crypto
from connections.checks import encryption_key_errors
from connections.models import Connection
from connections.queries import connection_builtin
from tests.connections.conftest import SECRET_API_KEY

pytestmark = pytest.mark.django_db

URL = "/api/v1/connections/"


def _create(client, **body):
    return client.post(URL, {"name": "Local", "kind": "openai", **body}, format="json")


def test_staff_creates_a_connection_and_the_key_is_never_answered(staff_client, capfd):
    response = _create(staff_client, base_url="http://127.0.0.1:9/v1", api_key=SECRET_API_KEY)
    assert response.status_code == 201
    body = response.json()
    assert body["has_key"] is True
    assert "api_key" not in body
    assert SECRET_API_KEY not in response.content.decode()
    stored = Connection.objects.get(pk=body["id"])
    assert stored.api_key_encrypted != SECRET_API_KEY
    assert SECRET_API_KEY not in stored.api_key_encrypted
    assert crypto.key_decrypt(stored.api_key_encrypted) == SECRET_API_KEY
    for answer in (staff_client.get(URL), staff_client.get(f"{URL}{body['id']}/")):
        assert answer.status_code == 200
        assert SECRET_API_KEY not in answer.content.decode()
    patched = staff_client.patch(f"{URL}{body['id']}/", {"name": "Renamed"}, format="json")
    assert patched.json()["name"] == "Renamed"
    assert SECRET_API_KEY not in patched.content.decode()
    out, err = capfd.readouterr()
    assert SECRET_API_KEY not in out + err


def test_naming_a_key_variable_replaces_a_stored_key_and_back(staff_client, settings):
    """Switching where the key comes from is one PATCH either way; naming the variable
    answered 400 with the database's constraint name ("connection_one_key_source")."""
    settings.PROVIDER_KEY_ENV_ALLOWED = ["OPENAI_API_KEY"]
    made = _create(staff_client, base_url="http://127.0.0.1:9/v1", api_key=SECRET_API_KEY).json()
    url = f"{URL}{made['id']}/"
    to_env = staff_client.patch(url, {"api_key_env": "OPENAI_API_KEY"}, format="json")
    assert to_env.status_code == 200, to_env.json()
    assert (to_env.json()["has_key"], to_env.json()["api_key_env"]) == (False, "OPENAI_API_KEY")
    stored = Connection.objects.get(pk=made["id"])
    assert (stored.api_key_encrypted, stored.api_key_env) == ("", "OPENAI_API_KEY")
    back = staff_client.patch(url, {"api_key": SECRET_API_KEY}, format="json")
    assert back.status_code == 200, back.json()
    assert (back.json()["has_key"], back.json()["api_key_env"]) == (True, "")
    both = staff_client.patch(
        url, {"api_key": SECRET_API_KEY, "api_key_env": "OPENAI_API_KEY"}, format="json"
    )
    assert both.status_code == 400
    assert both.json()["error"]["details"] == {
        "api_key": ["Give a key or the name of its variable, not both."]
    }


def test_the_builtin_connection_exists_for_everyone(owner_client):
    rows = owner_client.get(URL).json()
    assert [(r["name"], r["kind"], r["models"]) for r in rows] == [
        ("Built-in", "builtin", [{"id": "recall"}, {"id": "extractive"}])
    ]
    # a user sees no base URL, key variable or audience
    assert "base_url" not in rows[0] and "has_key" not in rows[0]


def test_a_non_staff_user_cannot_create_or_see_others(owner_client, staff, other_user):
    response = _create(owner_client, base_url="http://127.0.0.1:9/v1")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert not Connection.objects.filter(name="Local").exists()
    private = Connection.objects.create(name="Private", kind="openai", base_url="http://x.test/v1")
    private.users.add(other_user)
    for method in ("get", "patch", "delete"):
        answer = getattr(owner_client, method)(f"{URL}{private.pk}/", {}, format="json")
        assert answer.status_code == 404, method
        assert answer.json()["error"]["code"] == "not_found"
    refresh = owner_client.post(f"{URL}{private.pk}/refresh-models/")
    assert refresh.status_code == 404
    assert Connection.objects.filter(pk=private.pk, name="Private").exists()
    assert [r["name"] for r in owner_client.get(URL).json()] == ["Built-in"]


def test_users_see_the_connections_of_their_groups(owner, owner_client):
    team = Group.objects.create(name="team")
    owner.groups.add(team)
    shared = Connection.objects.create(name="Team", kind="openai", base_url="http://x.test/v1")
    shared.groups.add(team)
    Connection.objects.create(name="Hidden", kind="openai", base_url="http://y.test/v1")
    assert [r["name"] for r in owner_client.get(URL).json()] == ["Built-in", "Team"]
    assert owner_client.get(f"{URL}{shared.pk}/").json()["name"] == "Team"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "a\x00b", "base_url": "http://x.test/v1"}, "name"),
        ({"base_url": "http://user:pw@x.test/v1"}, "base_url"),
        ({"base_url": "file:///etc/passwd"}, "base_url"),
        ({}, "base_url"),
        ({"base_url": "http://x.test/v1", "api_key": 5}, "api_key"),
        ({"base_url": "http://x.test/v1", "api_key": "k" * 5000}, "api_key"),
        ({"base_url": "http://x.test/v1", "api_key_env": "SECRET_KEY"}, "api_key_env"),
        (
            {"base_url": "http://x.test/v1", "api_key": "sk-abc", "api_key_env": "OPENAI_API_KEY"},
            "api_key",
        ),
        ({"base_url": "http://x.test/v1", "groups": [999999]}, "groups"),
        ({"base_url": "http://x.test/v1", "groups": "1"}, "groups"),
        ({"base_url": "http://x.test/v1", "public": "yes"}, "public"),
        ({"base_url": "http://x.test/v1", "owner": 1}, "owner"),
        ({"base_url": "http://x.test/v1", "kind": "builtin"}, "kind"),
        ({"base_url": "http://x.test/v1", "kind": "litellm"}, "provider"),
    ],
)
def test_bad_input_is_a_validation_error_and_stores_nothing(staff_client, body, field):
    response = _create(staff_client, **body)
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in error["details"]
    assert not Connection.objects.exclude(kind="builtin").exists()


def test_a_key_cannot_be_stored_without_an_encryption_key(staff_client, settings):
    settings.CONNECTION_ENCRYPTION_KEY = ""
    response = _create(staff_client, base_url="http://x.test/v1", api_key=SECRET_API_KEY)
    assert response.status_code == 400
    assert "CONNECTION_ENCRYPTION_KEY" in response.json()["error"]["details"]["api_key"][0]
    assert SECRET_API_KEY not in response.content.decode()
    # naming an allowed variable needs no encryption
    named = _create(staff_client, base_url="http://x.test/v1", api_key_env="OPENAI_API_KEY")
    assert named.status_code == 201
    assert (named.json()["api_key_env"], named.json()["has_key"]) == ("OPENAI_API_KEY", False)


def test_a_key_under_a_short_encryption_key_is_refused_not_a_500(staff_client, settings):
    settings.CONNECTION_ENCRYPTION_KEY = "short"
    response = _create(staff_client, base_url="http://x.test/v1", api_key=SECRET_API_KEY)
    assert response.status_code == 400
    assert response.json()["error"]["details"]["api_key"] == [
        "CONNECTION_ENCRYPTION_KEY on the server is shorter than 32 characters: a key cannot be "
        "stored (name an allowed environment variable instead, or ask the operator)."
    ]
    assert not Connection.objects.filter(base_url="http://x.test/v1").exists()


def test_a_wrong_or_missing_encryption_key_fails_loudly_at_start_up(staff, settings):
    Connection.objects.create(
        name="Stored",
        kind="openai",
        base_url="http://x.test/v1",
        api_key_encrypted=crypto.key_encrypt(SECRET_API_KEY),
    )
    assert encryption_key_errors() == []
    startup_checks_run()

    settings.CONNECTION_ENCRYPTION_KEY = "another-key-of-enough-length-0123456789"
    assert [e.id for e in encryption_key_errors()] == ["connections.E002"]
    with pytest.raises(ImproperlyConfigured, match="connections.E002"):
        startup_checks_run()
    with pytest.raises(SystemCheckError, match="connections.E002"):
        call_command("check", deploy=True)

    settings.CONNECTION_ENCRYPTION_KEY = ""
    assert [e.id for e in encryption_key_errors()] == ["connections.E001"]
    with pytest.raises(ImproperlyConfigured, match="CONNECTION_ENCRYPTION_KEY is not set"):
        startup_checks_run()

    # rotation: the new key first, the old one after a comma, opens the stored key
    settings.CONNECTION_ENCRYPTION_KEY = (
        "another-key-of-enough-length-0123456789,test-connection-encryption-key-0123456789abcdef"
    )
    assert encryption_key_errors() == []


def test_deleting_a_connection_in_use_is_refused(staff_client, staff, fake_connection):
    from tests.factories import BotFactory

    bot = BotFactory(owner=staff, model="openai/fake-model", connection=fake_connection)
    response = staff_client.delete(f"{URL}{fake_connection.pk}/")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"bots": [bot.pk]}
    assert Connection.objects.filter(pk=fake_connection.pk).exists()
    builtin = connection_builtin()
    assert staff_client.delete(f"{URL}{builtin.pk}/").status_code == 400


def test_moving_a_connection_elsewhere_asks_for_its_key_again(staff_client):
    """The key is write-only: a PATCH of ``base_url`` alone sent it to the new address with the
    next model refresh. Another address is refused unless the key comes again (or a variable);
    the old server's model list is cleared."""
    from connections.models import Connection

    made = _create(staff_client, base_url="http://127.0.0.1:9/v1", api_key=SECRET_API_KEY).json()
    Connection.objects.filter(pk=made["id"]).update(model_list=[{"id": "m"}])
    url = f"/api/v1/connections/{made['id']}/"

    moved = staff_client.patch(url, {"base_url": "http://127.0.0.1:18107/v1"}, format="json")
    # A blank variable name is no key either: sent with the move, it kept the stored key
    # (200, has_key true) and the next refresh sent it to the new server.
    blank = staff_client.patch(
        url, {"base_url": "http://127.0.0.1:18107/v1", "api_key_env": ""}, format="json"
    )
    assert blank.json() == moved.json()

    assert moved.status_code == 400
    assert moved.json()["error"]["details"] == {
        "api_key": [
            "The server's address changed: send its key again, or the name of its variable "
            "(a key is never sent to an address it was not given for)."
        ]
    }
    again = staff_client.patch(
        url, {"base_url": "http://127.0.0.1:18107/v1", "api_key": "sk-new"}, format="json"
    )
    assert again.status_code == 200
    stored = Connection.objects.get(pk=made["id"])
    assert (stored.base_url, stored.model_list) == ("http://127.0.0.1:18107/v1", [])


def test_the_admin_asks_for_the_key_again_when_the_address_moves(staff, fake_connection):
    """The admin's form checked the fields but not the move: a new base_url with the key field
    left blank was saved with the stored key (302), and the next refresh sent it there."""
    from django.test import Client

    from connections.models import Connection

    staff.is_superuser = True
    staff.save()
    Connection.objects.filter(pk=fake_connection.pk).update(model_list=[{"id": "m"}])
    stored = Connection.objects.get(pk=fake_connection.pk)
    assert stored.has_key
    client = Client()
    client.force_login(staff)
    url = f"/admin/connections/connection/{stored.pk}/change/"
    form = {
        "name": stored.name,
        "kind": stored.kind,
        "provider": stored.provider,
        "base_url": "http://127.0.0.1:18107/v1",
        "api_key_env": "",
        "api_key": "",
        "public": "on" if stored.public else "",
    }
    refused = client.post(url, form)
    assert refused.status_code == 200  # the form again, with the error
    assert "send its key again" in refused.content.decode()
    assert Connection.objects.get(pk=stored.pk).base_url == stored.base_url
    moved = client.post(url, {**form, "api_key": "sk-new"})
    assert moved.status_code == 302
    after = Connection.objects.get(pk=stored.pk)
    assert (after.base_url, after.model_list) == ("http://127.0.0.1:18107/v1", [])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("way", ["create", "rename"])
def test_a_name_taken_between_the_check_and_the_write_is_a_validation_error(
    staff_client, monkeypatch, way
):
    """Two staff saving one name at once: the second passed the name check before the first
    wrote, and its write was an IntegrityError, a 500. (The check is skipped here, as the race
    skips it.)"""
    from django.db.models import Model

    assert _create(staff_client, name="conn", base_url="http://x.test/v1").status_code == 201
    other = _create(staff_client, name="other", base_url="http://x.test/v1").json()
    monkeypatch.setattr(Model, "validate_unique", lambda self, exclude=None: None)
    if way == "create":
        answer = _create(staff_client, name="conn", base_url="http://x.test/v1")
    else:
        answer = staff_client.patch(
            f"/api/v1/connections/{other['id']}/", {"name": "conn"}, format="json"
        )
    assert answer.status_code == 400
    assert answer.json()["error"]["details"] == {
        "name": ["Connection with this Name already exists."]
    }
    names = Connection.objects.exclude(kind="builtin").values_list("name", flat=True)
    assert sorted(names) == ["conn", "other"]
