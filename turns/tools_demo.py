"""The demo tool server's registration for ``seed_demo --tools-url`` (docs/tools.md): the
public tool server ``demo-tools`` at that URL, its tools read (a few tries while the server
starts), and a shared bot of the demo user given all of them. What exists is kept."""

import time

from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import timezone

from bots.models import Bot
from chat_platform.errors import ValidationFailed
from tools.models import ToolServer
from tools.services import tool_server_tools_read

DEMO_SERVER = "demo-tools"
TOOLS_BOT = {
    "name": "Tools demo",
    "model": "builtin/recall",
    "system_prompt": "You are a helpful assistant with a calculator, a clock and a notes store.",
    "tools": [f"{DEMO_SERVER}/*"],
}
TRIES = 20


def demo_tools_seed(*, user: AbstractBaseUser, url: str) -> str:
    server, _ = ToolServer.objects.get_or_create(
        name=DEMO_SERVER, defaults={"url": url, "public": True}
    )
    if server.url != url:
        ToolServer.objects.filter(pk=server.pk).update(url=url)
        server.url = url
    problem = ""
    for _ in range(TRIES):
        try:
            found = tool_server_tools_read(server)
        except ValidationFailed as exc:
            problem = exc.message
            time.sleep(0.5)
            continue
        ToolServer.objects.filter(pk=server.pk).update(
            tool_list=found, tools_refreshed_at=timezone.now(), refresh_error=""
        )
        problem = ""
        break
    Bot.objects.get_or_create(
        owner=user, name=TOOLS_BOT["name"], defaults={**TOOLS_BOT, "is_shared": True}
    )
    if problem:
        return f"demo tool server {url}: {problem}"
    return f"demo tool server {url} registered as {DEMO_SERVER} ({len(found)} tools)"
