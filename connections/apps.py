from django.apps import AppConfig


class ConnectionsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "connections"
    verbose_name = "Provider connections and usage"

    def ready(self) -> None:
        # The start-up check of CONNECTION_ENCRYPTION_KEY (connections.checks): the ASGI server
        # and the Celery worker run it at start (chat_platform.startup), `check --deploy` too.
        from chat_platform.startup import startup_check_register
        from connections import checks

        startup_check_register(checks.encryption_key_problems)
