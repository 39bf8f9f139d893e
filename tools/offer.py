"""What a bot's ``tools`` setting offers a model: one function per tool, named collision-free.

A bot names tools as ``"<server>/<tool>"`` or ``"<server>/*"`` (every tool the server listed at
its last refresh). The model sees each as a function named ``<server>__<tool>``: characters
outside ``[A-Za-z0-9_-]`` become ``_`` and the name is cut to 64 characters (what providers
accept). Two tools whose names meet after that, or a name already taken (the memory tools, an
API client's tools), get ``_2``, ``_3``… so every function name maps back to exactly one tool.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tools.models import ToolServer

FUNCTION_NAME_MAX = 64
ENTRY_PATTERN = re.compile(r"^([a-z0-9-]{1,40})/(\*|\S{1,128})\Z")
_OUTSIDE = re.compile(r"[^A-Za-z0-9_-]")
DESCRIPTION_MAX_CHARS = 1024


def function_name(server: str, tool: str) -> str:
    return _OUTSIDE.sub("_", f"{server}__{tool}")[:FUNCTION_NAME_MAX]


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    for n in range(2, 10_000):
        suffix = f"_{n}"
        candidate = name[: FUNCTION_NAME_MAX - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
    raise ValueError("no free function name")  # 10,000 tools of one name: not reachable


@dataclass(frozen=True)
class OfferedTool:
    function: str  # the name the model calls
    server: str
    tool: str
    schema: dict[str, Any]  # OpenAI tool shape

    @property
    def label(self) -> str:
        return f"{self.server}/{self.tool}"


def entry_parts(entry: str) -> tuple[str, str] | None:
    found = ENTRY_PATTERN.match(entry) if isinstance(entry, str) else None
    return (found.group(1), found.group(2)) if found else None


def tools_offered(
    entries: Iterable[str],
    servers: dict[str, ToolServer],
    *,
    taken: Iterable[str] = (),
) -> list[OfferedTool]:
    """The functions ``entries`` offer, in the order named (a server's ``*`` in its listed
    order), each tool once. Entries whose server is not in ``servers`` (gone, or not usable)
    or whose tool the server did not list are skipped."""
    used = set(taken)
    seen: set[tuple[str, str]] = set()
    offered: list[OfferedTool] = []
    for entry in entries:
        parts = entry_parts(entry)
        if parts is None or parts[0] not in servers:
            continue
        server = servers[parts[0]]
        listed = server.tool_list if parts[1] == "*" else [server.tool_named(parts[1])]
        for tool in listed:
            if not isinstance(tool, dict) or (server.name, tool.get("name")) in seen:
                continue
            name = str(tool.get("name") or "")
            seen.add((server.name, name))
            function = _unique(function_name(server.name, name), used)
            used.add(function)
            schema = tool.get("input_schema") or {"type": "object", "properties": {}}
            offered.append(
                OfferedTool(
                    function=function,
                    server=server.name,
                    tool=name,
                    schema={
                        "type": "function",
                        "function": {
                            "name": function,
                            "description": str(tool.get("description") or "")[
                                :DESCRIPTION_MAX_CHARS
                            ],
                            "parameters": schema,
                        },
                    },
                )
            )
    return offered


def entry_servers(entries: Iterable[str]) -> set[str]:
    return {parts[0] for parts in map(entry_parts, entries) if parts is not None}
