import sys

from django.apps import AppConfig


class BotsConfig(AppConfig):
    name = "bots"
    verbose_name = "Bots and conversations"

    def ready(self) -> None:
        from django.conf import settings

        from chat_platform.warmup import warm_web_process

        # Embedded mode runs turns inside the web process: import litellm now, in the
        # background, so the first reply does not wait for it (never for commands or tests).
        warm_web_process(embedded=settings.EMBEDDED, argv=sys.argv)
