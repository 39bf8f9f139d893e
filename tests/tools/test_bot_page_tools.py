"""The bot page's Advanced > Tools checklist (docs/tools.md): one group per server the user may
use; saving goes through the same checks as the API."""

import re

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from tests.bots.test_bot_pages import post_data
from tests.factories import BotFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner_web(owner) -> Client:
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture
def calc(staff, owner, tool_server):
    team = Group.objects.create(name="team")
    owner.groups.add(team)
    return tool_server  # public


def checkbox_values(body: str) -> list[tuple[str, bool]]:
    found = re.findall(r'<input type="checkbox" name="tools" value="([^"]+)"([^>]*)>', body)
    return [(value, "checked" in attrs) for value, attrs in found]


def test_the_checklist_offers_each_usable_server_and_its_tools(owner_web, owner, calc, staff):
    from tools.services import tool_server_create

    tool_server_create(user=staff, name="hidden", url="http://127.0.0.1:9/mcp")
    bot = BotFactory(owner=owner, tools=["calc/echo"])
    body = owner_web.get(f"/bots/{bot.pk}/").content.decode()
    assert 'id="section-tools"' in body
    assert "/static/bots/tool_checklist.js" in body
    values = checkbox_values(body)
    assert values[:3] == [("calc/*", False), ("calc/add", False), ("calc/echo", True)]
    assert [v for v, _ in values if v.startswith("hidden/")] == []
    assert "add — Add two integers." in body


def test_saving_the_checklist_stores_the_tools(owner_web, owner, calc):
    bot = BotFactory(owner=owner)
    response = owner_web.post(
        f"/bots/{bot.pk}/", {**post_data(), "tools": ["calc/add", "calc/clock"]}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    bot.refresh_from_db()
    assert bot.tools == ["calc/add", "calc/clock"]


def test_a_value_not_offered_is_refused_and_nothing_is_saved(owner_web, owner, calc, staff):
    from tools.services import tool_server_create

    tool_server_create(user=staff, name="hidden", url="http://127.0.0.1:9/mcp")
    bot = BotFactory(owner=owner)
    response = owner_web.post(f"/bots/{bot.pk}/", {**post_data(), "tools": ["hidden/*"]})
    assert response.status_code == 400
    assert "Select a valid choice. hidden/* is not one of the available choices." in (
        response.content.decode()
    )
    bot.refresh_from_db()
    assert bot.tools == [] and bot.name != "Planner"
