from django.apps import AppConfig


class AttachmentsConfig(AppConfig):
    name = "attachments"
    verbose_name = "Files attached to messages"
    default_auto_field = "django.db.models.BigAutoField"
