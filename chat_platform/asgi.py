"""ASGI entry point: HTTP through Django, websockets through Channels."""

import os
import sys

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")
# Django must be set up before anything imports models (routing -> consumers -> services).
django_asgi_app = get_asgi_application()

from chat_platform import serverloop  # noqa: E402
from chat_platform.startup import startup_checks_run  # noqa: E402
from chat_platform.warmup import is_web_server  # noqa: E402

# An ASGI server (uvicorn, daphne…) fails loudly at start when stored connection keys cannot be
# opened; a test or a script importing this module checks nothing.
if is_web_server(sys.argv, os.environ):
    startup_checks_run()
    # uvicorn's main loop ticks once a second, not ten times (idle CPU; docs/performance.md).
    serverloop.install()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from bots.routing import websocket_urlpatterns  # noqa: E402
from chat_platform.body_limit import BodyLimit  # noqa: E402
from chat_platform.realtime_auth import (  # noqa: E402
    TokenOrSessionAuthMiddleware,
    origin_validated,
)

application = ProtocolTypeRouter(
    {
        # Bodies are bounded before Django copies them (chat_platform/body_limit.py).
        "http": BodyLimit(django_asgi_app),
        "websocket": origin_validated(
            TokenOrSessionAuthMiddleware(URLRouter(websocket_urlpatterns))
        ),
    }
)
