"""Reads of connections, and the access chokepoint: who may use which connection.

Staff see and use every connection. Anyone else: the public ones, those listing them, and those
listing one of their groups; any other id answers ``not_found``, like a missing one.
"""

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import Q, QuerySet

from chat_platform.errors import NotFound
from connections.models import Connection

# litellm's prefix for each kind (kind "litellm" uses the connection's own ``provider``).
# Ollama is called through its OpenAI-compatible endpoint (``<server>/v1``).
KIND_PREFIX = {
    Connection.Kind.OPENAI: "openai",
    Connection.Kind.OLLAMA: "openai",
    Connection.Kind.ANTHROPIC: "anthropic",
    Connection.Kind.BUILTIN: "builtin",
}


def _as_id(value: object) -> int:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        raise NotFound("Connection not found.") from None
    if not 1 <= number <= 2**63 - 1:
        raise NotFound("Connection not found.")
    return number


def _is_staff(user: AbstractBaseUser) -> bool:
    return bool(getattr(user, "is_staff", False)) and bool(getattr(user, "is_active", False))


BUILTIN_NAME = "Built-in"
BUILTIN_MODELS = ({"id": "recall"}, {"id": "extractive"})


def connection_builtin() -> Connection:
    """The built-in models as a connection everyone may use. Made by a data migration, and
    made again here if it was removed (a flushed test database, an admin's delete)."""
    found = Connection.objects.filter(kind=Connection.Kind.BUILTIN).order_by("pk").first()
    if found is not None:
        return found
    connection, _ = Connection.objects.get_or_create(
        kind=Connection.Kind.BUILTIN,
        name=BUILTIN_NAME,
        defaults={"public": True, "model_list": [dict(m) for m in BUILTIN_MODELS]},
    )
    return connection


def connection_list_for_user(*, user: AbstractBaseUser) -> QuerySet[Connection]:
    connection_builtin()
    connections = Connection.objects.all()
    if _is_staff(user):
        return connections
    return connections.filter(
        Q(public=True) | Q(users=user) | Q(groups__in=user.groups.all())  # type: ignore[attr-defined]
    ).distinct()


def connection_get_for_user(*, user: AbstractBaseUser, connection_id: object) -> Connection:
    found = connection_list_for_user(user=user).filter(pk=_as_id(connection_id)).first()
    if found is None:
        raise NotFound("Connection not found.")
    return found


def connection_get_for_staff(*, user: AbstractBaseUser, connection_id: object) -> Connection:
    """Staff only; anyone else gets the same ``not_found`` as for a missing id."""
    if not _is_staff(user):
        raise NotFound("Connection not found.")
    found = Connection.objects.filter(pk=_as_id(connection_id)).first()
    if found is None:
        raise NotFound("Connection not found.")
    return found


def connection_usable_by(*, connection: Connection, user: AbstractBaseUser) -> bool:
    return connection_list_for_user(user=user).filter(pk=connection.pk).exists()


def connection_prefix(connection: Connection) -> str:
    if connection.kind == Connection.Kind.LITELLM:
        return connection.provider
    return KIND_PREFIX[Connection.Kind(connection.kind)]


def connection_call_base(connection: Connection) -> str:
    """Where model calls go: the base URL (Ollama: its OpenAI endpoint under ``/v1``)."""
    base = connection.base_url.rstrip("/")
    if connection.kind == Connection.Kind.OLLAMA and base and not base.endswith("/v1"):
        return base + "/v1"
    return connection.base_url


def connection_model_string(connection: Connection, model: str) -> str:
    """The litellm model string for ``model``: a listed id (``fake-model``) gets the kind's
    prefix (``openai/fake-model``); a string already carrying it is kept."""
    prefix = connection_prefix(connection)
    if not prefix or model.startswith(prefix + "/"):
        return model
    return f"{prefix}/{model}"


def connection_model_ids(connection: Connection) -> list[str]:
    return [str(m.get("id")) for m in connection.model_list if isinstance(m, dict)]


def connection_model_window(connection: Connection, model: str) -> int | None:
    """The context window discovery reported for ``model`` (an id or its full string)."""
    for entry in connection.model_list:
        if not isinstance(entry, dict):
            continue
        if connection_model_string(connection, str(entry.get("id"))) == model:
            window = entry.get("context_window")
            return window if isinstance(window, int) and window > 0 else None
    return None
