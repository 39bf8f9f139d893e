"""The demo tool server (scripts/demo_mcp.py) and its registration by ``seed_demo --tools-url``."""

import importlib.util
import socket

import pytest
from django.core.management import call_command

from bots.models import Bot
from tests.integration.processes import ROOT
from tools.mcp_client import Call, Endpoint
from tools.mcp_sessions import tool_calls_run
from tools.models import ToolServer

pytestmark = pytest.mark.django_db


def _demo():
    spec = importlib.util.spec_from_file_location("demo_mcp", ROOT / "scripts" / "demo_mcp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def demo_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = _demo().serve(port)
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True


def test_the_calculator_is_arithmetic_only():
    demo = _demo()
    assert demo.calculate_expression("(17 + 25) * 3") == 126
    for bad in ("__import__('os')", "2 ** 1000", "1/0", "x + 1"):
        with pytest.raises(demo.ToolError):
            demo.calculate_expression(bad)


def test_seed_demo_registers_the_demo_server_and_a_bot_that_uses_it(settings, demo_url, capsys):
    settings.DEBUG = True
    call_command("seed_demo", "--tools-url", demo_url)
    server = ToolServer.objects.get(name="demo-tools")
    assert (server.url, server.public) == (demo_url, True)
    assert [t["name"] for t in server.tool_list] == [
        "calculate",
        "clock",
        "note_save",
        "note_read",
        "note_list",
    ]
    bot = Bot.objects.get(name="Tools demo")
    assert (bot.tools, bot.is_shared, bot.owner.username) == (["demo-tools/*"], True, "demo")
    assert "registered as demo-tools (5 tools)" in capsys.readouterr().out
    endpoint = Endpoint(name="demo-tools", url=demo_url)
    outcomes = tool_calls_run(
        [
            Call(endpoint, "note_save", {"key": "k", "text": "v"}),
            Call(endpoint, "calculate", {"expression": "6*7"}),
        ],
        timeout=10,
    )
    assert [(o.ok, o.text) for o in outcomes] == [(True, "saved k"), (True, "42")]
    call_command("seed_demo", "--tools-url", demo_url)  # again: kept, not doubled
    assert ToolServer.objects.count() == 1 and Bot.objects.filter(name="Tools demo").count() == 1
