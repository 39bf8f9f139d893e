"""Reads of tool servers, and the access chokepoint: who may use which server.

Staff see and use every server. Anyone else: the public ones and those listing one of their
groups; a server that is not public and lists no group is staff's only. Any other id answers
``not_found``, like a missing one.
"""

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import Q, QuerySet

from chat_platform.errors import NotFound
from tools.models import ToolServer


def _as_id(value: object) -> int:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        raise NotFound("Tool server not found.") from None
    if not 1 <= number <= 2**63 - 1:
        raise NotFound("Tool server not found.")
    return number


def is_staff(user: AbstractBaseUser | None) -> bool:
    return bool(getattr(user, "is_staff", False)) and bool(getattr(user, "is_active", False))


def tool_server_list_for_user(*, user: AbstractBaseUser | None) -> QuerySet[ToolServer]:
    servers = ToolServer.objects.all()
    if is_staff(user):
        return servers
    if user is None or not getattr(user, "is_authenticated", False):
        return servers.none()
    return servers.filter(
        Q(public=True) | Q(groups__in=user.groups.all())  # type: ignore[attr-defined]
    ).distinct()


def tool_server_get_for_user(*, user: AbstractBaseUser, server_id: object) -> ToolServer:
    found = tool_server_list_for_user(user=user).filter(pk=_as_id(server_id)).first()
    if found is None:
        raise NotFound("Tool server not found.")
    return found


def tool_server_get_for_staff(*, user: AbstractBaseUser, server_id: object) -> ToolServer:
    """Staff only; anyone else gets the same ``not_found`` as for a missing id."""
    if not is_staff(user):
        raise NotFound("Tool server not found.")
    found = ToolServer.objects.filter(pk=_as_id(server_id)).first()
    if found is None:
        raise NotFound("Tool server not found.")
    return found


def tool_servers_usable_named(
    *, user: AbstractBaseUser | None, names: set[str]
) -> dict[str, ToolServer]:
    """The servers among ``names`` that ``user`` may use, by name."""
    if not names:
        return {}
    found = tool_server_list_for_user(user=user).filter(name__in=sorted(names))
    return {server.name: server for server in found}


def tool_servers_named(names: set[str]) -> dict[str, ToolServer]:
    """The servers among ``names``, by name, whoever may use them (a bot's stored choices)."""
    if not names:
        return {}
    return {s.name: s for s in ToolServer.objects.filter(name__in=sorted(names))}
