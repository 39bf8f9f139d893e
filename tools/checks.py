"""Start-up check: stored tool-server headers can be opened with ``CONNECTION_ENCRYPTION_KEY``
(they are encrypted as connection keys are, ``connections.checks``): a missing or changed
setting stops the ASGI server and the Celery worker at start with the reason, instead of every
call to those servers failing later ("the headers of the tool server … cannot be read")."""

from django.core import checks

from connections.checks import stored_secret_errors, stored_tokens

CHECK_TAG = "tools"


def header_key_errors() -> list[checks.CheckMessage]:
    from tools.models import ToolServer

    tokens = stored_tokens(ToolServer.objects.exclude(headers_encrypted=""), "headers_encrypted")
    return stored_secret_errors(
        tokens,
        what="tool server header set(s)",
        each="the headers of tool server(s)",
        prefix="tools",
    )


def header_key_problems() -> list[str]:
    """The start-up check (``chat_platform.startup``): the errors as text lines."""
    return [f"{error.id}: {error.msg}" for error in header_key_errors()]


# A deploy check, like connections': ordinary checks run on every management command.
@checks.register(CHECK_TAG, deploy=True)
def header_key_check(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    return header_key_errors()
