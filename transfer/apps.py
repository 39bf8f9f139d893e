from django.apps import AppConfig


class TransferConfig(AppConfig):
    name = "transfer"
    verbose_name = "Export and import of chats"
    default_auto_field = "django.db.models.BigAutoField"
