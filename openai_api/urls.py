from django.urls import path, re_path

from openai_api import views

# /v1/: the OpenAI-compatible API; anything else under it is an OpenAI-shaped 404.
urlpatterns = [
    path("models", views.models_view, name="openai-models"),
    # A model id may be "<owner>/<slug>": the rest of the path is the id.
    re_path(r"^models/(?P<model_id>.+)$", views.model_view, name="openai-model"),
    path("chat/completions", views.chat_completions_view, name="openai-chat-completions"),
    re_path(r"^(?P<rest>.*)$", views.not_found_view),
]
