"""The bot field ``tools``: who may name which server, well-formed entries, schemas within B
(docs/tools.md)."""

import pytest
from django.contrib.auth.models import Group

from bots.models import Bot
from chat_platform.llm.tokens import count_tools_tokens
from tools.models import ToolServer
from tools.offer import function_name, tools_offered

pytestmark = pytest.mark.django_db
BOTS = "/api/v1/bots/"


@pytest.fixture
def servers(staff, owner, mcp_server):
    """calc (the owner's group), secret (staff only), theirs (another group), all refreshed."""
    from tools.services import tool_server_create, tool_server_tools_refresh

    team, others = Group.objects.create(name="team"), Group.objects.create(name="others")
    owner.groups.add(team)
    made = {}
    for name, groups in (("calc", [team.pk]), ("secret", []), ("theirs", [others.pk])):
        server = tool_server_create(user=staff, name=name, url=mcp_server.url, groups=groups)
        made[name] = tool_server_tools_refresh(user=staff, server_id=server.pk)
    return made


def test_an_owner_names_tools_of_a_server_their_group_may_use(owner_client, bot, servers):
    response = owner_client.patch(
        f"{BOTS}{bot.pk}/", {"tools": ["calc/add", "calc/*"]}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["tools"] == ["calc/add", "calc/*"]
    bot.refresh_from_db()
    assert bot.tools == ["calc/add", "calc/*"]
    assert owner_client.get(f"{BOTS}{bot.pk}/").json()["tools"] == ["calc/add", "calc/*"]


@pytest.mark.parametrize("entry", ["secret/add", "theirs/*", "nowhere/add"])
def test_a_server_the_owner_may_not_use_is_a_validation_error_and_nothing_changes(
    owner_client, bot, servers, entry
):
    response = owner_client.patch(f"{BOTS}{bot.pk}/", {"tools": [entry]}, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"] == {"tools": [f"{entry}: no such tool server, or you may not use it."]}
    bot.refresh_from_db()
    assert bot.tools == []


def test_creating_a_bot_with_another_users_server_is_refused(owner_client, servers):
    response = owner_client.post(BOTS, {"name": "Sneaky", "tools": ["theirs/add"]}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert not Bot.objects.filter(name="Sneaky").exists()


def test_staff_may_give_any_server_and_the_owner_keeps_it_while_editing(
    staff, owner_client, bot, servers
):
    from turns.bot_validation import check_bot_tools

    bot.tools = ["secret/echo"]
    check_bot_tools(user=staff, bot=bot)  # what the admin runs with staff acting
    bot.save(update_fields=["tools"])
    renamed = owner_client.patch(
        f"{BOTS}{bot.pk}/", {"name": "Renamed", "tools": ["secret/echo", "calc/add"]}, format="json"
    )
    assert renamed.status_code == 200, renamed.content
    assert renamed.json()["tools"] == ["secret/echo", "calc/add"]


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ("calc/add", 'A list of "<server>/<tool>" or "<server>/*".'),
        ({"calc": "add"}, 'A list of "<server>/<tool>" or "<server>/*".'),
        (["calc"], 'Not "<server>/<tool>" or "<server>/*": calc.'),
        (["Calc/add"], 'Not "<server>/<tool>" or "<server>/*": Calc/add.'),
        (["calc/add", "calc/add"], "A tool is listed twice."),
        (["calc/nope"], "calc/nope: the server calc lists no tool nope."),
    ],
)
def test_malformed_entries_are_refused(owner_client, bot, servers, tools, message):
    response = owner_client.patch(f"{BOTS}{bot.pk}/", {"tools": tools}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"tools": [message]}


def test_schemas_over_their_share_of_the_budget_are_refused_at_save(owner_client, bot, servers):
    # B = 1124 - 1024 = 100; tool schemas may take 25 % of it: 25 tokens.
    response = owner_client.patch(
        f"{BOTS}{bot.pk}/",
        {"context_window": 1124, "max_output_tokens": 1024, "tools": ["calc/add"]},
        format="json",
    )
    assert response.status_code == 400
    offered = tools_offered(["calc/add"], {"calc": servers["calc"]})
    tokens = count_tools_tokens([t.schema for t in offered], model=bot.model)
    assert tokens > 25
    assert response.json()["error"]["details"] == {
        "tools": [
            f"These tools' schemas take {tokens:,} tokens; this bot's budget is 100 tokens and "
            "tool schemas may take at most 25 (25 % of it). Choose fewer tools or give the bot "
            "a larger context window."
        ]
    }
    bot.refresh_from_db()
    assert bot.tools == [] and bot.context_window != 1124


def test_function_names_are_sanitised_cut_and_collision_free():
    server = ToolServer(name="s", tool_list=[])
    server.tool_list = [
        {"name": "a.b", "description": "", "input_schema": {"type": "object"}},
        {"name": "a_b", "description": "", "input_schema": {"type": "object"}},
        {"name": "x" * 80, "description": "d", "input_schema": {"type": "object"}},
    ]
    offered = tools_offered(["s/*"], {"s": server}, taken={"s__a_b_3"})
    assert [t.function for t in offered] == ["s__a_b", "s__a_b_2", "s__" + "x" * 61]
    assert function_name("my-srv", "get weather/now") == "my-srv__get_weather_now"
    second = tools_offered(["s/a_b", "s/a.b"], {"s": server}, taken={"s__a_b"})
    assert [(t.function, t.tool) for t in second] == [("s__a_b_2", "a_b"), ("s__a_b_3", "a.b")]
