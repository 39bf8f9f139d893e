import os
import sys

from django.apps import AppConfig


class BotsConfig(AppConfig):
    name = "bots"
    verbose_name = "Bots and conversations"

    def ready(self) -> None:
        from django.conf import settings

        if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
            from django.db.backends.signals import connection_created

            from chat_platform.pgcursor import use_preparing_cursor

            # A statement without parameters (a script, DDL) is never prepared: docs/operations.md.
            connection_created.connect(use_preparing_cursor, dispatch_uid="use_preparing_cursor")

        from chat_platform.warmup import is_web_server, warm_web_process

        # A web server reads litellm's model map on every send (and runs turns in embedded
        # mode): import litellm now, in the background, so the first send does not wait for it
        # (never for commands or tests).
        warm_web_process(argv=sys.argv)
        # ... and it has no Celery beat: the web server ends dead replies itself.
        if settings.EMBEDDED and is_web_server(sys.argv, os.environ):
            from chat_platform.inprocess import start_embedded_beat

            start_embedded_beat()
