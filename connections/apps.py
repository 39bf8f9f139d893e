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
        from connections.models import Connection

        checks.encrypted_store_register(
            checks.EncryptedStore(
                rows=lambda: Connection.objects.exclude(api_key_encrypted=""),
                field="api_key_encrypted",
                what="provider connection key(s)",
                each="the key of connection(s)",
                prefix="connections",
            )
        )
        startup_check_register(checks.encryption_key_problems)
