from django.urls import path, re_path

from openai_api import views

# /v1/: the OpenAI-compatible API; anything else under it is an OpenAI-shaped 404.
urlpatterns = [
    path("models", views.models_view, name="openai-models"),
    path("chat/completions", views.chat_completions_view, name="openai-chat-completions"),
    re_path(r"^(?P<rest>.*)$", views.not_found_view),
]
