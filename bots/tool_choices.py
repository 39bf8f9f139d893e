"""The bot page's Tools checklist (docs/tools.md): per server the user may use, "all its tools"
and each tool it listed at its last refresh; entries the bot already has on servers the user
may not pick (staff gave them) stay listed, checked, so saving keeps them."""

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser

from tools.queries import tool_server_list_for_user

DESCRIPTION_SHOWN_CHARS = 90
Choices = list[tuple[str, list[tuple[str, str]]]]


def tool_choices(*, user: AbstractBaseUser, current: list[Any]) -> Choices:
    groups: Choices = []
    offered: set[str] = set()
    for server in tool_server_list_for_user(user=user):
        options = [(f"{server.name}/*", f"All tools of {server.name}")]
        for tool in server.tool_list:
            name = str(tool.get("name") or "")
            description = str(tool.get("description") or "").strip()
            if len(description) > DESCRIPTION_SHOWN_CHARS:
                description = description[: DESCRIPTION_SHOWN_CHARS - 1] + "…"
            label = f"{name} — {description}" if description else name
            options.append((f"{server.name}/{name}", label))
        offered.update(value for value, _ in options)
        groups.append((server.name, options))
    kept = [str(e) for e in current if isinstance(e, str) and e not in offered]
    if kept:
        groups.append(("Given by staff", [(entry, entry) for entry in kept]))
    return groups
