"""/api/v1/tool-servers/: staff register MCP servers, refresh their tools; users see what they
may use (docs/tools.md)."""

import json

import pytest
from django.contrib.auth.models import Group

from tests.tools.conftest import SECRET_HEADER
from tools.models import ToolServer

URL = "/api/v1/tool-servers/"
pytestmark = pytest.mark.django_db

TOOL_NAMES = ["add", "echo", "clock", "boom", "big", "slow", "report", "note_save", "note_read"]


def test_staff_registers_a_server_and_refresh_lists_its_tools_sending_the_headers(
    staff_client, mcp_server
):
    created = staff_client.post(
        URL,
        {"name": "calc", "url": mcp_server.url, "headers": {"Authorization": SECRET_HEADER}},
        format="json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["name"] == "calc"
    assert body["transport"] == "streamable-http"
    assert body["public"] is False and body["groups"] == []
    assert body["header_names"] == ["Authorization"]
    assert body["tools"] == []
    assert "headers" not in body and SECRET_HEADER not in created.content.decode()
    stored = ToolServer.objects.get(pk=body["id"])
    assert SECRET_HEADER not in stored.headers_encrypted and stored.headers_encrypted

    refreshed = staff_client.post(f"{URL}{body['id']}/refresh-tools/")
    assert refreshed.status_code == 200, refreshed.content
    tools = refreshed.json()["tools"]
    assert [t["name"] for t in tools] == TOOL_NAMES
    add = tools[0]
    assert add["description"] == "Add two integers."
    assert add["input_schema"]["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }
    assert add["input_schema"]["required"] == ["a", "b"]
    assert SECRET_HEADER not in refreshed.content.decode()
    # The header reached the server on every request of the refresh.
    assert mcp_server.seen_headers
    assert {h.get("authorization") for h in mcp_server.seen_headers} == {SECRET_HEADER}
    stored.refresh_from_db()
    assert [t["name"] for t in stored.tool_list] == TOOL_NAMES
    assert stored.tools_refreshed_at is not None and stored.refresh_error == ""


def test_the_sse_transport_lists_the_same_tools(staff_client, mcp_server):
    created = staff_client.post(
        URL, {"name": "old-one", "url": mcp_server.sse_url, "transport": "sse"}, format="json"
    ).json()
    refreshed = staff_client.post(f"{URL}{created['id']}/refresh-tools/")
    assert refreshed.status_code == 200, refreshed.content
    assert [t["name"] for t in refreshed.json()["tools"]] == TOOL_NAMES


def test_a_server_that_is_down_is_a_clear_validation_error_and_keeps_its_last_list(
    staff, staff_client, tool_server
):
    ToolServer.objects.filter(pk=tool_server.pk).update(url="http://127.0.0.1:9/mcp")
    response = staff_client.post(f"{URL}{tool_server.pk}/refresh-tools/")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert (
        error["message"]
        == "Could not list the tools of calc: the tool server calc cannot be reached."
    )
    tool_server.refresh_from_db()
    assert [t["name"] for t in tool_server.tool_list] == TOOL_NAMES
    assert tool_server.refresh_error == error["message"]


def test_a_redirect_is_never_followed(staff_client, mcp_server):
    created = staff_client.post(
        URL, {"name": "moved", "url": mcp_server.redirect_url}, format="json"
    ).json()
    response = staff_client.post(f"{URL}{created['id']}/refresh-tools/")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "Could not list the tools of moved: the tool server moved answered with a redirect "
        "(HTTP 307), not followed."
    )
    # The redirect's target never saw a request: only the redirecting path was asked.
    assert len(mcp_server.seen_headers) == 1


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "Calc", "url": "http://127.0.0.1:1/mcp"}, "name"),
        ({"name": "x" * 41, "url": "http://127.0.0.1:1/mcp"}, "name"),
        ({"name": "calc", "url": "ftp://example.com/"}, "url"),
        ({"name": "calc", "url": "http://u:p@example.com/mcp"}, "url"),
        ({"name": "calc", "url": "http://example.com/mcp", "transport": "stdio"}, "transport"),
        ({"name": "calc", "url": "http://example.com/mcp", "headers": ["a"]}, "headers"),
        ({"name": "calc", "url": "http://example.com/mcp", "headers": {"A": "b\nc"}}, "headers"),
        ({"name": "calc", "url": "http://example.com/mcp", "groups": [999999]}, "groups"),
        ({"name": "calc", "url": "http://example.com/mcp", "colour": "red"}, "colour"),
        ({"url": "http://example.com/mcp"}, "name"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_stored(staff_client, payload, field):
    response = staff_client.post(URL, payload, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert field in response.json()["error"]["details"]
    assert ToolServer.objects.count() == 0


def test_headers_need_the_encryption_key(staff_client, settings):
    settings.CONNECTION_ENCRYPTION_KEY = ""
    response = staff_client.post(
        URL, {"name": "calc", "url": "http://example.com/mcp", "headers": {"X": "y"}}, format="json"
    )
    assert response.status_code == 400
    assert "CONNECTION_ENCRYPTION_KEY" in response.json()["error"]["details"]["headers"][0]
    assert ToolServer.objects.count() == 0


def test_headers_under_a_short_encryption_key_are_refused_not_a_500(staff_client, settings):
    """A key shorter than the cipher takes is refused at save with the reason, as a missing one
    is; it passed the "is it set" check and failed at encryption (500)."""
    settings.CONNECTION_ENCRYPTION_KEY = "short"
    response = staff_client.post(
        URL, {"name": "calc", "url": "http://example.com/mcp", "headers": {"X": "y"}}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "headers": [
            "CONNECTION_ENCRYPTION_KEY on the server is shorter than 32 characters: headers "
            "cannot be stored."
        ]
    }
    assert ToolServer.objects.count() == 0


def test_stored_headers_the_key_cannot_open_stop_the_start_up(staff_client, mcp_server, settings):
    """Headers are encrypted as connection keys are, and checked at start the same way: a
    missing or changed key stops the server and the worker with the reason (it started, and
    every call to the server then failed)."""
    from django.core.exceptions import ImproperlyConfigured

    from chat_platform.startup import startup_checks_run
    from connections.checks import encryption_key_errors

    def header_key_errors():  # the one check's errors about tool servers' headers
        return [e for e in encryption_key_errors() if e.id.startswith("tools.")]

    created = staff_client.post(
        URL, {"name": "calc", "url": mcp_server.url, "headers": {"X": "y"}}, format="json"
    )
    assert created.status_code == 201, created.content
    assert header_key_errors() == []
    settings.CONNECTION_ENCRYPTION_KEY = "another-key-of-enough-length-0123456789"
    assert [(e.id, e.msg) for e in header_key_errors()] == [
        (
            "tools.E002",
            "CONNECTION_ENCRYPTION_KEY cannot decrypt the headers of tool server(s) "
            f"{created.json()['id']}: the setting differs from the one they were saved with.",
        )
    ]
    settings.CONNECTION_ENCRYPTION_KEY = ""
    assert [e.id for e in header_key_errors()] == ["tools.E001"]
    with pytest.raises(ImproperlyConfigured, match="tools.E001: 1 tool server header set"):
        startup_checks_run()


def test_patch_replaces_headers_and_null_clears_them(staff_client, tool_server):
    patched = staff_client.patch(
        f"{URL}{tool_server.pk}/", {"headers": {"X-Key": "one"}, "public": False}, format="json"
    )
    assert patched.status_code == 200
    assert patched.json()["header_names"] == ["X-Key"] and patched.json()["public"] is False
    cleared = staff_client.patch(f"{URL}{tool_server.pk}/", {"headers": None}, format="json")
    assert cleared.json()["header_names"] == []
    tool_server.refresh_from_db()
    assert tool_server.headers_encrypted == ""


def test_non_staff_cannot_manage_servers(owner_client, tool_server):
    created = owner_client.post(
        URL, {"name": "mine", "url": "http://example.com/mcp"}, format="json"
    )
    assert created.status_code == 403
    assert created.json()["error"]["code"] == "permission_denied"
    for response in (
        owner_client.patch(f"{URL}{tool_server.pk}/", {"name": "x"}, format="json"),
        owner_client.delete(f"{URL}{tool_server.pk}/"),
        owner_client.post(f"{URL}{tool_server.pk}/refresh-tools/"),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert list(ToolServer.objects.values_list("name", flat=True)) == ["calc"]


def test_users_see_only_the_servers_their_groups_may_use_without_url_or_headers(
    staff, staff_client, owner, owner_client, other_client, mcp_server
):
    team = Group.objects.create(name="team")
    owner.groups.add(team)
    for name, extra in (
        ("team-tools", {"groups": [team.pk]}),
        ("staff-only", {}),
        ("everyone", {"public": True}),
    ):
        staff_client.post(
            URL,
            {"name": name, "url": mcp_server.url, "headers": {"X-Key": "k"}, **extra},
            format="json",
        )
    seen = owner_client.get(URL).json()
    assert [s["name"] for s in seen] == ["everyone", "team-tools"]
    assert set(seen[0]) == {"id", "name", "transport", "tools", "tools_refreshed_at"}
    assert [s["name"] for s in other_client.get(URL).json()] == ["everyone"]
    assert [s["name"] for s in staff_client.get(URL).json()] == [
        "everyone",
        "staff-only",
        "team-tools",
    ]
    staff_only = ToolServer.objects.get(name="staff-only")
    assert owner_client.get(f"{URL}{staff_only.pk}/").status_code == 404
    team_tools = ToolServer.objects.get(name="team-tools")
    assert other_client.get(f"{URL}{team_tools.pk}/").status_code == 404
    assert owner_client.get(f"{URL}{team_tools.pk}/").json()["name"] == "team-tools"


def test_delete(staff_client, tool_server):
    assert staff_client.delete(f"{URL}{tool_server.pk}/").status_code == 204
    assert ToolServer.objects.count() == 0
    assert json.loads(staff_client.get(URL).content) == []


def test_a_listed_nul_is_dropped_not_a_500(staff_client, mcp_server):
    """A server's list may hold what the database cannot store (a NUL in a description or a
    schema): the refresh stores it without, as a model's text is stored. It answered 500."""
    clock = mcp_server.app._tool_manager._tools["clock"]
    description, parameters = clock.description, clock.parameters
    clock.description = "The current\x00 time."
    clock.parameters = {**parameters, "title": "clock\x00Arguments"}
    try:
        created = staff_client.post(URL, {"name": "calc", "url": mcp_server.url}, format="json")
        refreshed = staff_client.post(f"{URL}{created.json()['id']}/refresh-tools/")
    finally:
        clock.description, clock.parameters = description, parameters
    assert refreshed.status_code == 200, refreshed.content
    [listed] = [t for t in refreshed.json()["tools"] if t["name"] == "clock"]
    assert (listed["description"], listed["input_schema"]["title"]) == (
        "The current time.",
        "clockArguments",
    )
    stored = ToolServer.objects.get(pk=created.json()["id"]).tool_list
    assert [t["description"] for t in stored if t["name"] == "clock"] == ["The current time."]


# --- a secret goes only where it was given ----------------------------------------------------


def test_moving_a_server_elsewhere_asks_for_its_headers_again(staff_client):
    """Its headers are write-only: a PATCH of the URL alone sent them to the new address on the
    next refresh (a logging server got ``Authorization``). Another address (scheme, host or
    port) is refused unless the same request sends the headers again (or ``{}``); its tool
    list, the old server's, is cleared."""
    made = staff_client.post(
        "/api/v1/tool-servers/",
        {
            "name": "calc",
            "url": "http://127.0.0.1:9/mcp",
            "headers": {"Authorization": SECRET_HEADER},
        },
        format="json",
    ).json()
    ToolServer.objects.filter(pk=made["id"]).update(tool_list=[{"name": "add"}])
    url = f"/api/v1/tool-servers/{made['id']}/"

    moved = staff_client.patch(url, {"url": "http://127.0.0.1:18107/mcp"}, format="json")

    assert moved.status_code == 400
    assert moved.json()["error"]["details"] == {
        "headers": [
            "The server's address changed: send its headers again, or {} to clear them "
            "(they are never sent to an address they were not given for)."
        ]
    }
    assert ToolServer.objects.get(pk=made["id"]).url == "http://127.0.0.1:9/mcp"
    # The same address with another path keeps them; with the headers sent again, it moves.
    same = staff_client.patch(url, {"url": "http://127.0.0.1:9/other/mcp"}, format="json")
    assert same.status_code == 200
    again = staff_client.patch(
        url, {"url": "http://127.0.0.1:18107/mcp", "headers": {"X-Key": "new"}}, format="json"
    )
    assert again.status_code == 200
    stored = ToolServer.objects.get(pk=made["id"])
    assert (stored.url, stored.header_names, stored.tool_list) == (
        "http://127.0.0.1:18107/mcp",
        ["X-Key"],
        [],
    )


def test_headers_the_client_sets_itself_are_refused(staff_client):
    """``Host`` or ``Content-Length: 5`` were stored, and broke every request to the server."""
    response = staff_client.post(
        "/api/v1/tool-servers/",
        {
            "name": "calc",
            "url": "http://127.0.0.1:9/mcp",
            "headers": {"Host": "evil.test", "Content-Length": "5", "X-Team": "a"},
        },
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "headers": [
            "Host: set by the client itself, it cannot be given here.",
            "Content-Length: set by the client itself, it cannot be given here.",
        ]
    }
    assert not ToolServer.objects.exists()


def test_a_header_value_an_http_client_cannot_send_is_refused(staff_client):
    """``X-Key: café`` was stored, then every listing and call of the server failed
    (``UnicodeEncodeError``): header values are sent as ASCII."""
    response = staff_client.post(
        URL,
        {
            "name": "calc",
            "url": "http://127.0.0.1:9/mcp",
            "headers": {"X-Key": "café", "X-Bell": "a\x07b", "X-Team": "a\tb ~"},
        },
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "headers": [
            "X-Key: printable ASCII characters only.",
            "X-Bell: printable ASCII characters only.",
        ]
    }
    assert not ToolServer.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_staff_saving_one_name_at_once_get_a_validation_error_not_a_500(staff, monkeypatch):
    """Both pass the name check before either writes: the second write is refused as the
    check refuses it."""
    import threading

    from rest_framework.test import APIClient

    from tools import services

    checked = threading.Barrier(2, timeout=10)
    real_check = services.check_tool_server_fields

    def check_then_wait(**kwargs):
        found = real_check(**kwargs)
        checked.wait()
        return found

    monkeypatch.setattr(services, "check_tool_server_fields", check_then_wait)
    results = []

    def create():
        from django.db import connection

        client = APIClient()
        client.force_authenticate(staff)
        body = {"name": "calc", "url": "http://127.0.0.1:9/mcp"}
        results.append(client.post(URL, body, format="json"))
        connection.close()

    threads = [threading.Thread(target=create) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)

    assert sorted(r.status_code for r in results) == [201, 400]
    refused = next(r for r in results if r.status_code == 400)
    assert refused.json()["error"] == {
        "code": "validation_error",
        "message": refused.json()["error"]["message"],
        "details": {"name": ["A tool server with this name exists."]},
    }
    assert ToolServer.objects.filter(name="calc").count() == 1


def test_a_listing_past_the_limits_is_refused_and_a_long_description_cut(
    staff_client, mcp_server, monkeypatch
):
    """A server's list is read by every signed-in user and offered on every turn of its bots:
    2,000 tools of 5,000-character descriptions were kept whole (10 MB on each GET). It holds
    what a /v1 client may send: 128 tools, descriptions cut at 4,000 characters, input schemas
    of 64,000 bytes at most; a list past them is refused and the last good one stays."""
    from tools import services

    created = staff_client.post(URL, {"name": "calc", "url": mcp_server.url}, format="json").json()
    clock = mcp_server.app._tool_manager._tools["clock"]
    description = clock.description
    clock.description = "x" * 5_000
    try:
        refreshed = staff_client.post(f"{URL}{created['id']}/refresh-tools/")
    finally:
        clock.description = description
    assert refreshed.status_code == 200
    [listed] = [t for t in refreshed.json()["tools"] if t["name"] == "clock"]
    assert listed["description"] == "x" * 4_000

    def many(endpoint, *, timeout):
        tool = {"name": "t", "description": "", "input_schema": {"type": "object"}}
        return [{**tool, "name": f"t{i}"} for i in range(129)]

    monkeypatch.setattr(services, "tools_list", many)
    refused = staff_client.post(f"{URL}{created['id']}/refresh-tools/")
    assert refused.status_code == 400
    assert refused.json()["error"]["details"] == {
        "url": ["it lists 129 tools, more than the 128 kept"]
    }

    def wide(endpoint, *, timeout):
        schema = {"type": "object", "description": "y" * 70_000}
        return [{"name": "wide", "description": "", "input_schema": schema}]

    monkeypatch.setattr(services, "tools_list", wide)
    refused = staff_client.post(f"{URL}{created['id']}/refresh-tools/")
    assert refused.json()["error"]["details"] == {
        "url": ["the input schema of wide is 70,037 bytes, more than the 64,000 kept"]
    }
    stored = ToolServer.objects.get(pk=created["id"])
    assert [t["name"] for t in stored.tool_list] == TOOL_NAMES
    assert stored.refresh_error.startswith("Could not list the tools of calc: the input schema")


def test_a_tool_name_past_128_characters_is_refused_and_control_characters_are_cut(
    staff_client, mcp_server, monkeypatch
):
    """Names had no limit: five tools of 2 MB names were kept (10 MB on every user's GET, 142 ms
    of every turn of its bots; audit). A name holds 128 characters at most (as the MCP
    specification advises); a description loses the control characters a terminal or a reader
    would act on (ESC, BEL, right-to-left overrides), keeping lines and tabs."""
    from tools import services

    created = staff_client.post(URL, {"name": "calc", "url": mcp_server.url}, format="json").json()

    def long_name(endpoint, *, timeout):
        return [{"name": "n" * 129, "description": "", "input_schema": {"type": "object"}}]

    monkeypatch.setattr(services, "tools_list", long_name)
    refused = staff_client.post(f"{URL}{created['id']}/refresh-tools/")
    assert refused.status_code == 400
    assert refused.json()["error"]["details"] == {
        "url": [f"the name {'n' * 100}… is 129 characters, more than the 128 kept"]
    }

    def controls(endpoint, *, timeout):
        text = "Adds.\x1b[2J Ring\x07 and\u202e back.\nLine two\tend."
        return [{"name": "n" * 128, "description": text, "input_schema": {"type": "object"}}]

    monkeypatch.setattr(services, "tools_list", controls)
    kept = staff_client.post(f"{URL}{created['id']}/refresh-tools/")
    assert kept.status_code == 200
    assert [(t["name"], t["description"]) for t in kept.json()["tools"]] == [
        ("n" * 128, "Adds.[2J Ring and back.\nLine two\tend.")
    ]


def test_the_admin_asks_for_the_headers_again_when_the_address_moves(staff, tool_server):
    """As the API does (and the connections' admin): the admin's form checked the fields but
    not the move, so a new URL with the headers left blank kept them for the new server."""
    from django.test import Client

    from tools.services import tool_server_update

    staff.is_superuser = True
    staff.save()
    tool_server_update(user=staff, server_id=tool_server.pk, headers={"X-Key": "k"})
    client = Client()
    client.force_login(staff)
    url = f"/admin/tools/toolserver/{tool_server.pk}/change/"
    form = {
        "name": tool_server.name,
        "url": "http://127.0.0.1:18107/mcp",
        "transport": tool_server.transport,
        "public": "on",
        "headers": "",
    }
    refused = client.post(url, form)
    assert refused.status_code == 200  # the form again, with the error
    assert "send its headers again" in refused.content.decode()
    assert ToolServer.objects.get(pk=tool_server.pk).url == tool_server.url
    moved = client.post(url, {**form, "clear_headers": "on"})
    assert moved.status_code == 302
    after = ToolServer.objects.get(pk=tool_server.pk)
    assert (after.url, after.header_names, after.tool_list) == (
        "http://127.0.0.1:18107/mcp",
        [],
        [],
    )
