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
