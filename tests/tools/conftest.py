import pytest

ENCRYPTION_KEY = "test-tools-encryption-key-0123456789abcdef"
SECRET_HEADER = "Bearer tool-secret-7d3a9c1e5b"


@pytest.fixture(autouse=True)
def _encryption_key(settings):
    settings.CONNECTION_ENCRYPTION_KEY = ENCRYPTION_KEY


@pytest.fixture
def tool_server(staff, mcp_server):
    """The test MCP server registered by staff (public) with its tools refreshed."""
    from tools.services import tool_server_create, tool_server_tools_refresh

    server = tool_server_create(user=staff, name="calc", url=mcp_server.url, public=True)
    return tool_server_tools_refresh(user=staff, server_id=server.pk)


@pytest.fixture
def no_stop_polls(monkeypatch):
    """A tool round asks whether the reply was stopped each ``STOP_POLL_SECONDS`` its calls
    run (one statement each time): a count of a round's statements counts those only when its
    calls take longer than that, as on a loaded machine. Tests that count statements wait for
    the calls without polling, so the count is the same on any machine."""
    from tools import mcp_sessions

    monkeypatch.setattr(mcp_sessions, "STOP_POLL_SECONDS", 3600.0)
