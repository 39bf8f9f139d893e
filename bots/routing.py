from django.urls import path, re_path

from bots.consumers import NoSuchPathConsumer, SessionConsumer

websocket_urlpatterns = [
    path("ws/sessions/<int:session_id>/", SessionConsumer.as_asgi()),
    # Any other path: closed 4404 like a session that is not the caller's (docs/api.md); the
    # router's own answer was an HTTP 500 and a logged traceback.
    re_path(r"", NoSuchPathConsumer.as_asgi()),
]
