from django.apps import AppConfig


class ConnectionsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "connections"
    verbose_name = "Provider connections and usage"

    def ready(self) -> None:
        # The start-up check of CONNECTION_ENCRYPTION_KEY (connections.checks): registered
        # with Django's system checks, so runserver, migrate and `manage.py check` fail loudly.
        from connections import checks  # noqa: F401
