"""URLs of the bot pages (docs/architecture.md), mounted at ``/bots/`` by ``chat_platform.urls``."""

from django.urls import path

from bots import bot_pages

urlpatterns = [
    path("", bot_pages.bot_list_page, name="bot-page-list"),
    path("new/", bot_pages.bot_new_page, name="bot-page-new"),
    path("model-info/", bot_pages.model_info_page, name="bot-page-model-info"),
    path("<int:bot_id>/", bot_pages.bot_edit_page, name="bot-page-edit"),
    path("<int:bot_id>/delete/", bot_pages.bot_delete_page, name="bot-page-delete"),
    path("<int:bot_id>/check/", bot_pages.bot_check_page, name="bot-page-check"),
]
