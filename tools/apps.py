from django.apps import AppConfig


class ToolsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "tools"
    verbose_name = "Tool servers (MCP)"

    def ready(self) -> None:
        # Tool servers' headers are encrypted as connection keys are: the one start-up and
        # deploy check of CONNECTION_ENCRYPTION_KEY opens them too (connections.checks).
        from connections import checks
        from tools.models import ToolServer

        checks.encrypted_store_register(
            checks.EncryptedStore(
                rows=lambda: ToolServer.objects.exclude(headers_encrypted=""),
                field="headers_encrypted",
                what="tool server header set(s)",
                each="the headers of tool server(s)",
                prefix="tools",
            )
        )
