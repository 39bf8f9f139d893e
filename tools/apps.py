from django.apps import AppConfig


class ToolsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "tools"
    verbose_name = "Tool servers (MCP)"

    def ready(self) -> None:
        # The start-up check of the headers' key (tools.checks), as connections' keys have.
        from chat_platform.startup import startup_check_register
        from tools import checks

        startup_check_register(checks.header_key_problems)
